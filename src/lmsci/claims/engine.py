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
interval. A check needs no null arm.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from lmsci.claims.core import Claim, Verdict, judge

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
    real_arm, null_arm = claim.arms
    gates = dict(gate_values or {})
    for g in claim.gates:
        if g.stat is not None:
            gates[g.id] = measure_gate(g, claim, ok, arm_column)
    gates = {k: v for k, v in gates.items() if k in {g.id for g in claim.gates}}
    common = dict(gates=gates, experiment=experiment, master_seed=master_seed, note=note)
    real = stat.per_seed(arm_rows(ok, real_arm, arm_column), ok, arm_column)
    if real.empty:
        return judge(claim, preset, value=None, passed=None, why_not_computed=f"no finished rows of arm "
                     f"{real_arm!r} give the statistic ({stat.definition()})", **common)
    value, ci, ci_kind, n = _summary(rule, real, exact)
    details: dict[str, Any] = {"per_seed": [float(v) for v in real.to_numpy()],
                               "seeds": [int(i) if isinstance(i, (int, float)) else str(i) for i in real.index]}
    null = None
    if claim.kind == "claim" and claim.null:
        nv = stat.per_seed(arm_rows(ok, null_arm, arm_column), ok, arm_column)
        if not nv.empty:
            n_mean, n_ci, _, _ = _summary(rule, nv, exact)
            null = (n_mean, bool(rule(nv.to_numpy())))
            details.update(null_per_seed=[float(v) for v in nv.to_numpy()], null_ci=n_ci)
    return judge(claim, preset, value=value, passed=bool(rule(real.to_numpy())), ci=ci, ci_kind=ci_kind,
                 n_seeds=n, null=null, details=details, **common)
