"""Figures and the report section of ``length-lm`` (family-private): NLL by position per method, the maximum attention
logit and the attention entropy by query position, and the real model beside the toy ``length-generalization``
experiment's published quick values (``results/quick/claims.csv``, read as data).

Source: Han et al., arXiv 2308.16137, Fig. 1 (a)-(b) and Fig. 3; Xiao et al., arXiv 2309.17453, Fig. 3.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lmsci.contract import Figure, save_figure

# the real model's claim -> the toy experiment's claim of the same statement
TOY_TWIN = {"vanilla-nll-rises": "vanilla-nll-rises", "lm-infinite-flat": "lm-infinite-flat",
            "sliding-window-degrades": "sliding-window-degrades", "sinks-flat": None,
            "theorem1-logits-explode": "theorem1-logits-explode", "theorem1-ceiling-bounds": "theorem1-ceiling-bounds",
            "entropy-grows": "entropy-grows", "start-tokens-distinct": None}
COLORS = {"vanilla": "C3", "lm_infinite": "C0", "sliding_window": "C1", "attention_sinks": "C2"}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _curves(results: pd.DataFrame, column: str) -> dict[str, np.ndarray]:
    """arm -> ``[n_seeds, n_buckets]`` of the JSON list ``column`` (None -> NaN)."""
    out: dict[str, np.ndarray] = {}
    if column not in results:
        return out
    for arm, g in results.groupby("arm"):
        rows = [json.loads(v) for v in g[column] if isinstance(v, str) and v]
        if rows:
            out[str(arm)] = np.array([[np.nan if x is None else x for x in r] for r in rows], dtype=float)
    return out


def figures(cfg: Any, results: pd.DataFrame, run: Any) -> list[Figure]:
    """``nll_by_position.png`` (the NLL claims) and ``logit_entropy.png`` (Theorems 1-2)."""
    plt = _plt()
    out: list[Figure] = []
    L = int(results["L"].dropna().iloc[0]) if "L" in results and results["L"].notna().any() else None
    nll = _curves(results, "nll_curve")
    if nll:
        fig, ax = plt.subplots(figsize=(6.4, 3.8))
        for arm, a in nll.items():
            x = (np.arange(a.shape[1]) + 0.5) * cfg.bucket
            m = np.array([np.nanmean(c) if np.isfinite(c).any() else np.nan for c in a.T])
            ax.plot(x, m, "-o", ms=2.5, color=COLORS.get(arm), label=f"{arm} (mean of {a.shape[0]} samples)")
        if L:
            ax.axvline(L, color="k", ls="--", lw=0.8, label=f"training length L = {L}")
        ax.set_xlabel("target position (tokens)")
        ax.set_ylabel("NLL (nats/token), bucket mean")
        ax.set_title(f"{cfg.model}: NLL by position", fontsize=9)
        ax.legend(fontsize=7)
        out.append(save_figure(fig, run, "nll_by_position.png",
                               f"NLL by position ({cfg.bucket}-token buckets, mean over samples) per method; the sliding "
                               "window and the sinks read the last stream_len tokens only",
                               claims=("vanilla-nll-rises", "lm-infinite-flat", "sliding-window-degrades", "sinks-flat")))
    lg, en = _curves(results, "logit_curve"), _curves(results, "entropy_curve")
    if lg:
        fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6))
        for ax, curves, lab in ((axes[0], lg, "max attention logit (mean over layers)"),
                                (axes[1], en, "attention entropy (nats, mean over layers)")):
            for arm, a in curves.items():
                x = (np.arange(a.shape[1]) + 0.5) * cfg.bucket
                ax.plot(x, np.nanmean(a, axis=0), "-o", ms=2.5, color=COLORS.get(arm), label=arm)
            if L:
                ax.axvline(L, color="k", ls="--", lw=0.8)
            ax.set_xlabel("query position (tokens)")
            ax.set_ylabel(lab, fontsize=8)
            ax.legend(fontsize=7)
        out.append(save_figure(fig, run, "logit_entropy.png",
                               "Per-query maximum attention logit and attention entropy by query position (bucket means, "
                               "mean over layers and samples); the dashed line is L",
                               claims=("theorem1-logits-explode", "theorem1-ceiling-bounds", "entropy-grows")))
    return out


def published_toy_rows(root: Path | None = None) -> pd.DataFrame:
    """The toy experiment's published quick rows (``results/quick/claims.csv``, experiment
    ``length-generalization``; ``LMSCI_RESULTS`` overrides the folder), or an empty table."""
    import lmsci

    if root is None:
        root = Path(os.environ.get("LMSCI_RESULTS") or Path(lmsci.__file__).resolve().parents[2] / "results")
    p = root / "quick" / "claims.csv"
    if not p.is_file():
        return pd.DataFrame()
    df = pd.read_csv(p)
    return df[df["experiment"] == "length-generalization"] if "experiment" in df else pd.DataFrame()


def toy_section(results: pd.DataFrame, claims: list[Any], toy: pd.DataFrame | None = None) -> str:
    """Markdown: each claim's per-sample mean on the real model beside the toy experiment's published quick value."""
    toy = published_toy_rows() if toy is None else toy
    lines = ["## The real model beside the toy experiment", "",
             "Real: this run's per-sample mean of the claim's statistic on its arm and on its null arm. Toy: "
             "`length-generalization`'s published quick value (results/quick/claims.csv; a small RoPE GPT trained on "
             "Shakespeare characters, its own statistics: ratios or differences at 32x its training length).", "",
             "| claim | real: arm mean | real: null mean | toy claim | toy value | toy null | toy outcome |",
             "|---|---|---|---|---|---|---|"]
    for c in claims:
        col = c.stat.column
        vals = {}
        for arm in c.arms[:2]:
            v = results.loc[results.get("arm") == arm, col] if col in results else pd.Series(dtype=float)
            vals[arm] = f"{pd.to_numeric(v, errors='coerce').mean():.4g}" if len(v) else "-"
        twin = TOY_TWIN.get(c.id)
        t = toy[toy["claim"] == twin] if twin and len(toy) else pd.DataFrame()
        tv = (_g(t["value"].iloc[0]), _g(t["null_value"].iloc[0]), str(t["outcome"].iloc[0])) if len(t) else ("-",) * 3
        lines.append(f"| {c.id} ({c.arms[0]} vs {c.arms[1]}) | {vals[c.arms[0]]} | {vals[c.arms[1]]} | "
                     f"{twin or '-'} | {tv[0]} | {tv[1]} | {tv[2]} |")
    return "\n".join(lines) + "\n"


def _g(v: Any) -> str:
    try:
        return f"{float(v):.4g}"
    except (TypeError, ValueError):
        return str(v)
