"""The knowledge experiments' shared gates and per-seed statistics (front: :mod:`.common`).

Gate: ``memorised`` (biography recall >= 0.9 of the people tested, every model; the experiments' ``qa-learned``
gates are statistics of their own claims now), the protocol of Allen-Zhu & Li, Physics of Language Models Part 3.1, arXiv
2309.14316, Sections 3-4 (issue 11). Per-seed values are ``{seed_index: value}``; intervals across seeds come from
:func:`lmsci.stats.across_seeds`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from lmsci.claims import Gate
from lmsci.stats import across_seeds

# -- verdicts: per-seed statistics and the shared gate -------------------------------------------------
MEMORISED = Gate("memorised", "biography recall (exact match of each of the 6 attribute values given the "
                              "biography prefix, on the pretrained model) of the people tested >= 0.9 in every "
                              "model trained (every condition, every seed)")
QA_LEARNED_MIN = 0.5
RECALL_MIN = 0.9


def seed_values(results: pd.DataFrame, col: str, **where: Any) -> dict[int, float]:
    """``{seed_index: value of col}`` for the rows matching ``where`` (column == value), one per seed
    (rows of one seed averaged; a table without ``seed_index`` is seed 0)."""
    m = results
    for k, v in where.items():
        m = m[m[k] == v]
    if col not in m or not len(m):
        return {}
    if "seed_index" not in m:
        return {0: float(m[col].mean())}
    return {int(s): float(g[col].mean()) for s, g in m.groupby("seed_index")}


def paired(*per_seed: dict[int, float]) -> list[int]:
    """The seed indices present in every one of ``per_seed`` (sorted)."""
    common = set(per_seed[0]) if per_seed else set()
    for d in per_seed[1:]:
        common &= set(d)
    return sorted(common)


def recall_gate(*per_seed: dict[int, float]) -> tuple[float | None, bool | None]:
    """The ``memorised`` gate: the lowest recall over every (condition, seed); None when not measured."""
    vals = [v for d in per_seed for v in d.values() if np.isfinite(v)]
    if not vals:
        return (None, None)
    lo = float(min(vals))
    return (lo, lo >= RECALL_MIN)


def seed_summary(per_seed: dict[int, float]) -> dict[str, Any]:
    """``{"mean", "ci95", "per_seed", "kind"}`` of a per-seed accuracy, for the verdict's details."""
    if not per_seed:
        return {}
    st = across_seeds(per_seed.values())
    return {"mean": st.mean, "ci95": st.ci, "kind": st.kind, "per_seed": dict(per_seed)}
