"""Post-training fake quantization (int8 / int4, symmetric RTN per output channel or group-wise)."""

import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.quantize import fake_quantize, qmax, quantize_tensor


def _w(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_round_trip_error_is_at_most_half_a_step_per_channel():
    w = _w(16, 40) * torch.linspace(0.1, 3.0, 16)[:, None]  # rows of very different ranges
    for bits in (8, 4):
        deq, scale = quantize_tensor(w, bits)
        assert scale.shape == (16,)
        torch.testing.assert_close(scale, w.abs().amax(1) / qmax(bits))
        assert bool(((deq - w).abs() <= scale[:, None] / 2 + 1e-6).all())
        levels = (deq / scale[:, None]).round()
        assert levels.abs().max() <= qmax(bits) and torch.allclose(deq / scale[:, None], levels, atol=1e-4)
        assert len(torch.unique(levels)) <= 2 * qmax(bits) + 1


def test_int4_is_worse_than_int8_and_both_are_idempotent():
    w = _w(32, 64, seed=1)
    err = {}
    for bits in (8, 4):
        deq, _ = quantize_tensor(w, bits)
        err[bits] = float((deq - w).norm() / w.norm())
        again, _ = quantize_tensor(deq, bits)
        torch.testing.assert_close(again, deq, rtol=1e-6, atol=1e-7)
    assert err[4] > 5 * err[8] and err[8] < 0.01


def test_group_wise_scales_and_stacks():
    w = _w(8, 32, seed=2)
    deq_g, scale_g = quantize_tensor(w, 4, group_size=8)
    assert scale_g.shape == (8, 4)
    deq_c, _ = quantize_tensor(w, 4)
    assert (deq_g - w).norm() < (deq_c - w).norm()  # finer scales, smaller error
    stack = _w(3, 8, 16, seed=3)
    deq_s, scale_s = quantize_tensor(stack, 8)
    assert scale_s.shape == (3, 8) and deq_s.shape == stack.shape
    torch.testing.assert_close(deq_s[1], quantize_tensor(stack[1], 8)[0])  # per (expert, row)
    with pytest.raises(ConfigError, match="group_size"):
        quantize_tensor(w, 4, group_size=5)
    with pytest.raises(ConfigError, match="bits"):
        quantize_tensor(w, 16)
    with pytest.raises(ConfigError):
        quantize_tensor(w[0], 8)


@pytest.mark.parametrize("mlp", ["gelu", "moe"])
def test_fake_quantize_a_gpt(mlp):
    cfg = GPTConfig(vocab_size=40, seq_len=16, n_layers=2, n_heads=2, d_model=32, mlp=mlp, tie_embeddings=True,
                    pos="rope")
    m = GPT(cfg, seed=0).eval()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(0))
    q8, r8 = fake_quantize(m, 8)
    q4, r4 = fake_quantize(m, 4)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())  # the original is untouched
    assert q8.lm_head.weight is q8.wte.weight  # still tied, quantized once
    assert r8["n_params"] == m.num_params() and 0.9 * m.num_params() < r8["n_quantized"] < m.num_params()
    assert not any("ln" in n or n.endswith("bias") for n in r8["tensors"])
    assert r4["rel_rmse"] > 5 * r8["rel_rmse"]
    with torch.no_grad():
        full, l8, l4 = m(ids), q8(ids), q4(ids)
    assert (l8 - full).abs().max() < (l4 - full).abs().max()
    q_skip, r_skip = fake_quantize(m, 4, skip=["wte.*"])
    assert torch.equal(q_skip.wte.weight, m.wte.weight) and "wte.weight" not in r_skip["tensors"]
    with pytest.raises(ConfigError):
        fake_quantize(m, 1)
