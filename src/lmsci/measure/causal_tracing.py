"""Causal tracing: where a fact's recall is mediated, by restoring clean hidden states into a corrupted run.

Source: Meng, Bau, Andonian, Belinkov, "Locating and Editing Factual Associations in GPT", NeurIPS 2022,
arXiv 2202.05262, Section 2.1 (causal tracing, Figure 1/2) and the released code (``kmeng01/rome``,
``experiments/causal_trace.py``: ``trace_with_patch``, ``trace_important_window``; the noise level
``s3`` = 3 x the empirical standard deviation of the subject tokens' embeddings).

Three runs per fact (prompt tokens ``x``, subject tokens ``x[s:e]``, answer token ``o``):

* clean: ``P(o)`` (``high``), caching every hidden state ``h_i^(l)``;
* corrupted: Gaussian noise ``eps ~ N(0, nu^2)`` added to the embeddings of the subject tokens,
  ``nu = 3 * std(subject embeddings)``; ``P*(o)`` (``low``), averaged over ``samples`` noise draws;
* corrupted-with-restoration: as corrupted, but one hidden state (token ``i``, layer ``l``) is set back to
  its clean value; ``P*_{clean h_i^(l)}(o)``. For MLP and attention outputs the paper restores a *window*
  of ``window`` consecutive layers centred on ``l`` (10 in GPT-2 XL's 48 layers).

The indirect effect of a state is ``IE = P*_{clean h}(o) - P*(o)``; the total effect ``TE = P(o) - P*(o)``.
The average indirect effect (AIE) over facts is taken per token *category* (:data:`CATEGORIES`, the rows of
the paper's Figure 2) so that prompts of different lengths can be pooled.

Hook names (lmsci GPT and Hugging Face models through :class:`lmsci.models.hf.HFModel`): ``embed``,
``blocks.{l}.resid_post`` (kind ``"resid"``), ``blocks.{l}.mlp.out`` (``"mlp"``), ``blocks.{l}.attn.out``
(``"attn"``). Every restoration of one fact runs as one batched forward per kind on the model's device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lmsci.errors import ConfigError, UnknownNameError

KINDS: dict[str, str] = {"resid": "blocks.{}.resid_post", "mlp": "blocks.{}.mlp.out", "attn": "blocks.{}.attn.out"}
"""Kind of restored state -> lmsci hook name (``{}``: the layer)."""
CATEGORIES = ("first subject", "middle subject", "last subject", "first subsequent", "further", "last")
"""Token categories of the paper's average heat-maps (Figure 2): the subject's first, middle and last tokens,
the first token after the subject, further tokens, and the prompt's last token."""
NOISE_FACTOR = 3.0
"""Meng et al.: nu = 3 x the empirical standard deviation of the (subject) embeddings."""


def hookable(model: Any) -> Any:
    """``model`` itself when it has a ``hooks`` API (lmsci GPT, HFModel); a ``transformers`` causal LM is
    wrapped in :class:`lmsci.models.hf.HFModel`.

    Raises:
        ConfigError: anything else.
    """
    if hasattr(model, "hooks") and callable(model):
        return model
    if isinstance(model, torch.nn.Module) and hasattr(model, "config"):
        from lmsci.models.hf import HFModel

        return HFModel(model)
    raise ConfigError("model", type(model).__name__, "an lmsci GPT, a lmsci HFModel or a transformers causal LM")


def n_layers_of(model: Any) -> int:
    """Number of blocks of an lmsci GPT / HF model (through the architecture map)."""
    from lmsci.models.arch import arch_of

    return arch_of(model).n_layers


def model_device(model: Any) -> torch.device:
    return next(iter(model.parameters())).device


def check_layer(layer: int, n_layers: int, what: str = "layer") -> None:
    """Raise :class:`UnknownNameError` naming the layers that exist when ``layer`` is out of range."""
    if not isinstance(layer, (int, np.integer)) or not 0 <= int(layer) < n_layers:
        raise UnknownNameError(what, str(layer), [str(i) for i in range(n_layers)])


@dataclass
class TraceResult:
    """One fact's causal trace.

    Attributes:
        scores: kind -> ``[n_tokens, n_layers]`` answer probability with that state (window) restored.
        high: clean ``P(o)``. low: corrupted ``P*(o)`` (mean over noise samples).
        answer: the answer token id. subject: ``(s, e)`` token range corrupted. window: layers restored per cell.
        categories: the :data:`CATEGORIES` label of each token (``"before"`` for tokens before the subject).
    """

    scores: dict[str, np.ndarray]
    high: float
    low: float
    answer: int
    subject: tuple[int, int]
    window: dict[str, int]
    categories: list[str] = field(default_factory=list)

    def indirect_effect(self, kind: str) -> np.ndarray:
        """``[n_tokens, n_layers]``: ``P*_{clean h}(o) - P*(o)``."""
        return self.scores[kind] - self.low

    @property
    def total_effect(self) -> float:
        return self.high - self.low


