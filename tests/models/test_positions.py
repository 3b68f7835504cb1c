"""The position schemes split out of gpt.py (issue 44 item 6): the pieces against their papers' definitions."""

import math

import torch

from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.positions import (POS_SCHEMES, alibi_slopes, apply_rope, rope_cos_sin, rotate_qk, t5_bucket,
                                    uni_window)


def test_every_scheme_builds_and_runs_from_the_module():
    ids = torch.randint(0, 20, (2, 9), generator=torch.Generator().manual_seed(0))
    assert set(POS_SCHEMES) == set(GPTConfig.model_fields["pos"].annotation.__args__)
    for pos in POS_SCHEMES:
        m = GPT(GPTConfig(vocab_size=20, seq_len=12, n_layers=1, n_heads=2, d_model=8, pos=pos), seed=0).eval()
        with torch.no_grad():
            fused = m(ids)
            explicit = m.run_with_hooks(ids, [("blocks.0.attn.scores", lambda x, h: None)])
        torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_alibi_slopes_are_press_et_al_geometric_sequence():
    # 8 heads: 2^-1 ... 2^-8 (Press et al. 2022, sec. 3)
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert alibi_slopes(6).shape == (6,)


def test_rope_scores_depend_only_on_relative_position():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 1, 1, 8, generator=g), torch.randn(1, 1, 1, 8, generator=g)
    dots = []
    for shift in (0, 5, 11):
        qp, kp = torch.tensor([3 + shift]), torch.tensor([1 + shift])
        qr, kr = rotate_qk(q, k, qp, kp, 8, 10000.0)
        dots.append(float((qr * kr).sum()))
    assert max(dots) - min(dots) < 1e-5
    cos, sin = rope_cos_sin(torch.arange(4), 8, 10000.0, torch.float32)
    x = torch.randn(1, 1, 4, 8, generator=g)
    torch.testing.assert_close(apply_rope(x, cos, sin).norm(dim=-1), x.norm(dim=-1))  # a rotation


def test_t5_buckets_and_uni_windows():
    d = torch.arange(0, 200)
    b = t5_bucket(d)
    assert torch.equal(b[:16], torch.arange(16)) and int(b.max()) == 31 and bool((b.diff() >= 0).all())
    assert [uni_window(h) for h in range(3)] == [1, 3, 7] and math.isclose(uni_window(4), 31)
