"""Verdicts of :mod:`lmsci.experiments.theory.double_descent`: one function per registered claim or check.

The results table has one row per (part, complexity ``level``, seed) with squared-error risks (``train_risk``,
``test_risk``, ``ridge_test_risk`` and the null arms' ``null_*``, ``oracle_ridge_test_risk``,
``mean_pred_test_risk``, ``perm_test_risk``). Sources: Hastie, Tibshirani, Friedman, ESL Sec. 2.9 (u-curve);
Belkin et al., PNAS 2019, arXiv 1812.11118 and Nakkiran et al., arXiv 2003.01897 (threshold, second descent,
ridge); Hastie et al., Ann. Statist. 2022, arXiv 1903.08560, Thm 1 (isotropic).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmsci.claims import Verdict
from lmsci.stats import across_seeds
from lmsci.experiments.base import Experiment


def curves(results: pd.DataFrame, part: str, col: str) -> pd.DataFrame:
    """levels x seeds table of ``col`` for ``part``."""
    df = results[(results["part"] == part) & (results.get("status", "ok") == "ok")]
    if "seed_index" not in df:
        df = df.assign(seed_index=0)
    return df.pivot_table(index="level", columns="seed_index", values=col, aggfunc="mean").sort_index()


def ucurve_stat(tr: pd.DataFrame, te: pd.DataFrame) -> dict | None:
    """The u-curve statistic and rule on a (train, test) pair of degree x seed tables."""
    seeds = [s for s in te.columns if te[s].notna().all() and tr[s].notna().all()]
    if len(te) < 3 or not seeds:
        return None
    mono = {int(s): bool(np.all(np.diff(tr[s].to_numpy()) <= 1e-9 * tr[s].abs().max())) for s in seeds}
    ratio = {int(s): float(min(te[s].iloc[0], te[s].iloc[-1]) / te[s].min()) for s in seeds}
    mean = te[seeds].mean(axis=1)
    arg = mean.idxmin()
    interior = mean.index[0] < arg < mean.index[-1]
    st = across_seeds(ratio.values())
    ok = all(mono.values()) and min(ratio.values()) >= 1.2 and interior
    return {"st": st, "ok": bool(ok), "ratio": ratio, "mono": mono, "arg": float(arg), "mean": mean}


def ucurve(exp: Experiment, cfg, results: pd.DataFrame) -> Verdict:
    """``u-curve``: min(test risk at the ends) / min test risk per seed, training risk monotone, interior
    minimum; null arm: the same fits to the noise alone."""
    real = ucurve_stat(curves(results, "ucurve", "train_risk"), curves(results, "ucurve", "test_risk"))
    if real is None:
        return exp.judge(cfg, "u-curve", value=None, passed=None, why_not_computed="fewer than 3 degrees")
    nul = None
    if "null_test_risk" in results:
        nul = ucurve_stat(curves(results, "ucurve", "null_train_risk"), curves(results, "ucurve", "null_test_risk"))
    st, mean = real["st"], real["mean"]
    return exp.judge(cfg, "u-curve", value=st.mean, passed=real["ok"], ci=st.ci, ci_kind=st.kind, n_seeds=st.n,
                     null=(None, None) if nul is None else (nul["st"].mean, nul["ok"]),
                     details={"ratio_by_seed": real["ratio"], "train_monotone_by_seed": real["mono"],
                              "argmin_degree_mean_curve": real["arg"], "degrees": [float(mean.index[0]),
                                                                                  float(mean.index[-1])],
                              "mean_test_curve": {float(k): float(v) for k, v in mean.items()},
                              "null_argmin_degree": None if nul is None else nul["arg"],
                              "null_ratio_ci": None if nul is None else nul["st"].ci})


def threshold_measurements(results: pd.DataFrame, tasks: dict[str, int]) -> tuple[dict, dict, dict, dict]:
    """(gate ``interpolates``, peak by task, second-descent statistics by task, ridge ratios by task) of the
    ``digits`` / ``linear`` parts; ``tasks`` maps each present task to its training size n."""
    peak, desc, ridge = {}, {}, {}
    worst_train = []
    for task, n in tasks.items():
        tr = curves(results, task, "train_risk")
        tr = tr[tr.index >= n]
        if len(tr):
            worst_train.append(float(np.nanmax(tr.to_numpy())))
    gate = {"interpolates": (max(worst_train), max(worst_train) <= 1e-6) if len(worst_train) == 2
            else (None, None)}
    have = lambda col: col in results  # noqa: E731
    for task, n in tasks.items():
        mn, rg = curves(results, task, "test_risk"), curves(results, task, "ridge_test_risk")
        seeds = [s for s in mn.columns if mn[s].notna().all()]
        if not seeds:
            continue
        mean = mn[seeds].mean(axis=1)
        peak[task] = {"argmax_mean": float(mean.idxmax()), "n": n,
                      "dev": abs(float(mean.idxmax()) / n - 1),
                      "argmax_by_seed": {int(s): float(mn[s].idxmax()) for s in seeds}}
        if have("oracle_ridge_test_risk"):
            orc = curves(results, task, "oracle_ridge_test_risk").mean(axis=1).dropna()
            if len(orc):
                peak[task]["null_argmax_mean"] = float(orc.idxmax())
                peak[task]["null_dev"] = abs(float(orc.idxmax()) / n - 1)
        need = {n // 2, n, 2 * n, 10 * n}
        if need <= set(mn.index):
            base = {s: mn.loc[n // 2, s] for s in seeds}
            nul = None
            if have("mean_pred_test_risk"):
                mp = curves(results, task, "mean_pred_test_risk")
                base = {s: min(base[s], mp.loc[n // 2, s]) for s in seeds}
                if have("perm_test_risk"):
                    pm = curves(results, task, "perm_test_risk")
                    if {n // 2, 10 * n} <= set(pm.index):
                        nul = [float(pm.loc[10 * n, s] / min(pm.loc[n // 2, s], mp.loc[n // 2, s]))
                               for s in seeds if np.isfinite(pm.loc[10 * n, s])]
            r = [float(mn.loc[10 * n, s] / base[s]) for s in seeds]
            desc[task] = (across_seeds(r), r, across_seeds(nul) if nul else None)
            rr = [float(rg.loc[n, s] / max(rg.loc[n // 2, s], rg.loc[2 * n, s])) for s in seeds
                  if s in rg.columns]
            mr = [float(mn.loc[n, s] / max(mn.loc[n // 2, s], mn.loc[2 * n, s])) for s in seeds]
            ridge[task] = (across_seeds(rr) if rr else None, across_seeds(mr), rr, mr)
    return gate, peak, desc, ridge


def peak_at_threshold(exp: Experiment, cfg, tasks: dict[str, int], peak: dict, gate: dict) -> Verdict:
    """``peak-at-threshold``: the largest |argmax / n - 1| of the mean min-norm curves over both tasks; null arm:
    ridge tuned per level on the test risk."""
    if set(peak) == set(tasks) and len(tasks) == 2:
        dev = max(p["dev"] for p in peak.values())
        n_s = min(len(p["argmax_by_seed"]) for p in peak.values())
        ndev = (max(p["null_dev"] for p in peak.values()) if all("null_dev" in p for p in peak.values())
                else None)
        return exp.judge(cfg, "peak-at-threshold", value=dev, passed=dev <= 0.1, n_seeds=n_s, gates=gate,
                         ci_kind="argmax of the across-seed mean curve", details={"tasks": peak},
                         null=(None, None) if ndev is None else (ndev, bool(ndev <= 0.1)))
    return exp.judge(cfg, "peak-at-threshold", value=None, passed=None,
                     why_not_computed="both tasks (digits, linear) are needed")


def second_descent(exp: Experiment, cfg, desc: dict, gate: dict) -> Verdict:
    """``second-descent``: test risk at 10 n over the better of risk(n/2) and the mean predictor, per seed, worst
    task; null arm: min-norm on permuted training labels."""
    if set(desc) == {"digits", "linear"}:
        worst = max(desc, key=lambda k: desc[k][0].mean)
        st = desc[worst][0]
        ok = all(d[0].n >= 2 and d[0].hi < 1 for d in desc.values())
        nulls = [d[2] for d in desc.values()]
        null = (None, None)
        if all(x is not None and x.n >= 2 for x in nulls):
            null = (max(x.mean for x in nulls), bool(all(x.hi < 1 for x in nulls)))
        return exp.judge(cfg, "second-descent", value=st.mean, passed=ok if st.n >= 2 else None, gates=gate,
                         why_not_computed="one seed: no interval across seeds", ci=st.ci, ci_kind=st.kind,
                         n_seeds=min(d[0].n for d in desc.values()), null=null,
                         details={k: {"mean": d[0].mean, "ci": d[0].ci, "by_seed": d[1],
                                      "null_permuted_labels": None if d[2] is None else
                                      {"mean": d[2].mean, "ci": d[2].ci}}
                                  for k, d in desc.items()} | {"worst_task": worst})
    return exp.judge(cfg, "second-descent", value=None, passed=None,
                     why_not_computed="the grid lacks N = n/2 or 10 n on a task")


def ridge_removes_peak(exp: Experiment, cfg, task: str, ridge: dict, gate: dict) -> Verdict:
    """``ridge-removes-peak-<task>``: ridge risk(n) / max(risk(n/2), risk(2n)) per seed; null arm: min-norm."""
    cid = f"ridge-removes-peak-{task}"
    if task not in ridge or ridge[task][0] is None:
        return exp.judge(cfg, cid, value=None, passed=None,
                         why_not_computed=f"no ridge curve with N = n/2, n, 2n on {task}")
    rs, ms, rr, mr = ridge[task]
    ok = None if rs.n < 2 else bool(rs.hi <= 1)
    return exp.judge(cfg, cid, value=rs.mean, passed=ok, ci=rs.ci, ci_kind=rs.kind, n_seeds=rs.n,
                     gates={**gate, "min-norm-peak": (ms.mean, bool(ms.mean >= 1.5))},
                     why_not_computed="one seed: no interval across seeds",
                     null=(ms.mean, None if ms.n < 2 else bool(ms.hi <= 1)),
                     details={"ridge": cfg.ridge, "ridge_ratio_by_seed": rr, "min_norm_ratio_mean": ms.mean,
                              "min_norm_ratio_ci": ms.ci, "min_norm_ratio_by_seed": mr})


def threshold(exp: Experiment, cfg, results: pd.DataFrame, tasks: dict[str, int]) -> list[Verdict]:
    """The verdicts of the interpolation-threshold parts: peak, second descent, ridge on digits and linear."""
    gate, peak, desc, ridge = threshold_measurements(results, tasks)
    return [peak_at_threshold(exp, cfg, tasks, peak, gate), second_descent(exp, cfg, desc, gate),
            *(ridge_removes_peak(exp, cfg, task, ridge, gate) for task in ("digits", "linear"))]


def isotropic(exp: Experiment, cfg, results: pd.DataFrame) -> Verdict:
    """``isotropic-exact`` (check): the largest |Monte Carlo / exact - 1| over gamma of the seed-mean relative
    deviation."""
    mc, ex = curves(results, "isotropic", "test_risk"), curves(results, "isotropic", "exact_risk")
    seeds = [s for s in mc.columns if mc[s].notna().all()]
    if not seeds:
        return exp.judge(cfg, "isotropic-exact", value=None, passed=None, why_not_computed="no Monte Carlo rows")
    rel = mc[seeds] / ex[seeds] - 1  # gammas x seeds
    dev = rel.mean(axis=1).abs()
    worst = dev.idxmax()
    st = across_seeds(rel.loc[worst].to_numpy())
    ok = bool(dev.max() <= 0.05)
    return exp.judge(cfg, "isotropic-exact", value=float(dev.max()), passed=ok, ci=st.ci,
                     ci_kind=st.kind + f" (relative deviation at gamma = {worst:g})", n_seeds=st.n,
                     details={"relative_deviation_by_gamma": {float(g): float(v) for g, v in rel.mean(axis=1).items()},
                              "worst_gamma": float(worst), "r2": cfg.iso_r2, "sigma2": cfg.iso_sigma2,
                              "n": cfg.iso_n})


def verdicts(exp: Experiment, cfg, results: pd.DataFrame) -> list[Verdict]:
    """Every part's verdicts present in ``results``: u-curve, the threshold claims, the isotropic check."""
    out: list[Verdict] = []
    if "part" not in results or results.empty:
        return out
    parts = set(results["part"])
    if "ucurve" in parts:
        out.append(ucurve(exp, cfg, results))
    tasks = {"digits": cfg.digits_n, "linear": cfg.linear_n}
    if parts & set(tasks):
        out.extend(threshold(exp, cfg, results, {k: v for k, v in tasks.items() if k in parts}))
    if "isotropic" in parts:
        out.append(isotropic(exp, cfg, results))
    return out
