"""Figures and report sections of :mod:`lmsci.experiments.knowledge.causal_tracing_lm`: the (token category x
layer) maps of average indirect effects per arm (Meng et al. 2022, arXiv 2202.05262, Figure 2), one fact's
(token x layer) trace (Figure 1), the measured cost, and the real model beside the toy ``causal-tracing``
experiment's published quick values (``results/quick/claims.csv``, read as data)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lmsci.contract import Figure, save_figure
from lmsci.measure.causal_tracing import CATEGORIES
from lmsci.report import markdown_table
from lmsci.runs import RunDir
from lmsci.stats import across_seeds

TITLES = {"resid": "hidden state", "mlp": "MLP output", "attn": "attention output"}
CMAPS = {"resid": "Purples", "mlp": "Greens", "attn": "Reds"}
# this experiment's claim -> (the toy experiment's claim, what its value is)
TOY = {"mlp-early-site": ("mlp-early-site", "margin"), "attn-late-site": ("attn-late-site", "margin"),
       "rome-efficacy": ("rome-edit", "efficacy")}


def _arr(m: list) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in r] for r in m], dtype=float)


def mean_maps(results: pd.DataFrame, arm: str) -> dict[str, np.ndarray]:
    """kind -> ``[len(CATEGORIES), n_layers]`` AIE averaged over the arm's seeds (NaN where never restored)."""
    maps = [json.loads(a) for a in results.loc[results["arm"] == arm, "aie"]]
    out = {}
    for kind in (maps[0] if maps else {}):
        stack = np.array([_arr(m[kind]) for m in maps])
        cnt = np.isfinite(stack).sum(0)
        out[kind] = np.where(cnt > 0, np.nansum(stack, 0) / np.maximum(cnt, 1), np.nan)
    return out


def lm_figures(cfg: Any, results: pd.DataFrame, run: RunDir) -> list[Figure]:
    """The AIE maps of both arms (for the two tracing claims) and one fact's trace."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not len(results) or "aie" not in results:
        return []
    arms = [a for a in ("real", "null") if (results["arm"] == a).any()]
    kinds = list(mean_maps(results, arms[0]))
    fig, axes = plt.subplots(len(arms), len(kinds), figsize=(4.4 * len(kinds), 3.2 * len(arms)), squeeze=False)
    for i, arm in enumerate(arms):
        maps = mean_maps(results, arm)
        for j, kind in enumerate(kinds):
            ax = axes[i][j]
            im = ax.imshow(np.ma.masked_invalid(maps[kind]), cmap=CMAPS[kind], aspect="auto")
            ax.set_yticks(range(len(CATEGORIES)), CATEGORIES if arm == "real" else
                          [c.replace("subject", "decoy") for c in CATEGORIES], fontsize=7)
            ax.set_xlabel("layer (centre of the restored window)")
            ax.set_title(f"{arm} arm: {TITLES[kind]}", fontsize=9)
            plt.colorbar(im, ax=ax, fraction=0.046, label="AIE (probability)")
    figs = [save_figure(fig, run, "aie_maps.png",
                        "Average indirect effect (P(o) restored minus corrupted) by token category and layer, mean over "
                        "fact samples; top: the subject corrupted (real arm), bottom: a decoy span corrupted (null "
                        "arm; categories relative to the decoy). Blank cells were not restored (quick restores key "
                        "tokens at every third layer).", claims=("mlp-early-site", "attn-late-site"))]
    row = results[results["arm"] == arms[0]].iloc[0]
    ex = json.loads(row["example_trace"])
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.4 * len(kinds), 3.6), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        im = ax.imshow(np.ma.masked_invalid(_arr(ex[kind])), cmap=CMAPS[kind], aspect="auto", vmin=ex["low"])
        ax.set_yticks(range(len(ex["tokens"])), [t + ("*" if "subject" in c else "") for t, c in
                                                 zip(ex["tokens"], ex["categories"])], fontsize=7)
        ax.set_xlabel("layer")
        ax.set_title(f"{TITLES[kind]}: P(o) restored", fontsize=9)
        plt.colorbar(im, ax=ax, fraction=0.046)
    figs.append(save_figure(fig, run, "example_trace.png",
                            f"One fact's causal trace ({arms[0]} arm, first sample's first fact): the object's "
                            "probability with one state (window) restored per (token, layer); * marks the corrupted "
                            "tokens; blank: not restored."))
    return figs


def toy_values(repo: Path | None = None) -> pd.DataFrame:
    """The toy ``causal-tracing`` experiment's rows of the published quick table (empty when not found)."""
    p = (repo or Path(__file__).resolve().parents[4]) / "results" / "quick" / "claims.csv"
    if not p.is_file():
        return pd.DataFrame()
    df = pd.read_csv(p)
    return df[df["experiment"] == "causal-tracing"]


