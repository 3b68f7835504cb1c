"""Verdicts of :mod:`lmsci.experiments.icl.icl_kernel_regression`: one function per registered claim.

The results table has one row per training seed: ``spearman_acc_n`` (Spearman correlation of accuracy with the
number of demonstrations), accuracies in [0, 1] (``acc_model_*``, ``acc_bayes_*``), ``bayes_gap_last``, head-vote
agreements ``kr_*`` and the MiniLM baseline ``minilm_*``, each with its untrained-initialisation null arm
``null_*``. Source: Han, Wang, Zhao, Ji, arXiv 2305.12766, Theorem 1, Tables 2-3.
"""

from __future__ import annotations

import json

import pandas as pd

from lmsci.claims import Verdict
from lmsci.experiments.base import Experiment
from lmsci.experiments.icl._common import seed_interval as interval

SPEARMAN_MIN = 0.8     # accuracy rises with n: Spearman >= 0.8 over n_grid, in every seed
BAYES_GAP_MAX = 0.10   # model accuracy within 10 points of the Bayes posterior's at n = max(n_grid)
AGREE_MIN = 0.75       # task-specific best head agrees with the model's prediction
MINILM_MARGIN = 0.10   # ... by at least 10 points more than the MiniLM kernel baseline
ICL_GAIN_MIN = 0.05    # gate: accuracy at max n exceeds accuracy at n = 1 by 5 points


def null_col(df: pd.DataFrame, name: str) -> pd.Series | None:
    """A null arm's column as floats, or None when it was not measured for every seed."""
    return df[name].astype(float) if name in df and df[name].notna().all() else None


def icl_gate(df: pd.DataFrame) -> dict:
    """Gate ``does-icl``: mean accuracy gain from n = 1 to the largest n >= ``ICL_GAIN_MIN``."""
    gain = float((df["acc_model_last"].astype(float) - df["acc_model_first"].astype(float)).mean())
    return {"does-icl": (gain, bool(gain >= ICL_GAIN_MIN))}


def icl_rises(exp: Experiment, cfg, df: pd.DataFrame) -> Verdict:
    """``icl-rises``: the smallest per-seed Spearman correlation of accuracy with n; null arm: the untrained model."""
    rho = [float(x) for x in df["spearman_acc_n"]]
    rho0 = null_col(df, "null_spearman_acc_n")
    null = (None, None) if rho0 is None else (float(rho0.min()), bool(rho0.min() >= SPEARMAN_MIN))
    return exp.judge(cfg, "icl-rises", value=min(rho), passed=bool(min(rho) >= SPEARMAN_MIN), n_seeds=len(rho),
                     ci_kind=f"smallest over {len(rho)} seed(s) (every seed must hold)", null=null,
                     details={"spearman_per_seed": rho,
                              "null_spearman_per_seed": None if rho0 is None else rho0.round(4).tolist(),
                              "acc_model_per_seed": [json.loads(x) for x in df["acc_model"]],
                              "null_acc_model_per_seed": [json.loads(x) for x in df["null_acc_model"]]
                              if rho0 is not None and "null_acc_model" in df else None,
                              "acc_bayes": json.loads(df["acc_bayes"].iloc[0]),
                              "n_grid": json.loads(df["n_grid"].iloc[0])})


def near_bayes(exp: Experiment, cfg, df: pd.DataFrame) -> Verdict:
    """``near-bayes``: Bayes accuracy minus the model's at the largest n, per seed; null arm: the untrained model."""
    st, _, hi = interval(df["bayes_gap_last"].astype(float))
    gap0 = null_col(df, "null_bayes_gap_last")
    null = (None, None)
    if gap0 is not None:
        st0, _, hi0 = interval(gap0)
        null = (st0.mean, bool(hi0 <= BAYES_GAP_MAX))
    return exp.judge(cfg, "near-bayes", value=st.mean, passed=bool(hi <= BAYES_GAP_MAX), ci=st.ci,
                     ci_kind=st.kind, n_seeds=st.n, null=null,
                     details={"acc_model_last": df["acc_model_last"].astype(float).round(4).tolist(),
                              "null_acc_model_last": None if gap0 is None else
                              df["null_acc_model_last"].astype(float).round(4).tolist(),
                              "acc_bayes_last": float(df["acc_bayes_last"].iloc[0])})


def head_reconstructs(exp: Experiment, cfg, df: pd.DataFrame) -> Verdict:
    """``head-reconstructs``: held-out agreement of the task-specific best head's vote with the model's prediction,
    per seed; null arm: the untrained model's best head against its own predictions."""
    st, lo, _ = interval(df["kr_task_max"].astype(float))
    agree0 = null_col(df, "null_kr_task_max")
    null = (None, None)
    if agree0 is not None:
        st0, lo0, _ = interval(agree0)
        null = (st0.mean, bool(lo0 >= AGREE_MIN))
    details = {k: df[k].astype(float).round(4).tolist() for k in
               ("kr_task_max", "kr_overall_max", "kr_task_sum", "kr_task_label", "kr_gold_task_max",
                "null_kr_task_max", "null_kr_overall_max") if k in df and df[k].notna().all()}
    return exp.judge(cfg, "head-reconstructs", value=st.mean, passed=bool(lo >= AGREE_MIN), ci=st.ci,
                     ci_kind=st.kind, n_seeds=st.n, gates=icl_gate(df), null=null, details=details)


def beats_minilm(exp: Experiment, cfg, df: pd.DataFrame) -> list[Verdict]:
    """``beats-minilm``: best-head agreement minus the best MiniLM kernel's, per seed (none without MiniLM
    columns); null arm: the same difference for the untrained model."""
    if not ("minilm_best" in df and df["minilm_best"].notna().all()):
        return []
    agree0 = null_col(df, "null_kr_task_max")
    diff = df["kr_task_max"].astype(float) - df["minilm_best"].astype(float)
    st, lo, _ = interval(diff)
    best0 = null_col(df, "null_minilm_best")
    null = (None, None)
    if agree0 is not None and best0 is not None:
        st0, lo0, _ = interval(agree0 - best0)
        null = (st0.mean, bool(lo0 >= MINILM_MARGIN))
    return [exp.judge(cfg, "beats-minilm", value=st.mean, passed=bool(lo >= MINILM_MARGIN), ci=st.ci,
                      ci_kind=st.kind, n_seeds=st.n, gates=icl_gate(df), null=null,
                      details={k: df[k].astype(float).round(4).tolist() for k in
                               ("minilm_raw", "minilm_tuned", "null_minilm_raw", "null_minilm_tuned")
                               if k in df and df[k].notna().all()})]


def verdicts(exp: Experiment, cfg, results: pd.DataFrame) -> list[Verdict]:
    """icl-rises, near-bayes, head-reconstructs and (with MiniLM columns) beats-minilm; [] without results."""
    if results.empty or "spearman_acc_n" not in results:
        return []
    df = results.sort_values("seed_index") if "seed_index" in results else results
    return [icl_rises(exp, cfg, df), near_bayes(exp, cfg, df), head_reconstructs(exp, cfg, df),
            *beats_minilm(exp, cfg, df)]
