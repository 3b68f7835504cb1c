"""lmsci.methods.rep_reading: the RepE reading vector finds a planted concept direction from contrast pairs even when
a larger unrelated direction dominates the activations, reads held-out pairs, falls to chance with shuffled labels,
reads real activations of an lmsci GPT and a Hugging Face Llama, and steers exactly where the ground truth is linear."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.methods import rep_reading as R
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import HFModel

D, V, T = 16, 24, 8


def planted(n=200, seed=0, shuffle=False):
    """Pairs that share a base (with a large variance along ``w``) and differ by ``+-0.5 u`` plus small noise."""
    g = torch.Generator().manual_seed(seed)
    u, w = torch.zeros(D), torch.zeros(D)
    u[0], w[1] = 1.0, 1.0
    base = torch.randn(n, D, generator=g) + 10.0 * torch.randn(n, 1, generator=g) * w
    pos = base + 0.5 * u + 0.1 * torch.randn(n, D, generator=g)
    neg = base - 0.5 * u + 0.1 * torch.randn(n, D, generator=g)
    if shuffle:  # the null: which member carries the concept is a coin flip
        swap = torch.rand(n, generator=g) < 0.5
        pos, neg = torch.where(swap[:, None], neg, pos), torch.where(swap[:, None], pos, neg)
    return pos, neg, u, w


@pytest.mark.parametrize("method", ["pca", "mean_diff"])
def test_reading_vector_finds_the_planted_direction(method):
    pos, neg, u, w = planted()
    rv = R.reading_vector(pos[:100], neg[:100], method)
    assert float(rv.direction @ u) > 0.98  # sign-aligned, not the dominant w
    # the raw activations' first principal component is w, not u: the pair design is what finds u
    x = torch.cat([pos, neg])
    top = torch.linalg.svd(x - x.mean(0), full_matrices=False)[2][0]
    assert abs(float(top @ w)) > 0.95
    acc = R.read_accuracy(rv, pos[100:], neg[100:])
    assert acc["pair_acc"] >= 0.97 and acc["separation"] > 0.8
    if method == "pca":
        assert rv.explained_variance > 0.5


def test_shuffled_labels_read_at_chance():
    pos, neg, _, _ = planted(n=400, seed=1, shuffle=True)
    rv = R.reading_vector(pos[:200], neg[:200])
    assert 0.35 < R.read_accuracy(rv, pos[200:], neg[200:])["pair_acc"] < 0.65


def _gpt(**kw):
    cfg = dict(vocab_size=V, seq_len=T, n_layers=2, n_heads=2, d_model=D)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg), seed=0).eval()


def _pairs(n=40, seed=0):
    """Random contexts ending in token 1 (concept) or token 2 (no concept); lengths vary (right padding)."""
    g = torch.Generator().manual_seed(seed)
    pos, neg = [], []
    for _ in range(n):
        ctx = torch.randint(3, V, (int(torch.randint(3, T, (1,), generator=g)),), generator=g).tolist()
        pos.append(ctx + [1])
        neg.append(ctx + [2])
    return pos, neg


def test_contrast_activations_and_layers_on_a_gpt():
    m = _gpt()
    pos, neg = _pairs()
    P, N = R.contrast_activations(m, pos, neg, 1)
    assert P.shape == N.shape == (40, D)
    _, cache = m.run_with_cache(torch.tensor([pos[3]]), ["blocks.1.resid_post"])
    assert torch.allclose(P[3], cache["blocks.1.resid_post"][0, -1], atol=1e-5)  # padding did not change it
    res = R.reading_by_layer(m, pos, neg, seed=0)
    assert [r["layer"] for r in res] == [0, 1]
    assert res[0]["test"]["pair_acc"] == 1.0  # the last token differs: block 0's output carries it


def test_hf_llama_contrast_activations():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = HFModel(LlamaForCausalLM(cfg).eval())
    pos, neg = _pairs(12, 1)
    P, N = R.contrast_activations(m, pos, neg, 0)
    _, cache = m.run_with_cache(torch.tensor([neg[5]]), ["blocks.0.resid_post"])
    assert torch.allclose(N[5], cache["blocks.0.resid_post"][0, -1], atol=1e-5)
    rv = R.reading_vector(P, N, layer=0)
    assert R.read_accuracy(rv, P, N)["pair_acc"] == 1.0


def test_steering_is_exactly_linear_where_the_model_is():
    # no final norm: steering the last block's output by alpha * v moves every logit by alpha * (W_U v)
    m = _gpt(norm="none")
    pos, neg = _pairs()
    P, N = R.contrast_activations(m, pos, neg, 1)
    rv = R.reading_vector(P, N, layer=1)
    ids = torch.randint(3, V, (5, T), generator=torch.Generator().manual_seed(2))
    alphas = [-2.0, 0.0, 1.0, 3.0]
    eff = R.steering_effect(m, rv, ids, alphas, lambda lg: lg[..., 1].mean())
    with torch.no_grad():
        assert eff[1] == pytest.approx(float(m(ids)[..., 1].mean()), abs=1e-5)
    slope = float(m.lm_head.weight[1].detach() @ rv.direction)
    assert np.allclose(eff - eff[1], slope * np.asarray(alphas), atol=1e-4) and abs(slope) > 1e-3
    steer = R.as_steer(rv, scale=2.0)
    assert steer.layer == 1 and torch.allclose(steer.vectors[0], 2 * rv.direction)


def test_bad_input_refused():
    pos, neg, _, _ = planted(n=10)
    with pytest.raises(ConfigError):
        R.reading_vector(pos, neg[:5])
    with pytest.raises(ConfigError):
        R.reading_vector(pos, neg, method="ica")
    with pytest.raises(ConfigError):
        R.contrast_activations(_gpt(), [[1, 2]], [[1, 2], [3]], 0)
    with pytest.raises(ConfigError):
        R.contrast_activations(_gpt(), [[1, 2]], [[1, 3]], 5)
    with pytest.raises(ConfigError):
        R.as_steer(R.reading_vector(pos, neg))
