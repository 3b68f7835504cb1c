"""lmsci.measure.attribution_patching: the gradient estimate equals exact activation patching where the logit difference
is affine in the patched head output (the last layer of a model without norms or MLPs), differs where softmax bends
it, agrees with lmsci.measure.patching.head_patching on the exact side, and runs on a Hugging Face Llama."""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.measure import attribution_patching as AP
from lmsci.measure import patching as P
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import HFModel

V, T, N = 20, 8, 12


def _model(seed=0, **kw):
    cfg = dict(vocab_size=V, seq_len=T, n_layers=2, n_heads=2, d_model=16)
    cfg.update(kw)
    m = GPT(GPTConfig(**cfg), seed=seed).eval()
    with torch.no_grad():  # sharpen the near-uniform random attention
        for n, p in m.named_parameters():
            if p.ndim == 2 and "wpe" not in n:
                p.mul_(8.0)
    return m


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, V, (N, T), generator=g)
    corrupt = clean.clone()
    corrupt[:, 1:4] = torch.randint(0, V, (N, 3), generator=g)
    end = torch.full((N,), T - 1)
    io, s = torch.randint(0, V, (N,), generator=g), torch.randint(0, V, (N,), generator=g)
    return clean, corrupt, end, io, s


def test_exact_where_linear_not_where_softmax_bends():
    # attention-only, no norm: the logits are affine in layer 1's z, but layer 0's z passes layer 1's softmax
    m, data = _model(norm="none", mlp="none").double(), _data()  # float64: effects well above rounding
    est = AP.attribution_patching(m, *data)
    exact = AP.exact_patching(m, *data, per="head_position")
    assert est.shape == exact.shape == (2, 2, T)
    assert torch.allclose(est[1].double(), exact[1].double(), rtol=1e-5, atol=1e-9)
    assert exact[1].abs().max() > 1e-4  # not trivially zero
    assert (est[0] - exact[0]).abs().max() > 1e-2 * exact[0].abs().max()
    # per head (all positions): the estimate sums over positions; still exact in the last layer
    heads = AP.exact_patching(m, *data, per="head")
    assert torch.allclose(est.sum(-1)[1].double(), heads[1].double(), rtol=1e-5, atol=1e-9)


def test_exact_side_equals_measure_patching():
    m, data = _model(), _data(1)
    assert torch.allclose(AP.exact_patching(m, *data), P.head_patching(m, *data), atol=1e-5)


def test_no_corruption_no_effect_and_model_untouched():
    m, (c, _, e, io, s) = _model(), _data(2)
    est = AP.attribution_patching(m, c, c, e, io, s)
    assert est.abs().max() < 1e-6
    assert all(p.grad is None and p.requires_grad for p in m.parameters())


def test_attribution_vs_exact_report_and_null():
    m, data = _model(seed=3), _data(3)
    r = AP.attribution_vs_exact(m, *data, per="head_position", top_k=4, n_perm=200)
    assert r["attribution"].shape == r["exact"].shape == (2, 2, T)
    assert r["time_attribution_s"] > 0 and r["time_exact_s"] > 0
    assert -1 <= r["pearson"] <= 1 and r["pearson"] > r["pearson_null_q95"]
    assert 0 < r["pearson_p"] <= 0.05 and abs(r["top_k_null_mean"] - 4 / (2 * 2 * T)) < 0.1
    # a permuted estimate is what the null is made of: it fails the test
    perm = r["attribution"].flatten()[torch.randperm(2 * 2 * T, generator=torch.Generator().manual_seed(0))]
    assert AP.agreement(perm, r["exact"], n_perm=200)["pearson_p"] > 0.01


def test_hf_llama_export_gives_the_same_maps():
    # the same network as an lmsci GPT (hook blocks.{l}.attn.z) and as a transformers Llama (pre-hook on o_proj)
    from lmsci.models.hf_convert import to_hf

    g = _model(seed=5, pos="rope", mlp="swiglu", norm="rmsnorm")
    hf = HFModel(to_hf(g).eval())
    data = _data(4)
    est_g, est_h = AP.attribution_patching(g, *data), AP.attribution_patching(hf, *data)
    ex_g, ex_h = AP.exact_patching(g, *data), AP.exact_patching(hf, *data)
    assert est_h.shape == (2, 2, T) and ex_g.abs().max() > 1e-3
    assert torch.allclose(est_g, est_h, atol=1e-4) and torch.allclose(ex_g, ex_h, atol=1e-4)
    assert AP.head_shape(hf) == (2, 2)


def test_bad_input_refused():
    m, (c, x, e, io, s) = _model(), _data()
    with pytest.raises(ConfigError):
        AP.attribution_patching(m, c, x[:, :-1], e, io, s)
    with pytest.raises(ConfigError):
        AP.attribution_patching(m, c, x, e[:3], io, s)
    with pytest.raises(ConfigError):
        AP.exact_patching(m, c, x, e, io, s, per="neuron")
    with pytest.raises(ConfigError):
        AP.agreement(torch.zeros(4), torch.zeros(5))
    with pytest.raises(ConfigError):
        AP.attribution_patching(m, c, x, torch.full((N,), T), io, s)
