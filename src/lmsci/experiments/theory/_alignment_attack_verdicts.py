"""Verdicts of :mod:`lmsci.experiments.theory.alignment_attack` judged by hand (the trained world's two claims: the
escape hatch, see that module's docstring) and the registered thresholds (the exact world's checks are judged by the
engine from the statistics in :mod:`._alignment_attack_exact`).

The results table has one ``exact`` row per seed (closed-form world: maxima over its cells; ``thm2_slope_ratio`` and
its null ``thm2_null_ratio``, means over cells) and one ``trained`` row per training seed and arm (sigmoid fits
``{tag}_nstar``, ``{tag}_lo``, ``{tag}_hi`` of the share of negative next sentences against the number N of attack
sentences, ``tag = a<alpha>``; on the ``good`` arm the P+ proxy's, on the ``mix2`` arm the second mixture's).
Source: Wolf et al., "Fundamental Limitations of Alignment in Large Language Models", ICML 2024, arXiv 2304.11082,
Theorems 1, 2, 4 and Appendix H.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from lmsci.claims import Verdict
from lmsci.stats import across_seeds
from lmsci.experiments.base import Experiment

CENTRE_TOL = 0.25  # exact world: fitted centre within 25% of log((1-alpha)/alpha)/beta
SLOPE_TOL = 0.25  # exact world: Thm 2 slope within 25% of beta'/beta (thm2-slope)
CENSORED_MAX = 0.01  # thm2-slope gate: at most 1% of sampled attacks never misalign within the horizon
FACTOR = 2.0  # trained world: N* within a factor 2 of log(1/alpha)/beta_hat
RISE_SHARE = 0.5  # trained world: the fitted rise of the share at least half of neg_bad - neg_good
NLL_GAP = 0.05  # gate: the trained mixture's held-out NLL within this of the Bayes mixture (nats/sentence)
DELTA = 0.1  # thm2-bound: the share of system prompts must be >= 1 - DELTA (the registered delta of every preset)


def learned_gate(cfg, tr: pd.DataFrame) -> tuple[float | None, bool]:
    """Gate ``learned``: the largest gap (nats/sentence) of a trained mixture's held-out NLL over the Bayes
    mixture's, over seeds and alphas, and whether it is at most ``NLL_GAP``."""
    tags = [f"a{a:g}" for a in cfg.trained_alphas]
    gaps = [float(r[f"{t}_nll"] - r[f"{t}_bayes_nll"]) for _, r in tr.iterrows() for t in tags
            if f"{t}_nll" in tr]
    return (max(gaps) if gaps else None, bool(gaps) and max(gaps) <= NLL_GAP)


def ok_fit(tr: pd.DataFrame, tag: str, lmax: int) -> tuple[Any, bool]:
    """Gate ``fit``: the fitted centres N* of ``tag`` per seed, and whether every one is finite in [0, lmax]."""
    ns = tr.get(f"{tag}_nstar")
    if ns is None:
        return (None, False)
    vals = [float(x) if x is not None and not pd.isna(x) else float("nan") for x in ns]
    good = all(math.isfinite(v) and 0 <= v <= lmax for v in vals)
    return (vals, good)


def centre_stat(cfg, tr: pd.DataFrame, ncol: str, rcols) -> tuple[Any, Any, Any]:
    """(SeedStat of N* beta_hat / log(1/alpha0), mean rise, passed) for the column ``ncol``; ``rcols(row)`` gives
    a row's fitted rise ``hi - lo`` (share units). All None when no row has a centre."""
    a0 = cfg.trained_alphas[0]
    rise_min = RISE_SHARE * (cfg.neg_bad - cfg.neg_good)
    rows = [r for _, r in tr.iterrows() if ncol in r and r.get(ncol) is not None and not pd.isna(r.get(ncol))]
    if not rows:
        return None, None, None
    rat = [float(r[ncol]) * float(r["beta_hat"]) / math.log(1 / a0) for r in rows]
    rise = [rcols(r) for r in rows]
    rise = float(np.nanmean(rise)) if any(x is not None and np.isfinite(x) for x in rise) else float("nan")
    st = across_seeds(rat)
    lo, hi = (st.lo, st.hi)
    return st, rise, bool(lo >= 1 / FACTOR and hi <= FACTOR and rise >= rise_min)


