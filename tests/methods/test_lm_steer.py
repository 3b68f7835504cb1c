"""LM-Steer (methods/lm_steer.py, its transfer in methods/lm_steer_transfer.py, its highlighting and SVD probe in
methods/lm_steer_analysis.py) and the steering baselines (methods/steering.py) on tiny models built here:
a random lmsci GPT, a random Hugging Face Llama and GPT-NeoX (tied and untied output embeddings)."""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.methods.lm_steer import LMSteer, generate, steering, token_logprobs, train_steer
from lmsci.methods.steer_training import train_intervention
from lmsci.methods.steerable import as_steerable, logits_of
from lmsci.methods.steering import ActAdd, LogitOffset
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import HFModel

V, D = 32, 16


def _gpt(seed: int = 0) -> GPT:
    return GPT(GPTConfig(vocab_size=V, seq_len=16, n_layers=1, n_heads=2, d_model=D), seed=seed).eval()


def _llama() -> HFModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HFModel(LlamaForCausalLM(cfg).eval())


def _neox(tie: bool) -> HFModel:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(vocab_size=V, hidden_size=D, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                        max_position_embeddings=32, tie_word_embeddings=tie)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HFModel(GPTNeoXForCausalLM(cfg).eval())


MODELS = {"gpt": _gpt, "llama": _llama, "neox-tied": lambda: _neox(True), "neox-untied": lambda: _neox(False)}


def _task(n: int = 48, seed: int = 0):
    """Positive texts use tokens 0..7, negative texts 8..15; labels +1 / -1."""
    g = torch.Generator().manual_seed(seed)
    pos = torch.randint(0, 8, (n, 10), generator=g)
    neg = torch.randint(8, 16, (n, 10), generator=g)
    return torch.cat([pos, neg]), torch.cat([torch.ones(n), -torch.ones(n)])