def token_categories(n_tokens: int, subject: tuple[int, int]) -> list[str]:
    """The :data:`CATEGORIES` label of each of ``n_tokens`` prompt tokens given the subject range ``[s, e)``.

    The prompt's last token is ``"last"`` (even when it is the first token after the subject); a one-token
    subject is ``"last subject"``; tokens before the subject are ``"before"`` (not in the paper's figure).
    """
    s, e = subject
    out = []
    for t in range(n_tokens):
        if t == n_tokens - 1 and t >= e:
            out.append("last")
        elif t < s:
            out.append("before")
        elif t == e - 1:
            out.append("last subject")
        elif t == s:
            out.append("first subject")
        elif t < e:
            out.append("middle subject")
        elif t == e:
            out.append("first subsequent")
        else:
            out.append("further")
    return out


def embedding_std(model: Any, prompts: Sequence[Sequence[int]], subjects: Sequence[tuple[int, int]]) -> float:
    """Empirical standard deviation (over all elements) of the ``embed`` activations ``[n_tokens, d_model]`` of the
    subject tokens ``ids[s:e]`` of each prompt (Meng et al. 2022, arXiv 2202.05262, Sec. 2.1; the released code's
    ``collect_embedding_std``); the noise of :func:`causal_trace` is ``nu = NOISE_FACTOR *`` this (embedding units).

    Raises:
        ConfigError: ``model`` is not an lmsci GPT, an HFModel or a ``transformers`` causal LM.
        UnknownNameError: the model has no ``embed`` hook."""
    model = hookable(model)
    dev = model_device(model)
    vals = []
    with torch.no_grad():
        for ids, (s, e) in zip(prompts, subjects):
            x = torch.as_tensor(list(ids), dtype=torch.long, device=dev)[None]
            with model.hooks(cache=["embed"]) as c:
                model(x)
            vals.append(c["embed"][0, s:e].flatten().float())
    return float(torch.cat(vals).std())


def last_logits(model: Any, x: Tensor) -> Tensor:
    """``[batch, vocab]`` next-token logits after the last position of ``x [batch, seq]``. On an
    :class:`~lmsci.models.hf.HFModel` only the last position goes through the unembedding (``logits_to_keep=1``:
    on a 49k-token vocabulary the unembedding of every position is a fifth of a small model's forward)."""
    if type(model).__name__ == "HFModel":
        return model(x, logits_to_keep=1)[:, -1]
    return model(x)[:, -1]


