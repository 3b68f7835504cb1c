"""Verdicts of :mod:`lmsci.experiments.knowledge.reversal_curse`: one function per claim.

Each claim compares, seed by seed, the forward-only point (``reverse_in_training`` False) with the with-reverse
point (True) on one column of the results (one row per point and seed): ``inverse_test`` (inverse-search exact
match after QA fine-tuning), ``reverse_completion_test`` (greedy exact match of the name after the held-out
attributes-only prompt) or ``name_gap_bits_test`` (correct-minus-random name log-probability, bits). The value is
the mean over seeds of (with-reverse - forward-only) with its 95% Student-t CI across seeds
(:func:`lmsci.stats.across_seeds`). The null arm (``null_*`` columns of the forward-only rows: a randomly
initialised model) takes the with-reverse arm's place in the same rule. Sources: Allen-Zhu & Li, Part 3.2, arXiv
2309.14402, Section 5; Berglund et al., "The Reversal Curse", arXiv 2309.12288, Section 2, Table 1, Figure 4.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from lmsci.claims import Verdict
from lmsci.stats import across_seeds
from lmsci.experiments.knowledge._gates import paired, recall_gate, seed_summary, seed_values, within_run

FORWARD_QA_MIN = 0.5
GAP_FORWARD_MAX, GAP_LIFT_MIN = 1.0, 3.0


def per(results: pd.DataFrame, col: str, rev: bool) -> dict[int, float]:
    """``{seed_index: col}`` of the with-reverse (``rev``) or forward-only rows."""
    return seed_values(results, col, reverse_in_training=rev)


def lift(results: pd.DataFrame, col: str):
    """``(forward-only per seed, with-reverse per seed, across-seed statistic of their difference, forward-only
    mean, with-reverse mean)`` over the seeds both arms have; None when they share none."""
    f, r = per(results, col, False), per(results, col, True)
    seeds = paired(f, r)
    if not seeds:
        return None
    return (f, r, across_seeds([r[k] - f[k] for k in seeds]), across_seeds([f[k] for k in seeds]).mean,
            across_seeds([r[k] for k in seeds]).mean)


def null_lift(results: pd.DataFrame, col: str, rule: Callable) -> tuple[tuple[float, bool] | None, dict]:
    """The null arm (random-init model, in the forward-only rows) in place of the with-reverse arm:
    ``(null=(value, meets the rule), details)``."""
    f, z = per(results, col, False), per(results, "null_" + col, False)
    seeds = paired(f, z)
    if not seeds:
        return None, {}
    d = across_seeds([z[k] - f[k] for k in seeds])
    mf, mz = across_seeds([f[k] for k in seeds]).mean, across_seeds([z[k] for k in seeds]).mean
    return (d.mean, bool(rule(mf, mz, d))), {"null_arm": {"per_seed": z, "minus_forward_only": d.mean,
                                                          "ci95": d.ci}}


def shared(cfg: Any, results: pd.DataFrame) -> dict[str, Any]:
    """What every claim reads: ``n`` (P_test size), the ``memorised`` and ``reverse-memorised`` gates and the
    ``scale`` phrase of the notes."""
    return {"n": int(results["n_test"].iloc[0]) if "n_test" in results and len(results) else 0,
            "mem": recall_gate(per(results, "bio_recall_test", False), per(results, "bio_recall_test", True)),
            "rmem": recall_gate(per(results, "reverse_recall_test", True)),
            "scale": (f"N={cfg.n_people}, d_model={cfg.model.d_model}, {cfg.model.n_layers} layers, "
                      f"{cfg.exposures} exposures, reverse{cfg.reverse_groups}")}


def reversal_verdict(exp: Any, cfg: Any, results: pd.DataFrame, S: dict[str, Any]) -> Verdict | None:
    """``reversal``: P_test inverse search after QA fine-tuning; forward-only <= 0.1, with-reverse >= 0.5 and the
    difference's CI above 0; gates memorised, reverse-memorised and forward-qa. None when not measured."""
    got = lift(results, "inverse_test")
    if got is None:
        return None
    n, mem, rmem, scale = S["n"], S["mem"], S["rmem"], S["scale"]
    inv_f, inv_r, diff, mf, mr = got
    fwd_f, fwd_r = per(results, "qa_test", False), per(results, "qa_test", True)
    fwd = [v for d in (fwd_f, fwd_r) for v in d.values()]
    fwd_gate = (min(fwd), min(fwd) >= FORWARD_QA_MIN) if fwd else (None, None)

    def rule(f_, r_, d_):
        return f_ <= 0.1 and r_ >= 0.5 and (d_.ci is None or d_.ci[0] > 0)

    ok = rule(mf, mr, diff)
    null, nd = null_lift(results, "inverse_test", rule)
    return exp.judge(
        cfg, "reversal", value=diff.mean, passed=ok, ci=diff.ci, ci_kind=diff.kind, n_seeds=diff.n,
        gates={"memorised": mem, "reverse-memorised": rmem, "forward-qa": fwd_gate}, null=null,
        details={**nd, "inverse_test_forward_only": seed_summary(inv_f),
                 "inverse_test_with_reverse": seed_summary(inv_r),
                 "inverse_train": {"forward_only": per(results, "inverse_train", False),
                                   "with_reverse": per(results, "inverse_train", True)},
                 "forward_qa_test": {"forward_only": fwd_f, "with_reverse": fwd_r},
                 "forward_qa_train": {"forward_only": per(results, "qa_train", False),
                                      "with_reverse": per(results, "qa_train", True)},
                 "bio_recall_test": {"forward_only": per(results, "bio_recall_test", False),
                                     "with_reverse": per(results, "bio_recall_test", True)},
                 "reverse_recall_test": per(results, "reverse_recall_test", True),
                 "forward_only_within_run": within_run(inv_f, n), "with_reverse_within_run": within_run(inv_r, n),
                 "paper": {"gpt3_reverse_exact_match": 0.0, "part3.2_inverse_search": "~0%"}},
        note="" if ok else (f"At {scale}: inverse search after QA fine-tuning = {mr:.2f} with reversed "
                            f"biographies, {mf:.2f} forward-only."))


