"""Figures and report sections of :mod:`lmsci.experiments.knowledge.factual_recall`.

Three figures: facts stored vs parameters (log-log, per-family fits and the authors' guide line, cf. Fig. 4 left
of Nichani, Lee, Bietti, arXiv 2412.06538), the capacity search trace of the first training seed, and the
attention/MLP trade-off map with each seed's boundary (cf. Fig. 4 right); and the report's method and tables.
Each function reads the results table (one row per point and training seed) and writes nothing but its figure.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from lmsci.experiments.base import Figure, save_figure
from lmsci.experiments.knowledge._factual_recall_verdicts import (GUIDE_RATIO, boundary, capacity_rows, loglog_fit,
                                                                  seeds, tradeoff_rows, usable)
from lmsci.runs import RunDir


def figures(cfg: Any, results: pd.DataFrame, run: RunDir) -> list[Figure]:
    """facts_vs_params.png and capacity_search.png when there are capacity rows, tradeoff_map.png when there are
    trade-off rows (in this order)."""
    import matplotlib.pyplot as plt

    figs = []
    cap = capacity_rows(results)
    if not cap.empty:
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        figs.append(facts_vs_params_figure(cfg, cap, run, colors))
        figs.append(capacity_search_figure(cfg, cap, run, colors))
    tr = tradeoff_rows(results)
    if not tr.empty:
        figs.append(tradeoff_map_figure(cfg, tr, run))
    return figs


def facts_vs_params_figure(cfg: Any, cap: pd.DataFrame, run: RunDir, colors: list[str]) -> Figure:
    """Facts stored (S·R) vs parameters (4·H·d_h·d + 2·m·d), log-log: one line per family and seed, the search
    bracket as bars, censored points as crosses, each family's fit and the guide facts = 0.15 x params."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    use = usable(cap)
    try:
        pooled = loglog_fit(use["params"].values, use["facts"].values, use["family"].values)
    except ValueError:
        pooled = None
    for i, fam in enumerate(sorted(cap["family"].unique())):
        c = colors[i % len(colors)]
        sub = cap[cap["family"] == fam].sort_values("params")
        good = sub[(sub["censored"] == "") & (sub["facts"] > 0)]
        bad = sub[~sub.index.isin(good.index) & (sub["facts"] > 0)]
        for j, (_, g) in enumerate(seeds(good)):  # one line per training seed
            ax.plot(g["params"], g["facts"], "o-", color=c, alpha=1 if j == 0 else 0.5, lw=1,
                    label=fam if j == 0 else None)
        if "facts_next_failed" in good:  # the search bracket: stored .. first failed above it
            up = (good["facts_next_failed"].fillna(good["facts"]) - good["facts"]).clip(lower=0)
            ax.errorbar(good["params"], good["facts"], yerr=[np.zeros(len(good)), up.values], fmt="none",
                        ecolor=c, alpha=0.5, capsize=2)
        if not bad.empty:
            ax.plot(bad["params"], bad["facts"], "x", color=c, ms=8, label=f"{fam} (censored)")
        try:
            f = loglog_fit(good["params"].values, good["facts"].values)
            xs = np.geomspace(good["params"].min(), good["params"].max(), 20)
            ax.plot(xs, np.exp(f["intercept"]) * xs ** f["slope"], ":", color=c, lw=1,
                    label=f"  fit slope {f['slope']:.2f} [{f['ci_lo']:.2f}, {f['ci_hi']:.2f}]")
        except ValueError:
            pass
    lo, hi = cap["params"].min() / 1.5, cap["params"].max() * 1.5
    xs = np.geomspace(lo, hi, 20)
    ax.plot(xs, GUIDE_RATIO * xs, "k--", lw=1, label=f"guide: facts = {GUIDE_RATIO} x params")
    ax.set_xscale("log")
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("parameters (4·H·d_h·d + 2·m·d)")
    ax.set_ylabel(f"facts stored (S·R at ≥ {cfg.threshold:g} accuracy)")
    title = "Facts stored vs parameters"
    if pooled:
        title += f" — pooled slope {pooled['slope']:.2f} [{pooled['ci_lo']:.2f}, {pooled['ci_hi']:.2f}]"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return save_figure(fig, run, "facts_vs_params.png",
                       "Facts stored vs parameters (log-log) with per-family fits and the authors' "
                       "guide line facts ≈ 0.15 × params (cf. Fig. 4 left); bars reach the smallest "
                       "fact count that failed", dpi=120)


