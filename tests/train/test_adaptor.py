"""lmsci.train.adaptor: train_point / train_lm / train_group are the trainer calls experiments wrote by hand (same
TrainConfig, batches, seeds and records), and they reach the trainers through their modules (so a test that patches
``lmsci.train.trainer.train`` or ``lmsci.train.stacked.train_stacked`` sees them)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tqdm.auto import tqdm

from lmsci.models.gpt import GPT, GPTConfig
from lmsci.train import adaptor, stacked, trainer
from lmsci.train.trainer import TrainSpec

GC = GPTConfig(vocab_size=40, seq_len=12, n_layers=1, n_heads=2, d_model=16)
SPEC = TrainSpec(steps=10, batch_size=4, lr=3e-3, warmup_steps=2)


class _Ctx(SimpleNamespace):
    def __init__(self, seed: int, artifact_dir=None):
        super().__init__(device="cpu", seed=seed, records=[], bars=[], artifact_dir=artifact_dir)

    def log(self, **rec):
        self.records.append(rec)

    def progress(self, total: int, desc: str = "train"):
        bar = tqdm(total=total, desc=desc, disable=True)
        self.bars.append((total, desc, bar))
        return bar


def _sample(n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(adaptor.numpy_rng(gen).integers(2 ** 31)).integers(
        0, GC.vocab_size, (n, GC.seq_len + 1)))


def _losses(history):
    return [h["loss"] for h in history if "loss" in h]


def test_numpy_rng_is_one_draw_of_the_batch_generator():
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a = adaptor.numpy_rng(g1).integers(1 << 30, size=4)
    b = np.random.default_rng(int(torch.randint(0, 2 ** 62, (1,), generator=g2))).integers(1 << 30, size=4)
    assert (a == b).all() and torch.equal(g1.get_state(), g2.get_state())
    assert adaptor.numpy_rng(g1, 2 ** 31 - 1).integers(10) == np.random.default_rng(
        int(torch.randint(0, 2 ** 31 - 1, (1,), generator=g2))).integers(10)


def test_row_batches_is_the_hand_written_row_draw():
    x, y = torch.arange(30).reshape(10, 3), -torch.arange(30).reshape(10, 3)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    get_batch = adaptor.row_batches(x, y, 4)
    for step in range(3):
        bx, by = get_batch(step, g1)
        idx = torch.randint(x.shape[0], (4,), generator=g2)
        assert torch.equal(bx, x[idx]) and torch.equal(by, y[idx])
    assert torch.equal(g1.get_state(), g2.get_state())
    with pytest.raises(ValueError):
        adaptor.row_batches(x, y[:5], 4)


def test_train_lm_is_the_hand_written_trainer_call():
    ctx = _Ctx(seed=7)
    res = adaptor.train_lm(GPT(GC, seed=1), _sample, SPEC, ctx, seed=11, desc="train x", log_points=5,
                           log_fields={"model": "m"})
    tcfg = SPEC.train_config(device="cpu", log_every=2)
    logged: list[dict] = []
    ref = trainer.train(GPT(GC, seed=1), adaptor.lm_batches(_sample, SPEC.batch_size), tcfg, seed=11,
                        log=logged.append)
    assert _losses(res.history) == _losses(ref.history) and len(_losses(ref.history)) == 5
    assert [r["step"] for r in ctx.records] == [r["step"] for r in logged]
    assert all(r["model"] == "m" and list(r)[0] == "model" for r in ctx.records)
    (total, desc, bar), = ctx.bars
    assert (total, desc) == (10, "train x") and bar.disable


def test_config_changes_reach_the_train_config(monkeypatch):
    seen = {}

    def spy(model, get_batch, cfg, **kw):  # patched in the trainer module: the adaptor calls through it
        seen.update(cfg=cfg, seed=kw["seed"])
        return "result"

    monkeypatch.setattr(trainer, "train", spy)
    ctx = _Ctx(seed=5)
    assert adaptor.train_point(GPT(GC, seed=1), lambda s, g: None, SPEC, ctx, steps=40, log_every=7,
                               warmup_steps=3, device="cpu", checkpoint_every=4) == "result"
    c = seen["cfg"]
    assert (c.steps, c.log_every, c.warmup_steps, c.checkpoint_every, seen["seed"]) == (40, 7, 3, 4, 5)
    adaptor.train_point(GPT(GC, seed=1), lambda s, g: None, SPEC, ctx, steps=40)
    assert seen["cfg"].log_every == 2 and ctx.bars[-1][0] == 40  # steps // 20, the bar over the changed steps
    with pytest.raises(Exception, match="not_a_field"):
        adaptor.train_point(GPT(GC, seed=1), lambda s, g: None, SPEC, ctx, not_a_field=1)


def test_train_group_is_the_hand_written_stacked_call():
    ctxs = [_Ctx(seed=21), _Ctx(seed=22)]
    batches = [adaptor.lm_batches(_sample, SPEC.batch_size)] * 2
    res = adaptor.train_group([GPT(GC, seed=i) for i in (1, 2)], batches, SPEC, ctxs, warmup_steps=1)
    tcfg = SPEC.train_config(device="cpu", log_every=1, warmup_steps=1)
    ref = stacked.train_stacked([GPT(GC, seed=i) for i in (1, 2)], batches, tcfg, seeds=[21, 22])
    for a, b, c in zip(res.members, ref.members, ctxs):
        assert _losses(a.history) == _losses(b.history) and len(_losses(b.history)) == 10
        assert [r["loss"] for r in c.records if "loss" in r] == _losses(b.history)
    assert len(ctxs[0].bars) == 1 and not ctxs[1].bars


@pytest.mark.parametrize("stack", [True, False])
def test_train_group_with_stack_is_train_seeds_under_one_bar(stack, tmp_path):
    """``stack=cfg.stack_seeds``: the same members as :func:`lmsci.train.seeds.train_seeds` (stacked, or one after
    another with each member's checkpoints in its own directory), each context's records, one bar."""
    from lmsci.train.seeds import train_seeds

    ctxs = [_Ctx(seed=31, artifact_dir=tmp_path / "a"), _Ctx(seed=32, artifact_dir=tmp_path / "b")]
    gb = adaptor.lm_batches(_sample, SPEC.batch_size)
    ckpts = [tmp_path / "a" / "ck", tmp_path / "b" / "ck"]
    res = adaptor.train_group([GPT(GC, seed=i) for i in (1, 2)], gb, SPEC, ctxs, stack=stack, seeds=[5, 6],
                              desc="x2", log_points=5, checkpoint="ck", checkpoint_every=5)
    tcfg = SPEC.train_config(device="cpu", log_every=2, checkpoint_every=5)
    ref = train_seeds([GPT(GC, seed=i) for i in (1, 2)], gb, tcfg, seeds=[5, 6], stack=stack)
    assert not res.diverged and len(res.members) == 2
    for a, b, c in zip(res.members, ref.members, ctxs):
        assert _losses(a.history) == _losses(b.history) and len(_losses(b.history)) == 5
        assert [r["loss"] for r in c.records if "loss" in r] == _losses(b.history)
    (total, desc, _), = ctxs[0].bars
    assert (total, desc) == (10 if stack else 20, "x2") and not ctxs[1].bars
    assert all(d.exists() for d in ckpts) != stack  # checkpoints one after another; a stack keeps none


def test_train_group_stack_true_trains_one_model_with_the_trainer(monkeypatch):
    calls = []
    monkeypatch.setattr(stacked, "train_stacked", lambda *a, **k: calls.append("stacked") or stacked.StackedResult())
    real_train = trainer.train
    monkeypatch.setattr(trainer, "train", lambda *a, **k: calls.append("trainer") or real_train(*a, **k))
    gb = adaptor.lm_batches(_sample, SPEC.batch_size)
    adaptor.train_group([GPT(GC, seed=1)], gb, SPEC, [_Ctx(seed=3)], stack=True, steps=2)
    adaptor.train_group([GPT(GC, seed=1)], gb, SPEC, [_Ctx(seed=3)], steps=2)  # default "always": the stack
    assert calls == ["trainer", "stacked"]