def _window_layers(center: int, window: int, n_layers: int) -> range:
    # the released code's interval: [l - w//2, l + ceil(w/2)) clipped to the model
    return range(max(0, center - window // 2), min(n_layers, center - (-window // 2)))


def causal_trace(model: Any, ids: Sequence[int], subject: tuple[int, int], answer: int, *, noise: float,
                 kinds: Sequence[str] = ("resid", "mlp", "attn"), samples: int = 10,
                 window: int | dict[str, int] = 1, seed: int = 0, max_rows: int = 2048,
                 tokens: Sequence[int] | None = None, layers: Sequence[int] | None = None) -> TraceResult:
    """Causal trace of one fact (Meng et al. 2022, arXiv 2202.05262, Section 2.1).

    Args:
        model: an lmsci GPT, an :class:`~lmsci.models.hf.HFModel` or a ``transformers`` causal LM.
        ids: the prompt's token ids (``[n_tokens]``); the answer is predicted after its last token.
        subject: ``(s, e)``: the subject's tokens ``ids[s:e]`` are corrupted.
        answer: the answer token id whose probability is traced.
        noise: the noise standard deviation ``nu`` (use ``NOISE_FACTOR * embedding_std(...)``).
        kinds: restored states, keys of :data:`KINDS`.
        samples: noise draws (the same draws for every restored state, as the released code).
        window: layers restored around each centre (an int for every kind or ``{kind: window}``; the paper
            uses 1 for ``resid`` and 10 for ``mlp``/``attn``).
        seed: seed of the noise.
        max_rows: largest batch of one forward (rows = restored cells x samples).
        tokens, layers: restore only at these token positions / window centres (None: all); the other cells
            of ``scores`` are NaN. A trace of a few key tokens and every other layer costs a fraction of the full
            grid (``rows = len(kinds) x len(tokens) x len(layers) x samples`` forwards of the prompt).

    Returns:
        :class:`TraceResult` (``scores[kind]`` ``[n_tokens, n_layers]`` probabilities, NaN where not restored).

    Raises:
        ConfigError: empty or out-of-range subject, answer outside the vocabulary, unknown kind, window < 1,
            a token position or layer out of range.
        UnknownNameError: the model lacks one of the hook points (names what exists).
    """
    model = hookable(model)
    dev = model_device(model)
    x0 = torch.as_tensor(list(ids), dtype=torch.long, device=dev)
    T = int(x0.numel())
    s, e = int(subject[0]), int(subject[1])
    if not 0 <= s < e <= T:
        raise ConfigError("subject", (s, e), f"a non-empty token range inside the prompt's {T} tokens")
    for k in kinds:
        if k not in KINDS:
            raise UnknownNameError("kind", k, KINDS)
    L = n_layers_of(model)
    wins = {k: int(window[k] if isinstance(window, dict) else window) for k in kinds}
    if any(w < 1 for w in wins.values()):
        raise ConfigError("window", window, "an integer >= 1 (layers restored around each centre)")
    toks = list(range(T)) if tokens is None else sorted({int(t) for t in tokens})
    centres = list(range(L)) if layers is None else sorted({int(l) for l in layers})
    if not toks or not all(0 <= t < T for t in toks):
        raise ConfigError("tokens", tokens, f"token positions in [0, {T})")
    if not centres or not all(0 <= l < L for l in centres):
        raise ConfigError("layers", layers, f"layers in [0, {L})")
    names = {k: [KINDS[k].format(l) for l in range(L)] for k in kinds}
    with torch.no_grad():
        with model.hooks(cache=["embed"] + [n for k in kinds for n in names[k]]) as clean:
            logits = model(x0[None])
        V = logits.shape[-1]
        if not 0 <= int(answer) < V:
            raise ConfigError("answer", answer, f"a token id in [0, {V})")
        high = float(torch.softmax(logits[0, -1].float(), -1)[answer])
        clean = dict(clean)
        d = clean["embed"].shape[-1]
        g = torch.Generator().manual_seed(int(seed))
        eps = (torch.randn(samples, e - s, d, generator=g) * float(noise)).to(dev, clean["embed"].dtype)

        def run(rows_sample: Tensor, restore: dict[str, tuple[Tensor, Tensor]]) -> Tensor:
            """rows_sample [R]: noise draw per row; restore: hook name -> (row idx, token idx)."""
            R = rows_sample.numel()

            def corrupt(h: Tensor, hook: Any) -> Tensor:
                h = h.clone()
                h[:, s:e] = h[:, s:e] + eps[rows_sample]
                return h

            def patch_fn(name: str):
                rows, toks = restore[name]

                def fn(h: Tensor, hook: Any) -> Tensor:
                    h = h.clone()
                    h[rows, toks] = clean[name][0, toks].to(h.dtype)
                    return h
                return fn

            hooks = [("embed", corrupt)] + [(n, patch_fn(n)) for n in restore]
            with model.hooks(hooks):
                out = last_logits(model, x0[None].expand(R, T))
            return torch.softmax(out.float(), -1)[:, answer]

        low = float(run(torch.arange(samples, device=dev), {}).mean())
        scores: dict[str, np.ndarray] = {}
        for k in kinds:
            cells = [(l, t) for l in centres for t in toks]
            per = max(1, max_rows // samples)
            res = torch.empty(len(cells), device=dev)
            for c0 in range(0, len(cells), per):
                chunk = cells[c0:c0 + per]
                n = len(chunk)
                rows_sample = torch.arange(samples, device=dev).repeat(n)  # row r: cell r // samples
                restore: dict[str, tuple[list[int], list[int]]] = {}
                for ci, (l, t) in enumerate(chunk):
                    for j in _window_layers(l, wins[k], L):
                        rr, tt = restore.setdefault(names[k][j], ([], []))
                        rr.extend(range(ci * samples, (ci + 1) * samples))
                        tt.extend([t] * samples)
                restore_t = {nm: (torch.tensor(rr, device=dev), torch.tensor(tt, device=dev))
                             for nm, (rr, tt) in restore.items()}
                p = run(rows_sample, restore_t)
                res[c0:c0 + n] = p.view(n, samples).mean(1)
            grid = np.full((T, L), np.nan)
            vals = res.cpu().numpy().astype(np.float64)
            for (l, t), v in zip(cells, vals):
                grid[t, l] = v
            scores[k] = grid
    return TraceResult(scores=scores, high=high, low=low, answer=int(answer), subject=(s, e), window=wins,
                       categories=token_categories(T, (s, e)))


def average_by_category(traces: Sequence[TraceResult], kind: str, *, relative: bool = False) -> np.ndarray:
    """Average indirect effect ``[len(CATEGORIES), n_layers]`` over ``traces``: per fact, the IE of the tokens of
    each category is averaged, then facts are averaged (NaN where no fact has the category).

    ``relative``: divide each fact's IE by its total effect (facts whose TE <= 0 are dropped)."""
    if not traces:
        raise ConfigError("traces", 0, "at least one TraceResult")
    L = traces[0].scores[kind].shape[1]
    acc = np.zeros((len(CATEGORIES), L))
    cnt = np.zeros((len(CATEGORIES), L))
    for tr in traces:
        ie = tr.indirect_effect(kind)
        if relative:
            if tr.total_effect <= 0:
                continue
            ie = ie / tr.total_effect
        for ci, cat in enumerate(CATEGORIES):
            rows = [t for t, c in enumerate(tr.categories) if c == cat]
            if rows:
                sub = ie[rows]
                ok = np.isfinite(sub).any(0)  # cells not restored (a partial trace) are NaN and not counted
                m = np.nansum(sub, 0) / np.maximum(np.isfinite(sub).sum(0), 1)
                acc[ci, ok] += m[ok]
                cnt[ci, ok] += 1
    with np.errstate(invalid="ignore"):
        return np.where(cnt > 0, acc / np.maximum(cnt, 1), np.nan)


def subject_token_aie(traces: Sequence[TraceResult], kind: str) -> np.ndarray:
    """Average indirect effect per subject token, ``[max subject length, n_layers]``: row ``j`` is the IE of the
    ``j``-th subject token (0 = the first) averaged over the facts whose subject has at least ``j + 1`` tokens
    (NaN where none has). Unlike :func:`average_by_category` the middle subject tokens are not pooled, so the
    argmax names one token position (where the causal trace puts the fact; Meng et al. 2022, arXiv 2202.05262,
    Section 2.1, per-token traces of Figure 1).

    Raises:
        ConfigError: no trace. KeyError: ``kind`` was not traced.
    """
    if not traces:
        raise ConfigError("traces", 0, "at least one TraceResult")
    L = traces[0].scores[kind].shape[1]
    n = max(tr.subject[1] - tr.subject[0] for tr in traces)
    acc = np.zeros((n, L))
    cnt = np.zeros((n, 1))
    for tr in traces:
        s, e = tr.subject
        acc[:e - s] += tr.indirect_effect(kind)[s:e]
        cnt[:e - s] += 1
    with np.errstate(invalid="ignore"):
        return np.where(cnt > 0, acc / np.maximum(cnt, 1), np.nan)


def site_margin(aie: np.ndarray, category: str, layers: Sequence[int]) -> float:
    """How much the peak of an AIE map ``[len(CATEGORIES), n_layers]`` at (``category``, ``layers``) exceeds
    the largest AIE anywhere else: ``max(aie[cat, layers]) - max(aie[other cells])`` (> 0: the map's peak lies
    there). NaN cells are ignored."""
    ci = CATEGORIES.index(category)
    mask = np.zeros_like(aie, dtype=bool)
    mask[ci, list(layers)] = True
    inside = aie[mask]
    outside = aie[~mask]
    if not np.isfinite(inside).any():
        return float("nan")
    out_max = np.nanmax(outside) if np.isfinite(outside).any() else -np.inf
    return float(np.nanmax(inside) - out_max)


def thirds(n_layers: int) -> tuple[list[int], list[int], list[int]]:
    """The early, middle and late thirds of ``n_layers`` layers (``[0, L/3)``, ``[L/3, 2L/3)``, ``[2L/3, L)``,
    boundaries rounded)."""
    a, b = round(n_layers / 3), round(2 * n_layers / 3)
    return list(range(0, a)), list(range(a, b)), list(range(b, n_layers))


__all__ = ["KINDS", "CATEGORIES", "NOISE_FACTOR", "TraceResult", "causal_trace", "embedding_std", "token_categories",
           "average_by_category", "subject_token_aie", "site_margin", "thirds", "hookable", "n_layers_of",
           "check_layer", "last_logits"]
