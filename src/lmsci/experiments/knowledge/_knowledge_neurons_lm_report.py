"""Figures and report sections of :mod:`lmsci.experiments.knowledge.knowledge_neurons_lm`: per fact, the answer
probability's relative change under the knowledge neurons' edit against that of random neurons (Dai et al. 2022,
arXiv 2104.08696, Figs. 3-4), where the knowledge neurons sit (their Fig. 2: mostly in the top layers of BERT), the
measured cost, and the toy ``knowledge-neurons`` experiment's published quick rows."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from lmsci.contract import Figure, save_figure
from lmsci.report import markdown_table
from lmsci.report.published import toy_rows_section
from lmsci.runs import RunDir

PAPER = {"suppress": -0.2903, "random_suppress": -0.0147, "amplify": 0.3117}


def _facts(row: pd.Series, col: str) -> np.ndarray:
    v = row.get(f"fact_{col}")
    return np.asarray(json.loads(v), dtype=float) if isinstance(v, str) else np.zeros(0)


def layer_counts(results: pd.DataFrame, n_layers: int) -> np.ndarray:
    """Knowledge neurons per layer over the real arm's samples, ``[n_layers]`` (int)."""
    rows = results[results["arm"] == "real"] if "arm" in results else results
    layers = [l for v in rows.get("neuron_layers", []) if isinstance(v, str) for l in json.loads(v)]
    if not layers:
        return np.zeros(n_layers, int)
    return np.bincount(np.asarray(layers, dtype=int), minlength=n_layers)[:n_layers]


def kn_figures(cfg: Any, results: pd.DataFrame, run: RunDir) -> list[Figure]:
    """Per fact: knowledge neurons' change against random neurons' (suppress, amplify); the layer histogram."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not len(results) or "fact_suppress" not in results:
        return []
    real = results[results["arm"] == "real"].sort_values("seed_index")
    null = results[results["arm"] == "null"].set_index("seed_index")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, col, title in ((axes[0], "suppress", "suppressed (x0)"), (axes[1], "amplify", "amplified (x2)")):
        for _, r in real.iterrows():
            k = r["seed_index"]
            y = 100 * _facts(r, col)
            x = 100 * _facts(null.loc[k], col) if k in null.index else np.full_like(y, np.nan)
            if len(x) == len(y) and len(y):
                ax.scatter(x, y, s=14, alpha=0.7, label=f"sample {int(k)}")
        if col == "suppress":
            ax.scatter([100 * PAPER["random_suppress"]], [100 * PAPER["suppress"]], marker="*", s=140, c="k",
                       zorder=5, label="Dai et al. (BERT-base)")
        else:
            ax.axhline(100 * PAPER["amplify"], color="k", ls=":", lw=1,
                       label="Dai et al. (BERT-base; random not given)")
        ax.axhline(0, color="grey", lw=0.8)
        ax.axvline(0, color="grey", lw=0.8)
        lo, hi = min(ax.get_xlim()[0], ax.get_ylim()[0]), max(ax.get_xlim()[1], ax.get_ylim()[1])
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--")
        ax.set_xlabel("random neurons, same count and layers (null): change %")
        ax.set_ylabel("knowledge neurons (real): change %")
        ax.set_title(f"answer probability, neurons {title}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    figs = [save_figure(fig, run, "per_fact_change.png",
                        "Per fact (facts with >= 1 knowledge neuron): relative change of the answer's probability "
                        "(mean over its three prompts) when its knowledge neurons are edited (y) against as many "
                        "random neurons in the same layers (x); dashed: equal effect; star: Dai et al.'s means.",
                        claims=("suppress-erases", "amplify-strengthens"))]
    L = int(results["n_layers"].iloc[0])
    c = layer_counts(results, L)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(np.arange(1, L + 1), 100 * c / max(1, c.sum()), color="tab:green")
    ax.set_xlabel("layer (1 = bottom)")
    ax.set_ylabel("% of knowledge neurons")
    ax.set_title(f"{cfg.model}: where the knowledge neurons are ({int(c.sum())} over all samples)", fontsize=9)
    fig.tight_layout()
    figs.append(save_figure(fig, run, "neuron_layers.png",
                            "Layers of the knowledge neurons found (all samples; Dai et al. find them mostly in the "
                            "top layers of BERT-base)."))
    return figs


def kn_report(cfg: Any, results: pd.DataFrame, run: RunDir) -> str:
    """Per-sample table, protocol and measured cost, the layer profile, and the toy experiment's rows."""
    if not len(results):
        return ""
    cols = [c for c in ("arm", "seed_index", "n_known", "n_facts", "n_facts_with_neurons", "share", "mean_coarse",
                        "mean_neurons", "p_before", "suppress", "amplify", "other", "specificity",
                        "suppress_per_prompt", "amplify_per_prompt", "sec_per_fact")
            if c in results]
    L = int(results["n_layers"].iloc[0])
    c = layer_counts(results, L)
    top = int(c[L // 2:].sum())
    prof = (f"{int(c.sum())} knowledge neurons over all samples, {top} ({100 * top / max(1, c.sum()):.0f}%) in the "
            f"top half of the {L} layers: " + ", ".join(f"{l + 1}: {int(n)}" for l, n in enumerate(c) if n) + "."
            if c.sum() else "No knowledge neuron was found.")
    cpu = f" ({results['cpu_per_fact'].mean():.1f} s of CPU)" if "cpu_per_fact" in results else ""
    rows = 3 * cfg.ig_steps * L
    return "\n".join([
        "## Per fact sample", "", markdown_table(results, None, cols=cols, float_format=".3f"),
        f"Model `{cfg.model}`: {int(results['n_known'].iloc[0])} of {int(results['n_candidates'].iloc[0])} facts "
        f"known (greedy next token = the object's first token). Integrated gradients with m = {cfg.ig_steps} over "
        f"all {L} x {int(results['d_mlp'].iloc[0])} MLP neurons at the answer position of each of a fact's "
        f"~{results['n_prompts'].mean():.0f} prompts; coarse threshold {cfg.threshold} x the prompt's maximum; "
        f"refined to the neurons in more than p of the fact's prompts, p from {cfg.share_start} in steps of "
        f"{cfg.share_step} to {cfg.min_neurons:g}-{cfg.max_neurons:g} neurons per fact on average (`share`). "
        f"`suppress`/`amplify`: mean relative change of the answer probability with the arm's neurons set to 0 / "
        f"multiplied by {cfg.amplify_factor:g}; `other`: that of {cfg.n_other} known facts of other relations under "
        "the same suppression; `specificity` = `suppress` - `other`. Real arm: the knowledge neurons; null arm: as "
        "many random neurons in the same layers. Per-fact rows: `points/real-facts/facts.csv` (and `__s<k>`).", "",
        f"Measured cost: {results['sec_per_fact'].mean():.1f} s wall{cpu} per attributed fact (~{rows} single-token "
        f"rows of integrated gradients, prompts of ~{results['prompt_tokens'].mean():.1f} tokens with the prefix "
        f"cached), {results['sec_screen'].max():.1f} s to screen the prompts (once per process).", "",
        "## Where the knowledge neurons are", "", prof,
        f"\nPaper (BERT-base, PARAREL): suppression {100 * PAPER['suppress']:.2f}% (random neurons "
        f"{100 * PAPER['random_suppress']:.2f}%), amplification +{100 * PAPER['amplify']:.2f}%.",
        toy_rows_section("knowledge-neurons"),
    ])
