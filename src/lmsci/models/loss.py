"""Cross-entropy of a linear unembedding without materialising the logits (a fused, chunked head).

The language-modelling loss of a decoder is ``CE(h W^T, y)`` with ``h [N, d_model]`` the final hidden
states, ``W [vocab_size, d_model]`` the unembedding and ``y [N]`` the next tokens. Computed the usual
way (``F.cross_entropy(lm_head(h), y)``) the logits ``[N, vocab_size]`` are written, read by
``log_softmax``, written again as log-probabilities, and in the backward pass written once more as their
gradient, then read by two matmuls. With a vocabulary of tens of thousands of tokens and a small
``d_model`` this memory traffic, not the arithmetic, dominates a CPU training step (for N = 2048,
vocab 50257 the logits alone are 412 MB in fp32).

:func:`linear_cross_entropy` computes the *same* quantity in row chunks of ``chunk_rows`` tokens. For
each chunk it forms the logits, the softmax ``p``, the loss ``-log p[y]``, and -- when gradients are
needed -- the gradient of the summed loss with respect to the logits, ``p - onehot(y)``, which it
immediately contracts into ``dL/dh = (p - onehot(y)) W`` and ``dL/dW += (p - onehot(y))^T h``. Only one
chunk of logits ever exists; the backward pass merely scales the two stored gradients by the incoming
gradient. The arithmetic (three matmuls of the head per step) is the same as the unfused forward plus
backward; results agree with ``F.cross_entropy(h @ W.T, y, reduction="sum")`` to float rounding
(tested: relative 1e-6 for the loss, 1e-5 for the gradients).

This is the technique of Liger Kernel's ``FusedLinearCrossEntropy`` (Hsu et al. 2024, arXiv 2410.10989,
sec. 3.2) and, in spirit, Cut Cross-Entropy (Wijmans et al. 2024, arXiv 2411.09009), written here
with plain PyTorch ops.

Limits: one backward pass per loss (the gradient is computed in the forward pass and scaled in
place; ``retain_graph`` and double backward are not supported); no label smoothing.
"""

from __future__ import annotations

import torch
from torch import Tensor

IGNORE_INDEX = -100

# Logit elements per chunk (8 Mi floats = 32 MiB): at vocab 50257 about 167 rows, at vocab 512 the
# whole batch of a small model (one chunk, i.e. no loop). A chunk also has at least d_model rows, so
# that each pass over the weight [vocab, d_model] is spread over at least as many logits as the weight
# has elements. Measured on a 2-core CPU (head forward + backward, 2048 or 1024 tokens, vocab 50257):
# d_model 128: 166-384 rows 1.4-1.5x faster than unfused, 32 rows 1.3x slower than 128;
# d_model 768: 166 rows 0.9-1.1x, 768-1024 rows 1.1-1.2x.
CHUNK_ELEMENTS = 1 << 23


def default_chunk_rows(vocab_size: int, d_model: int = 0) -> int:
    """Rows per chunk: about ``CHUNK_ELEMENTS`` logits, but at least ``d_model`` rows (and 16)."""
    return max(16, d_model, CHUNK_ELEMENTS // max(1, vocab_size))


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, ignore_index: int, chunk_rows: int,
                need_hidden_grad: bool, need_weight_grad: bool) -> Tensor:
        n = hidden.shape[0]
        valid_all = targets != ignore_index
        any_ignored = not bool(valid_all.all())
        safe = torch.where(valid_all, targets, torch.zeros_like(targets))
        grad_h = torch.empty_like(hidden) if need_hidden_grad else None
        grad_w = None
        if need_weight_grad:  # the first chunk writes it (no rows at all: zero)
            grad_w = torch.empty_like(weight) if n else torch.zeros_like(weight)
        total = hidden.new_zeros((), dtype=torch.float64)
        for s in range(0, n, chunk_rows):
            h = hidden[s:s + chunk_rows]
            y = safe[s:s + chunk_rows, None]
            logits = h @ weight.t()  # [rows, vocab]
            p = torch.softmax(logits, dim=-1)
            p_y = p.gather(1, y).squeeze(1)
            nll = -torch.log(p_y)
            tiny = p_y < 1e-30  # softmax underflowed at the target: recompute those rows in log space
            if bool(tiny.any()):
                rows = logits[tiny]
                nll[tiny] = torch.logsumexp(rows, dim=-1) - rows.gather(1, y[tiny]).squeeze(1)
            if any_ignored:
                valid = valid_all[s:s + chunk_rows]
                nll = nll * valid
            total += nll.sum(dtype=torch.float64)
            if grad_h is None and grad_w is None:
                continue
            del logits
            p.scatter_add_(1, y, torch.full_like(p_y[:, None], -1.0))  # p - onehot(y) = dL/dlogits
            if any_ignored:
                p.mul_(valid[:, None].to(p.dtype))
            if grad_h is not None:
                torch.mm(p, weight, out=grad_h[s:s + chunk_rows])
            if grad_w is not None:
                if s == 0:
                    torch.mm(p.t(), h, out=grad_w)
                else:
                    grad_w.addmm_(p.t(), h)
        ctx.save_for_backward(*(g for g in (grad_h, grad_w) if g is not None))
        ctx.has = (grad_h is not None, grad_w is not None)
        return total.to(hidden.dtype)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        # The stored gradients are scaled in place and handed to autograd (no copy of a
        # [vocab_size, d_model] tensor), so a second backward through the same graph is refused.
        if getattr(ctx, "consumed", False):
            raise RuntimeError("linear_cross_entropy: backward was already run through this loss "
                               "(retain_graph is not supported); compute the loss again")
        ctx.consumed = True
        saved = list(ctx.saved_tensors)
        gh = saved.pop(0).mul_(grad_out) if ctx.has[0] else None
        gw = saved.pop(0).mul_(grad_out) if ctx.has[1] else None
        return gh, gw, None, None, None, None, None


