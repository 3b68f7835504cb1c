"""The published quick rows of an experiment (``results/quick/claims.csv``), for reports that show a toy
experiment's verdicts beside a real model's (issue 45: "show real and toy side by side in each report")."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

COLUMNS = ("claim", "kind", "ours", "null_arm", "outcome", "seeds", "master_seeds", "commit", "date")


def published_quick_rows(experiment: str) -> pd.DataFrame | None:
    """The rows of ``experiment`` in ``results/quick/claims.csv`` (``$LMSCI_RESULTS`` overrides the folder; by
    default ``results/`` of the checkout lmsci runs from, else of the working directory), or None without the file."""
    env = os.environ.get("LMSCI_RESULTS")
    roots = [Path(env)] if env else [Path(__file__).resolve().parents[3] / "results", Path("results")]
    for root in roots:
        f = root / "quick" / "claims.csv"
        if f.is_file():
            df = pd.read_csv(f)
            return df[df["experiment"] == experiment][[c for c in COLUMNS if c in df.columns]]
    return None


def toy_rows_section(experiment: str) -> str:
    """A markdown section with ``experiment``'s published quick rows (a line saying so when there are none)."""
    from lmsci.report import markdown_table

    df = published_quick_rows(experiment)
    title = f"\n## The toy experiment `{experiment}`: its published quick rows (results/quick/claims.csv)\n\n"
    if df is None:
        return title + "results/quick/claims.csv not found.\n"
    return title + (markdown_table(df) if len(df) else "(no published rows)\n")