def _fmt(st: Any) -> str:
    return f"{st.mean:.4g} [{st.ci[0]:.4g}, {st.ci[1]:.4g}]" if st.n else "-"


def comparison(results: pd.DataFrame, toy: pd.DataFrame, rules: dict[str, float]) -> str:
    """This run's real-arm values beside the toy's published quick values, with where they disagree."""
    if toy.empty:
        return "The toy experiment's published quick values (`results/quick/claims.csv`) were not found.\n"
    real = results[results["arm"] == "real"]
    lines = ["| claim | real model: real arm mean [95% CI] | null arm mean [95% CI] | toy `causal-tracing` (quick, "
             "master seeds) | toy outcome | agree? |", "|---|---|---|---|---|---|"]
    col = {"mlp-early-site": "mlp_margin", "attn-late-site": "attn_margin", "rome-efficacy": "efficacy"}
    for cid, (tid, what) in TOY.items():
        st = across_seeds(pd.to_numeric(real[col[cid]], errors="coerce").dropna())
        nl = across_seeds(pd.to_numeric(results.loc[results["arm"] == "null", col[cid]], errors="coerce").dropna())
        t = toy[toy["claim"] == tid]
        if t.empty:
            continue
        t = t.iloc[0]
        ours = bool(st.n >= 2 and np.isfinite(st.ci[0]) and st.ci[0] > rules[cid])
        null = bool(nl.n >= 2 and np.isfinite(nl.ci[0]) and nl.ci[0] > rules[cid])
        toy_seeds = [o.strip() == "reproduced" for o in str(t["seed_outcomes"]).split(";")]
        same = sum(m == ours for m in toy_seeds)
        agree = "yes" if same == len(toy_seeds) else ("**no**" if same == 0 else f"partly ({same} of {len(toy_seeds)} "
                                                                               "toy master seeds)")
        lines.append(f"| {cid} ({what}) | {_fmt(st)} | {_fmt(nl)} | {t['ours']} | {t['seed_outcomes']} | "
                     f"{agree}: the real arm {'meets' if ours else 'does not meet'} the rule, the null arm "
                     f"{'meets it too' if null else 'does not'} |")
    return "\n".join(lines) + ("\n\nThe toy's value is its own statistic (`rome-edit`'s is the mean efficacy) at its "
                               "published quick preset; 'agree' compares whether each meets its rule.\n")


def lm_report(cfg: Any, results: pd.DataFrame, run: RunDir, early: list[int], late: list[int],
              rules: dict[str, float]) -> str:
    """Per-seed table, measured cost, and the comparison with the toy experiment (``rules``: claim id -> the
    threshold its 95% CI lower end must exceed)."""
    if not len(results):
        return ""
    cols = [c for c in ("arm", "seed_index", "n_known", "n_traced", "p_clean", "p_corrupt", "total_effect",
                        "mlp_margin", "attn_margin", "mlp_peak_layer", "mlp_peak_aie", "attn_peak_layer", "edit_layer",
                        "efficacy", "paraphrase", "specificity", "specificity_before", "edit_top1", "v_nll_end",
                        "sec_per_fact", "sec_per_edit") if c in results]
    rows_per_fact = len(cfg.kinds) * cfg.samples * int(results["n_centres"].iloc[0]) * (4 if cfg.tokens == "key" else
                                                                                       float(results["prompt_tokens"].mean()))
    cpu = (f" ({results['cpu_per_fact'].mean():.1f} s of CPU)" if "cpu_per_fact" in results else "")
    cost = (f"Measured cost: {results['sec_per_fact'].mean():.1f} s wall{cpu} per traced fact (mean over points; "
            f"~{rows_per_fact:.0f} restored forwards of ~{results['prompt_tokens'].mean():.1f} tokens each), "
            f"{results['sec_screen'].max():.1f} s to screen the {int(results['n_candidates'].iloc[0])} prompts "
            f"(once per process), {results['sec_per_edit'].mean():.1f} s per ROME edit." if "sec_per_edit" in results
            else "")
    n_known = int(results["n_known"].iloc[0])
    return "\n".join([
        "## Per fact sample", "", markdown_table(results, None, cols=cols, float_format=".3f"),
        f"Model `{cfg.model}`: {n_known} of {int(results['n_candidates'].iloc[0])} facts known (greedy next token = "
        f"the object's first token). Noise {cfg.noise_factor} x the std of the subject embeddings; MLP/attention "
        f"window {cfg.window} layers; restored tokens: {cfg.tokens}; window centres every {cfg.layer_stride} "
        f"layer(s); {cfg.samples} noise draws. Early-middle band: layers {early[0]}-{early[-1]}; late band: layers "
        f"{late[0]}-{late[-1]}. Margins: the peak at the claimed site minus the largest AIE elsewhere (> 0: the "
        "map's maximum lies there).", "", cost, "",
        "## The real model beside the toy experiment", "",
        comparison(results, toy_values(), rules),
    ])
