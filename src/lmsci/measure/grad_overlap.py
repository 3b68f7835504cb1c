"""Parameter overlap between statements: cosine similarity of the gradients of their log-likelihoods.

Two statements *share parameters* to the extent that raising the probability of one moves the parameters the
way raising the other would: the cosine between ``grad_theta log p(a)`` and ``grad_theta log p(b)``, over all
parameters and per layer. Seed lecture 000 ("Knowledge seems to be stored messily": negation curse,
over-ripple, cross-lingual and logical-distance barriers) reads knowledge storage through this overlap.

``log p(statement)`` is the log-likelihood of a token span given what precedes it (for a fact, the object
given the subject and relation: :func:`span_logprob`); the gradients of a few hundred statements of a small
model are computed one statement at a time (a loop; each gradient flattened per parameter group) and their
Gram matrices give every pairwise cosine.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lmsci.errors import ConfigError

_LAYER = re.compile(r"(?:^|\.)(?:blocks|layers|h)\.(\d+)\.")


def _base(model: Any) -> torch.nn.Module:
    return model.model if type(model).__name__ == "HFModel" else model


def _logits(model: Any, ids: Tensor) -> Tensor:
    out = model(ids)
    return out.logits if hasattr(out, "logits") else out


def _check_span(ids: Sequence[int], span: tuple[int, int]) -> tuple[int, int]:
    s, e = int(span[0]), int(span[1])
    if not 1 <= s < e <= len(ids):
        raise ConfigError("span", (s, e), f"a non-empty token range in [1, {len(ids)}] (the first token has no "
                                          "prediction)")
    return s, e


def span_logprob(model: Any, ids: Sequence[int], span: tuple[int, int]) -> Tensor:
    """``sum_{t in [s, e)} log p(ids[t] | ids[:t])`` in nats, a differentiable scalar.

    Raises:
        ConfigError: an empty span, or one starting at 0 or ending past the sequence.
    """
    s, e = _check_span(ids, span)
    dev = next(iter(model.parameters())).device
    x = torch.as_tensor(list(ids[:e]), dtype=torch.long, device=dev)[None]
    lp = torch.log_softmax(_logits(model, x)[0, s - 1:e - 1].float(), -1)
    return lp.gather(-1, x[0, s:e, None]).sum()


def span_logprobs(model: Any, seqs: Sequence[Sequence[int]], spans: Sequence[tuple[int, int]],
                  batch_size: int = 64) -> np.ndarray:
    """:func:`span_logprob` of many sequences without gradients (right-padded batches): ``[n]`` nats."""
    dev = next(iter(model.parameters())).device
    out = np.zeros(len(seqs))
    with torch.no_grad():
        for i in range(0, len(seqs), batch_size):
            chunk = list(seqs[i:i + batch_size])
            sp = [_check_span(q, s) for q, s in zip(chunk, spans[i:i + batch_size])]
            T = max(len(q) for q in chunk)
            x = torch.zeros(len(chunk), T, dtype=torch.long)
            for r, q in enumerate(chunk):
                x[r, :len(q)] = torch.as_tensor(list(q))
            x = x.to(dev)
            lp = torch.log_softmax(_logits(model, x).float(), -1)
            for r, (s, e) in enumerate(sp):
                out[i + r] = float(lp[r, s - 1:e - 1].gather(-1, x[r, s:e, None]).sum())
    return out


def param_group(name: str) -> str:
    """The group of a parameter name: ``"layer {i}"`` for block ``i`` (``blocks.i``, ``layers.i``, ``h.i``),
    else ``"embed/head"``."""
    m = _LAYER.search(name)
    return f"layer {int(m.group(1))}" if m else "embed/head"


@dataclass
class StatementGradients:
    """Flattened gradients of ``log p`` of ``n`` statements.

    Attributes:
        grads: ``[n, n_params]`` float32 (on the model's device).
        groups: group name -> ``(start, end)`` columns of ``grads`` (:func:`param_group`, in model order).
        logprobs: ``[n]`` the statements' ``log p`` (nats).
    """

    grads: Tensor
    groups: dict[str, tuple[int, int]]
    logprobs: np.ndarray

    def cosine(self, group: str | None = None) -> np.ndarray:
        """``[n, n]`` cosine similarity of the gradients (all parameters, or one group)."""
        if group is not None and group not in self.groups:
            from lmsci.errors import UnknownNameError

            raise UnknownNameError("group", group, self.groups)
        g = self.grads if group is None else self.grads[:, slice(*self.groups[group])]
        g = g.double()
        n = g.norm(dim=1).clamp_min(1e-30)
        return ((g @ g.T) / n[:, None] / n[None, :]).cpu().numpy()

    def pair_cosines(self, pairs: Sequence[tuple[int, int]], group: str | None = None) -> np.ndarray:
        """Cosines of the listed index pairs: ``[len(pairs)]``."""
        c = self.cosine(group)
        return np.asarray([c[a, b] for a, b in pairs])


def statement_gradients(model: Any, seqs: Sequence[Sequence[int]], spans: Sequence[tuple[int, int]]) -> StatementGradients:
    """Gradients of :func:`span_logprob` w.r.t. every parameter (shared tensors once), one statement at a time.

    Args:
        model: lmsci GPT, :class:`~lmsci.models.hf.HFModel` or ``transformers`` causal LM.
        seqs: token ids of each statement (starting with ``<bos>``).
        spans: the ``(s, e)`` tokens whose log-likelihood is differentiated (e.g. the object's tokens).

    Returns:
        :class:`StatementGradients`. The model's parameters are not changed; its mode is eval during the call.

    Raises:
        ConfigError: ``seqs`` and ``spans`` of different lengths, no statements, or a bad span.
    """
    if not seqs or len(seqs) != len(spans):
        raise ConfigError("spans", len(spans), f"one (start, end) per statement ({len(seqs)}), at least one")
    base = _base(model)
    named = [(n, p) for n, p in base.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    # order columns by group contiguously
    first = list(dict.fromkeys(param_group(n) for n, _ in named))
    order = sorted(range(len(named)), key=lambda i: first.index(param_group(named[i][0])))
    groups: dict[str, tuple[int, int]] = {}
    col = 0
    for i in order:
        g = param_group(named[i][0])
        a = groups[g][0] if g in groups else col
        col += params[i].numel()
        groups[g] = (a, col)
    was = model.training
    model.eval()
    out = torch.empty(len(seqs), col, dtype=torch.float32, device=params[0].device)
    lps = np.zeros(len(seqs))
    try:
        for r, (ids, sp) in enumerate(zip(seqs, spans)):
            lp = span_logprob(model, ids, sp)
            gs = torch.autograd.grad(lp, params, allow_unused=True)
            out[r] = torch.cat([(gs[i] if gs[i] is not None else torch.zeros_like(params[i])).reshape(-1).float()
                                for i in order])
            lps[r] = float(lp)
    finally:
        model.train(was)
    return StatementGradients(out, groups, lps)


__all__ = ["span_logprob", "span_logprobs", "statement_gradients", "StatementGradients", "param_group"]
