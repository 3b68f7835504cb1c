"""Figures and report sections of :mod:`lmsci.experiments.steering.lm_steer` (the Shakespeare GPTs; the paper
preset's detoxification ones are :mod:`lmsci.experiments.steering.lm_steer_detox`'s).

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798, Table 5
(the continuous trade-off), sec. 5 and App. G (keyword highlighting, SVD probe).
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from lmsci.experiments.base import Figure, save_figure
from lmsci.claims.engine import arm_rows
from lmsci.experiments.steering import lm_steer_detox
from lmsci.experiments.steering._lm_steer_verdicts import ATTRS
from lmsci.experiments.steering.lm_steer_detox import mean_curve
from lmsci.runs import RunDir


def figures(cfg: Any, results: pd.DataFrame, run: RunDir) -> list[Figure]:
    """The continuous-control trade-off: per attribute, the score (left axis, each seed of W faint, their mean
    bold, the unsteered level dotted) and the fluency GPT's perplexity (right axis) against the steer value in units
    of eps0; the paper preset's detoxification curve instead (:func:`lm_steer_detox.figures`)."""
    import matplotlib.pyplot as plt

    if "curves" not in results:
        return lm_steer_detox.figures(results, run)
    results = arm_rows(results, "real")  # the trained steers (the null arm's random W is in the verdicts)
    curves = [json.loads(c) for c in results["curves"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, a in zip(axes, ATTRS):
        mc = mean_curve([c[a] for c in curves])
        ax.plot(mc["s"], mc[a], "o-", color="C0", label="steered (dummy steer at 1)")
        for cv in curves:  # each seed of W, faint
            ax.plot([c["s"] for c in cv[a]], [c[a] for c in cv[a]], "-", color="C0", alpha=0.25, lw=0.8)
        if f"none__{a}" in results:
            ax.axhline(float(results[f"none__{a}"].astype(float).mean()), ls=":", color="k", label="no steer")
        ax.legend(fontsize=8, loc="upper left")
        ax.set_xlabel("steer value (units of eps0)")
        ax.set_ylabel("mean VADER compound" if a == "sentiment" else "mean classifier P(comedy)", color="C0")
        ax2 = ax.twinx()
        ax2.plot(mc["s"], mc["ppl"], "s--", color="C3")
        ax2.set_ylabel("perplexity under the fluency GPT", color="C3")
        ax.set_title(f"{a} steer (mean of {len(curves)} seed{'s' if len(curves) > 1 else ''} of W)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return [save_figure(fig, run, "tradeoff.png", "Attribute score (left axis) and fluency perplexity (right axis) "
                        "against the steer value: the continuous control trade-off", dpi=110)]

def report_sections(cfg: Any, results: pd.DataFrame, run: RunDir) -> str:
    """The report's measurements of seed 0 of W (NLL in nats/token, scores, perplexities, Dist-n), the baselines'
    sweep, highlighting and probe examples and sample continuations; the detoxification table at the paper preset."""
    if "curves" not in results:
        return lm_steer_detox.report_section(results, run)
    null = arm_rows(results, "null")
    results = arm_rows(results, "real")
    r = results.sort_values("seed_index").iloc[0] if "seed_index" in results else results.iloc[0]
    r0 = null[null["seed_index"] == r["seed_index"]].iloc[0] if len(null) and "seed_index" in null else None
    lines = ["## Measurements (seed 0 of W)\n", "| quantity | value |", "|---|---|",
             f"| validation NLL A / B / fluency GPT (nats/token) | {r['val_nll_A']:.3f} / {r['val_nll_B']:.3f} / "
             f"{r['val_nll_fluency']:.3f} |",
             f"| bigram / unigram NLL | {r['bigram_nll']:.3f} / {r['unigram_nll']:.3f} |",
             f"| genre classifier accuracy on unseen plays | {r['clf_acc']:.3f} (Wilson lower {r['clf_acc_lo']:.3f}, "
             f"{int(r['clf_n'])} lines) |"]
    for key, label in (("none", "no steer"), (f"sentiment_{cfg.steer_value:+g}", "sentiment +5"),
                       (f"sentiment_{-cfg.steer_value:+g}", "sentiment -5"), (f"genre_{cfg.steer_value:+g}", "genre +5"),
                       (f"genre_{-cfg.steer_value:+g}", "genre -5"), ("comp_+", "sentiment+genre (+5,+5)"),
                       ("comp_-", "sentiment+genre (-5,-5)")):
        if f"{key}__sentiment" in r:
            lines.append(f"| {label}: sentiment / P(comedy) / ppl / dist-1,2,3 | {r[f'{key}__sentiment']:.3f} / "
                         f"{r[f'{key}__genre']:.3f} / {r[f'{key}__ppl']:.1f} / {r[f'{key}__dist_1']:.2f}, "
                         f"{r[f'{key}__dist_2']:.2f}, {r[f'{key}__dist_3']:.2f} |")
    if r0 is not None and "sentiment_gain_pos" in r0:
        lines.append("| null arm (random W of the same norm): gains sentiment +/-, genre +/- | "
                     + " / ".join(f"{float(r0[f'{a}_gain_{d}']):.3f}" for a in ATTRS for d in ("pos", "neg"))
                     + " |")
        lines.append(f"| highlighting / probe enrichment: steer vs null arm | {float(r['highlight_enrichment']):.2f}"
                     f" vs {float(r0['highlight_enrichment']):.2f} / {float(r['probe_enrichment']):.2f} vs "
                     f"{float(r0['probe_enrichment']):.2f} |")
    lines.append(f"\nSteer plays: {str(r['steer_plays']).replace(';', ', ')}. Scorer plays (classifier, prompts, "
                 f"highlighting): {str(r['scorer_plays']).replace(';', ', ')}.\n")
    if "baselines" in r:
        b = json.loads(r["baselines"])
        lines += ["## LM-Steer vs baselines (sentiment, seed 0)\n", "| method | steer value | ppl | sentiment |",
                  "|---|---|---|---|", f"| none | - | {b['none']['ppl']:.1f} | {b['none']['sentiment']:.3f} |"]
        for k, v in b.items():
            if k != "none":
                lines += [f"| {k} | {e['s']:g} | {e['ppl']:.1f} | {e['sentiment']:.3f} |" for e in v]
        lines.append("")
    p = run.path / "points" / str(r["point"]) / "interpret.json"
    if p.exists():
        it = json.loads(p.read_text())
        lines.append("## Keyword highlighting (sentiment steer, held-out lines; highlighted spans in bold)\n")
        for e in it["highlight"]:
            t = e["text"]
            for s in e["spans"]:
                if s.strip():
                    t = t.replace(s, f"**{s.strip()}** " if s.endswith(" ") else f"**{s.strip()}**", 1)
            lines.append(f"- ({'+' if e['label'] > 0 else '-'}) {t}")
        lines.append("\n## SVD probe (sentiment W): top / bottom tokens per singular direction\n")
        for i, d in enumerate(it["probe"]):
            lines.append(f"- direction {i + 1}: top `{' '.join(d['top'])}` / bottom `{' '.join(d['bottom'])}`")
        lines.append("")
    g = run.path / "points" / str(r["point"]) / "generations.json"
    if g.exists():
        gen = json.loads(g.read_text())
        lines.append("## Sample continuations (first prompt)\n")
        for key in ("none", f"sentiment_{cfg.steer_value:+g}", f"sentiment_{-cfg.steer_value:+g}",
                    f"genre_{cfg.steer_value:+g}", f"genre_{-cfg.steer_value:+g}"):
            if key in gen:
                lines.append(f"- {key}: " + " | ".join(repr(t) for t in gen[key][:3]))
    return "\n".join(lines)
