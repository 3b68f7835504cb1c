"""Per-position test loss: the NLL of the token at each context position, for any causal language model.

Kaplan et al. 2020 (arXiv 2001.08361, sec. 3.2.1, Fig. 7 right; App. D.5) plot the per-token test loss against
the token's index in the context to show that Transformers keep improving with context while LSTMs plateau.
:func:`position_nll` gives that curve for a model mapping ``[batch, seq]`` ids to logits; :func:`log_position_slope`
summarises a curve (or a difference of two curves) by its least-squares slope against ``log2(position + 1)``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
import torch.nn.functional as F


@torch.no_grad()
def position_nll(model: torch.nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> np.ndarray:
    """Mean NLL in nats/token at each context position.

    Args:
        model: maps input ids ``[batch, seq]`` long to logits ``[batch, seq, vocab]`` (or ``.logits``).
        batches: ``(input_ids [b, seq], targets [b, seq])`` with every target scored (no ``-100``); position t's
            target is predicted from tokens ``0..t``.

    Returns:
        ``[seq]`` float64 array: entry t is the mean over all windows of the NLL of target t (nats).

    Raises:
        ValueError: no batch, or batches of different sequence lengths.
    """
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    total, n, T = None, 0, None
    for x, y in batches:
        if T is not None and x.shape[1] != T:
            raise ValueError(f"position_nll: sequence length {x.shape[1]} differs from {T}")
        T = x.shape[1]
        out = model(x.to(dev))
        logits = (out.logits if hasattr(out, "logits") else out).float()
        nll = F.cross_entropy(logits.transpose(1, 2), y.to(dev), reduction="none")  # [b, seq]
        s = nll.sum(0).double().cpu()
        total = s if total is None else total + s
        n += x.shape[0]
    model.train(was)
    if total is None:
        raise ValueError("position_nll: no batches")
    return (total / n).numpy()


def log_position_slope(curve: np.ndarray, start: int = 0) -> float:
    """Least-squares slope of ``curve[t]`` against ``log2(t + 1)`` over positions ``t >= start`` (units of the curve
    per doubling of the position). ``curve``: ``[seq]``.

    Raises:
        ValueError: fewer than 2 positions from ``start``.
    """
    c = np.asarray(curve, dtype=float)[start:]
    if c.size < 2:
        raise ValueError(f"log_position_slope: {c.size} positions from start={start}; need at least 2")
    x = np.log2(np.arange(start, start + c.size) + 1.0)
    return float(np.polyfit(x, c, 1)[0])


__all__ = ["position_nll", "log_position_slope"]