def reverse_completion_verdict(exp: Any, cfg: Any, results: pd.DataFrame, S: dict[str, Any]) -> Verdict | None:
    """``reverse-completion``: held-out-template completion on the pretrained model; forward-only <= 0.1 and
    (with-reverse - forward-only) >= 0.3 with its CI above 0. None when not measured."""
    got = lift(results, "reverse_completion_test")
    if got is None:
        return None
    n, mem, rmem, scale = S["n"], S["mem"], S["rmem"], S["scale"]
    sf, sr, d, f, r = got

    def rule(f_, r_, d_):
        return f_ <= 0.1 and d_.mean >= 0.3 and (d_.ci is None or d_.ci[0] > 0)

    ok = rule(f, r, d)
    null, nd = null_lift(results, "reverse_completion_test", rule)
    return exp.judge(
        cfg, "reverse-completion", value=d.mean, passed=ok, ci=d.ci, ci_kind=d.kind, n_seeds=d.n,
        gates={"memorised": mem, "reverse-memorised": rmem}, null=null,
        details={**nd, "forward_only": seed_summary(sf), "with_reverse": seed_summary(sr),
                 "train_people": {"forward_only": per(results, "reverse_completion_train", False),
                                  "with_reverse": per(results, "reverse_completion_train", True)},
                 "forward_only_within_run": within_run(sf, n), "with_reverse_within_run": within_run(sr, n),
                 "paper": {"gpt3_reverse_exact_match": 0.0, "gpt3_same_direction_held_out": 0.967}},
        note="" if ok else f"At {scale}: held-out-template completion {r:.2f} with reversed biographies, "
                           f"{f:.2f} forward-only.")


def name_logprob_verdict(exp: Any, cfg: Any, results: pd.DataFrame, S: dict[str, Any]) -> Verdict | None:
    """``name-logprob``: correct-minus-random name log-probability (bits) on the pretrained model; forward-only
    <= GAP_FORWARD_MAX and the lift >= GAP_LIFT_MIN with its CI above 0. None when not measured."""
    got = lift(results, "name_gap_bits_test")
    if got is None:
        return None
    mem, rmem, scale = S["mem"], S["rmem"], S["scale"]
    gf, gr, d, f, r = got

    def rule(f_, r_, d_):
        return f_ <= GAP_FORWARD_MAX and d_.mean >= GAP_LIFT_MIN and (d_.ci is None or d_.ci[0] > 0)

    ok = rule(f, r, d)
    null, nd = null_lift(results, "name_gap_bits_test", rule)
    return exp.judge(
        cfg, "name-logprob", value=d.mean, passed=ok, ci=d.ci, ci_kind=d.kind, n_seeds=d.n,
        gates={"memorised": mem, "reverse-memorised": rmem}, null=null,
        details={**nd, "forward_only_bits": seed_summary(gf), "with_reverse_bits": seed_summary(gr),
                 "train_people_bits": {"forward_only": per(results, "name_gap_bits_train", False),
                                       "with_reverse": per(results, "name_gap_bits_train", True)},
                 "paper": "correct name no more likely than a random name (Berglund et al., Figure 4)"},
        note="" if ok else f"At {scale}: correct-minus-random name log-probability {f:.2f} bits "
                           f"forward-only, {r:.2f} bits with reversed biographies.")


def verdicts(exp: Any, cfg: Any, results: pd.DataFrame) -> list[Verdict]:
    """``reversal``, ``reverse-completion``, ``name-logprob`` in that order, each only when measured."""
    S = shared(cfg, results)
    out = [f(exp, cfg, results, S) for f in (reversal_verdict, reverse_completion_verdict, name_logprob_verdict)]
    return [v for v in out if v is not None]