def capacity_search_figure(cfg: Any, cap: pd.DataFrame, run: RunDir, colors: list[str]) -> Figure:
    """The capacity search trace of the first training seed: best test accuracy (over learning rates) at each
    probed fact count, one panel per family, one line per d_model; the storage threshold dashed."""
    import matplotlib.pyplot as plt

    fams = sorted(cap["family"].unique())
    fig, axes = plt.subplots(1, len(fams), figsize=(5 * len(fams), 3.8), squeeze=False)
    for ax, fam in zip(axes[0], fams):
        sub = cap[cap["family"] == fam].sort_values("d_model")
        if "seed_index" in sub:  # the first training seed only
            sub = sub[sub["seed_index"].fillna(0).astype(int) == 0]
        for i, (_, r) in enumerate(sub.iterrows()):
            tr = pd.DataFrame(json.loads(r["trials"]))
            if tr.empty:
                continue
            best = tr.groupby("facts")["acc"].max()
            ax.plot(best.index, best.values, "o-", color=colors[i % len(colors)], ms=3,
                    label=f"d={r['d_model']} ({r['params']} params)")
        ax.axhline(cfg.threshold, color="k", ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("facts S·R probed")
        ax.set_ylabel("best test accuracy over LRs")
        ax.set_title(fam, fontsize=10)
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
    return save_figure(fig, run, "capacity_search.png",
                       "The capacity search: best test accuracy (over learning rates) at each probed "
                       "fact count; the dashed line is the storage threshold")


def tradeoff_map_figure(cfg: Any, tr: pd.DataFrame, run: RunDir) -> Figure:
    """The attention/MLP trade-off map: mean test accuracy over seeds per (attention params d·d_h·H, MLP params
    d·m) cell at the fixed fact count, with each seed's boundary (:func:`boundary`) in red."""
    import matplotlib.pyplot as plt

    piv = tr.pivot_table(index="mlp_params", columns="attn_params", values="accuracy")
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    im = ax.imshow(piv.values, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(piv.columns)), [str(int(c)) for c in piv.columns], rotation=45)
    ax.set_yticks(range(len(piv.index)), [str(int(i)) for i in piv.index])
    for (yi, xi), v in np.ndenumerate(piv.values):
        if not np.isnan(v):
            ax.text(xi, yi, f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="k" if v > 0.6 else "w", fontweight="bold" if v >= cfg.threshold else None)
    for j, (k, sub) in enumerate(seeds(tr)):  # each seed's boundary, in grid coordinates
        b = boundary(cfg, sub)
        if b.empty:
            continue
        xs = [list(piv.columns).index(a) for a in b["attn_params"]]
        ys = [list(piv.index).index(m) for m in b["min_mlp_params"]]
        ax.plot(xs, ys, "o-", color="r", ms=3, lw=1, alpha=0.8, label="boundary per seed" if j == 0 else None)
    if not tr.empty and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper right")
    ax.set_xlabel(f"attention parameters d·d_h·H (d={cfg.tradeoff_d_model}, d_h={cfg.tradeoff_d_head})")
    ax.set_ylabel("MLP parameters d·m")
    ax.set_title(f"Mean accuracy over seeds storing {cfg.tradeoff_size ** 2} facts (S=R={cfg.tradeoff_size}, "
                 f"D={cfg.answers_per_relation})", fontsize=10)
    fig.colorbar(im, ax=ax, label="test accuracy")
    return save_figure(fig, run, "tradeoff_map.png",
                       "Attention/MLP trade-off: accuracy over (attention params × MLP params) at a "
                       "fixed fact count, mean over training seeds; bold = stored on average; red: each "
                       "seed's boundary (smallest stored MLP per head count) (cf. Fig. 4 right)",
                       dpi=120)


def report_sections(cfg: Any, results: pd.DataFrame, run: RunDir) -> str:
    """The report's method paragraph, the capacity table (one row per capacity point and seed) and the trade-off
    table (per seed and head count, the smallest MLP params that stored the facts and the best accuracy)."""
    from lmsci.report import markdown_table

    parts = ["## Method\n",
             f"World: S subjects and R relations, D = {cfg.answers_per_relation} answers per relation "
             f"(disjoint blocks), n_noise = S + R, T = {cfg.seq_len}; facts = S·R. Model: one-layer "
             f"transformer, frozen random embeddings, H = {cfg.n_heads} heads, d_h = alpha·d/H, "
             "MLP width m = beta·d (beta = 0: attention-only); params = 4·H·d_h·d + 2·m·d. "
             f"Training: AdamW (wd 0), batch {cfg.batch_size}, up to {cfg.steps} steps, LR schedule "
             f"`{cfg.lr_schedule}`, test set {cfg.n_eval} fresh sequences, stop at test accuracy "
             f"≥ {cfg.threshold:g}. A fact set is stored if any LR in {cfg.lrs} reaches the threshold. "
             f"Capacity = the largest stored S·R, found by a k-ary search (k = {cfg.probes_per_round}) over "
             f"the `{cfg.fact_grid}` grid of (S, R) with S, R ∈ [{cfg.size_min}, {cfg.size_max}] "
             "('square': S = R; 'near-square': S = R or S = R + 1). The fit is ordinary least squares of log facts on "
             "log params, one fit per family and training seed (the pooled fit: one intercept per family); the "
             f"verdict intervals are 95% Student-t CIs across the {cfg.n_seeds} training seed(s) of the per-seed "
             "slopes. Trade-off map: per seed, the boundary is the smallest stored MLP params per head count, up "
             "to the first H whose attention-only cell stores; its OLS slope on attention params is taken per "
             "seed. Each seed draws its own fact tables and initial weights.\n"]
    cap = capacity_rows(results)
    if not cap.empty:
        cols = ["family", "seed_index", "d_model", "n_heads", "d_head", "d_mlp", "params", "S", "R", "facts",
                "facts_per_param", "facts_next_failed", "censored", "runs"]
        parts.append("## Capacity per model\n")
        parts.append(markdown_table(cap[[c for c in cols if c in cap]].sort_values(["family", "params"])))
    tr = tradeoff_rows(results)
    if not tr.empty:
        parts.append("## Trade-off map: smallest MLP that stores the facts, per head count\n")
        rows = []
        for (k, h), sub in tr.groupby([tr["seed_index"].fillna(0).astype(int) if "seed_index" in tr else
                                       pd.Series(0, index=tr.index), "n_heads"]):
            ok = sub[sub["accuracy"] >= cfg.threshold]
            rows.append({"seed_index": k, "n_heads": h, "attn_params": int(sub["attn_params"].iloc[0]),
                         "min_mlp_params_stored": int(ok["mlp_params"].min()) if not ok.empty else "none",
                         "best_accuracy": float(sub["accuracy"].max())})
        parts.append(markdown_table(pd.DataFrame(rows)))
    return "\n".join(parts)
