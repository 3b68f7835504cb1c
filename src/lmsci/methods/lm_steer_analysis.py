"""LM-Steer analysis: reading what a trained steer does -- keyword highlighting (the spans of a text that carry the
steered style), the steer value that explains a text best, and the SVD probe (the tokens each singular direction of
the steer's ``W`` promotes and demotes).

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798
(v1 "LM-Switch": App. G SVD probe); the authors' code ``Glaciohound/LM-Steer@265982f``
(``lm_steer/models/model_utils.py`` ``find_max_subspans``, ``model_base.py`` ``evidence_words`` and
``steer_analysis``, ``experiments/pca_analysis.py``). Spec: ``shared/research/seed_authors_code.md`` Sec. 1. The
steer itself is :class:`lmsci.methods.lm_steer.LMSteer` (this module was split out of :mod:`lmsci.methods.lm_steer`).

Shapes and API (``T`` sequence, ``V`` vocabulary, ``d`` width):

* :func:`max_subspans` ``(scores [T], n_spans, max_len) -> (spans, total)``: disjoint spans of maximal summed score
  by dynamic programming; :func:`highlight` ``(model, steer, input_ids [T], values_a, values_b) -> Highlight``:
  keyword highlighting by the per-token log-likelihood difference between two steer settings.
* :func:`steer_analysis` ``(model, steer, input_ids, name, grid) -> dict``: the steer value that explains a text best.
* :func:`svd_probe` ``(steer, embeddings [V, d] or a model, name, k, n_tokens, contexts, decode)
  -> list[SVDDirection]``: per singular direction of ``W``, the tokens scoring highest and lowest (``contexts``
  from :func:`lmsci.methods.steering.unembed_inputs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.methods.lm_steer import LMSteer
from lmsci.methods.steerable import output_embeddings
from lmsci.methods.steering import Steer, token_logprobs


# ------------------------------------------------------------------------------------ highlighting


def max_subspans(scores: Sequence[float] | Tensor, n_spans: int = 4, max_len: int = 10) -> tuple[list[tuple[int, int]], float]:
    """At most ``n_spans`` disjoint contiguous spans, each of at most ``max_len`` items, maximising the summed
    ``scores`` (the authors' ``find_max_subspans``, ``lm_steer/models/model_utils.py``).

    Dynamic programme over ``best[k][i]`` = the best total within the first ``i`` items using at most ``k`` spans:
    ``best[k][i] = max(best[k][i-1], max_{1<=l<=max_len} best[k-1][i-l-1] + sum(scores[i-l:i]))``; O(T n_spans
    max_len). Spans are separated by at least one item (the authors' DP lets spans touch and then reads the
    segments off the in/out tags, so two touching spans come back as one segment longer than ``max_length``; here
    every returned span is at most ``max_len``). Spans with a non-positive sum are never chosen (fewer spans are
    returned then). Returns ``([(start, end), ...] half-open, sorted by start; total)``.

    Raises:
        ConfigError: ``n_spans`` or ``max_len`` below 1.
    """
    if int(n_spans) < 1:
        raise ConfigError("n_spans", n_spans, ">= 1")
    if int(max_len) < 1:
        raise ConfigError("max_len", max_len, ">= 1")
    x = [float(v) for v in (scores.tolist() if isinstance(scores, Tensor) else scores)]
    T = len(x)
    csum = [0.0]
    for v in x:
        csum.append(csum[-1] + v)
    best = [[0.0] * (T + 1) for _ in range(n_spans + 1)]
    choice: list[list[int]] = [[0] * (T + 1) for _ in range(n_spans + 1)]  # 0 = skip item i-1, l = span length
    for k in range(1, n_spans + 1):
        prev, cur, ch = best[k - 1], best[k], choice[k]
        for i in range(1, T + 1):
            cur[i], ch[i] = cur[i - 1], 0
            for ln in range(1, min(max_len, i) + 1):
                val = (prev[i - ln - 1] if i - ln >= 1 else 0.0) + csum[i] - csum[i - ln]  # a gap before the span
                if val > cur[i] + 1e-12:
                    cur[i], ch[i] = val, ln
    spans, k, i = [], n_spans, T
    while i > 0 and k > 0:
        ln = choice[k][i]
        if ln == 0:
            i -= 1
        else:
            spans.append((i - ln, i))
            i, k = i - ln - 1, k - 1
    return sorted(spans), best[n_spans][T]


@dataclass
class Highlight:
    """Keyword highlighting of one text (:func:`highlight`).

    Attributes:
        spans: ``[(start, end), ...]`` half-open token positions in the input ids (sorted).
        delta: ``[T-1]`` float, ``delta[t-1] = log P_a(x_t | x_<t) - log P_b(x_t | x_<t)`` (nats), t = 1..T-1.
        score: the summed delta over the spans.
    """

    spans: list[tuple[int, int]]
    delta: Tensor
    score: float


def highlight(model: Any, steer: Steer, input_ids: Tensor, values_a: Tensor | Mapping[str, float],
              values_b: Tensor | Mapping[str, float], n_spans: int = 4, max_len: int = 10) -> Highlight:
    """The words of a text that carry a style: per-token log-likelihood difference between two steer settings
    (e.g. ``{"attr": 1}`` vs ``{"attr": -1}``), then :func:`max_subspans` (authors' ``evidence_words``, defaults
    ``n_spans = 4``, ``max_len = 10``). ``input_ids``: ``[T]`` or ``[1, T]``. The delta of target ``t`` belongs to
    token ``t`` (the +1 shift of the authors' code), so spans index ``input_ids`` directly."""
    ids = input_ids if input_ids.dim() == 2 else input_ids[None]
    if ids.shape[0] != 1:
        raise ConfigError("input_ids", tuple(input_ids.shape), "one text: [T] or [1, T]")
    delta = (token_logprobs(model, ids, steer, values_a) - token_logprobs(model, ids, steer, values_b))[0]
    spans, score = max_subspans(delta, n_spans, max_len)
    return Highlight([(a + 1, b + 1) for a, b in spans], delta.detach(), score)


@torch.no_grad()
def steer_analysis(model: Any, steer: Steer, input_ids: Tensor, name: str | None = None,
                   grid: Sequence[float] = (-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0), dummy: float = 1.0,
                   temperature: float = 10.0) -> dict[str, Any]:
    """Which steer value explains a text best (the authors' ``steer_analysis``, ``model_base.py``; the demo's text
    analyser): the mean NLL (nats/token) of ``input_ids`` (``[T]`` or ``[B, T]``, averaged over all targets) under
    steer ``name`` (default the first attribute) at each value of ``grid`` (dummies at ``dummy``).

    Returns:
        ``{"grid": [G], "loss": [G], "best": the grid value of least loss, "distribution": softmax(temperature *
        (mean(loss) - loss))}`` (the code's pseudo-distribution, temperature 10), as Python floats.
    """
    name = name if name is not None else steer.attributes[0]
    ids = input_ids if input_ids.dim() == 2 else input_ids[None]
    losses = []
    for g in grid:
        lp = token_logprobs(model, ids, steer, steer.values({name: float(g)}, dummy=dummy))
        losses.append(float(-lp.mean()))
    loss = torch.tensor(losses, dtype=torch.float64)
    dist = torch.softmax(temperature * (loss.mean() - loss), 0)
    return {"grid": [float(g) for g in grid], "loss": losses, "best": float(grid[int(loss.argmin())]),
            "distribution": dist.tolist()}


# ------------------------------------------------------------------------------------ SVD probe


@dataclass
class SVDDirection:
    """One singular direction of a steer's ``W`` (:func:`svd_probe`).

    Attributes:
        index: rank of the direction (0 = largest singular value). singular_value: ``S_j``.
        top_ids, top_scores: the ``n_tokens`` tokens with the largest ``E v_j`` (descending).
        bottom_ids, bottom_scores: the ``n_tokens`` with the smallest (ascending).
        top_tokens, bottom_tokens: their strings when ``decode`` was given, else None.
    """

    index: int
    singular_value: float
    top_ids: list[int]
    top_scores: list[float]
    bottom_ids: list[int]
    bottom_scores: list[float]
    top_tokens: list[str] | None = None
    bottom_tokens: list[str] | None = None


@torch.no_grad()
def svd_probe(steer: LMSteer, embeddings: Any, name: str | None = None, k: int = 10, n_tokens: int = 20,
              contexts: Tensor | None = None, decode: Any = None) -> list[SVDDirection]:
    """The words a steer's dimensions act on (paper v1 App. G; code ``experiments/pca_analysis.py``).

    ``W = P1 P2^T`` of steer ``name`` (default the first attribute) = ``U diag(S) V^T``. A position with hidden state
    ``h`` moves by ``eps sum_j S_j (h . u_j) v_j``, so token ``v``'s logit moves by ``eps sum_j S_j (h . u_j)
    (v_j . e_v)``: direction ``j`` raises the tokens with large ``E v_j`` and lowers those with small ``E v_j``
    when ``h . u_j > 0``. For each of the first ``k`` directions the tokens are scored by ``E v_j``
    (``E = embeddings [V, d]``, or the output embeddings of a model) and the ``n_tokens`` highest and lowest are
    returned. SVD signs are arbitrary; each ``(u_j, v_j)`` pair is flipped so that ``mean(contexts @ u_j) >= 0``
    when ``contexts [N, d]`` (hidden states of typical positions) are given -- then "top" tokens are those the steer
    promotes at positive steer values -- else so that the largest ``|E v_j|`` is positive.

    Raises:
        ConfigError: ``k`` or ``n_tokens`` below 1; embeddings of another width.
    """
    if int(k) < 1:
        raise ConfigError("k", k, ">= 1")
    if int(n_tokens) < 1:
        raise ConfigError("n_tokens", n_tokens, ">= 1")
    E = embeddings if isinstance(embeddings, Tensor) else output_embeddings(embeddings)
    E = E.detach().float()
    if E.dim() != 2 or E.shape[1] != steer.d_model:
        raise ConfigError("embeddings", tuple(E.shape), f"[V, d] with d = {steer.d_model}")
    W = steer.matrix(name).to(E.device)
    U, S, Vh = torch.linalg.svd(W)
    n_tok = min(int(n_tokens), E.shape[0])
    out = []
    for j in range(min(int(k), S.shape[0])):
        u, v = U[:, j], Vh[j]
        scores = E @ v
        if contexts is not None:
            flip = float((contexts.to(E.device).float() @ u).mean()) < 0
        else:
            flip = float(scores[scores.abs().argmax()]) < 0
        if flip:
            scores = -scores
        top = torch.topk(scores, n_tok)
        bot = torch.topk(-scores, n_tok)
        d = SVDDirection(j, float(S[j]), top.indices.tolist(), top.values.tolist(), bot.indices.tolist(),
                         (-bot.values).tolist())
        if decode is not None:
            d.top_tokens = [decode(i) for i in d.top_ids]
            d.bottom_tokens = [decode(i) for i in d.bottom_ids]
        out.append(d)
    return out


__all__ = ["max_subspans", "Highlight", "highlight", "steer_analysis", "SVDDirection", "svd_probe"]
