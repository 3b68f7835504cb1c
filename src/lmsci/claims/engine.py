"""The one engine that judges a claim declared as values on a results table.

For a :class:`~lmsci.claims.Claim` whose statistic is a :class:`~lmsci.claims.stat.Stat` and whose rule is a
:class:`~lmsci.claims.rules.Rule`, :func:`judge_claim` does everything an experiment used to write by hand:

1. keeps the finished rows (``status == "ok"``; rows without a status count as finished);
2. computes the statistic per training seed on the real arm's rows (``arm == claim.arms[0]``) and, by the same
   statistic, on the null arm's (``claim.arms[1]``), paired by seed where the statistic is a contrast;
3. applies the same rule to both arms (mean and Student-t interval across seeds from :mod:`lmsci.stats`);
4. measures every gate that has a statistic, takes the others from ``gate_values`` (what the experiment's
   :meth:`~lmsci.contract.Experiment.measured_gates` returns), and
5. hands all of it to :func:`lmsci.claims.judge`, which alone decides the outcome (gates, preset scale, too few
   seeds, the null arm meeting the rule, post hoc and pilot marks).

A claim with ``uncertainty="exact"`` reads one value (the mean of the statistic's per-seed values) and no
interval. A check needs no null arm. Three pieces state the conjunctions that used to be judged by hand (issue 44
item 1): a rule :func:`~lmsci.claims.rules.all_of` several rules on one statistic; ``Claim.also``, further
``(Stat, Rule)`` conditions read at the main statistic's seeds; ``Claim.for_each``, the rule in every group of a
column (the verdict reports the group with the smallest margin); and several null arms (``Claim.arms[1:]``: the null
meets the rule if any null arm does, and its reported value is that of the arm with the largest margin). A null read
from other columns of the same rows, ``Claim.null_stat``, is judged by the same rule on the real arm's rows in place
of the null arms.
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from lmsci.claims.core import Claim, Verdict, judge
from lmsci.stats import across_seeds

STATUS_OK = "ok"


def finished(results: pd.DataFrame) -> pd.DataFrame:
    """The finished rows of a results table (``status`` missing or ``"ok"``)."""
    if results.empty or "status" not in results:
        return results
    return results[results["status"].fillna(STATUS_OK) == STATUS_OK]


def arm_rows(results: pd.DataFrame, arm: str, arm_column: str = "arm") -> pd.DataFrame:
    """The rows of ``arm`` (all rows when the table has no arm column and ``arm`` is ``"real"``)."""
    if arm_column not in results:
        return results if arm == "real" else results.iloc[0:0]
    return results[results[arm_column] == arm]


def _summary(rule: Any, values: pd.Series, exact: bool) -> tuple[float, tuple[float, float] | None, str, int]:
    s = rule.summary(values.to_numpy())
    if exact:
        return s.mean, None, "exact", 1
    return s.mean, s.ci, s.kind, s.n


def measure_gate(gate: Any, claim: Claim, ok: pd.DataFrame, arm_column: str = "arm") -> tuple[Any, bool | None]:
    """(value, passed) of a gate that has a statistic: the rule on its arm's per-seed values; the value is the
    mean over seeds (or the extreme the rule reads, for a minimum/maximum over seeds). Not measured (None) when
    no row matches."""
    arm = gate.arm or claim.arms[0]
    vals = gate.stat.per_seed(arm_rows(ok, arm, arm_column), ok, arm_column)
    if vals.empty:
        return None, None
    name = type(gate.rule).__name__
    value = float(vals.min()) if name == "EveryAtLeast" else float(vals.max()) if name == "EveryAtMost" \
        else float(vals.mean())
    return value, bool(gate.rule(vals.to_numpy()))


def _groups(claim: Claim, ok: pd.DataFrame) -> list[tuple[Any, pd.DataFrame]]:
    """``(group value, rows)`` of ``claim.for_each`` (one group of all rows without it)."""
    if not claim.for_each:
        return [(None, ok)]
    if claim.for_each not in ok:
        return []
    return [(g, rows) for g, rows in ok.groupby(claim.for_each, sort=True)]


def _arm(claim: Claim, ok: pd.DataFrame, arm: str, arm_column: str,
         stats: Any = None) -> tuple[pd.Series, bool, Any] | None:
    """On ``arm``: (per-seed values of the reported group, whether the rule and every ``also`` condition hold in
    every group, the reported group); None when a group has no value. ``stats``: the statistic and one per ``also``
    condition, read in place of the claim's (``Claim.null_stat``)."""
    got = []
    stat, *also_stats = (claim.stat, *(s for s, _ in claim.also)) if stats is None else stats
    for g, rows in _groups(claim, ok):
        vals = stat.per_seed(arm_rows(rows, arm, arm_column), rows, arm_column)
        if vals.empty:
            return None
        held = bool(claim.decider(vals.to_numpy()))
        for s, (_, r) in zip(also_stats, claim.also):
            v = s.per_seed(arm_rows(rows, arm, arm_column), rows, arm_column)
            held = held and bool(r(v[v.index.isin(vals.index)].to_numpy()))
        got.append((claim.decider.margin(vals.to_numpy()) if claim.for_each else 0.0, vals, held, g))
    if not got:
        return None
    _, vals, _, g = min(got, key=lambda t: t[0]) if claim.for_each else got[0]
    return vals, all(h for _, _, h, _ in got), g