def _prompt(b: int = 3, t: int = 5) -> torch.Tensor:
    return torch.randint(16, V, (b, t), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kind", list(MODELS))
def test_only_adapters_train_and_eps0_is_exact(kind):
    model = MODELS[kind]()
    if kind == "neox-tied":
        assert model.model.get_output_embeddings().weight is model.model.get_input_embeddings().weight
    before = {n: p.detach().clone() for n, p in as_steerable(model).model.named_parameters()} if kind != "gpt" \
        else {n: p.detach().clone() for n, p in model.named_parameters()}
    data, labels = _task(8)
    steer = train_steer(model, data, labels, steps=2, batch_size=4, epsilon=0.1, lr=0.05)
    params = dict(model.named_parameters()) if kind == "gpt" else dict(model.model.named_parameters())
    for n, p in params.items():
        assert torch.equal(p, before[n]), n
        assert p.grad is None, n
        assert p.requires_grad  # flags restored
    assert steer.P1.grad is not None and steer.P2.grad is not None
    assert len(steer.history) == 2
    ids = _prompt()
    base = logits_of(as_steerable(model), ids)
    with steering(model, steer, torch.zeros(steer.K)):
        same = logits_of(as_steerable(model), ids)
    with steering(model, steer, steer.values(attr=5.0)):
        moved = logits_of(as_steerable(model), ids)
    assert torch.equal(base, same)
    assert not torch.allclose(base, moved)
    assert torch.equal(base, logits_of(as_steerable(model), ids))  # detached on exit


@pytest.mark.parametrize("kind", ["gpt", "llama", "neox-tied"])
def test_steer_moves_next_token_distribution(kind):
    model = MODELS[kind]()
    data, labels = _task()
    steer = train_steer(model, data, labels, steps=40, batch_size=16, epsilon=0.1, lr=0.05)
    assert steer.history[-1] < steer.history[0]
    ids = _prompt()
    mass = {}
    for v in (1.0, -1.0):
        p = token_logprobs  # noqa: F841 (scoring API exercised below)
        with steering(model, steer, steer.values(attr=v)):
            probs = logits_of(as_steerable(model), ids)[:, -1].softmax(-1)
        mass[v] = (probs[:, :8].sum(-1).mean().item(), probs[:, 8:16].sum(-1).mean().item())
    assert mass[1.0][0] > mass[-1.0][0] + 0.1  # positive steer: more mass on the positive tokens
    assert mass[-1.0][1] > mass[1.0][1] + 0.1
    out = generate(model, ids, steer, steer.values(attr=1.0), max_new_tokens=6,
                   **({"temperature": 0.0} if kind == "gpt" else {"do_sample": False, "pad_token_id": 0}))
    assert out.shape == (3, 11)
    assert (out[:, 5:] < 8).float().mean() > 0.5


def test_shift_is_the_embedding_map_and_composes_linearly():
    """h <- h + eps h W equals logits with e_v <- (I + eps W) e_v; steers add in the hidden space."""
    model = _gpt()
    steer = LMSteer(D, names=("a", "b"), rank=4, epsilon=0.3, dummy=False, seed=3)
    h = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(0))
    E = model.lm_head.weight.detach()
    for s in ([1.0, 0.0], [0.0, 1.0]):
        W = steer.matrix(values=torch.tensor(s))
        steered = steer.shift(h, torch.tensor([s, s]))
        ref = h @ ((torch.eye(D) + 0.3 * W) @ E.T)  # l_v = h^T (I + eps W) e_v
        torch.testing.assert_close(steered @ E.T, ref, rtol=1e-5, atol=1e-5)
    c = torch.tensor([[1.0, 0.0], [2.0, 0.0]]), torch.tensor([[0.0, -1.0], [0.0, 0.5]])
    d_a, d_b = steer.shift(h, c[0]) - h, steer.shift(h, c[1]) - h
    torch.testing.assert_close(steer.shift(h, c[0] + c[1]) - h, d_a + d_b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(steer.shift(h, 3 * c[0]) - h, 3 * d_a, rtol=1e-5, atol=1e-6)
    # combining two separately made steers: exact sum, dummies renamed, ranks padded
    s1 = LMSteer(D, names=("sent",), rank=3, epsilon=0.2, seed=1)
    s2 = LMSteer(D, names=("genre",), rank=5, epsilon=0.1, seed=2)
    both = LMSteer.combine([s1, s2])
    assert both.names == ("sent", "dummy.0", "genre", "dummy.1") and both.dummies == ("dummy.0", "dummy.1")
    v1, v2 = s1.values(sent=2.0), s2.values(genre=-1.0)
    got = both.shift(h, both.values({"sent": 2.0, "genre": -1.0}).expand(2, -1)) - h
    want = (s1.shift(h, v1.expand(2, -1)) - h) + (s2.shift(h, v2.expand(2, -1)) - h)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_per_example_values_and_dummy():
    model = _gpt()
    steer = LMSteer(D, rank=D, epsilon=0.5, seed=0)
    assert steer.names == ("attr", "dummy") and steer.values(attr=5).tolist() == [5.0, 1.0]
    assert steer.values(attr=5, dummy=0).tolist() == [5.0, 0.0]
    ids = _prompt(2)
    vals = torch.tensor([[1.0, 1.0], [-1.0, 1.0]])
    with steering(model, steer, vals):
        both = model(ids)
    for i in range(2):
        with steering(model, steer, vals[i]):
            one = model(ids[i:i + 1])
        torch.testing.assert_close(both[i:i + 1], one, rtol=1e-5, atol=1e-6)
    assert LMSteer(D, rank=4).num_trainable() == 2 * 2 * D * 4


def test_named_errors():
    model = _gpt()
    with pytest.raises(ConfigError, match="rank"):
        LMSteer(D, rank=D + 1)
    steer = LMSteer(D)
    with pytest.raises(UnknownNameError, match="steer"):
        steer.values(toxicity=1.0)
    with pytest.raises(ConfigError, match="d_model"):
        LMSteer(D + 2).attach(model)
    from transformers import LlamaConfig, LlamaModel

    base = LlamaModel(LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=32, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(ConfigError, match="lm_head"):
        train_steer(base, *_task(4), steps=1)
    with pytest.raises(ConfigError, match="model"):
        as_steerable(torch.nn.Linear(3, 3))
    with pytest.raises(ConfigError, match="labels"):
        train_steer(model, *_task(4)[:1], torch.ones(3), steps=1)
    with pytest.raises(ConfigError, match="layer"):
        ActAdd(D, layer=5).attach(model)


def test_diverged():
    from lmsci.errors import DivergedError

    model = _gpt()
    steer = LMSteer(D, epsilon=1.0)
    steer.P1.data.fill_(float("nan"))
    with pytest.raises(DivergedError):
        train_steer(model, *_task(4), steer=steer, steps=2)


# ------------------------------------------------------------------------------------ transfer


def _orthogonal(d: int, seed: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed)))
    return q


