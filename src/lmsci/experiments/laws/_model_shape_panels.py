"""Kaplan et al. 2020 (arXiv 2001.08361, sec. 3.1, Fig. 5) left and right panels for ``model-shape``: the feed-forward
ratio ``d_mlp / d_model`` at fixed non-embedding parameters N (left; the paper: 50M parameters), and the attention head
dimension ``d_model / n_heads`` at fixed ``d_model`` and N (right; the paper: 25M parameters). Sec. 3.1: "This was
simplest for the case of n_heads" (``n_heads * d_head = d_model`` holds N); "to vary d_ff at fixed model size we also
simultaneously varied the d_model parameter".

Shapes are architecture dicts ``{n_layers, d_model, n_heads, d_head, d_mlp, x}`` (``x``: the panel's abscissa, the
head dimension or the feed-forward ratio). Null arms (the same statistic and rule): the same head counts at a fixed
*head width* (the narrowest head of the grid, so ``d_model = n_heads * d_head`` and N grow with the heads; the
most-headed model is shared with the real grid), and the same feed-forward ratios at a fixed ``d_model`` (the narrowest
of the fixed-N grid, so N grows with the ratio; the widest-MLP model is shared).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from lmsci.claims import Verdict, judge_arms
from lmsci.experiments.laws._common import gpt_non_embedding_params

PANELS = {"flat-heads": ("heads", "heads-null"), "flat-mlp": ("mlp", "mlp-null")}
KEY = ("n_layers", "d_model", "n_heads", "d_head", "d_mlp")


def shape_for(n_params: int, n_layers: int, d_head: int, mlp_ratio: float = 4.0) -> tuple[int, int]:
    """``(d_model, n_heads)`` whose GPT of ``n_layers`` layers (MLP width ``round(mlp_ratio * d_model)``) has
    non-embedding parameters closest to ``n_params`` (``n_heads = max(1, round(d_model / d_head))``)."""
    best = None
    for d in range(4, 8192):
        h = max(1, round(d / d_head))
        n = gpt_non_embedding_params(n_layers, d, h, d_head, max(1, round(mlp_ratio * d)))
        err = abs(n - n_params)
        if best is None or err < best[0]:
            best = (err, d, h)
        if n > n_params:
            break
    return best[1], best[2]


def _arch(L: int, d: int, h: int, dh: int, m: int, x: float) -> dict[str, Any]:
    return {"n_layers": int(L), "d_model": int(d), "n_heads": int(h), "d_head": int(dh), "d_mlp": int(m), "x": float(x)}


def panel_shapes(cfg) -> dict[str, list[dict[str, Any]]]:
    """The shapes of the two panels and their null arms: ``{"heads", "heads-null", "mlp", "mlp-null"}`` -> shapes.

    ``cfg`` is a ``ModelShapeConfig`` (``heads_shape``, ``heads``, ``mlp_layers``, ``mlp_ratios``, ``n_params``,
    ``model.d_head``)."""
    L, d = cfg.heads_shape
    dh_w = d // max(cfg.heads)
    out = {"heads": [_arch(L, d, h, d // h, 4 * d, d // h) for h in sorted(cfg.heads)],
           "heads-null": [_arch(L, h * dh_w, h, dh_w, 4 * h * dh_w, d // h) for h in sorted(cfg.heads)]}
    dh, Lm = cfg.model.head_dim, cfg.mlp_layers
    grid = [(r, *shape_for(cfg.n_params[0], Lm, dh, r)) for r in sorted(cfg.mlp_ratios)]
    out["mlp"] = [_arch(Lm, dm, h, dh, max(1, round(r * dm)), r) for r, dm, h in grid]
    d_w = min(dm for _, dm, _ in grid)
    h_w = max(1, round(d_w / dh))
    out["mlp-null"] = [_arch(Lm, d_w, h_w, dh, max(1, round(r * d_w)), r) for r, _, _ in grid]
    return out


def arch_key(row) -> tuple[int, ...]:
    """The architecture of a result row or shape dict (what makes two points the same model)."""
    return tuple(int(row[k]) for k in KEY)


def panel_stats(rows: pd.DataFrame, cfg) -> dict[str, float]:
    """One seed's spreads: for each panel, ``max / min - 1`` of the validation NLL over its grid (``heads``,
    ``mlp``) and over its null grid (``heads-null``, ``mlp-null``); a grid with a missing model is left out.

    Args:
        rows: the seed's finished rows (columns ``n_layers, d_model, n_heads, d_head, d_mlp, val_nll``), any arm.
    """
    if rows.empty or not set(KEY) <= set(rows.columns):
        return {}
    nll = {arch_key(r): float(r["val_nll"]) for _, r in rows.iterrows()}
    out = {}
    for arm, shapes in panel_shapes(cfg).items():
        vals = [nll.get(arch_key(s)) for s in shapes]
        if all(v is not None for v in vals):
            out[arm] = float(max(vals) / min(vals) - 1)
    return out


def decide_panels(exp, cfg, per_seed: list[dict[str, float]], spread_max: float) -> list[Verdict]:
    """The ``flat-heads`` and ``flat-mlp`` verdicts from per-seed :func:`panel_stats`: rule ``n >= 2`` seeds and the
    upper end of the 95% CI of the spread <= ``spread_max``; the null arm is the same on the null grid."""

    def rule(s) -> bool:
        return bool(s.n >= 2 and s.hi <= spread_max)

    out = []
    for cid, (arm, null_arm) in PANELS.items():
        real = [st[arm] for st in per_seed if arm in st]
        if not real:
            out.append(exp.judge(cfg, cid, value=None, passed=None, why_not_computed=f"no seed with the whole {arm} "
                                 "grid"))
            continue
        nulls = [st[null_arm] for st in per_seed if null_arm in st]
        out.append(judge_arms(lambda c, **kw: exp.judge(cfg, c, **kw), cid, real, nulls, rule))
    return out


def plot_panel(ax, res: pd.DataFrame, cfg, panel: str) -> None:
    """Loss increase (%) over the best shape of the real grid, mean over seeds, against the panel's abscissa
    (``panel``: ``heads`` or ``mlp``); the null grid dashed."""
    if res.empty or not set(KEY) <= set(res.columns):
        return
    mean = res.groupby(list(KEY))["val_nll"].mean()
    shapes = panel_shapes(cfg)
    real = [(s["x"], mean.get(arch_key(s), np.nan)) for s in shapes[panel]]
    best = np.nanmin([v for _, v in real]) if real else np.nan
    for arm, ls in ((panel, "o-"), (panel + "-null", "x--")):
        pts = sorted((s["x"], mean.get(arch_key(s), np.nan)) for s in shapes[arm])
        ax.plot([x for x, _ in pts], [100 * (v / best - 1) for _, v in pts], ls, color="C0" if arm == panel else "C3",
                label=("fixed N" if arm == panel else "null: " + ("fixed head width" if panel == "heads"
                                                                  else "fixed d_model")))
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if panel == "heads":
        L, d = cfg.heads_shape
        ax.set_xlabel(f"attention head dimension d_model / n_heads ({L} layers, d_model {d})")
    else:
        ax.set_xlabel(f"feed-forward ratio d_mlp / d_model ({cfg.mlp_layers} layers, N~{cfg.n_params[0]:,})")


__all__ = ["PANELS", "shape_for", "panel_shapes", "arch_key", "panel_stats",
           "decide_panels", "plot_panel"]
