"""Verdicts of :mod:`lmsci.experiments.steering.lm_steer` on the Shakespeare GPTs: one function per claim.

Each function takes the experiment (for :meth:`Experiment.judge` and the registered gates), the resolved config,
the real arm's rows and the null arm's rows (one row per seed of W each, sorted by ``seed_index``; the same columns)
and the gate values ``G`` (:func:`gates`, plus ``single-steer-gains``), and returns the claim's verdict. Statistics
are across the seeds of W with a Student-t 95% CI (:func:`lmsci.stats.across_seeds`); every claim but
``vs-baselines`` has a null arm (the arm ``null``: a random W of the same Frobenius norm and rank), judged by the
same rule on the same statistic. Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language
Models", ACL 2024, arXiv 2305.12798, Tables 1, 2 and 5, sec. 5, App. F-G.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from lmsci.claims import Verdict
from lmsci.stats import across_seeds
from lmsci.experiments.steering.lm_steer_detox import mean_curve, nan_stat
from lmsci.measure import text_scores as ts

ATTRS = ("sentiment", "genre")

#: claim id -> why its null arm (a random W of the trained W's Frobenius norm and rank, a fresh draw per seed, so W
#: and -W are equally likely) could meet the registered rule: the claims' ``null_can_meet`` (kept here, beside the
#: verdicts, for the experiment module's 500-line limit)
NULL_CAN_MEET = {
    "steering": "only by chance: a change that does not depend on the steer's sign (e.g. degraded text) raises one "
                "direction's gain and lowers the other's, so the random W meets the rule only when every seed's draw "
                "happens to push both attributes toward their targets",
    "continuous": "yes: the perplexity part almost surely (any steer of growing size costs fluency), and each score "
                  "part when the seeds' draws lean toward that attribute on balance and outweigh the sign-independent "
                  "change, so that the seed-averaged curve rises monotonically: by chance, for both attributes",
    "compositional": "yes, if the other attribute's steer carries this one (e.g. comedy lines more positive than "
                     "tragedy lines, so the genre steer alone moves sentiment and the sentiment steer P(comedy)) by "
                     "60% of the single-steer gain",
    "transfer": "only by chance: the mapped random W's spread on B has a random sign per seed, and the rule is met "
                "when every seed's draw leans toward both targets by 30% of the real steer's spread on A",
    "highlighting": "yes, if the highlighting favours VADER words for reasons other than sentiment: lexicon words are "
                    "content words, rarer than function words and with larger output embeddings, so any W's "
                    "log-probability differences may peak on them (the random spans control the span lengths only)",
    "probe": "yes, if the tokens at the extremes of any direction are VADER words more often than the base rate: a "
             "random projection's extremes favour tokens with large embeddings, and sentiment words may have larger "
             "embeddings than the other whole-word tokens",
    "detox": "yes, if any steer of this size lowers toxicity by degrading GPT2-Large's text whatever its direction "
             "(garbled or repetitive continuations score low on the toxicity classifier)",
    "detox-tradeoff": "yes, by the same degradation: perplexity rises with any steer's size, and if degraded text "
                      "scores as less toxic the random W's toxicity falls monotonically with the steer value too",
}

Gates = dict[str, tuple[Any, bool]]


def gates(r0: pd.Series) -> Gates:
    """The gates read from the first row (the language models and the classifier are shared by every seed of W):
    ``lm-learned`` (NLL in nats/token), ``genre-classifier`` (Wilson lower bound), ``fluency-lm``."""
    return {"lm-learned": ({"val_nll": float(r0["val_nll_A"]), "unigram_nll": float(r0["unigram_nll"]),
                            "bigram_nll": float(r0["bigram_nll"])},
                           bool(float(r0["val_nll_A"]) <= float(r0["unigram_nll"]) - 1.0)),
            "genre-classifier": ({"accuracy": float(r0["clf_acc"]), "wilson_lo": float(r0["clf_acc_lo"]),
                                  "n_lines": int(r0["clf_n"])}, bool(float(r0["clf_acc_lo"]) > 0.5)),
            "fluency-lm": ({"val_nll_fluency": float(r0["val_nll_fluency"]), "val_nll_A": float(r0["val_nll_A"])},
                           bool(float(r0["val_nll_fluency"]) < float(r0["val_nll_A"])))}


def _col(res: pd.DataFrame, name: str) -> list[float]:
    return [float(v) for v in res[name]]


def _has(res: pd.DataFrame, *names: str) -> bool:
    return len(res) > 0 and all(n in res for n in names)


def _gates_for(exp: Any, G: Gates, cid: str) -> Gates:
    return {g.id: G[g.id] for g in exp.get_claim(cid).gates}


def gain_stats(res: pd.DataFrame) -> dict[str, Any]:
    """``"{attr}_{pos|neg}"`` -> the across-seed statistic of the single-steer gain at +-steer_value (columns
    ``{attr}_gain_{pos|neg}`` of one arm's rows)."""
    return {f"{a}_{d}": across_seeds(_col(res, f"{a}_gain_{d}")) for a in ATTRS for d in ("pos", "neg")}


def single_steer_gains_gate(stats: dict[str, Any]) -> tuple[Any, bool]:
    """The gate ``single-steer-gains``: every gain's 95% CI across seeds above 0."""
    return ({k: [st.lo, st.hi] for k, st in stats.items()},
            bool(all(np.isfinite(st.lo) and st.lo > 0 for st in stats.values())))


def weak_gain_note(stats: dict) -> str:
    """A caveat naming the single-steer gains whose 95% CI across seeds reaches 0: a retention ratio over such a
    small denominator is unstable (it can exceed 1 or change sign)."""
    weak = [k for k, st in stats.items() if st.lo <= 0]
    return ("" if not weak else "single-steer gains whose CI across seeds reaches 0 (" + ", ".join(weak) + "): the "
            "retention ratios of these attributes divide by a gain not distinguishable from 0 and are unstable")


def continuous_stats(curves: list[dict]) -> tuple[list[float], dict[str, Any]]:
    """The continuous claim's three Spearman correlations on the seed-averaged curves (one dict per seed:
    attribute -> curve), and the details: the mean curves and the correlations by name."""
    mean_curves = {a: mean_curve([c[a] for c in curves]) for a in ATTRS}
    rho = {a: ts.spearman(mean_curves[a]["s"], mean_curves[a][a]) for a in ATTRS}
    ppl_rho = {}
    for a in ATTRS:
        s, p = np.asarray(mean_curves[a]["s"]), np.asarray(mean_curves[a]["ppl"])
        mags = sorted({abs(v) for v in s})
        ppl_rho[a] = ts.spearman(mags, [float(p[np.abs(s) == m].mean()) for m in mags])
    vals = [rho["sentiment"], rho["genre"], nan_stat(np.mean, list(ppl_rho.values()))]
    return vals, {"spearman_score": rho, "spearman_abs_ppl": ppl_rho, "mean_curves": mean_curves}


def steering(exp: Any, cfg: Any, res: pd.DataFrame, nres: pd.DataFrame, G: Gates, stats: dict[str, Any]) -> Verdict:
    """``steering``: the smallest of the four mean gains; every gain's CI lower end > 0."""
    worst = min(stats, key=lambda k: stats[k].mean)
    null: tuple[Any, bool | None] = (None, None)
    null_details: dict[str, Any] = {}
    if _has(nres, *(f"{a}_gain_{d}" for a in ATTRS for d in ("pos", "neg"))):
        nstats = gain_stats(nres)
        nw = min(nstats, key=lambda k: nstats[k].mean)
        null = (nstats[nw].mean, bool(all(np.isfinite(st.lo) and st.lo > 0 for st in nstats.values())))
        null_details = {"null_random_W": {k: {"mean": st.mean, "ci": [st.lo, st.hi]} for k, st in nstats.items()}}
    return exp.judge(cfg, "steering", value=stats[worst].mean, passed=all(s.lo > 0 for s in stats.values()),
                     ci=stats[worst].ci, ci_kind=stats[worst].kind, n_seeds=stats[worst].n,
                     gates=_gates_for(exp, G, "steering"), null=null,
                     details={k: {"mean": s.mean, "ci": [s.lo, s.hi],
                                  "per_seed": _col(res, f"{k.rsplit('_', 1)[0]}_gain_{k.rsplit('_', 1)[1]}")}
                              for k, s in stats.items()} | {"smallest": worst} | null_details,
                     note="sentiment in VADER compound units, genre in P(comedy) units")


def continuous(exp: Any, cfg: Any, res: pd.DataFrame, nres: pd.DataFrame, G: Gates, stats: dict[str, Any]) -> Verdict:
    """``continuous``: the three Spearman correlations on the seed-averaged curves, each >= 0.9."""
    curves = [json.loads(c) for c in res["curves"]]
    vals, cd = continuous_stats(curves)
    mean_curves, rho, ppl_rho = cd["mean_curves"], cd["spearman_score"], cd["spearman_abs_ppl"]
    ok = None if any(not np.isfinite(v) for v in vals) else all(v >= 0.9 for v in vals)
    per_seed_min = [min(ts.spearman([c["s"] for c in cv[a]], [c[a] for c in cv[a]]) for a in ATTRS) for cv in curves]
    null, null_details = (None, None), {}
    if _has(nres, "curves") and nres["curves"].notna().all():
        nv, nd = continuous_stats([json.loads(c) for c in nres["curves"]])
        # a constant curve (NaN Spearman) does not meet the rule
        null = (nan_stat(np.min, nv), bool(all(np.isfinite(v) and v >= 0.9 for v in nv)))
        null_details = {"null_random_W": nd}
    return exp.judge(cfg, "continuous", value=nan_stat(np.min, vals), passed=ok, n_seeds=len(res),
                     ci=(nan_stat(np.min, per_seed_min), nan_stat(np.max, per_seed_min)),
                     ci_kind="range across seeds of the per-seed smallest attribute Spearman",
                     gates=_gates_for(exp, G, "continuous"),
                     why_not_computed="" if ok is not None else "a constant curve", null=null,
                     details={"spearman_score": rho, "spearman_abs_ppl": ppl_rho, "mean_curves": mean_curves,
                              **null_details})


def compositional(exp: Any, cfg: Any, res: pd.DataFrame, nres: pd.DataFrame, G: Gates,
                  stats: dict[str, Any]) -> Verdict:
    """``compositional``: each attribute's mean retention across seeds >= 0.6."""
    cs = {a: across_seeds(_col(res, f"comp_{a}_retention")) if np.isfinite(_col(res, f"comp_{a}_retention")).any()
          else None for a in ATTRS}
    if any(v is None for v in cs.values()):
        return exp.judge(cfg, "compositional", value=None, passed=None, gates=_gates_for(exp, G, "compositional"),
                         why_not_computed="a single-steer gain was not positive in any seed, so retention "
                                          "is undefined")
    w = min(ATTRS, key=lambda a: cs[a].mean)
    null, nd = (None, None), {}
    if _has(nres, *(f"comp_{a}_retention" for a in ATTRS)):
        # a retention undefined in every seed (NaN) does not meet the rule
        nm = {a: nan_stat(np.mean, _col(nres, f"comp_{a}_retention")) for a in ATTRS}
        null = (nan_stat(np.min, list(nm.values())), bool(all(np.isfinite(v) and v >= 0.6 for v in nm.values())))
        nd = {"null_random_W": {a: {"mean": nm[a], "per_seed": _col(nres, f"comp_{a}_retention")}
                                for a in ATTRS}}
    return exp.judge(cfg, "compositional", value=cs[w].mean, passed=all(s.mean >= 0.6 for s in cs.values()),
                     ci=cs[w].ci, ci_kind=cs[w].kind, n_seeds=cs[w].n, gates=_gates_for(exp, G, "compositional"),
                     null=null,
                     details={a: {"mean": s.mean, "ci": [s.lo, s.hi], "per_seed": _col(res, f"comp_{a}_retention")}
                              for a, s in cs.items()} | nd, note=weak_gain_note(stats))


def transfer(exp: Any, cfg: Any, res: pd.DataFrame, nres: pd.DataFrame, G: Gates, stats: dict[str, Any]) -> Verdict:
    """``transfer``: each attribute's mean retention on B >= 0.3 and the spread on B's CI lower end > 0."""
    tr = {a: _col(res, f"transfer_{a}_retention") for a in ATTRS}
    if any(not np.isfinite(v).any() for v in tr.values()):
        return exp.judge(cfg, "transfer", value=None, passed=None, gates=_gates_for(exp, G, "transfer"),
                         why_not_computed="the steer's spread on A was not positive, so retention is undefined")
    ts_ = {a: across_seeds(tr[a]) for a in ATTRS}
    sp = {a: across_seeds(_col(res, f"transfer_{a}_spread_B")) for a in ATTRS}
    w = min(ATTRS, key=lambda a: ts_[a].mean)
    null, nd = (None, None), {}
    if _has(nres, *(f"transfer_{a}_{c}" for a in ATTRS for c in ("retention", "spread_B"))):
        nm = {a: nan_stat(np.mean, _col(nres, f"transfer_{a}_retention")) for a in ATTRS}
        nsp = {a: across_seeds(_col(nres, f"transfer_{a}_spread_B")) for a in ATTRS}
        null = (nan_stat(np.min, list(nm.values())),
                bool(all(np.isfinite(nm[a]) and nm[a] >= 0.3 and nsp[a].lo > 0 for a in ATTRS)))
        nd = {"null_random_W": {a: {"retention": _col(nres, f"transfer_{a}_retention"),
                                    "spread_B_ci": [nsp[a].lo, nsp[a].hi]} for a in ATTRS}}
    return exp.judge(cfg, "transfer", value=ts_[w].mean, passed=all(ts_[a].mean >= 0.3 and sp[a].lo > 0 for a in ATTRS),
                     ci=ts_[w].ci, ci_kind=ts_[w].kind, n_seeds=ts_[w].n, gates=_gates_for(exp, G, "transfer"),
                     null=null,
                     details={a: {"retention": tr[a], "spread_B_ci": [sp[a].lo, sp[a].hi],
                                  "map_heldout_rel_error": _col(res, f"transfer_{a}_map_error")}
                              for a in ATTRS} | nd, note=weak_gain_note(stats))


def _enrichment(exp: Any, cfg: Any, res: pd.DataFrame, nres: pd.DataFrame, G: Gates, cid: str, name: str,
                thr: float) -> Verdict:
    """An enrichment claim (column ``name``): mean across seeds >= ``thr`` and its CI lower end > 1."""
    v = _col(res, name)
    if not np.isfinite(v).any():
        return exp.judge(cfg, cid, value=None, passed=None, gates=_gates_for(exp, G, cid),
                         why_not_computed="no lexicon word in the reference spans / vocabulary")
    s = across_seeds(v)
    null, nd = (None, None), {}
    if _has(nres, name):
        nv = _col(nres, name)
        if np.isfinite(nv).any():
            ns = across_seeds(nv)
            null = (ns.mean, bool(ns.mean >= thr and ns.lo > 1))
            nd = {"null_random_W": {"per_seed": nv, "ci": [ns.lo, ns.hi]}}
        else:  # no lexicon word in the null arm's spans / extremes: an enrichment of 0, below the rule
            null = (0.0, False)
            nd = {"null_random_W": {"per_seed": nv}}
    return exp.judge(cfg, cid, value=s.mean, passed=bool(s.mean >= thr and s.lo > 1), ci=s.ci,
                     ci_kind=s.kind, n_seeds=s.n, gates=_gates_for(exp, G, cid), null=null,
                     details={"per_seed": v} | nd)


def highlighting(exp: Any, cfg: Any, res: pd.DataFrame, nres: pd.DataFrame, G: Gates, stats: dict[str, Any]) -> Verdict:
    """``highlighting``: lexicon enrichment of the highlighted spans, mean >= 2 and CI lower end > 1."""
    return _enrichment(exp, cfg, res, nres, G, "highlighting", "highlight_enrichment", 2.0)


def probe(exp: Any, cfg: Any, res: pd.DataFrame, nres: pd.DataFrame, G: Gates, stats: dict[str, Any]) -> Verdict:
    """``probe``: lexicon enrichment of the SVD probe's extreme tokens, mean >= 3 and CI lower end > 1."""
    return _enrichment(exp, cfg, res, nres, G, "probe", "probe_enrichment", 3.0)


def vs_baselines(exp: Any, cfg: Any, res: pd.DataFrame, nres: pd.DataFrame, G: Gates, stats: dict[str, Any]) -> Verdict:
    """The ablation: LM-Steer's sentiment gain minus each baseline's at LM-Steer's perplexity increase, across
    the seeds whose baselines were trained."""
    gates_ = _gates_for(exp, G, "vs-baselines")
    m = {k[len("matched_"):]: [float(x) for x in res[k]] for k in res.columns if k.startswith("matched_")}
    names = [b for b in cfg.baselines if b in m]
    details: dict[str, Any] = {k: {"mean": nan_stat(np.mean, v) if np.isfinite(v).any() else None, "per_seed": v}
                               for k, v in m.items()}
    lm_gain = m.get("lm_steer", [float("nan")])
    if not names:
        return exp.judge(cfg, "vs-baselines", value=None, passed=None, gates=gates_,
                         why_not_computed="no baseline was trained", details=details)
    # a seed counts where both gains are defined (a baseline whose sweep does not reach LM-Steer's perplexity
    # increase has no gain there); fewer than min_seeds such seeds make the ablation inconclusive
    diffs = {b: [x - y for x, y in zip(lm_gain, m[b]) if np.isfinite(x) and np.isfinite(y)] for b in names}
    empty = [b for b in names if not diffs[b]]
    if empty:
        return exp.judge(cfg, "vs-baselines", value=None, passed=None, gates=gates_, details=details,
                         why_not_computed=f"the perplexity sweep of {', '.join(empty)} does not reach "
                                          "LM-Steer's perplexity increase in any seed")
    n = min(len(d) for d in diffs.values())
    st = {b: across_seeds(diffs[b]) for b in names}
    w = min(names, key=lambda b: st[b].mean)
    details["lm_steer_minus"] = {b: {"mean": st[b].mean, "ci": [st[b].lo, st[b].hi], "per_seed": diffs[b]}
                                 for b in names}
    return exp.judge(cfg, "vs-baselines", value=st[w].mean, passed=bool(all(st[b].mean >= 0 for b in names)),
                     ci=st[w].ci, ci_kind=st[w].kind + f" (LM-Steer - {w})", n_seeds=n, gates=gates_,
                     details=details)


#: the Shakespeare claims' verdict functions, in the registered claims' order
CLAIM_VERDICTS = (steering, continuous, compositional, transfer, highlighting, probe, vs_baselines)


def shakespeare_verdicts(exp: Any, cfg: Any, res: pd.DataFrame, nres: pd.DataFrame) -> list[Verdict]:
    """Every Shakespeare claim's verdict, in claim order, from the real arm's rows ``res`` and the null arm's rows
    ``nres`` (each sorted by seed of W; ``nres`` empty: the null arm not measured)."""
    stats = gain_stats(res)
    G = gates(res.iloc[0])
    G["single-steer-gains"] = single_steer_gains_gate(stats)
    return [f(exp, cfg, res, nres, G, stats) for f in CLAIM_VERDICTS]
