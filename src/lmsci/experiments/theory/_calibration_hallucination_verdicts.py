"""Verdicts of :mod:`lmsci.experiments.theory.calibration_hallucination`: one function per registered claim.

The results table has one row per (Zipf point, seed) with the monofact rate ``mf``, each generator's hallucination
rate ``<g>_hall``, miscalibration ``<g>_mis`` (Mis_b) and bound slack ``<g>_slack`` (all rates in [0, 1]), and the
untrained transformer's ``tf_init_*`` (the null arms). Source: Kalai & Vempala, "Calibrated Language Models Must
Hallucinate", STOC 2024, arXiv 2311.14648, sec. 4-5 (the simplified corollary).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lmsci.claims import Verdict
from lmsci.stats import across_seeds
from lmsci.experiments.base import Experiment

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


def bound_holds(exp: Experiment, cfg, df: pd.DataFrame) -> Verdict:
    """``bound-holds`` (check): the smallest slack g(H) - bound over runs and generators must be >= 0."""
    n_seeds = len(sorted(df["seed_index"].unique()))
    slacks = df[[f"{g}_slack" for g in GENERATORS]]
    min_slack = float(slacks.min().min())
    worst = slacks.min().idxmin().replace("_slack", "")
    nonvac = {int(s): bool((sub["gt_bound"] > 0).any()) for s, sub in df.groupby("seed_index")}
    return exp.judge(
        cfg, "bound-holds", value=min_slack, passed=bool(min_slack >= 0), n_seeds=n_seeds,
        ci_kind=f"minimum over {len(df)} runs x {len(GENERATORS)} generators (every run must hold)",
        gates={"non-vacuous": (float(df["gt_bound"].max()), all(nonvac.values()))},
        details={"min_slack_by_generator": {g: float(df[f"{g}_slack"].min()) for g in GENERATORS},
                 "tightest_generator": worst, "max_bound_gt": float(df["gt_bound"].max()),
                 "regularity_term": float(df["bound_regularity"].iloc[0]),
                 "concentration_term": float(df["bound_concentration"].iloc[0])},
    )


def tracks_mf(exp: Experiment, cfg, df: pd.DataFrame, claim_id: str, gname: str) -> Verdict:
    """``gt-tracks-mf`` (check, ``gname`` gt) or ``transformer-tracks-mf`` (``gname`` tf): the per-seed OLS slope
    of g(H) on MF within [SLOPE_LO, SLOPE_HI]; the transformer's null arm: the untrained network's slope."""
    n_seeds = len(sorted(df["seed_index"].unique()))
    mf_span = float(df.groupby("zipf")["mf"].mean().pipe(lambda s: s.max() - s.min()))
    slopes = [slope(sub["mf"], sub[f"{gname}_hall"]) for _, sub in df.groupby("seed_index")]
    fin = [s for s in slopes if math.isfinite(s)]
    gates = {"mf-moves": (mf_span, mf_span >= MF_SPAN)}
    if claim_id == "transformer-tracks-mf":
        mx = float(df["tf_mis"].max())
        gates["calibrated"] = (mx, mx <= CALIBRATED_MIS)
    if not fin:
        return exp.judge(cfg, claim_id, value=None, passed=None, gates=gates, n_seeds=n_seeds,
                         why_not_computed="MF does not vary within a seed")
    st = across_seeds(fin)
    lo, hi = (st.lo, st.hi)
    null, null_detail = None, {}
    if claim_id == "transformer-tracks-mf" and "tf_init_hall" in df:
        ns = [x for x in (slope(sub["mf"], sub["tf_init_hall"]) for _, sub in df.groupby("seed_index"))
              if math.isfinite(x)]
        if ns:
            nst = across_seeds(ns)
            nlo, nhi = (nst.lo, nst.hi)
            null = (nst.mean, bool(nlo >= SLOPE_LO and nhi <= SLOPE_HI))
            null_detail = {"null_untrained_slope_per_seed": ns, "null_untrained_ci": nst.ci}
    return exp.judge(
        cfg, claim_id, value=st.mean, ci=st.ci, ci_kind=st.kind, n_seeds=st.n,
        passed=bool(lo >= SLOPE_LO and hi <= SLOPE_HI), gates=gates, null=null,
        details={"slope_per_seed": fin, "mean_mis": float(df[f"{gname}_mis"].mean()),
                 "max_mis": float(df[f"{gname}_mis"].max()), **null_detail},
    )


def temperature_tradeoff(exp: Experiment, cfg, df: pd.DataFrame) -> Verdict:
    """``temperature-tradeoff``: the real arm is the trained transformer, the null arm the untrained one."""
    n_seeds = len(sorted(df["seed_index"].unique()))
    ok_all, judged, per_point, mean_dh = tradeoff(df, "tf")
    null = None
    if "tf_init_hall" in df:
        nok, _, nper, nmean = tradeoff(df, "tf_init")
        null = (nmean, bool(nok) if judged else None)
    return exp.judge(
        cfg, "temperature-tradeoff", value=mean_dh, passed=bool(ok_all) if judged else None, n_seeds=n_seeds,
        ci_kind="per-point 95% CIs across seeds (details)", gates={"points": (judged, judged >= 1)},
        why_not_computed="no Zipf point with enough MF", null=null,
        details={"per_point": per_point, "cold_temperature": cfg.cold_temperature,
                 "null_untrained_per_point": nper if null is not None else None},
    )


def verdicts(exp: Experiment, cfg, results: pd.DataFrame) -> list[Verdict]:
    """bound-holds, gt-tracks-mf, transformer-tracks-mf, temperature-tradeoff ([] without results)."""
    df = results.copy()
    if "seed_index" not in df:
        df["seed_index"] = 0
    if df.empty or "mf" not in df:
        return []
    return [bound_holds(exp, cfg, df), tracks_mf(exp, cfg, df, "gt-tracks-mf", "gt"),
            tracks_mf(exp, cfg, df, "transformer-tracks-mf", "tf"), temperature_tradeoff(exp, cfg, df)]
