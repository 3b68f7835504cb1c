"""Figure and tables of ``passkey-lm`` (family-private): accuracy by method and key distance, real vs null arm.

Source: Han et al., "LM-Infinite", NAACL 2024, arXiv 2308.16137, Sec. 5.3 / Table 2.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

METHODS = ("vanilla", "lm_infinite", "lm_infinite_topk")
COLORS = {"vanilla": "tab:gray", "lm_infinite": "tab:blue", "lm_infinite_topk": "tab:red"}


def per_prompt(results: pd.DataFrame) -> pd.DataFrame:
    """One row per prompt: ``arm``, ``context``, ``seed_index``, ``distance`` and one 0/1 column per method."""
    rows = []
    for _, r in results.iterrows():
        if not isinstance(r.get("distances"), str) or not isinstance(r.get("correct"), str):
            continue
        dist, ok = json.loads(r["distances"]), json.loads(r["correct"])
        for i, d in enumerate(dist):
            rows.append({"arm": r.get("arm"), "context": r.get("context"), "seed_index": r.get("seed_index", 0),
                         "distance": d, **{m: ok[m][i] for m in METHODS if m in ok}})
    return pd.DataFrame(rows)


def accuracy_figure(cfg: Any, results: pd.DataFrame) -> Any:
    """Left: accuracy by method vs key distance (bins of ``n_local / 2`` tokens; filled markers: real arm, open:
    null arm; curves offset by +-0.015 so equal ones stay visible). Right: per-sample accuracy by method and arm. None when there are no prompt rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pp = per_prompt(results)
    if pp.empty:
        return None
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    width = max(cfg.n_local // 2, 1)
    pp = pp.assign(bin=(pp["distance"] // width) * width + width / 2)
    for arm, fill in (("real", True), ("null", False)):
        g = pp[pp["arm"] == arm]
        if g.empty:
            continue
        acc = g.groupby("bin")[[m for m in METHODS if m in g]].mean()
        for j, m in enumerate(acc.columns):  # a small vertical offset per method keeps equal curves visible
            ax.plot(acc.index, acc[m] + (j - 1) * 0.015, marker="o", color=COLORS[m], ls="-" if fill else "--",
                    mfc=COLORS[m] if fill else "none", label=f"{m} ({arm})")
    ax.axvline(cfg.n_local, color="k", ls=":", lw=0.8)
    ax.set_xlabel("key distance (tokens from the key sentence to the prompt's end)")
    ax.set_ylabel("accuracy (all digits)")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=6)
    ax.set_title("accuracy by key distance")
    x = 0
    ticks = []
    for arm in ("real", "null"):
        for m in METHODS:
            col = f"acc_{m}"
            v = results.loc[results.get("arm") == arm].groupby("seed_index" if "seed_index" in results else "arm")[
                col].mean() if col in results else pd.Series(dtype=float)
            if len(v):
                ax2.scatter(np.full(len(v), x), v, color=COLORS[m], s=18)
                ax2.hlines(v.mean(), x - 0.3, x + 0.3, color=COLORS[m])
            ticks.append(f"{m}\n({arm})")
            x += 1
    ax2.set_xticks(range(len(ticks)), ticks, fontsize=6)
    ax2.set_ylim(-0.05, 1.05)
    ax2.set_ylabel("accuracy per prompt sample")
    ax2.set_title("per sample (line: mean)")
    fig.tight_layout()
    return fig


def accuracy_table(results: pd.DataFrame) -> str:
    """Markdown: mean accuracy by arm, context and method (over samples), the gain, and a few decoded answers."""
    if results.empty or "acc_vanilla" not in results:
        return ""
    lines = ["## Accuracy (all digits) by arm, context and method", "",
             "| arm | context | samples | vanilla | lm_infinite | lm_infinite_topk | gain (topk - lm_infinite) |",
             "|---|---|---|---|---|---|---|"]
    for (arm, n), g in results.groupby(["arm", "context"]):
        lines.append(f"| {arm} | {int(n)} | {len(g)} | " + " | ".join(f"{g[f'acc_{m}'].mean():.2f}" for m in METHODS)
                     + f" | {g['gain'].mean():+.2f} |")
    ex = results[results["arm"] == "real"].head(1)
    if len(ex) and isinstance(ex["answers"].iloc[0], str):
        ans = json.loads(ex["answers"].iloc[0])
        lines += ["", "Decoded answers (first prompts of the first real-arm row): "
                  + "; ".join(f"{m}: {[a for a in ans.get(m, [])]!r}" for m in METHODS)]
    return "\n".join(lines) + "\n"
