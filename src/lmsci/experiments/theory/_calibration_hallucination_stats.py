"""Statistics of :mod:`lmsci.experiments.theory.calibration_hallucination`: the per-seed functions its claims read
and temperature-tradeoff's rule (judged by hand, see that module's docstring).

The results table has one row per (Zipf point, seed, arm) with the monofact rate ``mf`` and each generator's
hallucination rate ``<g>_hall``, miscalibration ``<g>_mis`` (Mis_b) and bound slack ``<g>_slack`` (all rates in
[0, 1]); on the ``init`` arm the ``tf`` and ``tf_cold`` columns are the untrained network's. Source: Kalai &
Vempala, "Calibrated Language Models Must Hallucinate", STOC 2024, arXiv 2311.14648, sec. 4-5 (the simplified
corollary).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmsci.stats import across_seeds

GENERATORS = ("mle", "gt", "tf", "tf_cold")
SLOPE_LO, SLOPE_HI = 0.7, 1.3
CALIBRATED_MIS = 0.1  # the gate of "transformer-tracks-mf": Mis_b of the T=1 transformer on every run
MF_SPAN = 0.2  # the gate of the slope claims: the sweep must move MF by at least this much
COLD_MIN_MF = 0.05  # the temperature claim is judged at sweep points whose mean MF is at least this


def slope(x: np.ndarray, y: np.ndarray) -> float:
    """OLS slope of y on x (NaN when x does not vary)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.ptp(x) == 0:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0])


def _slopes(rows: pd.DataFrame, col: str) -> pd.Series:
    if rows.empty or col not in rows or "mf" not in rows:
        return pd.Series(dtype=float)
    return pd.Series({s: slope(sub["mf"], sub[col]) for s, sub in rows.groupby("seed_index")}, dtype=float)


def gt_slope(rows: pd.DataFrame) -> pd.Series:
    """Per seed, the OLS slope of the Good-Turing generator's g(H) on MF across the Zipf sweep."""
    return _slopes(rows, "gt_hall")


def tf_slope(rows: pd.DataFrame) -> pd.Series:
    """Per seed, the OLS slope of the T=1 transformer's g(H) on MF across the Zipf sweep (exact g over Y)."""
    return _slopes(rows, "tf_hall")


def min_slack(rows: pd.DataFrame) -> pd.Series:
    """Per seed, the smallest slack g(H) - bound over the Zipf points and the four generators."""
    cols = [f"{g}_slack" for g in GENERATORS]
    if rows.empty or any(c not in rows for c in cols):
        return pd.Series(dtype=float)
    return rows.groupby("seed_index")[cols].min().min(axis=1)


def tradeoff(df: pd.DataFrame, gen: str) -> tuple[bool, int, dict, float]:
    """temperature-tradeoff's rule for the generator pair (``gen``, ``gen``_cold): (held at every judged point,
    number of judged points, per-point details, mean g(H) difference)."""
    per_point = {}
    ok_all = True
    judged = 0
    for z, sub in df.groupby("zipf"):
        dh = (sub[f"{gen}_cold_hall"] - sub[f"{gen}_hall"]).values
        dm = (sub[f"{gen}_cold_mis"] - sub[f"{gen}_mis"]).values
        if sub["mf"].mean() < COLD_MIN_MF:
            per_point[f"zipf{z:g}"] = {"mf": float(sub["mf"].mean()), "judged": False,
                                       "d_hall": float(dh.mean()), "d_mis": float(dm.mean())}
            continue
        judged += 1
        sh, sm = across_seeds(dh), across_seeds(dm)
        held = sh.n >= 2 and sh.hi < 0 and sm.lo > 0
        ok_all &= held
        per_point[f"zipf{z:g}"] = {"mf": float(sub["mf"].mean()), "judged": True, "d_hall": sh.mean,
                                   "d_hall_ci": [sh.lo, sh.hi], "d_mis": sm.mean, "d_mis_ci": [sm.lo, sm.hi],
                                   "held": bool(held)}
    return bool(ok_all), judged, per_point, float((df[f"{gen}_cold_hall"] - df[f"{gen}_hall"]).mean())


def cold_arm_row(base: dict, real_row: dict) -> dict:
    """The ``cold`` arm's row of one Zipf point and seed (the null arm of ``transformer-tracks-mf``, since
    2026-12-06): the trained network's scores at the lower temperature (the real row's ``tf_cold_*`` columns) under
    the T=1 names ``tf_*``, beside the point's shared columns ``base`` (MF, ...). Nothing is trained or scored
    again: the same network, made miscalibrated by cooling (the temperature-tradeoff check measures its Mis_b)."""
    pre = "tf_cold_"
    return {**base, **{"tf_" + k[len(pre):]: v for k, v in real_row.items() if k.startswith(pre)}}
