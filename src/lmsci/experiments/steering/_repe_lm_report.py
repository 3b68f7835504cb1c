"""Figures and report sections of :mod:`lmsci.experiments.steering.repe_lm` (representation reading on a real LM):
held-out pairwise accuracy by layer, sentiment of the continuations by steering sign, per-arm means, and the
published quick rows of ``lm-steer-lm`` and ``lm-steer`` beside them (:func:`lmsci.report.published.toy_rows_section`).

Source: Zou et al. 2023, arXiv 2310.01405, sec. 3.1-3.2.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from lmsci.contract import Figure, save_figure
from lmsci.report.published import toy_rows_section
from lmsci.runs import RunDir

# (label, arm, by-layer column, chosen-layer column)
_BY_LAYER = (("reading vector (PCA)", "real", "test_by_layer", "layer"),
             ("mean difference", "real", "test_by_layer_md", "layer_md"),
             ("random direction (null)", "null", "test_by_layer", "layer"))
# (label, arm, column prefix of the +-alpha sentiments)
_STEERS = (("reading vector (PCA)", "real", "sentiment"), ("mean difference", "real", "sentiment_md"),
           ("random direction (null)", "null", "sentiment"))


def _arm(results: pd.DataFrame, arm: str) -> pd.DataFrame:
    if results.empty or "arm" not in results:
        return results.iloc[0:0]
    return results[results["arm"] == arm]


def figures(cfg: Any, results: pd.DataFrame, run: RunDir) -> list[Figure]:
    """``accuracy_by_layer.png`` (claim ``reading``) and ``steering.png`` (claim ``steering``)."""
    import matplotlib.pyplot as plt

    out = []
    if "test_by_layer" in results:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for j, (label, arm, col, lcol) in enumerate(_BY_LAYER):
            g = _arm(results, arm).dropna(subset=[col]) if col in results else pd.DataFrame()
            if g.empty:
                continue
            curves = [json.loads(c) for c in g[col]]
            layers = sorted(int(k) for k in curves[0])
            ys = np.array([[c[str(l)] for l in layers] for c in curves], dtype=float)
            ax.plot(layers, ys.mean(0), "o-", ms=3, color=f"C{j}", label=f"{label} ({len(ys)} seeds)")
            for lay in g[lcol].astype(int):
                ax.axvline(lay, color=f"C{j}", alpha=0.3, lw=0.8, ls="--")
        ax.axhline(0.5, color="gray", lw=0.8)
        ax.set_xlabel("block (residual stream leaving it, last token)")
        ax.set_ylabel("held-out pairwise accuracy")
        ax.legend(fontsize=7)
        fig.suptitle(f"{cfg.model}: sentiment read at each layer", fontsize=9)
        fig.tight_layout()
        out.append(save_figure(fig, run, "accuracy_by_layer.png", "Held-out pairwise accuracy by layer (mean over "
                               "seeds; dashed: the layer each seed chose by cross-validation on its training pairs; "
                               "only the chosen layer's accuracy is the statistic)", claims=("reading",)))
    if "sentiment_pos" in results:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        zero = _arm(results, "real")["sentiment_zero"].astype(float) if "sentiment_zero" in results else None
        for j, (label, arm, pre) in enumerate(_STEERS):
            g = _arm(results, arm)
            if f"{pre}_pos" not in g or g[f"{pre}_pos"].isna().all():
                continue
            ys = np.c_[g[f"{pre}_neg"].astype(float), zero.values if zero is not None and len(zero) == len(g)
                       else np.full(len(g), np.nan), g[f"{pre}_pos"].astype(float)]
            for y in ys:
                ax.plot([-1, 0, 1], y, color=f"C{j}", alpha=0.25, lw=0.8)
            ax.plot([-1, 0, 1], np.nanmean(ys, 0), "o-", color=f"C{j}", label=f"{label} ({len(ys)} seeds)")
        ax.set_xticks([-1, 0, 1], ["-alpha", "unsteered", "+alpha"])
        ax.set_ylabel("mean VADER compound of continuations")
        ax.legend(fontsize=7)
        fig.suptitle(f"{cfg.model}: steering with the direction at the reading layer", fontsize=9)
        fig.tight_layout()
        out.append(save_figure(fig, run, "steering.png", "Sentiment of the continuations of neutral prompts with "
                               "the direction added at -alpha, not at all, and at +alpha (thin lines: seeds; the "
                               "same prompts and sampling seeds throughout)", claims=("steering",)))
    return out


def sections(results: pd.DataFrame) -> str:
    """Per arm and direction: mean over seeds of the layer, held-out accuracy, alpha, sentiment at -alpha / 0 /
    +alpha and the perplexities; then the published quick rows of lm-steer-lm and lm-steer."""
    lines = ["\n## Reading and steering by direction (mean over seeds)\n",
             "| direction | arm | layer | held-out pair acc. | alpha | sentiment -alpha | unsteered | +alpha | "
             "spread | ppl -alpha | ppl +alpha | seeds |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    cols = {"reading vector (PCA)": ("real", "layer", "pair_acc", "sentiment", "ppl", "spread"),
            "mean difference": ("real", "layer_md", "pair_acc_md", "sentiment_md", "ppl_md", "spread_md"),
            "random direction (null)": ("null", "layer", "pair_acc", "sentiment", "ppl", "spread")}

    def mean(g: pd.DataFrame, c: str) -> float:
        return float(pd.to_numeric(g[c], errors="coerce").mean()) if c in g else float("nan")

    zero = mean(_arm(results, "real"), "sentiment_zero")
    for label, (arm, lay, acc, sent, ppl, spread) in cols.items():
        g = _arm(results, arm)
        if g.empty or acc not in g:
            continue
        lines.append(f"| {label} | {arm} | {mean(g, lay):.1f} | {mean(g, acc):.3f} | {mean(g, 'alpha'):.3g} | "
                     f"{mean(g, sent + '_neg'):.3f} | {zero:.3f} | {mean(g, sent + '_pos'):.3f} | "
                     f"{mean(g, spread):.3f} | {mean(g, ppl + '_neg'):.4g} | {mean(g, ppl + '_pos'):.4g} | {len(g)} |")
    body = "\n".join(lines) + "\n" if len(lines) > 3 else ""
    note = ("\nNo activation-addition experiment of its own is in the catalog: activation addition from a contrast "
            "is a baseline of `lm-steer-lm` (its `vs-baselines` row) and the mean-difference row above.\n")
    real = toy_rows_section("lm-steer-lm").replace("The toy experiment", "The real-model steering experiment", 1)
    return body + real + toy_rows_section("lm-steer") + note
