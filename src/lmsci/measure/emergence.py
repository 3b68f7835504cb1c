"""Discontinuous and continuous metrics of multi-token answers, scored on the same model outputs.

Schaeffer, Miranda & Koyejo 2023 ("Are Emergent Abilities of Large Language Models a Mirage?", arXiv 2304.15004,
Section 2 and Table/Fig. 2-3): the same model outputs scored by a discontinuous metric (exact match of the whole
answer) can look "emergent" over scale while a continuous one (per-token log-likelihood of the answer, token edit
distance) changes smoothly. With per-token accuracy ``p`` and answers of ``L`` tokens, exact match is about
``p^L`` and the token edit distance about ``L (1 - p)`` (:func:`exact_match_from_token_accuracy`,
:func:`edit_distance_from_token_accuracy`: their eq. 1-2 in the simplest form, independent token errors).

:func:`answer_metrics` scores a model on ``(prompt, answer)`` token lists:

* ``exact_match``: greedy decoding of ``len(answer)`` tokens after the prompt equals the answer (1/0).
* ``token_edit_distance``: Levenshtein distance between the greedy tokens and the answer (insertions, deletions,
  substitutions of tokens; :func:`token_edit_distance`).
* ``answer_logprob`` / ``token_logprob``: the answer's log-likelihood in nats given the prompt, teacher forced
  (summed / per answer token).
* ``token_accuracy``: the share of answer tokens that are the argmax given the prompt and the true earlier answer
  tokens (teacher forced).

The law fits over compute are in :mod:`lmsci.laws.emergence`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from lmsci.errors import ConfigError
from lmsci.measure.accuracy import forward_in_batches
from lmsci.models.device import resolve_model_device


def token_edit_distance(a: Sequence[int], b: Sequence[int]) -> int:
    """Levenshtein distance between two token sequences (unit-cost insertion, deletion, substitution)."""
    a, b = list(a), list(b)
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def exact_match_from_token_accuracy(p: np.ndarray | float, length: int) -> np.ndarray:
    """Expected exact match of an ``length``-token answer with independent per-token accuracy ``p``: ``p^L``
    (Schaeffer et al. 2023, Section 2)."""
    return np.asarray(p, dtype=float) ** int(length)


def edit_distance_from_token_accuracy(p: np.ndarray | float, length: int) -> np.ndarray:
    """Expected token edit distance (substitutions only) of an ``length``-token answer with independent
    per-token accuracy ``p``: ``L (1 - p)`` (Schaeffer et al. 2023, Section 2)."""
    return int(length) * (1.0 - np.asarray(p, dtype=float))


def _check(prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]]) -> None:
    if len(prompts) != len(answers) or not len(prompts):
        raise ConfigError("prompts/answers", f"{len(prompts)}/{len(answers)}", "two non-empty lists of one length")
    for i, (p, a) in enumerate(zip(prompts, answers)):
        if not len(p) or not len(a):
            raise ConfigError(f"item {i}", f"prompt of {len(p)} and answer of {len(a)} tokens", ">= 1 token each")


def teacher_forced(model: torch.nn.Module, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], *,
                   batch_size: int = 256, device: str | torch.device | None = None) -> dict[str, np.ndarray]:
    """Teacher-forced scores of each answer given its prompt: ``answer_logprob`` (nats, summed), ``token_logprob``
    (nats per answer token) and ``token_accuracy`` (share of answer tokens that are the argmax), each ``[n]``.

    ``model`` maps ``input_ids [batch, seq]`` to logits ``[batch, seq, vocab]`` (or an object with ``.logits``).

    Raises:
        ConfigError: mismatched or empty prompts/answers.
    """
    _check(prompts, answers)
    seqs = [list(p) + list(a) for p, a in zip(prompts, answers)]

    def fn(logits, ids, rows):
        logp = torch.log_softmax(logits, dim=-1)
        out = []
        for r, row in enumerate(rows):
            P, A = len(prompts[row]), len(answers[row])
            tgt = ids[r, P:P + A]
            lp = logp[r, P - 1:P + A - 1]
            tok = lp.gather(-1, tgt[:, None])[:, 0]
            out.append((float(tok.sum()), float((lp.argmax(-1) == tgt).float().mean())))
        return out

    res = forward_in_batches(model, seqs, fn, batch_size=batch_size, device=device)
    lens = np.array([len(a) for a in answers], dtype=float)
    total = np.array([r[0] for r in res])
    return {"answer_logprob": total, "token_logprob": total / lens, "token_accuracy": np.array([r[1] for r in res])}


@torch.no_grad()
def greedy_answers(model: torch.nn.Module, prompts: Sequence[Sequence[int]], lengths: Sequence[int], *,
                   batch_size: int = 256, device: str | torch.device | None = None) -> list[list[int]]:
    """Greedy continuation of ``lengths[i]`` tokens after ``prompts[i]`` (prompts of one length are decoded
    together; no padding enters a prompt). Returns the generated tokens per item."""
    device = resolve_model_device(model, device)
    was = model.training
    model.eval()
    out: list[list[int]] = [[] for _ in prompts]
    try:
        by_len: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            by_len.setdefault(len(p), []).append(i)
        for idx in by_len.values():
            for s in range(0, len(idx), batch_size):
                rows = idx[s:s + batch_size]
                ids = torch.tensor([list(prompts[i]) for i in rows], dtype=torch.long, device=device)
                for _ in range(max(int(lengths[i]) for i in rows)):
                    logits = model(ids)
                    logits = logits.logits if hasattr(logits, "logits") else logits
                    ids = torch.cat([ids, logits[:, -1].float().argmax(-1, keepdim=True)], dim=1)
                for r, i in enumerate(rows):
                    P = len(prompts[i])
                    out[i] = ids[r, P:P + int(lengths[i])].tolist()
    finally:
        model.train(was)
    return out


def answer_metrics(model: torch.nn.Module, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], *,
                   batch_size: int = 256, device: str | torch.device | None = None) -> dict[str, Any]:
    """Every metric of the module docstring on the same items: per item ``[n]`` arrays ``exact_match``,
    ``token_edit_distance``, ``answer_logprob``, ``token_logprob``, ``token_accuracy``, plus ``generated`` (the
    greedy tokens) and ``mean`` (each metric averaged over items).

    Raises:
        ConfigError: mismatched or empty prompts/answers.
    """
    tf = teacher_forced(model, prompts, answers, batch_size=batch_size, device=device)
    gen = greedy_answers(model, prompts, [len(a) for a in answers], batch_size=batch_size, device=device)
    em = np.array([float(list(g) == list(a)) for g, a in zip(gen, answers)])
    ed = np.array([float(token_edit_distance(g, a)) for g, a in zip(gen, answers)])
    out: dict[str, Any] = {"exact_match": em, "token_edit_distance": ed, **tf, "generated": gen}
    out["mean"] = {k: float(np.mean(out[k])) for k in ("exact_match", "token_edit_distance", "answer_logprob",
                                                        "token_logprob", "token_accuracy")}
    return out