def linear_cross_entropy(hidden: Tensor, weight: Tensor, targets: Tensor, *, ignore_index: int = IGNORE_INDEX,
                         chunk_rows: int | None = None) -> Tensor:
    """Summed cross-entropy ``sum_i -log softmax(hidden_i W^T)[targets_i]`` without the full logits.

    Equal, up to float rounding, to
    ``F.cross_entropy(hidden @ weight.T, targets, ignore_index=ignore_index, reduction="sum")``;
    see the module docstring for how and why. Differentiable once with respect to ``hidden`` and
    ``weight`` (the gradient is computed in the forward pass, and only when autograd will need it).

    Args:
        hidden: ``[..., d_model]`` float, the final hidden states (flattened to ``[N, d_model]``).
        weight: ``[vocab_size, d_model]``, same dtype and device, the unembedding.
        targets: ``[...]`` long, the same leading shape as ``hidden``; ``ignore_index`` entries add
            nothing to the loss or the gradient.
        ignore_index: the target value to skip (default -100, as ``F.cross_entropy``).
        chunk_rows: tokens per chunk (default :func:`default_chunk_rows`); changes speed and memory,
            not the result beyond rounding.

    Returns:
        a scalar tensor: the summed negative log-likelihood in nats (divide by the number of
        non-ignored targets for nats/token).

    Raises:
        ValueError: shapes do not match, or a target lies outside ``[0, vocab_size)`` and is not
            ``ignore_index``.
    """
    d = hidden.shape[-1]
    if weight.dim() != 2 or weight.shape[1] != d:
        raise ValueError(f"linear_cross_entropy: weight must be [vocab_size, d_model={d}], got {tuple(weight.shape)}")
    if targets.shape != hidden.shape[:-1]:
        raise ValueError(f"linear_cross_entropy: targets shape {tuple(targets.shape)} must equal hidden's leading "
                         f"shape {tuple(hidden.shape[:-1])}")
    h = hidden.reshape(-1, d)
    y = targets.reshape(-1)
    vocab = weight.shape[0]
    bad = (y != ignore_index) & ((y < 0) | (y >= vocab))
    if bool(bad.any()):
        raise ValueError(f"linear_cross_entropy: targets must lie in [0, vocab_size={vocab}) or equal "
                         f"ignore_index={ignore_index}; found {int(y[bad][0])}")
    rows = int(chunk_rows) if chunk_rows else default_chunk_rows(vocab, d)
    if rows < 1:
        raise ValueError(f"linear_cross_entropy: chunk_rows must be >= 1, got {chunk_rows}")
    grad = torch.is_grad_enabled()
    if h.dtype != weight.dtype:
        h = h.to(weight.dtype)
    with torch.autocast(h.device.type, enabled=False):
        return _LinearCrossEntropy.apply(h, weight, y, ignore_index, rows,
                                         grad and h.requires_grad, grad and weight.requires_grad)
