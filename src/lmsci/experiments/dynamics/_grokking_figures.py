"""Figures of :mod:`lmsci.experiments.dynamics.grokking`, drawn from the curves and progress measures its points
saved (``points/<id>/curve.csv``, ``points/<id>/measures.csv``).

Source: Nanda, Chan, Lieberum, Smith, Steinhardt, "Progress measures for grokking via mechanistic
interpretability", arXiv 2301.05217, Fig. 3 (embedding spectrum) and Fig. 7 (progress measures and phases).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from lmsci.contract import Figure, save_figure
from lmsci.runs import RunDir


def _csv(run: RunDir, pid: str, name: str) -> pd.DataFrame | None:
    """A point's artifact table ``points/<pid>/<name>``, or None when the point did not write it."""
    path = run.path / "points" / pid / name
    return pd.read_csv(path) if path.exists() else None


def grokking_figures(cfg: Any, results: pd.DataFrame, run: RunDir, top_k: int = 6) -> list[Figure]:
    """The figures of ``grokking``: seed 0's losses, accuracies and top-``top_k`` Fourier share with the detected
    phases (cf. Nanda et al., arXiv 2301.05217, Fig. 7), its final embedding spectrum (Fig. 3), and every seed's
    accuracy curves with the wd = 0 control's; ``cfg`` is the run's ``GrokkingConfig``."""
    import matplotlib.pyplot as plt

    figs: list[Figure] = []
    res = results if "kind" in results else results.assign(kind="grok")
    main = res[res["kind"] == "grok"]
    if len(main):
        r0 = main.sort_values("seed_index").iloc[0] if "seed_index" in main else main.iloc[0]
        c = _csv(run, r0["point"], "curve.csv")
        m = _csv(run, r0["point"], "measures.csv")
        if c is not None and m is not None:
            fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
            s = c["step"].clip(lower=1)
            ax = axes[0]
            ax.plot(s, c["train_loss"], label="train loss")
            ax.plot(s, c["test_loss"], label="test loss")
            ms = m["step"].clip(lower=1)
            ax.plot(ms, m["restricted_loss"], "o-", ms=2, label="restricted loss (test)")
            ax.plot(ms, m["excluded_loss"], "s-", ms=2, label="excluded loss (train)")
            ax.set_yscale("log")
            ax.set_ylabel("cross-entropy (nats)")
            ax2 = axes[1]
            ax2.plot(s, c["train_acc"], label="train accuracy")
            ax2.plot(s, c["test_acc"], label="test accuracy")
            ax2.set_ylabel("accuracy")
            ax3 = axes[2]
            ax3.plot(ms, m[f"top{top_k}_share"], label=f"top-{top_k} Fourier share of W_E")
            ax3b = ax3.twinx()
            ax3b.plot(s, c["weight_norm"], color="C3", label="weight norm")
            ax3b.set_ylabel("total weight norm", color="C3")
            ax3.set_ylabel("share of ||W_E||^2")
            for a in axes:
                a.set_xscale("log")
                a.set_xlabel("step (log)")
                t_mem, t_clean, t_gen = (r0.get("t_train"), r0.get("t_clean"), r0.get("t_test"))
                ends = [v for v in (t_mem, t_clean, t_gen) if v is not None and not pd.isna(v)]
                bounds = [1] + [max(1, float(v)) for v in ends]
                for (lo, hi), col, lab in zip(zip(bounds, bounds[1:]), ("C0", "C1", "C2"),
                                              ("memorisation", "circuit formation", "clean-up")):
                    a.axvspan(lo, hi, color=col, alpha=0.08, label=lab if a is axes[1] else None)
                a.grid(True, alpha=0.3)
            axes[0].legend(fontsize=7)
            axes[1].legend(fontsize=7)
            axes[2].legend(fontsize=7, loc="center left")
            fig.suptitle(f"(x + y) mod {cfg.p}, fraction {cfg.train_frac}, wd {cfg.weight_decay} (seed 0); "
                         f"key frequencies {r0.get('key_freqs', '')}", fontsize=10)
            figs.append(save_figure(fig, run, "progress_measures.png",
                                    "Losses (train, test, restricted, excluded), accuracies and the embedding's "
                                    "top-6 Fourier share with the weight norm on a log-step axis; shaded: the "
                                    "three phases detected by the registered rule (cf. Nanda et al. Fig. 7)",
                                    claims=("restricted-before-test",)))
            sh = m[[col for col in m if col.startswith("share_k")]].iloc[-1].values
            fig, ax = plt.subplots(figsize=(7, 3.2))
            ax.bar(np.arange(1, len(sh) + 1), sh)
            ax.set_xlabel("frequency k")
            ax.set_ylabel("share of ||W_E||^2")
            ax.set_title(f"embedding Fourier spectrum at step {int(m['step'].iloc[-1])} (seed 0)", fontsize=10)
            figs.append(save_figure(fig, run, "fourier_spectrum.png",
                                    "Share of the embedding's squared norm per Fourier frequency at the end (cf. "
                                    "Nanda et al. Fig. 3)", claims=("fourier-sparse",)))
    # all seeds + control accuracy
    fig, ax = plt.subplots(figsize=(7, 4))
    any_curve = False
    for _, r in res[res["kind"].isin(["grok", "control", "dense"])].iterrows():
        c = _csv(run, r["point"], "curve.csv")
        if c is None:
            continue
        any_curve = True
        col = {"grok": "C0", "control": "C3"}.get(r["kind"], "C2")
        tag = f"frac={r['train_frac']:g} wd={r['weight_decay']:g} seed {int(r.get('seed_index', 0) or 0)}"
        ax.plot(c["step"].clip(lower=1), c["test_acc"], color=col, alpha=0.8, label="test " + tag)
        ax.plot(c["step"].clip(lower=1), c["train_acc"], color=col, ls=":", alpha=0.8, label="train " + tag)
    if any_curve:
        ax.set_xscale("log")
        ax.set_xlabel("step (log)")
        ax.set_ylabel("accuracy")
        ax.legend(fontsize=6)
        ax.grid(True, alpha=0.3)
        figs.append(save_figure(fig, run, "accuracy_all_seeds.png",
                                "Train (dotted) and test accuracy of every seed with weight decay, of the wd = 0 "
                                "control and of the dense arm (training fraction 0.9: delay's null arm)",
                                claims=("delay", "no-wd-no-grok")))
    else:
        plt.close(fig)
    return figs
