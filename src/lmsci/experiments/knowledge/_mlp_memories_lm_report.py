"""Figures and report sections of :mod:`lmsci.experiments.knowledge.mlp_memories_lm` (read only the results
table, so ``lmsci report RUN_DIR`` re-renders them)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from lmsci.contract import Figure, save_figure
from lmsci.report import markdown_table
from lmsci.report.published import toy_rows_section
from lmsci.runs import RunDir

_LINES = (("real", "agree", "real: own key", "C0", "o-"),
          ("real", "shuffled", "real: exact shuffled-neuron baseline", "C7", ":"),
          ("shuffled", "agree", "shuffled arm: another key of the layer", "C3", "s--"),
          ("random_init", "agree", "random_init arm: own key", "C2", "^-."))


def _layer_matrix(rows: pd.DataFrame, prefix: str, L: int) -> np.ndarray:
    """``[n_rows, L]`` of the columns ``{prefix}_L{l}``."""
    return rows[[f"{prefix}_L{l}" for l in range(L)]].astype(float).to_numpy()


def lm_figures(cfg: Any, results: pd.DataFrame, run: RunDir) -> list[Figure]:
    """Agreement by layer (%) for every arm, with the real arm's exact shuffled baseline: mean over samples and a
    min-max band; the upper half of the layers shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not len(results) or "n_layers" not in results or "arm" not in results:
        return []
    ok = results[results.get("status", pd.Series("ok", index=results.index)).fillna("ok") == "ok"]
    if not len(ok):
        return []
    L = int(ok["n_layers"].max())
    x = np.arange(L)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.axvspan(L // 2 - 0.5, L - 0.5, color="0.93", zorder=0, label="upper half")
    for arm, prefix, label, color, style in _LINES:
        sub = ok[ok["arm"] == arm]
        if not len(sub) or f"{prefix}_L0" not in sub:
            continue
        m = 100 * _layer_matrix(sub, prefix, L)
        ax.plot(x, m.mean(0), style, color=color, ms=4, label=f"{label} ({len(sub)} samples)")
        if len(m) > 1:
            ax.fill_between(x, m.min(0), m.max(0), color=color, alpha=0.15)
    ax.set_xticks(x[:: max(1, L // 15)], [str(l + 1) for l in x[:: max(1, L // 15)]])
    ax.set_xlabel("layer")
    ax.set_ylabel("agreement (% of sampled neurons)")
    ax.set_title(f"{cfg.model}: value top token = next token of the key's top trigger prefix", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return [save_figure(fig, run, "agreement_by_layer.png",
                        "Fraction of sampled MLP neurons whose value's top token (v E) is the next token of the top-1 "
                        "trigger prefix of the key paired with it, per layer: the pretrained model with its own keys "
                        "(real), its exact shuffled-neuron baseline, the shuffled arm (a random other key of the "
                        "layer) and the random-init arm; mean over samples, band min-max. Geva et al. Fig. 4: ~0 in "
                        "layers 1-10 of 16, ~3.5% in the upper ones.",
                        claims=("rises-with-depth", "upper-exceeds-shuffled"))]


def _examples_table(results: pd.DataFrame) -> str:
    real = results[results["arm"] == "real"] if "examples" in results else results.iloc[:0]
    if not len(real):
        return ""
    lines = ["Examples (the top layer's first sampled neurons, real arm, first sample): the end of the top-1 "
             "trigger prefix, its next token and the value's top tokens.", "",
             "| layer | neuron | prefix (last 8 tokens) | next | value's top 5 | coefficient |", "|---|---|---|---|---|---|"]
    for e in json.loads(real.iloc[0]["examples"]):
        cell = (lambda s: repr(s).replace("|", "\\|"))
        lines.append(f"| {e['layer'] + 1} | {e['neuron']} | {cell(e['prefix_end'])} | {cell(e['next'])} | "
                     f"{', '.join(cell(t) for t in e['value_top'])} | {e['coefficient']:.3g} |")
    return "\n".join(lines) + "\n"


def lm_report(cfg: Any, results: pd.DataFrame, run: RunDir, nll_max: float) -> str:
    """Protocol, per-row summaries, per-layer agreement, examples, cost, and the toy ``mlp-memories``'s published
    quick rows."""
    toy = toy_rows_section("mlp-memories")
    if not len(results) or "n_layers" not in results:
        return toy
    L = int(results["n_layers"].max())
    cols = [c for c in ("point", "arm", "weights", "pairing", "n_neurons", "n_positions", "nll", "agree_lower",
                        "agree_upper", "shuffled_upper", "depth_gap", "upper_minus_shuffled") if c in results]
    layer_cols = [c for l in range(L) for c in (f"agree_L{l}", f"shuffled_L{l}") if c in results]
    cost = [c for c in ("point", "sec_search", "tokens_per_s", "sec_values") if c in results]
    return "\n".join([
        "## Protocol", "",
        f"Model `{cfg.model}` ({L} layers, d_mlp {int(results['d_mlp'].max())}, {int(results['n_neurons'].max())} "
        f"neurons sampled per layer); keys: top-{cfg.top_k} trigger prefixes per neuron (coefficient "
        "`blocks.{l}.mlp.post` = act(gate) * up at the prefix's last token) over each sample's "
        f"{cfg.n_windows} Shakespeare windows of {cfg.seq_len} tokens; values: `v_i E` (final norm: {cfg.norm}). "
        f"Upper half: layers {L // 2 + 1}-{L} (1-based). Gate `reads-text`: NLL <= {nll_max} nats/token in "
        "every sample.", "",
        markdown_table(results, None, cols=cols, float_format=".4f"),
        "Agreement and exact shuffled baseline per layer (0-based):", "",
        markdown_table(results, None, cols=["point"] + layer_cols, float_format=".4f"),
        _examples_table(results),
        "Cost per row (wall seconds of the key search's forward passes, tokens/s, seconds of the value projection):",
        "", markdown_table(results, None, cols=cost, float_format=".1f"), toy])