@pytest.mark.parametrize("method", ["lstsq", "procrustes"])
def test_transfer_recovers_a_planted_rotation(method):
    from lmsci.methods.lm_steer_transfer import fit_embedding_map, transfer_steer

    src = _gpt(0)
    Q = _orthogonal(D, 7)
    tgt = _gpt(1)
    with torch.no_grad():  # the target's output embeddings are the source's, rotated: E_t = E_s Q
        tgt.lm_head.weight.copy_(src.lm_head.weight @ Q)
    steer = LMSteer(D, rank=4, epsilon=0.5, seed=2)
    moved, emap = transfer_steer(steer, src, tgt, method=method, holdout=0.25)
    assert emap.heldout_error < 1e-4 and emap.heldout_error_inverse < 1e-4
    assert emap.n_fit == 24 and emap.n_heldout == 8
    # W' = Q^T W Q: the steered target logits equal the steered source logits for corresponding hidden states
    torch.testing.assert_close(moved.matrix("attr"), Q.T @ steer.matrix("attr") @ Q, rtol=1e-4, atol=1e-5)
    assert moved.names == steer.names and moved.dummies == steer.dummies
    h = torch.randn(2, 3, D, generator=torch.Generator().manual_seed(4))
    s = steer.values(attr=2.0).expand(2, -1)
    torch.testing.assert_close(moved.shift(h @ Q, s) @ tgt.lm_head.weight.T, steer.shift(h, s) @ src.lm_head.weight.T,
                               rtol=1e-4, atol=1e-5)
    # unrelated embeddings: the held-out error is large
    rand = torch.randn(200, D, generator=torch.Generator().manual_seed(5))
    bad = fit_embedding_map(torch.randn(200, D, generator=torch.Generator().manual_seed(6)), rand, method)
    assert bad.heldout_error > 0.9


def test_procrustes_matches_scipy_and_handles_widths():
    from scipy.linalg import orthogonal_procrustes

    from lmsci.methods.lm_steer_transfer import fit_embedding_map

    g = torch.Generator().manual_seed(0)
    Es, Et = torch.randn(100, 8, generator=g), torch.randn(100, 8, generator=g)
    emap = fit_embedding_map(Es, Et, "procrustes", holdout=0.0)
    R, _ = orthogonal_procrustes(Et.double().numpy(), Es.double().numpy())
    c = emap.A.double().norm() / torch.tensor(R).norm()
    torch.testing.assert_close(emap.A.double() / c, torch.tensor(R), rtol=1e-4, atol=1e-5)
    # different widths: a planted linear map from a 6-wide to an 8-wide space is recovered by least squares
    M = torch.randn(6, 8, generator=g)
    E6 = torch.randn(100, 6, generator=g)
    wide = fit_embedding_map(E6, E6 @ M, "lstsq")
    assert wide.heldout_error < 1e-4 and wide.A.shape == (8, 6) and wide.B.shape == (6, 8)
    moved = wide.map_steer(LMSteer(6, rank=6))
    assert moved.d_model == 8 and moved.rank == 6
    with pytest.raises(ConfigError, match="method"):
        fit_embedding_map(Es, Et, "adam")
    with pytest.raises(ConfigError, match="steer.d_model"):
        wide.map_steer(LMSteer(8))


