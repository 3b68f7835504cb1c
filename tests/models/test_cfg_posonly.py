"""GPT_pos (``GPTConfig(pos="posonly")``): attention depends only on the causal distance, never on content.

Source: Allen-Zhu & Li, arXiv 2305.13673 (Physics of LMs Part 1), GPT_pos; reproduction HJXA/Physics_of_LM
``modeling_gpt2_variants.py`` (``GPT_Rel_Pos_Attention(mode='pos')``).
"""

from __future__ import annotations

import torch

from lmsci.models.gpt import GPT, GPTConfig


def model(**kw) -> GPT:
    return GPT(GPTConfig(vocab_size=11, seq_len=16, n_layers=2, n_heads=2, d_model=16, pos="posonly", **kw), seed=1)


def test_no_query_key_weights_and_a_distance_table():
    m = model()
    a = m.blocks[0].attn
    assert a.qkv.out_features == 16 and a.rel_bias_dist.shape == (2, 16)
    assert float(a.rel_bias_dist.detach().abs().sum()) == 0  # uniform causal attention at init


def test_pattern_depends_on_distance_only_and_is_causal():
    m = model()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2 and p.shape == (2, 16):
                p.copy_(torch.randn(p.shape))
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randint(0, 11, (2, 10), generator=g), torch.randint(0, 11, (2, 10), generator=g)
    _, c1 = m.run_with_cache(x1, "blocks.*.attn.pattern")
    _, c2 = m.run_with_cache(x2, "blocks.*.attn.pattern")
    for k in c1:
        assert torch.allclose(c1[k], c2[k])  # content-independent
        pat = c1[k][0]
        assert torch.allclose(pat.triu(1), torch.zeros_like(pat))  # causal
        # Toeplitz: the weight on distance d of query i depends on d (up to the normalisation over visible keys)
        b = m.blocks[int(k.split(".")[1])].attn.rel_bias_dist.detach()
        i = 7
        want = torch.softmax(b[:, torch.arange(i, -1, -1)], dim=-1)  # keys 0..i at distances i..0
        assert torch.allclose(pat[:, i, : i + 1], want, atol=1e-6)
    # the future does not leak
    x3 = x1.clone()
    x3[:, 6:] = (x3[:, 6:] + 1) % 11
    assert torch.allclose(m(x1)[:, :6], m(x3)[:, :6], atol=1e-6)


def test_kv_cache_generation_matches_and_the_table_learns():
    m = model()
    ids = torch.randint(0, 11, (3, 4), generator=torch.Generator().manual_seed(2))
    a = m.generate(ids, 8, generator=torch.Generator().manual_seed(0), use_cache=True)
    b = m.generate(ids, 8, generator=torch.Generator().manual_seed(0), use_cache=False)
    assert torch.equal(a, b)
    loss = m(ids).logsumexp(-1).mean()
    loss.backward()
    assert m.blocks[1].attn.rel_bias_dist.grad.abs().sum() > 0
