"""Attention instruments: max logit / entropy against hooks, NLL by position, buckets, PCA; experiment smokes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.measure.attention import (
    attention_profile,
    bucket_mean,
    log_buckets,
    nll_by_position,
    running_max_by_distance,
    start_token_pca,
)
from lmsci.methods.lm_infinite import full_policy, lm_infinite_policy
from lmsci.models.gpt import GPT, GPTConfig


@pytest.fixture(scope="module")
def gpt():
    return GPT(GPTConfig(vocab_size=30, seq_len=16, n_layers=2, n_heads=2, d_model=16, pos="rope"), seed=1).eval()


def test_profile_matches_model_hooks(gpt):
    x = torch.randint(0, 30, (2, 24), generator=torch.Generator().manual_seed(0))
    names = [f"blocks.{i}.attn.scores" for i in range(2)] + [f"blocks.{i}.attn.pattern" for i in range(2)]
    with torch.no_grad():
        _, cache = gpt.run_with_cache(x, names)
        prof = attention_profile(gpt, x, full_policy(block_size=5), keep_last_row=True)
    for i in range(2):
        s, p = cache[f"blocks.{i}.attn.scores"], cache[f"blocks.{i}.attn.pattern"]
        want_max = s.amax(-1).amax(1).mean(0).numpy()
        want_ent = (-torch.special.xlogy(p, p).sum(-1)).mean((0, 1)).numpy()
        np.testing.assert_allclose(prof.max_logit[i], want_max, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(prof.entropy[i], want_ent, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(prof.last_row[i], s[0, :, -1].numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(prof.n_keys, np.arange(1, 25))
    rm = running_max_by_distance(prof.last_row)
    assert rm.shape == prof.last_row.shape and (np.diff(rm, axis=-1) >= 0).all()


def test_profile_under_lm_infinite_sees_lambda_keys(gpt):
    x = torch.randint(0, 30, (1, 40), generator=torch.Generator().manual_seed(1))
    prof = attention_profile(gpt, x, lm_infinite_policy(8, 3))
    assert prof.n_keys.max() == 3 + 8  # G starting + L local keys
    # entropy is bounded by ln(#keys) under the Lambda mask, but grows like ln n under full attention
    assert np.nanmax(prof.entropy) <= np.log(11) + 1e-5


def test_nll_by_position_and_streaming_equal(gpt):
    x = torch.randint(0, 30, (2, 33), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = gpt(x)
    want = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), x[:, 1:], reduction="none").numpy()
    np.testing.assert_allclose(nll_by_position(gpt, x), want, rtol=1e-5, atol=1e-5)
    pol = lm_infinite_policy(8, 2)
    a = nll_by_position(gpt, x, pol)
    b = nll_by_position(gpt, x, pol, chunk=5)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert a.shape == (2, 32)


def test_bucket_mean_and_log_buckets():
    v = np.tile(np.arange(10.0), (3, 1))
    v[1] += 1.0
    c, m, se = bucket_mean(v, [0, 2, 5, 10])
    np.testing.assert_allclose(c, [0.5, 3.0, 7.0])
    np.testing.assert_allclose(m, [0.5 + 1 / 3, 3 + 1 / 3, 7 + 1 / 3])
    assert (se > 0).all()
    e = log_buckets(1000, first=8)
    assert e[0] == 0 and e[-1] == 1000 and all(a < b for a, b in zip(e, e[1:]))


def test_start_token_pca_separates_planted_start_states():
    g = torch.Generator().manual_seed(3)
    m = GPT(GPTConfig(vocab_size=30, seq_len=64, n_layers=2, n_heads=2, d_model=16, pos="rope"), seed=2).eval()
    x = torch.randint(0, 30, (4, 40), generator=g)
    res = start_token_pca(m, x, n_start=4)
    assert res.coords.shape == (2, 40, 2) and res.separation.shape == (2,)
    assert np.isfinite(res.coords).all() and (res.explained <= 1).all()
    # plant: the first tokens' final states far away -> separation large
    with m.hooks([("blocks.1.resid_post", lambda t, hook: torch.cat([t[:, :4] + 50.0, t[:, 4:]], 1))]):
        planted = start_token_pca(m, x, n_start=4)
    assert planted.separation[1] > 5 and planted.separation[1] > res.separation[1]


def test_hf_llama_profile_matches_eager_attentions():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      attn_implementation="eager")
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).eval()
    x = torch.randint(0, 64, (1, 20), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        att = m(x, output_attentions=True).attentions
    prof = attention_profile(m, x)
    for i, a in enumerate(att):
        want = (-torch.special.xlogy(a, a).sum(-1)).mean((0, 1)).numpy()
        np.testing.assert_allclose(prof.entropy[i], want, rtol=1e-4, atol=1e-5)
    pca = start_token_pca(m, x, n_start=2)
    assert pca.coords.shape == (2, 20, 2)


def test_length_generalization_smoke(tmp_path):
    from lmsci.experiments.length.length_generalization import LengthGeneralization, LengthGeneralizationConfig
    from lmsci.sweep import run_experiment

    cfg = resolve_config(LengthGeneralizationConfig, "smoke", ["ablation_n_global=[0]"])
    run = run_experiment(LengthGeneralization(), cfg, tmp_path / "lg", progress=False, log=lambda *a: None)
    res = run.results()
    assert set(res["point"]) >= {"train", "eval-vanilla", "eval-lm_infinite_G10", "profile"}
    assert (run.path / "figures" / "nll_by_position.png").exists()
    assert len(run.verdicts()) >= 3


def test_passkey_smoke(tmp_path):
    from lmsci.experiments.length.passkey_retrieval import PasskeyConfig, PasskeyRetrieval, make_prompts
    from lmsci.sweep import run_experiment

    p, keys, kp = make_prompts(3, 50, 0.5, 3, np.random.default_rng(0))
    assert p.shape == (3, 50) and (p[np.arange(3), kp + 1] == keys[:, 0]).all()
    cfg = resolve_config(PasskeyConfig, "smoke", ["length_factors=[2]"])
    run = run_experiment(PasskeyRetrieval(), cfg, tmp_path / "pk", progress=False, log=lambda *a: None)
    res = run.results()
    assert list(res["point"]) == ["train", "eval-x2"]
    assert 0 <= res["acc_lm_infinite_topk_h0"].dropna().iloc[0] <= 1
    assert run.verdicts()


def test_band_max_logit_compares_equal_key_counts():
    from lmsci.errors import ConfigError
    from lmsci.measure.attention import band_max_logit

    row = np.arange(10.0)  # key position j has logit j; the last query is position 9
    row[2] = -np.inf  # a masked key is skipped
    # distances 0..9 -> key positions 9..0; bands of 3 keys: distances [0,3), [3,6), [6,9); distance 9 dropped
    np.testing.assert_array_equal(band_max_logit(row, 3), [9.0, 6.0, 3.0])
    both = band_max_logit(np.stack([row, -row]), 5)
    np.testing.assert_array_equal(both, [[9.0, 4.0], [-5.0, 0.0]])
    assert band_max_logit(np.full(6, -np.inf), 3).tolist() == [-np.inf, -np.inf]
    with pytest.raises(ConfigError):
        band_max_logit(row, 11)