def test_shared_tokens():
    from lmsci.methods.lm_steer_transfer import shared_tokens

    src, tgt = shared_tokens({"a": 0, "b": 1, "c": 2}, {"c": 5, "a": 9, "z": 1})
    assert src.tolist() == [0, 2] and tgt.tolist() == [9, 5]


# ------------------------------------------------------------------------------------ highlighting, SVD


def test_max_subspans_finds_planted_spans():
    from lmsci.methods.lm_steer_analysis import max_subspans

    x = [-0.1] * 30
    x[5:9] = [1.0, 2.0, 1.5, 0.5]
    x[20:22] = [3.0, 1.0]
    spans, total = max_subspans(x, n_spans=4, max_len=10)
    assert spans == [(5, 9), (20, 22)] and total == pytest.approx(9.0)
    spans, _ = max_subspans(x, n_spans=1, max_len=10)
    assert spans == [(5, 9)]
    spans, total = max_subspans(x, n_spans=1, max_len=2)
    assert spans == [(20, 22)] and total == pytest.approx(4.0)
    spans, total = max_subspans(x, n_spans=3, max_len=2)  # spans never touch: (5,7) and (8,9) or (6,8)
    assert spans == [(5, 7), (8, 9), (20, 22)] or spans == [(6, 8), (20, 22)] or len(spans) == 3
    assert all(b < c for (_, b), (c, _) in zip(spans, spans[1:]))
    assert max_subspans([-1.0, -2.0], 3, 3) == ([], 0.0)
    # brute force on random scores: the DP optimum equals exhaustive search over 1-2 spans of length <= 3
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        s = torch.randn(9, generator=g).tolist()
        cands = [0.0] + [sum(s[a:b]) for a in range(9) for b in range(a + 1, min(9, a + 3) + 1)]
        cands += [sum(s[a:b]) + sum(s[c:e]) for a in range(9) for b in range(a + 1, min(9, a + 3) + 1)
                  for c in range(b + 1, 9) for e in range(c + 1, min(9, c + 3) + 1)]
        assert max_subspans(s, 2, 3)[1] == pytest.approx(max(cands))
    with pytest.raises(ConfigError, match="max_len"):
        max_subspans(x, 2, 0)


def test_highlight_returns_the_planted_span():
    """A steer that promotes tokens 0..3: the positive-vs-negative log-likelihood difference peaks there."""
    from lmsci.methods.lm_steer_analysis import highlight

    model = _gpt()
    steer = LMSteer(D, rank=1, epsilon=1.0, dummy=False)
    g = torch.Generator().manual_seed(9)
    a, b = torch.linalg.qr(torch.randn(D, 2, generator=g))[0].T  # orthonormal
    with torch.no_grad():  # every final hidden state has a component 5 a (ln_f bias); tokens 0..3 share b
        model.ln_f.bias += 5 * a
        model.lm_head.weight[:4] += 0.2 * b
        steer.P1.data[0, :, 0] = a * 5  # W = 5 a b^T: h W = 5 (h . a) b promotes tokens 0..3
        steer.P2.data[0, :, 0] = b
    ids = torch.tensor([20, 21, 22, 23, 24, 1, 2, 3, 0, 25, 26, 27, 28, 29])
    hl = highlight(model, steer, ids, {"attr": 1.0}, {"attr": -1.0}, n_spans=1, max_len=4)
    assert hl.spans == [(5, 9)], (hl.spans, hl.delta)
    assert hl.delta.shape == (13,) and hl.score > 0


