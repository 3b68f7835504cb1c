"""Reading a graph out of a trained GPT: the MLP and value-path logit tables (ALPINE's W^M and W^V'), their
agreement with a known adjacency / reachability (AUC, correlation), and greedy path generation scored by pair type.

Source: Wang, Shen, Feng, Sun, Teng, Chen, "ALPINE", NeurIPS 2024, arXiv 2405.09220, sec. 3 (Theorem 2: a
one-layer Transformer predicts the next node ``k`` of a path towards target ``t`` from current node ``u`` by
``W^M[u, k] + W^V'[t, k]``: the feed-forward output of the current node carries the adjacency, the attention
value of the target carries the reachability) and sec. 5 (Figs. 3-6: heat-maps of the learned W^M against
``A^true`` and of W^V' against ``R^obs`` / ``R^true``; accuracy by (s, t) type).

Readouts for an lmsci :class:`~lmsci.models.gpt.GPT` (pre-norm blocks; only block 0 is read, as the paper's
one-layer model), each a ``[n_tokens, vocab_size]`` table of output logits:

* ``mlp_logit_table``: row ``i`` is ``lm_head(ln_f(mlp(ln2(wte[i] + p))))``, the MLP's direct contribution to the
  logits when token ``i`` sits in the residual stream (``p``: the mean learned position embedding over
  ``positions``; zero without learned positions);
* ``value_logit_table``: row ``t`` is ``lm_head(ln_f(proj(V(ln1(wte[t] + wpe[position])))))``, what the
  attention writes to the logits when it attends fully to token ``t`` at ``position`` (the target's slot, 1).

The final norm is applied to the contribution alone (a linearisation of the pre-norm model: the paper's model
has no norm); rows are compared after subtracting their mean over the columns read (a softmax is shift-invariant).
The instruments take the adjacency / reachability as arguments (they import no world).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch


def _embed(model, tokens: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
    x = model.wte(tokens)
    if hasattr(model, "wpe") and len(positions):
        idx = torch.as_tensor(list(positions), device=tokens.device)
        x = x + model.wpe(idx).mean(0)
    return x


@torch.no_grad()
def mlp_logit_table(model, tokens: Sequence[int], positions: Sequence[int] = (), layer: int = 0) -> np.ndarray:
    """ALPINE's W^M read from block ``layer``'s MLP: ``[len(tokens), vocab_size]`` float64 (module docstring).

    Raises:
        ValueError: the block has no MLP.
    """
    block = model.blocks[layer]
    if not block.has_mlp:
        raise ValueError("mlp_logit_table: the block has no MLP (mlp='none')")
    dev = model.wte.weight.device
    t = torch.as_tensor(list(tokens), device=dev)
    out = model.lm_head(model.ln_f(block.mlp(block.ln2(_embed(model, t, positions)))))
    return out.double().cpu().numpy()


@torch.no_grad()
def value_logit_table(model, tokens: Sequence[int], position: int = 1, layer: int = 0) -> np.ndarray:
    """ALPINE's W^V' read from block ``layer``'s attention value path: ``[len(tokens), vocab_size]`` float64.

    Raises:
        ValueError: an attention without separate values (``pos="uni"``/``"posonly"`` compute only values; fine)
            is read as is; a model with several heads is read as all heads attending to ``t``.
    """
    block = model.blocks[layer]
    attn = block.attn
    dev = model.wte.weight.device
    t = torch.as_tensor(list(tokens), device=dev)
    x = block.ln1(_embed(model, t, [position]))
    inner = attn.n_heads * attn.d_head
    qkv = attn.qkv(x)
    v = qkv[..., -inner:] if qkv.shape[-1] == 3 * inner else qkv
    out = model.lm_head(model.ln_f(attn.proj(v)))
    return out.double().cpu().numpy()


def center_rows(table: np.ndarray) -> np.ndarray:
    """Subtract each row's mean: ``[n, m] -> [n, m]``."""
    return table - table.mean(axis=1, keepdims=True)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC of ``scores`` for the boolean ``labels`` (same shape, flattened; NaN if one class is absent)."""
    from sklearn.metrics import roc_auc_score

    y = np.asarray(labels, dtype=bool).ravel()
    s = np.asarray(scores, dtype=float).ravel()
    if y.all() or not y.any():
        return float("nan")
    return float(roc_auc_score(y, s))


def table_vs_graph(table: np.ndarray, graph: np.ndarray, mask: np.ndarray | None = None) -> dict[str, float]:
    """Agreement of a ``[n, n]`` logit table (rows centred) with a ``[n, n]`` 0/1 graph over ``mask``.

    Returns:
        ``{"auc", "pearson", "mean_on", "mean_off"}``: ROC AUC, Pearson correlation, and the mean centred
        logit where the graph has a 1 / a 0 (logit units).
    """
    c = center_rows(table)
    m = np.ones_like(graph, dtype=bool) if mask is None else mask.astype(bool)
    s, g = c[m], graph[m].astype(bool)
    r = float(np.corrcoef(s, g.astype(float))[0, 1]) if 0 < g.sum() < g.size and s.std() > 0 else float("nan")
    return {"auc": auc(s, g), "pearson": r,
            "mean_on": float(s[g].mean()) if g.any() else float("nan"),
            "mean_off": float(s[~g].mean()) if (~g).any() else float("nan")}


@torch.no_grad()
def greedy_paths(model, pairs: np.ndarray, newline: int, max_new: int, batch: int = 512) -> list[list[int]]:
    """Greedy continuation of the prompts ``s t s`` until ``newline`` or ``max_new`` tokens.

    Args:
        pairs: ``[m, 2]`` (s, t).
        newline: the end-of-path token.
        max_new: most tokens generated after the prompt.

    Returns:
        per pair, the path ``[s, u_1, ..., ]`` (the prompt's second ``s`` then the generated tokens, without the
        newline).
    """
    dev = model.wte.weight.device
    out: list[list[int]] = []
    for i in range(0, len(pairs), batch):
        p = torch.as_tensor(np.asarray(pairs[i: i + batch]), device=dev, dtype=torch.long)
        ids = torch.stack([p[:, 0], p[:, 1], p[:, 0]], 1)
        done = torch.zeros(len(p), dtype=torch.bool, device=dev)
        for _ in range(max_new):
            nxt = model(ids)[:, -1].argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, newline), nxt)
            ids = torch.cat([ids, nxt[:, None]], 1)
            done |= nxt == newline
            if bool(done.all()):
                break
        for row in ids[:, 2:].cpu().tolist():
            out.append(row[: row.index(newline)] if newline in row else row)
    return out


def accuracy_by_type(paths: list[list[int]], pairs: np.ndarray, types: np.ndarray,
                     is_valid: Callable[[int, int, list[int]], bool]) -> dict[str, tuple[float, int]]:
    """Share of valid paths per pair type: ``{type: (accuracy, n_pairs)}``.

    Args:
        paths: generated paths (``greedy_paths``); pairs ``[m, 2]``; types ``[m]`` labels.
        is_valid: ``is_valid(s, t, path)``, the world's path checker.
    """
    ok = np.array([bool(is_valid(int(s), int(t), p)) for p, (s, t) in zip(paths, pairs)])
    return {str(k): (float(ok[types == k].mean()), int((types == k).sum())) for k in np.unique(types)}
