"""Verdicts of :mod:`lmsci.experiments.icl.icl_linear_regression`: one function per registered claim.

The results table has one row per training seed: mean squared errors at n = 2d in-context examples
(``err_<predictor>_at_2d``: the model, least squares, ridge, the weak baselines, the zero predictor), squared
prediction differences ``spd_<baseline>`` averaged over n = 1..2d, the best layer's held-out probe R^2
``probe_r2_best``, and the untrained-initialisation null arm ``null_*``. Sources: Garg, Tsipras, Liang, Valiant,
arXiv 2208.01066, Fig. 2; Akyurek, Schuurmans, Andreas, Ma, Zhou, arXiv 2211.15661, Sec. 4-5.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from lmsci.claims import Verdict
from lmsci.stats import across_seeds
from lmsci.experiments.base import Experiment
from lmsci.experiments.icl._common import seed_interval

#: registered thresholds (issue 16)
LS_RATIO_MAX = 1.5          # model error at n = 2d within 1.5x of least squares
PROBE_R2_MIN = 0.5          # best layer's held-out R^2 of a linear probe for w
PLATEAU_FRAC = 0.5          # gate: error at n = 2d below half the zero predictor's (the model left the plateau)
#: baselines the model must beat at n = 2d, and the candidates of the implied-predictor comparison
WEAK_BASELINES = ("gd_1step", "knn3", "averaging")
SPD_CANDIDATES = ("least_squares", "ridge", "gd_1step", "knn3", "averaging")
LS_LIKE = ("least_squares", "ridge")


def trained_gate(df: pd.DataFrame) -> tuple[dict, float]:
    """(gate ``trained``: the model's mean error at n = 2d over the zero predictor's < ``PLATEAU_FRAC``, that ratio)."""
    err = df["err_model_at_2d"].astype(float)
    zero = float(df["err_zero_at_2d"].astype(float).mean())
    trained_val = float(err.mean()) / zero if zero > 0 else float("nan")
    return {"trained": (trained_val, bool(trained_val < PLATEAU_FRAC))}, trained_val


def null_err(df: pd.DataFrame) -> pd.Series | None:
    """The untrained model's error at n = 2d per seed, or None when the null arm was not measured for every seed."""
    has_null = "null_err_model_at_2d" in df and df["null_err_model_at_2d"].notna().all()
    return df["null_err_model_at_2d"].astype(float) if has_null else None


def ls_error(exp: Experiment, cfg, df: pd.DataFrame) -> Verdict:
    """``ls-error``: model error / least-squares error at n = 2d, per seed; null arm: the untrained model."""
    gate, trained_val = trained_gate(df)
    err, err0 = df["err_model_at_2d"].astype(float), null_err(df)
    ratio = err / df["err_least_squares_at_2d"].astype(float)
    st = across_seeds(ratio)
    hi = st.hi
    null = (None, None)
    if err0 is not None:
        st0, _, hi0 = seed_interval(err0 / df["err_least_squares_at_2d"].astype(float))
        null = (st0.mean, bool(hi0 <= LS_RATIO_MAX))
    return exp.judge(cfg, "ls-error", value=st.mean, passed=bool(hi <= LS_RATIO_MAX), ci=st.ci,
                     ci_kind=st.kind, n_seeds=st.n, gates=gate, null=null,
                     details={"ratio_per_seed": [round(float(x), 4) for x in ratio],
                              "err_model_at_2d": round(float(err.mean()), 5),
                              "err_least_squares_at_2d": round(float(df["err_least_squares_at_2d"].mean()), 5),
                              "err_ridge_at_2d": round(float(df["err_ridge_at_2d"].mean()), 5),
                              "error_to_zero_predictor": round(trained_val, 4)})


