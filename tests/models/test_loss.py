"""The fused, chunked linear + cross-entropy head (lmsci.models.loss) and its use by GPT and the trainer."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.loss import default_chunk_rows, linear_cross_entropy
from lmsci.train.trainer import TrainConfig, evaluate_nll, sum_nll, train


def _reference(h, W, y):
    return F.cross_entropy(h @ W.t(), y, ignore_index=-100, reduction="sum")


def _grads(fn, h, W, y):
    h = h.detach().clone().requires_grad_()
    W = W.detach().clone().requires_grad_()
    loss = fn(h, W, y)
    (loss * 0.37).backward()  # a non-unit upstream gradient, as the trainer's loss / n_tokens
    return loss.detach(), h.grad, W.grad


@pytest.mark.parametrize("chunk_rows", [None, 1, 7, 64, 1000])
def test_matches_cross_entropy_loss_and_gradients(chunk_rows):
    g = torch.Generator().manual_seed(0)
    h, W = torch.randn(53, 12, generator=g), torch.randn(97, 12, generator=g)
    y = torch.randint(0, 97, (53,), generator=g)
    y[::5] = -100  # ignored targets add nothing to loss or gradient
    ref = _grads(_reference, h, W, y)
    ours = _grads(lambda a, b, c: linear_cross_entropy(a, b, c, chunk_rows=chunk_rows), h, W, y)
    torch.testing.assert_close(ours[0], ref[0], rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(ours[1], ref[1], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours[2], ref[2], rtol=1e-5, atol=1e-6)
    assert ours[1][::5].abs().max() == 0  # rows with an ignored target get no hidden gradient


def test_leading_dims_and_frozen_weight():
    g = torch.Generator().manual_seed(1)
    h = torch.randn(3, 5, 8, generator=g, requires_grad=True)
    W = torch.randn(20, 8, generator=g)  # frozen: no weight gradient is computed or returned
    y = torch.randint(0, 20, (3, 5), generator=g)
    loss = linear_cross_entropy(h, W, y, chunk_rows=4)
    loss.backward()
    h2 = h.detach().clone().requires_grad_()
    _reference(h2.reshape(-1, 8), W, y.reshape(-1)).backward()
    torch.testing.assert_close(h.grad, h2.grad, rtol=1e-5, atol=1e-6)
    assert W.grad is None


def test_underflowed_target_probability_is_exact():
    """A target whose softmax probability underflows fp32 (log p = -200) still gets its exact loss."""
    h = torch.eye(4)
    W = torch.zeros(6, 4)
    W[0, 0] = 200.0  # row 0: logit 200 on class 0, 0 elsewhere
    y = torch.tensor([3, 0, 1, 2])
    ours = linear_cross_entropy(h, W, y)
    ref = _reference(h, W, y)
    assert torch.isfinite(ours)
    assert ours.item() == pytest.approx(ref.item(), rel=1e-6)
    assert ours.item() > 200.0


def test_no_grad_gives_the_same_value():
    g = torch.Generator().manual_seed(2)
    h, W = torch.randn(40, 8, generator=g, requires_grad=True), torch.randn(30, 8, generator=g, requires_grad=True)
    y = torch.randint(0, 30, (40,), generator=g)
    with torch.no_grad():
        a = linear_cross_entropy(h, W, y, chunk_rows=16)
    assert not a.requires_grad
    assert a.item() == pytest.approx(linear_cross_entropy(h, W, y, chunk_rows=16).item(), rel=1e-7)


def test_bad_input_is_named():
    h, W = torch.randn(4, 8), torch.randn(10, 8)
    with pytest.raises(ValueError, match="vocab_size=10"):
        linear_cross_entropy(h, W, torch.tensor([0, 1, 10, 2]))
    with pytest.raises(ValueError, match="vocab_size=10"):
        linear_cross_entropy(h, W, torch.tensor([0, -1, 2, 2]))
    with pytest.raises(ValueError, match="targets shape"):
        linear_cross_entropy(h, W, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="d_model=8"):
        linear_cross_entropy(h, torch.randn(10, 7), torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="chunk_rows"):
        linear_cross_entropy(h, W, torch.tensor([0, 1, 2, 3]), chunk_rows=-3)


def test_default_chunk_rows():
    assert default_chunk_rows(50257) == (1 << 23) // 50257
    assert default_chunk_rows(50257, d_model=768) == 768
    assert default_chunk_rows(10**9) == 16


@pytest.mark.parametrize("tie", [False, True])
def test_gpt_sum_nll_equals_logits_path(tie):
    m = GPT(GPTConfig(n_layers=2, d_model=32, n_heads=2, seq_len=16, vocab_size=50, tie_embeddings=tie), seed=3)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randint(0, 50, (3, 16), generator=g), torch.randint(0, 50, (3, 16), generator=g)
    y[0, :4] = -100
    ref = F.cross_entropy(m(x).flatten(0, 1), y.flatten(), ignore_index=-100, reduction="sum")
    ref.backward()
    ref_grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad(set_to_none=True)
    ours = m.sum_nll(x, y)
    ours.backward()
    assert ours.item() == pytest.approx(ref.item(), rel=1e-6)
    for n, p in m.named_parameters():
        torch.testing.assert_close(p.grad, ref_grads[n], rtol=1e-4, atol=1e-6, msg=n)
    # hooks still fire on the fused path
    seen = []
    with m.hooks({"final": lambda a, hook: seen.append(a.shape)}):
        m.sum_nll(x, y)
    assert seen == [torch.Size([3, 16, 32])]


def test_trainer_uses_the_fused_head_and_trains_the_same():
    """The trainer takes GPT.sum_nll; a run through it matches a run through logits to rounding."""
    cfg = GPTConfig(n_layers=1, d_model=16, n_heads=2, seq_len=8, vocab_size=13)

    class LogitsOnly(torch.nn.Module):  # the same GPT, seen without its sum_nll
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)

    def get_batch(step, g):
        x0 = torch.randint(0, 13, (4, 1), generator=g)
        seq = (x0 + 5 * torch.arange(9)) % 13
        return seq[:, :-1], seq[:, 1:]

    tc = TrainConfig(steps=8, lr=1e-2, warmup_steps=2, device="cpu")
    fused, plain = GPT(cfg, seed=0), GPT(cfg, seed=0)
    calls = []
    orig = fused.sum_nll
    fused.sum_nll = lambda x, y: calls.append(1) or orig(x, y)
    ra = train(fused, get_batch, tc, seed=0)
    rb = train(LogitsOnly(plain), get_batch, tc, seed=0)
    assert len(calls) == 8
    assert ra.history[-1]["loss"] < ra.history[0]["loss"]
    for a, b in zip(ra.history, rb.history):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
    x, y = get_batch(0, torch.Generator().manual_seed(9))
    s, n = sum_nll(fused, x, y)
    assert n == y.numel()
    assert evaluate_nll(fused, [(x, y)]) == pytest.approx(s.item() / n, rel=1e-6)


def test_second_backward_is_refused():
    h, W = torch.randn(6, 4, requires_grad=True), torch.randn(9, 4, requires_grad=True)
    loss = linear_cross_entropy(h, W, torch.arange(6))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="already run"):
        loss.backward()


def test_empty_input_gives_zero_loss_and_gradients():
    h, W = torch.randn(0, 4, requires_grad=True), torch.randn(9, 4, requires_grad=True)
    loss = linear_cross_entropy(h, W, torch.zeros(0, dtype=torch.long))
    loss.backward()
    assert loss.item() == 0.0 and W.grad.abs().max() == 0 and h.grad.shape == (0, 4)
