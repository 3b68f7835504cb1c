"""The report pieces of the SAE feature-recovery experiments (``sae-ground-truth``, ``sae-bios``): a heatmap of the
best-latent F1 per true feature, dictionary and arm, and the results table.

The rows are those of :func:`lmsci.measure.sae_dictionaries.dictionary_columns` (columns ``f1_<dict>__<feature>``,
``share_<dict>``, ``mean_f1_<dict>``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from lmsci.measure.sae_dictionaries import DICTS

TABLE_TAIL = ("n_features", "f1_floor", *[f"{m}_{d}" for m in ("share", "mean_f1") for d in DICTS], "sae_minus_pca",
              "l0", "fvu", "dead_fraction", "nll_clean", "nll_increase", "loss_recovered", "cpu_s", "wall_s")
"""The results table's columns after the point, arm, seed and the experiment's own lead columns."""


def ok_rows(results: pd.DataFrame) -> pd.DataFrame:
    """The rows whose ``status`` is ``ok`` (all rows when there is no ``status`` column)."""
    return results[results["status"] == "ok"] if "status" in results else results


def recovery_heatmap(ok: pd.DataFrame, features: Sequence[str], *, label: str, title: str, xlabel: str,
                     rotation: float, width: float, dicts: Sequence[str] = DICTS):
    """A heatmap ``[arms x dicts, features]`` of the mean over seeds of ``f1_<dict>__<feature>``: a row per arm
    (``real`` "trained", ``null`` "random init") and dictionary, a column per feature (x labels rotated by
    ``rotation`` degrees; figure ``width x 3.6`` inches). ``title`` is followed by `` at <hook>`` (the first row's
    ``hook``). Returns the matplotlib Figure (:func:`lmsci.report.figures.head_heatmap`, annotated)."""
    from lmsci.report.figures import head_heatmap

    rows, labels = [], []
    for arm in ("real", "null"):
        sub = ok[ok["arm"] == arm]
        if sub.empty:
            continue
        for d in dicts:
            rows.append([float(sub[f"f1_{d}__{n}"].mean()) for n in features])
            labels.append(f"{'trained' if arm == 'real' else 'random init'}: {d}")
    fig = head_heatmap(np.array(rows), label=label, title=f"{title} at {ok['hook'].iloc[0]}", annotate=True)
    ax = fig.axes[0]
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_xticks(range(len(features)), list(features), rotation=rotation, fontsize=7)
    ax.set(xlabel=xlabel, ylabel="")
    fig.set_size_inches(width, 3.6)
    fig.tight_layout()
    return fig


def results_table(results: pd.DataFrame, lead: Sequence[str]) -> str:
    """A markdown table of ``point``, ``arm``, ``seed_index``, the ``lead`` columns and :data:`TABLE_TAIL` (those
    present)."""
    from lmsci.report import markdown_table

    cols = ["point", "arm", "seed_index", *lead, *TABLE_TAIL]
    return markdown_table(results[[c for c in cols if c in results]])
