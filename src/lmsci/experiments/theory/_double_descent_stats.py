"""Statistics of :mod:`lmsci.experiments.theory.double_descent` as functions of one arm's rows (``Stat(fn=...)``).

Each takes the finished rows of one arm (filtered by the claim's ``where``) and returns one value per training
seed (a Series indexed by ``seed_index``). Sources: Hastie, Tibshirani, Friedman, ESL Sec. 2.9 (u-curve); Belkin et
al., PNAS 2019, arXiv 1812.11118 and Nakkiran et al., arXiv 2003.01897 (threshold, ridge); Hastie et al., Ann.
Statist. 2022, arXiv 1903.08560, Thm 1 (isotropic).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmsci.claims.engine import arm_rows, finished

TASKS = ("digits", "linear")


def curves(results: pd.DataFrame, part: str, col: str, arm: str = "real") -> pd.DataFrame:
    """levels x seeds table of ``col`` for ``part`` on ``arm`` (finished rows)."""
    df = arm_rows(finished(results), arm)
    df = df[df["part"] == part] if "part" in df else df.iloc[0:0]
    if "seed_index" not in df:
        df = df.assign(seed_index=0)
    if df.empty or col not in df:
        return pd.DataFrame()
    return df.pivot_table(index="level", columns="seed_index", values=col, aggfunc="mean").sort_index()


def _pivot(rows: pd.DataFrame, col: str = "test_risk") -> pd.DataFrame:
    return rows.pivot_table(index="level", columns="seed_index", values=col, aggfunc="mean").sort_index()


def ucurve_ratio(rows: pd.DataFrame) -> pd.Series:
    """Per seed, min(test MSE at degree 0, at the largest degree) / min over degrees of the U-curve part."""
    te = _pivot(rows)
    seeds = [s for s in te.columns if te[s].notna().all()] if len(te) >= 3 else []
    return pd.Series({s: float(min(te[s].iloc[0], te[s].iloc[-1]) / te[s].min()) for s in seeds}, dtype=float)


def train_monotone(rows: pd.DataFrame) -> pd.Series:
    """Per seed, 1 when the U-curve's training MSE is non-increasing in degree (relative tolerance 1e-9), else 0."""
    tr = _pivot(rows, "train_risk")
    return pd.Series({s: float(np.all(np.diff(tr[s].to_numpy()) <= 1e-9 * tr[s].abs().max()))
                      for s in tr.columns if tr[s].notna().all()}, dtype=float)


def worst_train_beyond_n(rows: pd.DataFrame) -> pd.Series:
    """Per seed, the largest min-norm training MSE at N >= n on both tasks (NaN unless both tasks are there)."""
    rows = rows[rows["part"].isin(TASKS) & (rows["level"] >= rows["n"])]
    if set(rows["part"]) != set(TASKS):
        return pd.Series(dtype=float)
    return rows.groupby("seed_index")["train_risk"].max()


def peak_ratio(rows: pd.DataFrame) -> pd.Series:
    """Per seed, test risk at N = n over max(test risk at n/2, at 2n): > 1 is a peak (one task's rows)."""
    if rows.empty:
        return pd.Series(dtype=float)
    te, n = _pivot(rows), int(rows["n"].iloc[0])
    if not {n // 2, n, 2 * n} <= set(te.index):
        return pd.Series(dtype=float)
    return (te.loc[n] / np.maximum(te.loc[n // 2], te.loc[2 * n])).astype(float)


def isotropic_deviation(rows: pd.DataFrame) -> pd.Series:
    """Per seed, Monte Carlo risk / exact risk - 1 at the gamma whose across-seed mean deviates most."""
    mc, ex = _pivot(rows), _pivot(rows, "exact_risk")
    seeds = [s for s in mc.columns if mc[s].notna().all()]
    if not seeds:
        return pd.Series(dtype=float)
    rel = mc[seeds] / ex[seeds] - 1  # gammas x seeds
    return rel.loc[rel.mean(axis=1).abs().idxmax()].astype(float)


def peak_deviation(rows: pd.DataFrame) -> pd.Series:
    """The larger over the two tasks of |argmax_N of the across-seed mean test risk / n - 1| (one value; empty
    unless both tasks are there). Seeds with a missing level are left out of the mean."""
    dev = []
    for task in TASKS:
        sub = rows[rows["part"] == task] if "part" in rows else rows.iloc[0:0]
        if sub.empty:
            return pd.Series(dtype=float)
        mean = _pivot(sub).dropna(axis=1).mean(axis=1)
        dev.append(abs(float(mean.idxmax()) / int(sub["n"].iloc[0]) - 1))
    return pd.Series({0: max(dev)}, dtype=float)