def judge_claim(claim: Claim, preset: str, results: pd.DataFrame, *,
                gate_values: dict[str, tuple[Any, bool | None]] | None = None, experiment: str = "",
                master_seed: int | None = None, arm_column: str = "arm", note: str = "") -> Verdict:
    """The verdict of a claim declared as values, from a results table.

    Args:
        claim: a claim whose ``statistic`` is a ``Stat`` and ``rule`` a ``Rule``.
        preset: the run's preset.
        results: the results table (one row per finished sweep point and training seed; unfinished rows are
            dropped here).
        gate_values: gate id -> (value, passed) for gates without a statistic (the experiment measures them).
        experiment, master_seed: for the post hoc and pilot marks.
        arm_column: the column naming each row's arm (the executor writes :attr:`lmsci.contract.Point.arm`).
        note: a caveat reported with the verdict.

    Returns:
        the :class:`~lmsci.claims.Verdict`.

    Raises:
        ValueError: the claim has no ``Stat`` (it is judged by the experiment's own code).
    """
    if claim.stat is None:
        raise ValueError(f"claim {claim.id!r} has a statistic in words: the experiment judges it by hand")
    ok = finished(results)
    stat, rule, exact = claim.stat, claim.decider, claim.uncertainty == "exact"
    real_arm, null_arms = claim.arms[0], claim.arms[1:]
    gates = dict(gate_values or {})
    for g in claim.gates:
        if g.stat is not None:
            gates[g.id] = measure_gate(g, claim, ok, arm_column)
    gates = {k: v for k, v in gates.items() if k in {g.id for g in claim.gates}}
    common = dict(gates=gates, experiment=experiment, master_seed=master_seed, note=note)
    got = _arm(claim, ok, real_arm, arm_column)
    if got is None:
        return judge(claim, preset, value=None, passed=None, why_not_computed=f"no finished rows of arm "
                     f"{real_arm!r} give the statistic ({stat.definition()})", **common)
    real, passed, group = got
    value, ci, ci_kind, n = _summary(rule, real, exact)
    details: dict[str, Any] = {"per_seed": [float(v) for v in real.to_numpy()],
                               "seeds": [int(i) if isinstance(i, (int, float)) else str(i) for i in real.index]}
    if claim.for_each:
        details[claim.for_each] = group
        ci_kind += f" ({claim.for_each} = {group})"
    null = None
    if claim.kind == "claim" and claim.null:
        nulls = [_arm(claim, ok, real_arm, arm_column, claim.null_stat)] if claim.null_stat is not None \
            else [_arm(claim, ok, a, arm_column) for a in null_arms]
        if all(x is not None for x in nulls):
            nv = nulls[0][0] if len(nulls) == 1 else max(nulls, key=lambda x: rule.margin(x[0].to_numpy()))[0]
            n_mean, n_ci, _, _ = _summary(rule, nv, exact)
            null = (n_mean, any(x[1] for x in nulls))
            details.update(null_per_seed=[float(v) for v in nv.to_numpy()], null_ci=n_ci)
    return judge(claim, preset, value=value, passed=passed, ci=ci, ci_kind=ci_kind,
                 n_seeds=n, null=null, details=details, **common)


def judge_arms(judge: Any, claim_id: str, real: Sequence[float], null: Sequence[float],
               rule: Any, **kw: Any) -> Verdict:
    """Judge a claim whose statistic is one value per training seed, with the same ``rule`` on both arms.

    ``rule(SeedStat) -> bool`` decides the real arm's values (mean and interval by :func:`across_seeds`) and,
    identically, the null arm's (an empty ``null``: not measured). ``judge(claim_id, **kw)`` is the experiment's
    judge (for example ``lambda cid, **kw: exp.judge(cfg, cid, **kw)``); ``kw`` (gates, note, more details) is
    passed through. The details record both arms' per-seed values and the null's interval.
    """
    s = across_seeds(real)
    ns = across_seeds(null) if len(null) else None
    details = {"per_seed": real, "null_per_seed": null, "null_ci": None if ns is None else ns.ci,
               **kw.pop("details", {})}
    return judge(claim_id, value=s.mean, passed=rule(s), ci=s.ci, ci_kind=s.kind, n_seeds=s.n,
                 null=None if ns is None else (ns.mean, rule(ns)), details=details, **kw)