def test_svd_probe_names_the_planted_tokens():
    from lmsci.methods.lm_steer_analysis import svd_probe

    model = _gpt()
    E = model.lm_head.weight.detach()
    steer = LMSteer(D, rank=1, epsilon=1.0, dummy=False)
    target = 11
    u = torch.randn(D, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        steer.P1.data[0, :, 0] = u
        steer.P2.data[0, :, 0] = -E[target] * 5  # W = u (-5 e_11)^T : rank 1, right singular vector -e_11/|e_11|
    dirs = svd_probe(steer, model, k=2, n_tokens=3, decode=lambda i: f"t{i}")
    assert dirs[0].top_ids[0] == target and dirs[0].top_tokens[0] == "t11"
    assert dirs[0].singular_value == pytest.approx(float(u.norm() * 5 * E[target].norm()), rel=1e-4)
    assert dirs[1].singular_value < 1e-4
    assert dirs[0].bottom_scores[0] <= dirs[0].bottom_scores[-1] <= dirs[0].top_scores[-1]
    # with contexts the sign follows the steer: h . u > 0 means the steer lowers token 11 (W has -e_11)
    dirs = svd_probe(steer, E, k=1, n_tokens=3, contexts=u[None])
    assert dirs[0].bottom_ids[0] == target
    with pytest.raises(ConfigError, match="embeddings"):
        svd_probe(steer, torch.zeros(V, D + 1))


# ------------------------------------------------------------------------------------ baselines


@pytest.mark.parametrize("kind", ["gpt", "llama", "neox-untied"])
@pytest.mark.parametrize("baseline", ["offset", "actadd"])
def test_baselines_train_in_the_same_harness(kind, baseline):
    model = MODELS[kind]()
    m = as_steerable(model)
    params = dict(model.named_parameters()) if kind == "gpt" else dict(m.model.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    steer = LogitOffset(V) if baseline == "offset" else ActAdd(D, layer=0)
    data, labels = _task()
    vals = steer.values(batch=len(labels))
    vals[:, 0] = labels
    train_intervention(model, steer, data, vals, steps=30, batch_size=16, lr=0.1)
    for n, p in params.items():
        assert torch.equal(p, before[n]) and p.grad is None, n
    ids = _prompt()
    base = logits_of(m, ids)
    with steering(model, steer, torch.zeros(steer.K)):
        assert torch.equal(logits_of(m, ids), base)
    mass = {}
    for v in (1.0, -1.0):
        with steering(model, steer, steer.values(attr=v)):
            probs = logits_of(m, ids)[:, -1].softmax(-1)
        mass[v] = probs[:, :8].sum(-1).mean().item()
    # (ActAdd acts before the final norm, which bounds what it can do to a random model with a small unembedding)
    assert mass[1.0] > mass[-1.0] + (0.1 if baseline == "offset" else 0.02)
    # the scale knob: values scale the intervention linearly
    with steering(model, steer, steer.values(attr=2.0, dummy=0.0)):
        two = logits_of(m, ids)
    with steering(model, steer, steer.values(attr=1.0, dummy=0.0)):
        one = logits_of(m, ids)
    if baseline == "offset":
        torch.testing.assert_close(two - base, 2 * (one - base), rtol=1e-4, atol=1e-5)
    else:
        assert not torch.allclose(two, one)


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_actadd_from_contrast(kind):
    model = MODELS[kind]()
    data, labels = _task(16)
    steer = ActAdd.from_contrast(model, 0, data[labels > 0], data[labels < 0])
    assert steer.names == ("attr",) and steer.K == 1
    m = as_steerable(model)
    with m.hooks(cache="blocks.0.resid_post") as cache:
        logits_of(m, data[labels > 0])
    mp = cache["blocks.0.resid_post"].mean((0, 1))
    with m.hooks(cache="blocks.0.resid_post") as cache:
        logits_of(m, data[labels < 0])
    mn = cache["blocks.0.resid_post"].mean((0, 1))
    torch.testing.assert_close(steer.vectors[0].detach(), mp - mn, rtol=1e-4, atol=1e-5)
    with steering(model, steer, torch.tensor([1.0])):
        with m.hooks(cache="blocks.0.resid_post") as cache:
            logits_of(m, data[labels < 0])
    torch.testing.assert_close(cache["blocks.0.resid_post"].mean((0, 1)), mp, rtol=1e-4, atol=1e-5)
    with pytest.raises(ConfigError, match="layer"):
        ActAdd.from_contrast(model, 3, data[:2], data[2:4])


# ------------------------------------------------------------------------------------ loss, io, analysis


def test_fused_loss_equals_plain_and_padding_is_masked():
    from lmsci.methods.steerable import mean_nll, pad_batch

    model = _gpt()
    steer = LMSteer(D, epsilon=0.5, seed=1)
    ids, mask = pad_batch([[1, 2, 3, 4, 5], [6, 7], [8, 9, 10]], pad_id=0)
    with steering(model, steer, steer.values(attr=2.0)):
        fused, plain = mean_nll(model, ids, mask), mean_nll(model, ids, mask, fused=False)
        one = mean_nll(model, ids[1:2, :2], mask[1:2, :2])
        other_pad = ids.clone()
        other_pad[mask == 0] = 31
        assert mean_nll(model, other_pad, mask).item() == pytest.approx(fused.item(), rel=1e-6)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-6)
    lp = token_logprobs(model, ids, steer, steer.values(attr=2.0), attention_mask=mask)
    assert lp.shape == (3, 4) and lp[1, 1:].eq(0).all()
    assert float(-lp.sum() / 7) == pytest.approx(fused.item(), rel=1e-5)
    assert float(-lp[1, 0]) == pytest.approx(one.item(), rel=1e-5)


def test_save_load_and_analysis(tmp_path):
    from lmsci.methods.lm_steer import load_steer, save_steer, unembed_inputs
    from lmsci.methods.lm_steer_analysis import steer_analysis

    model = _gpt()
    data, labels = _task()
    steer = train_steer(model, data, labels, steps=30, batch_size=16, epsilon=0.1, lr=0.05, rank=8)
    for s in (steer, LogitOffset(V), ActAdd(D, 0, names=("x", "y"), dummy=False)):
        with torch.no_grad():
            for p in s.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
        back = load_steer(save_steer(s, tmp_path / type(s).__name__))
        assert type(back) is type(s) and back.names == s.names and back.dummies == s.dummies
        assert back.epsilon == s.epsilon
        for a, b in zip(s.parameters(), back.parameters()):
            assert torch.equal(a, b)
    res = steer_analysis(model, steer, data[0])  # a positive text: best explained at a positive steer value
    assert res["best"] > 0 and len(res["loss"]) == 7 and sum(res["distribution"]) == pytest.approx(1.0)
    assert steer_analysis(model, steer, data[-1])["best"] < 0
    h = unembed_inputs(model, data[:2], torch.tensor([[1] * 10, [1] * 4 + [0] * 6]))
    assert h.shape == (14, D)
    with model.hooks(cache="final") as cache:
        model(data[:1])
    torch.testing.assert_close(h[:10], cache["final"][0])


def test_bfloat16_llama():
    model = _llama().to(torch.bfloat16)
    data, labels = _task(8)
    steer = train_steer(model, data, labels, steps=2, batch_size=4, epsilon=0.1, lr=0.05)
    assert steer.P1.dtype == torch.float32 and len(steer.history) == 2
    ids = _prompt()
    base = logits_of(as_steerable(model), ids)
    with steering(model, steer, torch.zeros(steer.K)):
        assert torch.equal(logits_of(as_steerable(model), ids), base)
    with steering(model, steer, steer.values(attr=3.0)):
        assert logits_of(as_steerable(model), ids).dtype == torch.bfloat16


def test_steer_trains_on_an_lm_that_still_holds_its_own_gradients():
    """Gradients left on the LM by its own training are not a leak: training the steer leaves them unchanged."""
    from lmsci.models.gpt import GPT, GPTConfig
    from lmsci.methods import lm_steer as lm

    model = GPT(GPTConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2, seq_len=8), seed=0)
    ids = torch.randint(0, 16, (4, 8), generator=torch.Generator().manual_seed(0))
    model.sum_nll(ids[:, :-1], ids[:, 1:]).backward()
    held = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert held
    lm.train_steer(model, ids.tolist(), torch.ones(4), steps=2, batch_size=2)
    for n, p in model.named_parameters():
        if n in held:
            assert torch.equal(p.grad, held[n])