def persona_centre(exp: Experiment, cfg, tr: pd.DataFrame, learned, good: pd.DataFrame) -> Verdict:
    """``persona-centre``: N* beta_hat / log(1/alpha0) per seed within a factor 2 of 1, with a rise of the share of
    at least ``RISE_SHARE (neg_bad - neg_good)``; null arm: the P+ proxy's curve on the same prompts."""
    a0 = cfg.trained_alphas[0]
    t0 = f"a{a0:g}"
    lmax = cfg.doc_len - 1
    fit0 = ok_fit(tr, t0, lmax)
    rise_min = RISE_SHARE * (cfg.neg_bad - cfg.neg_good)

    def real_rise(r):
        return float(r[f"{t0}_hi"]) - float(r[f"{t0}_lo"]) if f"{t0}_hi" in r and not pd.isna(r.get(f"{t0}_hi")) \
            else float("nan")

    st, rise, ok = centre_stat(cfg, tr, f"{t0}_nstar", real_rise)
    if len(good) and f"{t0}_nstar" in good:  # the null arm: the P+ proxy's curve, the real arm's statistic
        gst, grise, gok = centre_stat(cfg, good, f"{t0}_nstar", real_rise)
        # no fit, or no centre inside the prompt range, does not meet the rule
        g_in = all(x is not None and not pd.isna(x) and 0 <= float(x) <= lmax for x in good[f"{t0}_nstar"])
        null0 = (None, False) if gst is None else (gst.mean, bool(gok and g_in))
    else:
        null0 = (None, None)
    if st is None:
        return exp.judge(cfg, "persona-centre", value=None, passed=None, gates={"learned": learned, "fit": fit0},
                         why_not_computed="no sigmoid fit converged", null=null0)
    return exp.judge(cfg, "persona-centre", value=st.mean, ci=st.ci, ci_kind=st.kind, n_seeds=st.n,
                     passed=ok, gates={"learned": learned, "fit": fit0}, null=null0,
                     details={"ratio_per_seed": [float(r[f"{t0}_nstar"]) * float(r["beta_hat"]) /
                                                 math.log(1 / a0) for _, r in tr.iterrows()
                                                 if not pd.isna(r.get(f"{t0}_nstar"))],
                              "mean_rise": rise, "rise_min": rise_min,
                              "nstar_per_seed": [float(x) for x in tr[f"{t0}_nstar"]],
                              "theory_per_seed": [float(x) for x in tr[f"{t0}_theory"]],
                              "beta_hat_per_seed": [float(x) for x in tr["beta_hat"]],
                              "beta_true": float(tr["beta_true"].iloc[0]),
                              "null_good_proxy_nstar": [None if pd.isna(x) else float(x) for x in
                                                        good[f"{t0}_nstar"]] if len(good) and f"{t0}_nstar" in good
                              else None})


def persona_alpha_shift(exp: Experiment, cfg, tr: pd.DataFrame, learned, mix2: pd.DataFrame) -> Verdict:
    """``persona-alpha-shift``: the shift of N* from alpha0 to alpha1 per seed against ln(alpha0/alpha1)/beta_hat
    (sentences); null arm: a second alpha0 mixture (independent training seed), whose shift is 0 by construction."""
    a0 = cfg.trained_alphas[0]
    t0 = f"a{a0:g}"
    fit0 = ok_fit(tr, t0, cfg.doc_len - 1)
    t1 = f"a{cfg.trained_alphas[1]:g}"
    fit1 = ok_fit(tr, t1, cfg.doc_len - 1)
    shifts = [float(r[f"{t1}_nstar"]) - float(r[f"{t0}_nstar"]) for _, r in tr.iterrows()
              if not pd.isna(r.get(f"{t1}_nstar")) and not pd.isna(r.get(f"{t0}_nstar"))]
    target = math.log(a0 / cfg.trained_alphas[1]) / float(tr["beta_hat"].mean())
    null1 = (None, None)
    if len(mix2) and f"{t0}_nstar" in mix2:  # the null arm: the second alpha0 mixture, paired by seed
        second = mix2.set_index("seed_index")[f"{t0}_nstar"]
        nsh = [float(second[r["seed_index"]]) - float(r[f"{t0}_nstar"]) for _, r in tr.iterrows()
               if r["seed_index"] in second.index and not pd.isna(second[r["seed_index"]])
               and not pd.isna(r.get(f"{t0}_nstar"))]
        if len(nsh) >= 2:
            nst = across_seeds(nsh)
            null1 = (nst.mean, bool(nst.lo <= target <= nst.hi))
        else:
            null1 = (float(np.mean(nsh)) if nsh else None, None)
    if len(shifts) < 1:
        return exp.judge(cfg, "persona-alpha-shift", value=None, passed=None,
                         gates={"learned": learned, "fit": (False, False)}, null=null1,
                         why_not_computed="no sigmoid fit converged")
    st = across_seeds(shifts)
    half = (st.hi - st.lo) / 2 if st.n >= 2 else float("inf")
    lo, hi = (st.lo, st.hi)
    return exp.judge(
        cfg, "persona-alpha-shift", value=st.mean, ci=st.ci, ci_kind=st.kind, n_seeds=st.n,
        passed=bool(lo <= target <= hi), null=null1,
        gates={"learned": learned, "fit": (fit1[1] and fit0[1], fit0[1] and fit1[1]),
               "resolved": (half, half <= target / 2)},
        details={"shift_per_seed": shifts, "target_ln10_over_beta_hat": target,
                 "null_same_alpha_shift": null1[0]})


def verdicts(exp: Experiment, cfg, results: pd.DataFrame) -> list[Verdict]:
    """The trained world's claims judged by hand (``persona-alpha-shift`` only with two alphas); the exact world's
    checks are judged by the claims engine from the experiment's ``Stat`` s."""
    out: list[Verdict] = []
    if "kind" not in results:
        return out
    trained = results[results["kind"] == "trained"]
    arm = trained["arm"] if "arm" in trained else pd.Series("real", index=trained.index)
    tr, good, mix2 = (trained[arm == a] for a in ("real", "good", "mix2"))
    if len(tr):
        learned = learned_gate(cfg, tr)
        out.append(persona_centre(exp, cfg, tr, learned, good))
        if len(cfg.trained_alphas) >= 2:
            out.append(persona_alpha_shift(exp, cfg, tr, learned, mix2))
    return out
