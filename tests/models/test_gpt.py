"""Tests for lmsci.models.gpt: contract, variants, hooks, fused vs explicit attention, training, save/load."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.positions import t5_bucket, uni_window



POS = ["learned", "rope", "relative", "alibi", "nope", "uni"]


def tiny(**kw) -> GPTConfig:
    base = dict(vocab_size=50, seq_len=16, n_layers=2, n_heads=4, d_model=32)
    base.update(kw)
    return GPTConfig(**base)


def ids(B=3, T=16, V=50, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_config_defaults_and_errors():
    c = tiny()
    assert (c.head_dim, c.mlp_dim, c.pos, c.mlp, c.norm, c.tie_embeddings, c.bias) == (8, 128, "learned", "gelu", "layernorm", False, True)
    with pytest.raises(ConfigError, match="n_heads"):
        tiny(d_model=30)
    with pytest.raises(ConfigError, match="pos"):
        tiny(pos="sinusoid")
    with pytest.raises(ConfigError, match="d_head"):
        tiny(pos="rope", d_head=7)
    with pytest.raises(ConfigError):
        tiny(unknown_field=1)
    with pytest.raises(ConfigError, match="n_layers"):
        GPTConfig.model_validate(dict(vocab_size=5, seq_len=4, n_layers=-1, n_heads=1, d_model=4))
    assert GPTConfig.model_validate(c.model_dump()) == c


def test_num_params_formula():
    V, T, d, L, dm = 50, 16, 32, 2, 128
    m = GPT(tiny())
    ln = 2 * d
    block = ln + (d * 3 * d + 3 * d) + (d * d + d) + ln + (d * dm + dm) + (dm * d + d)
    non_emb = L * block + ln
    assert m.num_params(non_embedding=True) == non_emb
    assert m.num_params() == non_emb + 2 * V * d + T * d
    tied = GPT(tiny(tie_embeddings=True))
    assert tied.num_params() == non_emb + V * d + T * d
    assert tied.lm_head.weight is tied.wte.weight


@pytest.mark.parametrize("pos", POS)
@pytest.mark.parametrize("mlp,norm", [("gelu", "layernorm"), ("swiglu", "rmsnorm"), ("none", "layernorm")])
def test_forward_shapes_and_fused_equals_explicit(pos, mlp, norm):
    m = GPT(tiny(pos=pos, mlp=mlp, norm=norm)).eval()
    x = ids()
    fused = m(x)
    assert fused.shape == (3, 16, 50)
    # reading the pattern forces the explicit softmax path in every layer
    with m.hooks(cache="blocks.*.attn.pattern") as cache:
        explicit = m(x)
    assert torch.allclose(fused, explicit, atol=1e-5), (fused - explicit).abs().max()
    pat = cache["blocks.1.attn.pattern"]
    assert pat.shape == (3, 4, 16, 16)
    assert torch.allclose(pat.sum(-1), torch.ones(3, 4, 16), atol=1e-5)
    assert torch.all(pat.triu(1) == 0)  # causal


def test_uni_pattern_is_fixed_uniform_window():
    m = GPT(tiny(pos="uni"))
    _, cache = m.run_with_cache(ids(), "blocks.0.attn.pattern")
    pat = cache["blocks.0.attn.pattern"][0]
    for h in range(4):
        w = uni_window(h)
        row = pat[h, 15]
        assert torch.allclose(row[15 - w + 1:], torch.full((w,), 1.0 / w))
        assert row.sum().item() == pytest.approx(1.0)
    assert [uni_window(h) for h in range(4)] == [1, 3, 7, 15]
    assert not hasattr(m.blocks[0].attn, "rel_bias") and m.blocks[0].attn.qkv.out_features == 32


def test_t5_buckets_monotone():
    d = torch.arange(0, 300)
    b = t5_bucket(d)
    assert b[:16].tolist() == list(range(16))
    assert torch.all(b[1:] >= b[:-1]) and b.max().item() == 31


def test_hooks_read_patch_and_removed_even_after_exception():
    m = GPT(tiny()).eval()
    x = ids()
    clean = m(x)
    names = set(m.hook_points)
    assert {"embed", "final", "blocks.0.resid_pre", "blocks.1.resid_post", "blocks.0.attn.scores",
            "blocks.0.attn.pattern", "blocks.0.attn.out", "blocks.0.mlp.pre", "blocks.0.mlp.post"} <= names
    logits, cache = m.run_with_cache(x)
    assert torch.allclose(logits, clean, atol=1e-5)
    assert cache["embed"].shape == (3, 16, 32) and cache["blocks.0.mlp.pre"].shape == (3, 16, 128)
    assert cache["blocks.0.attn.scores"].shape == (3, 4, 16, 16)
    assert torch.isinf(cache["blocks.0.attn.scores"][0, 0, 0, 1])
    # the final logits are lm_head(final)
    assert torch.allclose(m.lm_head(cache["final"]), clean, atol=1e-5)
    # the residual stream is the sum of its parts
    r = cache["blocks.0.resid_pre"] + cache["blocks.0.attn.out"] + cache["blocks.0.mlp.out"]
    assert torch.allclose(r, cache["blocks.0.resid_post"], atol=1e-5)

    # patch: zeroing block 1's output changes logits; patching the final stream to itself does not
    with m.hooks([("blocks.1.resid_post", lambda a, hook: torch.zeros_like(a))]):
        patched = m(x)
    assert not torch.allclose(patched, clean)
    assert torch.allclose(patched, m.lm_head(m.ln_f(torch.zeros(3, 16, 32))).expand_as(patched), atol=1e-5)
    # activation patching with a cached value restores the clean run
    with m.hooks({"blocks.1.resid_post": lambda a, hook: cache["blocks.1.resid_post"]}):
        restored = m(ids(seed=1))
    assert torch.allclose(restored, clean, atol=1e-5)
    # patching the pattern (uniform attention in layer 0) changes the output
    with m.hooks([("blocks.0.attn.pattern", lambda p, hook: torch.tril(torch.ones_like(p)) / torch.tril(torch.ones_like(p)).sum(-1, keepdim=True))]):
        assert not torch.allclose(m(x), clean)
    # hooks removed: the next forward equals the clean one
    assert all(not h.active for h in m.hook_points.values())
    assert torch.allclose(m(x), clean, atol=1e-6)
    # ... also after an exception inside the block
    with pytest.raises(RuntimeError, match="boom"):
        with m.hooks([("blocks.*.resid_post", lambda a, hook: a * 0)], cache="*"):
            raise RuntimeError("boom")
    assert all(not h.active for h in m.hook_points.values())
    # a wrong-shape replacement is an error, and unknown names are rejected with a suggestion
    with pytest.raises(ValueError, match="shape"):
        with m.hooks([("embed", lambda a, hook: a[:, :1])]):
            m(x)
    assert all(not h.active for h in m.hook_points.values())
    with pytest.raises(UnknownNameError, match="blocks.0.resid_post"):
        with m.hooks([("blocks.0.resid_pots", lambda a, hook: None)]):
            pass


def test_attend_seam_can_be_replaced():
    m = GPT(tiny(pos="rope")).eval()
    x = ids()
    clean = m(x)
    attn = m.blocks[0].attn
    seen = {}
    orig = attn.attend

    def spy(q, k, v, q_pos, k_pos):
        seen["shapes"] = (q.shape, k.shape, v.shape, q_pos.shape)
        return orig(q, k, v, q_pos, k_pos)

    attn.attend = spy
    assert torch.allclose(m(x), clean, atol=1e-6)
    assert seen["shapes"] == ((3, 4, 16, 8), (3, 4, 16, 8), (3, 4, 16, 8), (16,))
    # explicit positions (distinct tensors) give the same causal attention
    q = torch.randn(2, 4, 16, 8)
    pos = torch.arange(16)
    a = orig(q, q, q, pos, pos)
    b = orig(q, q, q, pos.clone(), pos.clone())
    assert torch.allclose(a, b, atol=1e-5)
    del attn.attend


def copy_losses(pos: str, steps: int = 70) -> list[float]:
    """Train on a copy task: 8 random tokens then the same 8 again; loss on the copied half."""
    V, H = 16, 8
    m = GPT(GPTConfig(vocab_size=V, seq_len=2 * H, n_layers=2, n_heads=4, d_model=64, pos=pos), seed=0)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(steps):
        a = torch.randint(1, V, (32, H), generator=g)
        x = torch.cat([a, a], 1)
        logits = m(x[:, :-1])
        loss = F.cross_entropy(logits[:, H - 1:].reshape(-1, V), x[:, H:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


@pytest.mark.parametrize("pos", POS)
def test_each_positional_variant_learns_copy(pos):
    losses = copy_losses(pos)
    chance = math.log(15)  # uniform over the 15 possible tokens: nothing learned from context
    final = sum(losses[-10:]) / 10
    assert losses[0] > 0.95 * chance
    assert final < 0.9 * chance, (pos, final, chance)


def test_deterministic_init_and_no_global_rng():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = GPT(tiny(), seed=3)
    after = torch.rand(1)
    assert torch.equal(before, after)  # global RNG untouched
    b = GPT(tiny(), seed=3)
    c = GPT(tiny(), seed=4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.wte.weight, c.wte.weight)


def test_generate_and_save_load(tmp_path):
    m = GPT(tiny(pos="alibi", tie_embeddings=True)).eval()
    prompt = ids(B=2, T=4)
    g1 = m.generate(prompt, 20, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(1))
    g2 = m.generate(prompt, 20, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(1))
    assert g1.shape == (2, 24) and torch.equal(g1, g2) and torch.equal(g1[:, :4], prompt)
    greedy = m.generate(prompt, 3, temperature=0)
    assert greedy[0, 4].item() == m(prompt)[0, -1].argmax().item()
    m.save_pretrained(tmp_path / "ckpt")
    m2 = GPT.from_pretrained(tmp_path / "ckpt")
    assert m2.cfg == m.cfg and m2.lm_head.weight is m2.wte.weight
    assert torch.allclose(m2(prompt), m(prompt))
    with pytest.raises(ConfigError):
        GPT.from_pretrained(tmp_path / "nothing")
    with pytest.raises(ConfigError, match="seq_len"):
        GPT(tiny())(ids(T=17))


@pytest.mark.parametrize("pos", POS)
def test_kv_cache_generation_equals_recompute(pos):
    m = GPT(tiny(pos=pos, mlp="swiglu" if pos == "rope" else "gelu"), seed=5).eval()
    prompt = ids(B=2, T=5)
    # 20 new tokens: the first 11 with the cache, the rest beyond seq_len=16 recomputed on the crop
    a = m.generate(prompt, 20, temperature=0.8, generator=torch.Generator().manual_seed(2), use_cache=True)
    b = m.generate(prompt, 20, temperature=0.8, generator=torch.Generator().manual_seed(2), use_cache=False)
    assert torch.equal(a, b)
    cache = [{} for _ in m.blocks]
    full = m(a[:, :12])
    step = torch.cat([m(a[:, :7], kv_cache=cache), m(a[:, 7:11], kv_cache=cache), m(a[:, 11:12], kv_cache=cache)], 1)
    assert torch.allclose(full, step, atol=1e-5)