def beats_baselines(exp: Experiment, cfg, df: pd.DataFrame) -> Verdict:
    """``beats-baselines``: the model's error at n = 2d against the strongest weak baseline's mean; null arm: the
    untrained model."""
    gate, _ = trained_gate(df)
    err, err0 = df["err_model_at_2d"].astype(float), null_err(df)
    st = across_seeds(err)
    hi = st.hi
    base = {b: float(df[f"err_{b}_at_2d"].astype(float).mean()) for b in WEAK_BASELINES}
    best_b = min(base, key=base.get)
    null = (None, None)
    if err0 is not None:
        st0, _, hi0 = seed_interval(err0)
        null = (st0.mean, bool(hi0 < base[best_b]))
    return exp.judge(cfg, "beats-baselines", value=st.mean, passed=bool(hi < base[best_b]), ci=st.ci,
                     ci_kind=st.kind, n_seeds=st.n, gates=gate, null=null,
                     details={"baseline_errors_at_2d": {k: round(v, 5) for k, v in base.items()},
                              "strongest_baseline": best_b})


def implied_ridge(exp: Experiment, cfg, df: pd.DataFrame) -> Verdict:
    """``implied-ridge``: the closest other baseline's SPD minus the closest least-squares-like one's, per seed;
    null arm: the untrained model."""
    gate, _ = trained_gate(df)
    spd_cols = {b: df[f"spd_{b}"].astype(float).values for b in SPD_CANDIDATES}
    ls_like = np.minimum.reduce([spd_cols[b] for b in LS_LIKE])
    other = np.minimum.reduce([spd_cols[b] for b in SPD_CANDIDATES if b not in LS_LIKE])
    margin = other - ls_like
    st = across_seeds(margin)
    lo = st.lo
    closest = [min(SPD_CANDIDATES, key=lambda b: spd_cols[b][i]) for i in range(len(df))]
    null = (None, None)
    if null_err(df) is not None:
        s0 = {b: df[f"null_spd_{b}"].astype(float).values for b in SPD_CANDIDATES}
        m0 = (np.minimum.reduce([s0[b] for b in SPD_CANDIDATES if b not in LS_LIKE])
              - np.minimum.reduce([s0[b] for b in LS_LIKE]))
        st0, lo0, _ = seed_interval(m0)
        null = (st0.mean, bool(lo0 > 0))
    return exp.judge(cfg, "implied-ridge", value=st.mean, passed=bool(lo > 0), ci=st.ci, ci_kind=st.kind,
                     n_seeds=st.n, gates=gate, null=null,
                     details={"mean_spd": {b: round(float(v.mean()), 5) for b, v in spd_cols.items()},
                              "closest_per_seed": closest})


def probe_w(exp: Experiment, cfg, df: pd.DataFrame) -> Verdict:
    """``probe-w``: the best layer's held-out probe R^2 for w, per seed; null arm: the untrained model."""
    gate, _ = trained_gate(df)
    r2 = df["probe_r2_best"].astype(float)
    st = across_seeds(r2)
    lo = st.lo
    layers = df["probe_best_layer"].tolist() if "probe_best_layer" in df else []
    null = (None, None)
    if null_err(df) is not None:
        st0, lo0, _ = seed_interval(df["null_probe_r2_best"].astype(float))
        null = (st0.mean, bool(lo0 >= PROBE_R2_MIN))
    return exp.judge(cfg, "probe-w", value=st.mean, passed=bool(lo >= PROBE_R2_MIN), ci=st.ci,
                     ci_kind=st.kind, n_seeds=st.n, gates=gate, null=null,
                     details={"best_layer_per_seed": layers,
                              "r2_by_layer_per_seed": [json.loads(x) for x in df["probe_r2_by_layer"]]
                              if "probe_r2_by_layer" in df else None})


def verdicts(exp: Experiment, cfg, results: pd.DataFrame) -> list[Verdict]:
    """ls-error, beats-baselines, implied-ridge, probe-w ([] without results)."""
    if results.empty or "err_model_at_2d" not in results:
        return []
    df = results.sort_values("seed_index") if "seed_index" in results else results
    return [ls_error(exp, cfg, df), beats_baselines(exp, cfg, df), implied_ridge(exp, cfg, df), probe_w(exp, cfg, df)]
