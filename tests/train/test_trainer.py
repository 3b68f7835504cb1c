"""Trainer: schedule, grad accumulation, determinism, checkpoint resume bitwise, evaluate_nll."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from lmsci.errors import ConfigError
from lmsci.train.checkpoint import latest_checkpoint, set_rng_state
from lmsci.train.trainer import (
    TrainConfig,
    evaluate_nll,
    lr_at,
    make_optimizer,
    seed_scope,
    train,
)

V, T = 11, 8



class TinyLM(nn.Module):
    """Embedding -> one causal mixing layer -> LayerNorm -> unembedding, with dropout."""

    def __init__(self, d=16, dropout=0.1):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.mix = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(d, V)

    def forward(self, x):  # [batch, seq] -> [batch, seq, V]
        h = self.emb(x)
        h = h + torch.tanh(self.mix(torch.cumsum(h, dim=1) / torch.arange(1, x.size(1) + 1)[:, None]))
        return self.out(self.drop(self.ln(h)))


def make_model(seed=0, dropout=0.1):
    with seed_scope(seed):
        return TinyLM(dropout=dropout)


def get_batch_factory(batch_size=4):
    """A learnable task: x_{t+1} = (x_t + 3) mod V; some targets ignored."""

    def get_batch(step, g):
        x0 = torch.randint(0, V, (batch_size, 1), generator=g)
        seq = (x0 + 3 * torch.arange(T + 1)) % V
        x, y = seq[:, :-1].clone(), seq[:, 1:].clone()
        y[:, 0] = -100
        return x, y

    return get_batch


def cfg(**kw):
    base = dict(steps=12, batch_size=4, lr=3e-2, warmup_steps=3, min_lr_ratio=0.1, weight_decay=0.1,
                grad_clip=1.0, device="cpu")
    base.update(kw)
    return TrainConfig(**base)


def weights(m):
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def test_schedule_values():
    c = cfg(steps=11, warmup_steps=2, lr=1.0, min_lr_ratio=0.1)
    assert lr_at(0, c) == pytest.approx(0.5)
    assert lr_at(1, c) == pytest.approx(1.0)
    assert lr_at(2, c) == pytest.approx(1.0)  # start of the cosine
    # halfway through the cosine: (min + max) / 2
    assert lr_at(2 + 4, c) == pytest.approx(0.55)
    assert lr_at(10, c) == pytest.approx(0.1)  # last step at min_lr
    lrs = [lr_at(s, c) for s in range(2, 11)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    assert lr_at(0, cfg(warmup_steps=0, lr=2.0)) == pytest.approx(2.0)


def test_weight_decay_only_on_matrices():
    opt = make_optimizer(make_model(), cfg())
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert len(decay["params"]) == 3 and len(no_decay["params"]) == 4


def test_loss_falls_and_metrics_logged():
    logged = []
    r = train(make_model(), get_batch_factory(), cfg(steps=60, log_every=5), seed=0, log=logged.append,
              eval_fn=lambda m: {"val_loss": 1.0})
    losses = [x["loss"] for x in r.history if "grad_norm" in x]
    assert losses[-1] < 0.5 * losses[0]
    assert logged == r.history
    rec = logged[0]
    assert {"step", "loss", "lr", "grad_norm", "tokens_seen", "tokens_per_s"} <= set(rec)
    assert rec["step"] == 5 and rec["tokens_seen"] == 5 * 4 * (T - 1)  # ignored targets not counted
    assert r.final["val_loss"] == 1.0 and r.final["step"] == 60 and r.steps == 60


def test_deterministic_and_seed_matters():
    a, b, c = make_model(), make_model(), make_model()
    ra = train(a, get_batch_factory(), cfg(), seed=1)
    rb = train(b, get_batch_factory(), cfg(), seed=1)
    rc = train(c, get_batch_factory(), cfg(), seed=2)
    la = [x["loss"] for x in ra.history]
    assert la == [x["loss"] for x in rb.history]
    assert la != [x["loss"] for x in rc.history]
    for k, v in weights(a).items():
        assert torch.equal(v, weights(b)[k])


def test_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    train(make_model(), get_batch_factory(), cfg(steps=3), seed=0)
    assert torch.equal(before, torch.get_rng_state())


def test_grad_accumulation_equals_big_batch():
    """4 micro-batches of 2 sequences == 1 batch of 8 (same rows), up to float rounding."""
    rows = []

    def big(step, g):
        x, y = get_batch_factory(8)(step, g)
        rows.append((x, y))
        return x, y

    def small(step, g):
        if step * 4 >= len(small.buf):
            x, y = get_batch_factory(8)(step, g)
            small.buf += [(x[i:i + 2], y[i:i + 2]) for i in range(0, 8, 2)]
        out = small.buf[small.i]
        small.i += 1
        return out

    small.buf, small.i = [], 0
    a, b = make_model(dropout=0.0), make_model(dropout=0.0)
    ra = train(a, big, cfg(steps=5), seed=0)
    rb = train(b, small, cfg(steps=5, grad_accum=4, batch_size=2), seed=0)
    for x, y in zip(ra.history, rb.history):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5)
        assert x["tokens_seen"] == y["tokens_seen"]
    for k, v in weights(a).items():
        torch.testing.assert_close(v, weights(b)[k], rtol=1e-5, atol=1e-6)


def test_resume_equals_uninterrupted_bitwise(tmp_path):
    c = cfg(steps=12, checkpoint_every=4, eval_every=3)
    gb = get_batch_factory()
    ev = lambda m: {"val_nll": evaluate_nll(m, [gb(0, torch.Generator().manual_seed(9))])}  # noqa: E731
    full = make_model()
    r_full = train(full, gb, c, seed=5, eval_fn=ev)

    class Stop(Exception):
        pass

    def crashing(step, g):
        if step == 9:
            raise Stop
        return gb(step, g)

    with pytest.raises(Stop):
        train(make_model(), crashing, c, seed=5, eval_fn=ev, checkpoint_dir=tmp_path / "ck")
    assert latest_checkpoint(tmp_path / "ck").name == "step-0000008"
    resumed = make_model(seed=99)  # different init: the checkpoint must overwrite it
    logged = []
    r_res = train(resumed, gb, c, seed=5, eval_fn=ev, checkpoint_dir=tmp_path / "ck", log=logged.append,
                  replay_log_on_resume=False)
    assert r_res.resumed_from == 8
    assert [x["step"] for x in logged] == [9, 9, 10, 11, 12, 12]  # only new steps (train + eval records)

    def strip(h):  # wall-clock speed is the one field allowed to differ
        return [{k: v for k, v in x.items() if k != "tokens_per_s"} for x in h]

    assert strip(r_res.history) == strip(r_full.history)  # losses, lr, grad norms, eval NLL: exactly equal
    for k, v in weights(full).items():
        assert torch.equal(v, weights(resumed)[k]), k
    # a finished run resumes to a no-op (replaying its history to log); a different config is refused
    replayed = []
    again = train(make_model(), gb, c, seed=5, checkpoint_dir=tmp_path / "ck", log=replayed.append)
    assert replayed == r_res.history
    assert again.resumed_from == 12 and again.final["loss"] == r_full.final["loss"]
    with pytest.raises(ConfigError, match="lr"):
        train(make_model(), gb, cfg(steps=12, lr=0.5), seed=5, checkpoint_dir=tmp_path / "ck")


def test_evaluate_nll_uniform_model():
    class Uniform(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return torch.zeros(*x.shape, V) + self.w

    gb = get_batch_factory()
    g = torch.Generator().manual_seed(0)
    assert evaluate_nll(Uniform(), [gb(0, g), gb(1, g)]) == pytest.approx(math.log(V))
    with pytest.raises(ValueError):
        evaluate_nll(Uniform(), [(torch.zeros(1, 2, dtype=torch.long), torch.full((1, 2), -100))])


def test_tensorboard_flag_without_package_warns(tmp_path):
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        with pytest.warns(UserWarning, match="tensorboard"):
            train(make_model(), get_batch_factory(), cfg(steps=1, tensorboard=True), seed=0,
                  checkpoint_dir=tmp_path)
    else:  # pragma: no cover
        train(make_model(), get_batch_factory(), cfg(steps=1, tensorboard=True), seed=0, checkpoint_dir=tmp_path)
        assert (tmp_path / "tensorboard").exists()


def test_config_validation():
    with pytest.raises(Exception):
        TrainConfig(steps=0)
    with pytest.raises(Exception):
        TrainConfig(device="tpu")


def test_progress_bar_gets_steps_and_postfix():
    class Bar:
        def __init__(self):
            self.n, self.postfix = 0, {}

        def update(self, k):
            self.n += k

        def set_postfix(self, refresh=True, **kw):
            self.postfix = kw

    bar = Bar()
    train(make_model(), get_batch_factory(), cfg(steps=7, log_every=2), seed=0, progress=bar)
    assert bar.n == 7 and set(bar.postfix) == {"loss", "tok_s"}


def test_precision_bf16_on_cpu_trains_and_fp32_is_the_default():
    a, b, c = make_model(dropout=0.0), make_model(dropout=0.0), make_model(dropout=0.0)
    ra = train(a, get_batch_factory(), cfg(), seed=0)
    rb = train(b, get_batch_factory(), cfg(precision="fp32"), seed=0)
    rc = train(c, get_batch_factory(), cfg(precision="bf16"), seed=0)
    assert [r["loss"] for r in ra.history] == [r["loss"] for r in rb.history]  # the default is fp32
    assert TrainConfig().precision == "fp32"
    assert rc.history[-1]["loss"] < rc.history[0]["loss"]
    assert rc.history[-1]["loss"] != ra.history[-1]["loss"]  # bf16 matmuls really ran
    assert all(p.dtype == torch.float32 for p in c.parameters())
    for bad in ("fp16", "auto"):
        with pytest.raises(Exception, match="precision"):
            cfg(precision=bad)


def test_checkpoints_keep_the_cuda_rng_state_when_cuda_is_available(tmp_path, monkeypatch):
    """Issue 12 item 3: a checkpoint holds every CUDA generator's state (torch.cuda.get_rng_state_all) where
    CUDA is available, and resuming restores it; without CUDA only the CPU state is kept. CUDA is faked here
    (this machine has none): the states are opaque byte tensors to the trainer."""
    c = cfg(steps=4, checkpoint_every=2)
    train(make_model(), get_batch_factory(), c, seed=3, checkpoint_dir=tmp_path / "cpu")
    state = torch.load(latest_checkpoint(tmp_path / "cpu") / "trainer_state.pt", weights_only=True)
    assert "torch_rng" in state and ("cuda_rng" in state) == torch.cuda.is_available()

    fake = [torch.arange(8, dtype=torch.uint8), torch.arange(8, 16, dtype=torch.uint8)]
    restored = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: fake)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, i: restored.__setitem__(i, s.clone()))
    train(make_model(), get_batch_factory(), c, seed=3, checkpoint_dir=tmp_path / "cuda")
    state = torch.load(latest_checkpoint(tmp_path / "cuda") / "trainer_state.pt", weights_only=True)
    assert [s.tolist() for s in state["cuda_rng"]] == [s.tolist() for s in fake]
    set_rng_state(state)
    assert sorted(restored) == [0, 1] and all(torch.equal(restored[i], fake[i]) for i in (0, 1))
    # train() itself restores them when it resumes from the checkpoint
    restored.clear()
    train(make_model(), get_batch_factory(), c, seed=3, checkpoint_dir=tmp_path / "cuda")
    assert sorted(restored) == [0, 1] and torch.equal(restored[1], fake[1])
