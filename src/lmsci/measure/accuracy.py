"""Exact-match QA accuracy with greedy decoding, computed in one teacher-forced forward pass.

Greedy decoding reproduces the gold answer exactly iff, feeding the gold prefix, the arg-max
next token equals the gold token at every answer position (and at the terminating ``.``): the
first disagreement is exactly where greedy decoding would diverge. So exact match of greedy
decoding = all(argmax(logits[t-1]) == ids[t] for t in answer + stop), which needs a single
forward pass over right-padded documents instead of a decoding loop.

Source: the exact-match metric of Allen-Zhu & Li, Part 3.1 (arXiv 2309.14316, Section 3) and
Berglund et al., "The Reversal Curse" (arXiv 2309.12288, Section 2.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from lmsci.models.device import resolve_model_device


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int = 0) -> torch.Tensor:
    """Right-pad token lists into a long tensor ``[batch, max_len]``."""
    T = max(len(s) for s in seqs)
    out = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out


@torch.no_grad()
def forward_in_batches(model: torch.nn.Module, seqs: Sequence[Sequence[int]], fn, batch_size: int = 256,
                       device: str | torch.device | None = None, pad_id: int = 0) -> list[Any]:
    """Run ``model`` over right-padded ``seqs`` and call ``fn(logits [b, T, vocab], ids [b, T], rows)``
    per batch; returns the concatenated list of ``fn``'s per-row outputs (in the order of ``seqs``).
    ``device``: where the batches go (default: the model's device)."""
    device = resolve_model_device(model, device)
    was_training = model.training
    model.eval()
    out: list[Any] = []
    try:
        for s in range(0, len(seqs), batch_size):
            rows = list(range(s, min(s + batch_size, len(seqs))))
            ids = pad_batch([seqs[r] for r in rows], pad_id).to(device)
            logits = model(ids)
            logits = logits.logits if hasattr(logits, "logits") else logits
            out += fn(logits.float(), ids, rows)
    finally:
        model.train(was_training)
    return out


def exact_match(model: torch.nn.Module, docs: Sequence[Any], span_key: str = "answer", stop: int = 1,
                batch_size: int = 256, device: str | torch.device | None = None) -> np.ndarray:
    """Greedy-decoding exact match of each document's answer span.

    Args:
        model: ``input_ids [batch, seq] -> logits [batch, seq, vocab]``.
        docs: objects with ``ids`` (list of token ids) and ``spans[span_key] = [(start, end)]``.
        stop: how many tokens after the span must also be predicted (1: the terminating ``.``).

    Returns:
        bool array ``[len(docs)]``.
    """
    def fn(logits, ids, rows):
        pred = logits.argmax(-1)  # [b, T]
        res = []
        for b, r in enumerate(rows):
            s, e = docs[r].spans[span_key][0]
            e2 = min(e + stop, len(docs[r].ids))
            res.append(bool(torch.equal(pred[b, s - 1:e2 - 1], ids[b, s:e2])))
        return res

    return np.asarray(forward_in_batches(model, [d.ids for d in docs], fn, batch_size, device), dtype=bool)


def first_token_match(model: torch.nn.Module, docs: Sequence[Any], span_key: str = "answer", batch_size: int = 256,
                      device: str | torch.device | None = None) -> np.ndarray:
    """Whether the arg-max prediction of the answer's first token is right (Part 3.1's first-token accuracy)."""
    def fn(logits, ids, rows):
        return [bool(logits[b, docs[r].spans[span_key][0][0] - 1].argmax() == ids[b, docs[r].spans[span_key][0][0]])
                for b, r in enumerate(rows)]

    return np.asarray(forward_in_batches(model, [d.ids for d in docs], fn, batch_size, device), dtype=bool)


def qa_accuracy(model: torch.nn.Module, world: Any, people: Sequence[int], attrs: Sequence[str],
                batch_size: int = 256, device: str | torch.device | None = None) -> dict[str, float]:
    """Forward QA exact-match accuracy per attribute and its mean (``"mean"``) over ``people``.

    Args:
        world: a :class:`lmsci.worlds.bios.BiosWorld` (anything with ``qa(i, attr)``).
        attrs: the attributes asked about (for bioS, ``lmsci.worlds.bios.ATTRS``).
    """
    attrs = list(attrs)
    docs = [world.qa(int(i), a) for i in people for a in attrs]
    hit = exact_match(model, docs, batch_size=batch_size, device=device)
    out = {}
    k = len(attrs)
    for j, a in enumerate(attrs):
        out[a] = float(hit[j::k].mean()) if len(hit) else float("nan")
    out["mean"] = float(hit.mean()) if len(hit) else float("nan")
    return out


def inverse_accuracy(model: torch.nn.Module, world: Any, people: Sequence[int], batch_size: int = 256,
                     device: str | torch.device | None = None) -> float:
    """Inverse-search exact match (birth date and city -> full name) over ``people`` (Part 3.2, Section 5)."""
    docs = [world.inverse_qa(int(i)) for i in people]
    return float(exact_match(model, docs, batch_size=batch_size, device=device).mean())
