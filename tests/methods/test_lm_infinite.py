"""LM-Infinite / attention sinks / sliding window harness: exactness, ceiling, top-k, removal, linear cost."""

from __future__ import annotations

import math

import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.methods.lm_infinite import (
    ALiBiScorer,
    AttentionPatch,
    AttentionPolicy,
    AttentionStats,
    RoPEScorer,
    alibi_slopes,
    attention_sinks_policy,
    full_policy,
    lm_infinite,
    lm_infinite_policy,
    patched,
    policy_attention,
    rope_cos_sin,
    sliding_window_policy,
    top_k_middle_keys,
)
from lmsci.models.gpt import GPT, GPTConfig


def _naive(q, k, v, scorer, policy):
    """Reference: an explicit n x n loop with LM-Infinite's / StreamingLLM's per-element rules."""
    b, h, n, d = q.shape
    rep = h // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    logits = torch.full((b, h, n, n), -math.inf)
    W, G, C = policy.window, policy.n_start, policy.ceiling
    for i in range(n):
        for j in range(i + 1):
            if W is not None and not (i - j < W or j < G):
                continue
            a, bb = i, j
            if C is not None and i - j >= C:
                a, bb = C, 0
            if policy.kind == "attention_sinks" and j < G:
                a = min(i, policy.n_local - 1)
            logits[:, :, i, j] = scorer.scores(q[:, :, i:i + 1], k[:, :, j:j + 1], torch.tensor([a]),
                                               torch.tensor([bb]))[..., 0, 0]
    return torch.softmax(logits, -1) @ v


@pytest.fixture(scope="module")
def qkv():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 37, 8, generator=g)
    k = torch.randn(2, 2, 37, 8, generator=g)  # grouped-query: 2 kv heads for 4 query heads
    v = torch.randn(2, 2, 37, 8, generator=g)
    return q, k, v


SCORERS = {"rope": RoPEScorer(rope_cos_sin(8), 8 ** -0.5), "alibi": ALiBiScorer(alibi_slopes(4), 8 ** -0.5)}
POLICIES = [full_policy(block_size=5), lm_infinite_policy(8, 3, block_size=5), lm_infinite_policy(8, 3, d_max=6),
            sliding_window_policy(7, block_size=4), attention_sinks_policy(9, 2, block_size=6)]


@pytest.mark.parametrize("pe", ["rope", "alibi"])
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.label())
def test_blockwise_harness_matches_naive_reference(qkv, pe, policy):
    q, k, v = qkv
    pos = torch.arange(q.shape[2])
    out = policy_attention(q, k, v, pos, pos, SCORERS[pe], policy)
    torch.testing.assert_close(out, _naive(q, k, v, SCORERS[pe], policy), atol=2e-6, rtol=1e-5)


def test_distance_ceiling_applied_to_far_starting_tokens(qkv):
    q, k, v = qkv
    n, L, G = q.shape[2], 8, 3
    pos = torch.arange(n)
    seen = {}

    def rec(layer, qp, kp, logits, probs):
        for r, i in enumerate(qp.tolist()):
            seen[i] = (kp, logits[:, :, r])

    sc = SCORERS["rope"]
    policy_attention(q, k, v, pos, pos, sc, lm_infinite_policy(L, G), recorder=rec)
    kp, row = seen[n - 1]
    kk = k.repeat_interleave(2, 1)
    for col, j in enumerate(kp.tolist()):
        if j < G:  # far starting token: scored as if at distance exactly L (query rotated to L, key unrotated)
            want = sc.scores(q[:, :, -1:], kk[:, :, j:j + 1], torch.tensor([L]), torch.tensor([0]))[..., 0, 0]
            true = sc.scores(q[:, :, -1:], kk[:, :, j:j + 1], torch.tensor([n - 1]), torch.tensor([j]))[..., 0, 0]
            torch.testing.assert_close(row[..., col], want)
            assert not torch.allclose(row[..., col], true)
    assert set(kp.tolist()) >= set(range(G)) | set(range(n - L, n))
    finite = torch.isfinite(row[0, 0])
    assert int(finite.sum()) == G + L  # exactly the Lambda: G starting + L local keys


def test_top_k_selects_planted_middle_keys():
    g = torch.Generator().manual_seed(1)
    n, d, L, G = 60, 8, 10, 2
    q = torch.randn(1, 2, n, d, generator=g) * 0.1
    k = torch.randn(1, 2, n, d, generator=g) * 0.1
    v = torch.randn(1, 2, n, d, generator=g)
    target = [17, 23, 31]  # middle positions (>= G, farther than L from the last query)
    u = torch.nn.functional.normalize(torch.randn(1, 2, d, generator=g), dim=-1) * 6
    q[:, :, -1] = u
    for t in target:
        k[:, :, t] = u  # aligned with the last query: logit 36/sqrt(8) >> the others
    sc = ALiBiScorer(alibi_slopes(2), d ** -0.5)
    pol = lm_infinite_policy(L, G, top_k=3, top_k_from_layer=0, top_k_distance=L // 2)
    sel = top_k_middle_keys(q[:, :, -1:], k, torch.arange(n), n - 1, sc, pol)
    assert sorted(sel[0, 0].tolist()) == target and sorted(sel[0, 1].tolist()) == target
    # the last row attends to them (they carry most of the mass); without top-k it cannot
    pos = torch.arange(n)
    with_k = policy_attention(q, k, v, pos, pos, sc, pol)[:, :, -1]
    without = policy_attention(q, k, v, pos, pos, sc, lm_infinite_policy(L, G))[:, :, -1]
    torch.testing.assert_close(with_k, v[:, :, target].mean(2), atol=1e-3, rtol=1e-3)
    assert (without - v[:, :, target].mean(2)).abs().max() > 0.1
    # below top_k_from_layer no top-k
    late = lm_infinite_policy(L, G, top_k=3, top_k_from_layer=2)
    torch.testing.assert_close(policy_attention(q, k, v, pos, pos, sc, late, layer_idx=1)[:, :, -1], without)


def _gpt(pos: str) -> GPT:
    return GPT(GPTConfig(vocab_size=40, seq_len=32, n_layers=2, n_heads=4, d_model=32, pos=pos), seed=0).eval()


@pytest.mark.parametrize("pos", ["rope", "alibi"])
def test_gpt_patch_equals_full_when_input_fits_and_removal_is_exact(pos):
    m = _gpt(pos)
    x = torch.randint(0, 40, (2, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = m(x)
        for pol in (lm_infinite_policy(32, 4, block_size=8), sliding_window_policy(32),
                    attention_sinks_policy(32, 4), full_policy(block_size=7)):
            with patched(m, pol) as p:
                torch.testing.assert_close(m(x), ref, atol=1e-5, rtol=1e-5)
                assert p.stats.score_elements > 0
        assert torch.equal(m(x), ref)  # removal restores the original exactly
        p = AttentionPatch(m, lm_infinite_policy(8, 2)).apply()
        assert not torch.allclose(m(x), ref, atol=1e-3)  # the patch is really active at n > window
        p.remove()
        assert torch.equal(m(x), ref)
        assert "attend" not in m.blocks[0].attn.__dict__


@pytest.mark.parametrize("pos", ["rope", "alibi"])
def test_streaming_cache_is_bounded_and_matches_long_path(pos):
    m = _gpt(pos)
    x = torch.randint(0, 40, (1, 90), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        for pol in (lm_infinite_policy(12, 3), attention_sinks_policy(12, 3), sliding_window_policy(12)):
            with patched(m, pol) as p:
                long = m(x)
                with p.stream() as s:
                    outs = [s.feed(x[:, i:i + 1]) for i in range(x.shape[1])]
                    assert s.max_cache <= pol.cache_budget() + 1
                    assert s.cache_len() <= pol.cache_budget()
                torch.testing.assert_close(torch.cat(outs, 1), long, atol=1e-5, rtol=1e-5)
                if pol.kind == "lm_infinite":  # chunked feeding gives the same result too
                    with p.stream() as s:
                        outs = [s.feed(x[:, i:i + 7]) for i in range(0, x.shape[1], 7)]
                    torch.testing.assert_close(torch.cat(outs, 1), long, atol=1e-5, rtol=1e-5)


def test_long_path_cost_grows_linearly():
    g = torch.Generator().manual_seed(3)
    sc = SCORERS["rope"]
    counts = {}
    for kind, pol in (("lminf", lm_infinite_policy(32, 4)), ("full", full_policy(block_size=32))):
        for n in (256, 512, 1024):
            q = torch.randn(1, 4, n, 8, generator=g)
            st = AttentionStats()
            policy_attention(q, q[:, :2], q[:, :2], torch.arange(n), torch.arange(n), sc, pol, stats=st)
            counts[kind, n] = st.score_elements
    # LM-Infinite: score elements per query bounded by O(G + 2L) -> exactly linear growth
    # linear: cost(n) = a n + b, so the increments double when n doubles (quadratic: they quadruple)
    inc = lambda kind, a, b: counts[kind, b] - counts[kind, a]  # noqa: E731
    assert inc("lminf", 512, 1024) / inc("lminf", 256, 512) == pytest.approx(2.0, rel=1e-6)
    assert counts["lminf", 1024] <= 1024 * 4 * 2 * (4 + 2 * 32)  # <= (G + 2L) logits per query, x2 for ceiling
    assert inc("full", 512, 1024) / inc("full", 256, 512) == pytest.approx(4.0, rel=0.05)


def test_policy_and_model_errors():
    with pytest.raises(ConfigError) as e:
        AttentionPolicy("lm_infinite", n_local=None)
    assert e.value.field == "policy.n_local"
    with pytest.raises(ConfigError):
        AttentionPolicy("bogus")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        attention_sinks_policy(4, 4)
    with pytest.raises(ConfigError):
        AttentionPolicy("sliding_window", n_local=4, top_k=2)
    with pytest.raises(ConfigError) as e:
        AttentionPatch(torch.nn.Linear(2, 2), full_policy())
    assert e.value.field == "model"
    with pytest.raises(ConfigError) as e:
        AttentionPatch(GPT(GPTConfig(vocab_size=10, seq_len=8, n_layers=1, n_heads=2, d_model=8)), full_policy())
    assert e.value.field == "model.pos"


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def test_hf_llama_gqa_patch_exact_removal_and_streaming():
    m = _tiny_llama()
    x = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = m(x).logits
        with lm_infinite(m, 64, 4, block_size=16) as p:
            torch.testing.assert_close(m(x).logits, ref, atol=1e-5, rtol=1e-5)
            assert p.applied
        assert torch.equal(m(x).logits, ref)
        with patched(m, lm_infinite_policy(12, 3)) as p:
            long = m(x).logits
            assert not torch.allclose(long, ref, atol=1e-3)
            with p.stream() as s:
                outs = [s.feed(x[:, i:i + 1]) for i in range(x.shape[1])]
                assert s.max_cache <= 3 + 12 + 1
            torch.testing.assert_close(torch.cat(outs, 1), long, atol=1e-5, rtol=1e-5)
        assert torch.equal(m(x).logits, ref)


@pytest.mark.parametrize("family", ["qwen2", "gpt_neox"])
def test_other_hf_families_patch(family):
    import transformers as tf

    if family == "qwen2":
        cfg = tf.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        cls = tf.Qwen2ForCausalLM
    else:  # Pythia-style: fused QKV, partial rotary
        cfg = tf.GPTNeoXConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, max_position_embeddings=64, rotary_pct=0.5)
        cls = tf.GPTNeoXForCausalLM
    torch.manual_seed(0)
    m = cls(cfg).eval()
    x = torch.randint(0, 64, (1, 30), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = m(x).logits
        with patched(m, lm_infinite_policy(64, 4)):
            torch.testing.assert_close(m(x).logits, ref, atol=1e-5, rtol=1e-5)
        with patched(m, lm_infinite_policy(8, 2)) as p:
            long = m(x).logits
            with p.stream() as s:
                outs = [s.feed(x[:, i:i + 3]) for i in range(0, 30, 3)]
            torch.testing.assert_close(torch.cat(outs, 1), long, atol=1e-5, rtol=1e-5)
        assert torch.equal(m(x).logits, ref)


def test_hf_patch_refuses_padding_and_mixed_positions_then_removes_the_check():
    m = _tiny_llama()
    x = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    pad = torch.ones(2, 12, dtype=torch.long)
    pad[1, :3] = 0  # left padding on row 1
    with torch.no_grad():
        with lm_infinite(m, 64, 4):
            ok = m(input_ids=x, attention_mask=torch.ones_like(pad)).logits  # all ones is fine
            with pytest.raises(ConfigError) as e:
                m(input_ids=x, attention_mask=pad)
            assert e.value.field == "attention_mask"
            pos = torch.stack([torch.arange(12), torch.arange(12) + 5])
            with pytest.raises(ConfigError) as e:
                m(input_ids=x, position_ids=pos)
            assert e.value.field == "position_ids"
        assert ok.shape == (2, 12, 64)
        m(input_ids=x, attention_mask=pad)  # the check leaves with the patch
        assert not m.model._forward_pre_hooks
