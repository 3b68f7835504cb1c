"""Registered claims and the one engine that turns measurements into an outcome.

A :class:`Claim` is data fixed before any result is seen: what is claimed, where (paper, arXiv id,
figure), the paper's value, the statistic we compute, the rule that decides, the prerequisite
:class:`Gate` s, and the presets at whose scale the claim can be decided. An experiment lists its claims
in ``Experiment.claims``; its ``verdicts()`` computes the statistic and calls :func:`judge`, which alone
decides the outcome:

- ``reproduced``: every gate passed, the preset is at the claim's scale, enough training seeds, rule held;
- ``not reproduced``: every gate passed, the preset is at the claim's scale, the rule failed;
- ``inconclusive``: a gate failed or was not measured, the preset is below the claim's scale, the statistic
  could not be computed (too few points, a fit that did not converge), fewer seeds than the claim needs,
  the null arm was not measured, or the null arm also meets the rule ("the rule cannot tell the effect from
  its absence").

Every registered item is of one of two kinds (:attr:`Claim.kind`):

- a **claim**: an empirical statement about trained models or data that could come out either way. It has a
  **null arm** (:attr:`Claim.null`): the same statistic, in the same run, on a configuration where the
  effect is absent by construction (random init, shuffled labels, the manipulated factor removed, random
  units of the same count). ``reproduced`` needs the real arm to meet the rule and the null arm not to.
- a **check**: a property of the setup that holds by construction (a world's design, a closed-form bound, an
  interpolation). Its outcomes are ``passed`` / ``failed`` / ``inconclusive``; checks are reported in their
  own "design checks" section and never counted as reproduced claims.

A verdict is also marked ``post_hoc`` when its preset, gate or rule changed after a result at that preset
had been seen (:data:`POST_HOC`) and the run's master seed is one of those seen then, and ``pilot`` when its
master seed is in the pilot range (>= :data:`PILOT_SEED_MIN`).

A registered rule changes only with a dated line in ``CLAIMS.md`` naming the claim and its new digest
(:meth:`Claim.digest`), in a commit of its own; ``tests/test_claims.py`` compares every claim with the
checked-in snapshot ``tests/data/claims.json`` and looks for that line.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

from lmsci.claims.seen import POST_HOC

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
#: a check's outcomes (a check is never "reproduced")
PASSED = "passed"
FAILED = "failed"
OUTCOMES = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, PASSED, FAILED)
KINDS = ("claim", "check")

#: master seeds at or above this are pilots and sizing runs (CLAIMS.md, "Pilots"): never published
PILOT_SEED_MIN = 1_000_000

#: what an inconclusive outcome says when the null arm meets the rule
NULL_MEETS_RULE = "the rule cannot tell the effect from its absence"


#: presets in increasing scale; a claim registered for ``presets`` is undecidable at any other preset
ALL_PRESETS = ("smoke", "quick", "gpu", "paper")
UNCERTAINTY = ("seeds", "within-run", "exact")


@dataclass(frozen=True)
class Gate:
    """A prerequisite of a claim (for example "biography recall of the tested people >= 0.9").

    Attributes:
        id: short identifier, unique within the claim (``"memorised"``).
        rule: the condition: words with its threshold (a gate measured by the experiment's own code,
            :meth:`lmsci.contract.Experiment.measured_gates`), or a :class:`~lmsci.claims.rules.Rule` applied by
            the engine to ``stat`` on ``arm``'s per-seed values.
        stat: the :class:`~lmsci.claims.stat.Stat` the rule reads (with a rule object).
        arm: the arm whose rows the gate reads (empty: the claim's real arm).
    """

    id: str
    rule: Any
    stat: Any = None
    arm: str = ""

    def __post_init__(self):
        if (self.stat is None) != isinstance(self.rule, str):
            raise ValueError(f"gate {self.id!r}: give a rule in words, or a Rule object with a Stat")

    @property
    def rule_text(self) -> str:
        """The gate in words (rendered from the rule and statistic objects when it has them)."""
        if isinstance(self.rule, str):
            return self.rule
        where = f" on the {self.arm} arm" if self.arm else ""
        return f"{self.stat.words or self.stat.definition()}{where}: {self.rule.text()}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "rule": self.rule_text}
        if self.stat is not None:
            d.update(stat_spec=self.stat.spec(), rule_spec=self.rule.spec(), arm=self.arm)
        return d


@dataclass(frozen=True)
class Claim:
    """A claim registered before its first run.

    Attributes:
        id: identifier unique within the experiment (``"linear-per-family"``).
        statement: the claim in one sentence.
        source: paper, arXiv id, section / figure / table.
        paper_value: the paper's own number(s), as text.
        statistic: what we compute, with units: words (a claim judged by the experiment's own code, an escape
            hatch) or a :class:`~lmsci.claims.stat.Stat` (judged by the engine, :mod:`lmsci.claims.engine`).
        rule: the decision rule: words, with the CI level and the thresholds (with a statistic in words), or a
            :class:`~lmsci.claims.rules.Rule` (with a ``Stat``); its words are then rendered from it.
        gates: prerequisites; any failed or unmeasured gate makes the outcome inconclusive.
        presets: the presets at whose scale the claim can be decided; elsewhere it is inconclusive
            ("preset below the claim's scale") and its value is still reported.
        uncertainty: ``"seeds"`` (the CI is across training seeds: needs ``min_seeds``),
            ``"within-run"`` (registered to be decided by a within-run interval), or ``"exact"``
            (a deterministic computation, no interval needed).
        min_seeds: for every ``uncertainty`` but ``"exact"``, the fewest training seeds behind a decided
            outcome (fewer give ``inconclusive``).
        ablation: a row reported beside the claims that decides nothing (its outcome is still computed).
        kind: ``"claim"`` (could come out either way; needs a null arm) or ``"check"`` (holds by
            construction; reported apart, never counted as reproduced).
        null: the null arm in words: the configuration, measured in the same run with the same statistic,
            where the claimed effect is absent by construction (required for a claim that is not an
            ablation; ``tests/test_claims.py`` enforces it for the registry).
        arms: ``(real arm, null arm, ...)``: the values of the results' ``arm`` column the engine judges a ``Stat``
            on (each null arm with the same statistic and rule; with several, the null meets the rule if any does).
        null_can_meet: why the null arm could meet the rule (a null that fails by construction proves nothing).
        also: further ``(Stat, Rule)`` conditions that must hold with the rule (a conjunction over statistics), read
            on the judged arm's rows at the main statistic's seeds; the reported value is the main statistic's.
        for_each: a column: the rule (and ``also``) must hold in every group of its values (every target N, every
            loss); the verdict reports the group with the smallest :meth:`~lmsci.claims.rules.Rule.margin`.
        null_stat: a null read from other columns of the real arm's rows: a :class:`~lmsci.claims.stat.Stat`
            judged by the same rule on the same rows as the statistic (``arms[0]``), in place of the null arms
            (for a null measured beside the real value, e.g. the same model within its training length); ``arms``
            may then name the real arm alone. With ``also``, a tuple: the null's statistic, then one ``Stat`` per
            ``also`` condition (read with that condition's rule).
    """

    id: str
    statement: str
    source: str
    paper_value: str
    statistic: str
    rule: str
    gates: tuple[Gate, ...] = ()
    presets: tuple[str, ...] = ("quick", "gpu", "paper")
    uncertainty: str = "seeds"
    min_seeds: int = 3
    ablation: bool = False
    kind: str = "claim"
    null: str = ""
    arms: tuple[str, ...] = ("real", "null")
    null_can_meet: str = ""
    also: tuple = ()
    for_each: str = ""
    null_stat: Any = None

    def __post_init__(self):
        obj_stat, obj_rule = not isinstance(self.statistic, str), not isinstance(self.rule, str)
        if obj_stat != obj_rule:
            raise ValueError(f"claim {self.id!r}: a Stat needs a Rule object and a Rule object a Stat")
        object.__setattr__(self, "arms", tuple(self.arms))
        object.__setattr__(self, "also", tuple(tuple(a) for a in self.also))
        if self.null_stat is not None:
            ns = tuple(self.null_stat) if isinstance(self.null_stat, (tuple, list)) else (self.null_stat,)
            if len(ns) != 1 + len(self.also):
                raise ValueError(f"claim {self.id!r}: null_stat needs one Stat and one per also condition")
            object.__setattr__(self, "null_stat", ns)
        if ((self.also or self.for_each or self.null_stat is not None) and not obj_stat) or \
                len(self.arms) < (1 if self.null_stat is not None else 2):
            raise ValueError(f"claim {self.id!r}: also/for_each/null_stat need a Stat; arms need a real and a null arm "
                             "(the real arm alone with null_stat)")
        bad = [p for p in self.presets if p not in ALL_PRESETS]
        if bad:
            raise ValueError(f"claim {self.id!r}: presets {bad} not in {ALL_PRESETS}")
        if self.uncertainty not in UNCERTAINTY:
            raise ValueError(f"claim {self.id!r}: uncertainty={self.uncertainty!r} not in {UNCERTAINTY}")
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id!r}: kind={self.kind!r} not in {KINDS}")
        ids = [g.id for g in self.gates]
        if len(set(ids)) != len(ids):
            raise ValueError(f"claim {self.id!r}: duplicate gate ids {ids}")

    @property
    def stat(self) -> Any:
        """The :class:`~lmsci.claims.stat.Stat` the engine judges (None: judged by the experiment's code)."""
        return None if isinstance(self.statistic, str) else self.statistic

    @property
    def decider(self) -> Any:
        """The :class:`~lmsci.claims.rules.Rule` object (None for a rule in words)."""
        return None if isinstance(self.rule, str) else self.rule

    @property
    def statistic_text(self) -> str:
        """The statistic in words (rendered from the ``Stat`` when there is one)."""
        return self.statistic if isinstance(self.statistic, str) else self.statistic.text()

    @property
    def rule_text(self) -> str:
        """The rule in words (rendered from the ``Rule`` when there is one, with the seeds it needs)."""
        if isinstance(self.rule, str):
            return self.rule
        seeds = "" if self.uncertainty == "exact" else f" (>= {self.min_seeds} training seeds)"
        also = "".join(f"; and {s.words or s.definition()}: {r.text()}" for s, r in self.also)
        each = f"in every group of `{self.for_each}`: " if self.for_each else ""
        return each + self.rule.text() + also + seeds

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("id", "statement", "source", "paper_value")}
        d.update(statistic=self.statistic_text, rule=self.rule_text, gates=[g.to_dict() for g in self.gates],
                 presets=list(self.presets), uncertainty=self.uncertainty, min_seeds=self.min_seeds,
                 ablation=self.ablation, kind=self.kind, null=self.null)
        if self.stat is not None:
            d.update(stat_spec=self.stat.spec(), rule_spec=self.rule.spec(), arms=list(self.arms))
            d.update({"also_spec": [[s.spec(), r.spec()] for s, r in self.also]} if self.also else {})
            d.update({"for_each": self.for_each} if self.for_each else {})
            d.update({"null_stat_spec": [x.spec() for x in self.null_stat]} if self.null_stat is not None else {})
        if self.null_can_meet:
            d["null_can_meet"] = self.null_can_meet
        return d

    @property
    def needs_null(self) -> bool:
        """Whether a decided outcome needs a measured null arm (a claim that is not an ablation)."""
        return self.kind == "claim" and not self.ablation

    def digest(self, preset_digests: dict[str, str] | None = None) -> str:
        """8 hex digits of a hash of the decision-relevant fields (statistic, rule, gates, presets,
        uncertainty, min_seeds, ablation, kind, null) and of ``preset_digests`` (preset -> digest of its
        resolved configuration, :func:`lmsci.config.preset_digest`; the registry's digest includes those of
        every preset the claim is decided at, see :func:`registered_digest`); a changed digest is a
        changed rule or preset."""
        d = self.to_dict()
        keep = {k: d[k] for k in ("id", "statistic", "rule", "gates", "presets", "uncertainty", "min_seeds",
                                  "ablation", "kind", "null", "stat_spec", "rule_spec", "arms", "null_can_meet",
                                  "also_spec", "for_each", "null_stat_spec")
                if k in d}
        if preset_digests:
            keep["preset_digests"] = dict(sorted(preset_digests.items()))
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:8]


@dataclass
class GateResult:
    """A measured gate: its rule, the value that was measured and whether it passed (None: not measured)."""

    id: str
    rule: str
    value: Any
    passed: bool | None


@dataclass
class Verdict:
    """The outcome of one claim in one run, with everything needed to read it.

    Attributes:
        claim_id, claim, source, paper_value, statistic, rule: copied from the :class:`Claim`.
        outcome: ``"reproduced"``, ``"not reproduced"`` or ``"inconclusive"``.
        value: our value of the statistic (None when it could not be computed).
        ci: an interval for ``value`` (see ``ci_kind``).
        ci_kind: what the interval is: ``"95% CI across 3 seeds (Student t)"``, ``"within-run bootstrap
            95% CI"``, ``"range across models"``, ...
        n_seeds: training seeds behind ``value``.
        rule_passed: the rule's own result (None when not evaluated), whatever the outcome.
        gates: measured gates.
        reasons: why the outcome is inconclusive (empty otherwise).
        details: further numbers behind the verdict.
        note: caveats; for a claim not reproduced, what scale would settle it.
        ablation: decides nothing (reported beside the claims).
        kind: ``"claim"`` or ``"check"`` (copied from the claim).
        null: the null arm in words; null_value, null_passed: its statistic and whether it met the rule
            (None: not measured).
        post_hoc: the claim's preset, gate or rule changed after a result from this master seed at this
            preset was seen (:data:`POST_HOC`); rerun on a fresh master seed to clear it.
        pilot: the run's master seed is a pilot seed (>= :data:`PILOT_SEED_MIN`); never published.
        master_seed: the run's master seed (None when unknown).
    """

    claim_id: str
    claim: str
    source: str
    paper_value: str
    statistic: str
    rule: str
    outcome: str
    value: float | None = None
    ci: tuple[float, float] | None = None
    ci_kind: str = ""
    n_seeds: int = 1
    rule_passed: bool | None = None
    gates: list[GateResult] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    ablation: bool = False
    kind: str = "claim"
    null: str = ""
    null_value: float | None = None
    null_passed: bool | None = None
    post_hoc: bool = False
    pilot: bool = False
    master_seed: int | None = None

    @property
    def reproduced(self) -> bool:
        return self.outcome == REPRODUCED

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ci"] = list(self.ci) if self.ci is not None else None
        return _clean(d)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        d = dict(d)
        if d.get("ci") is not None:
            d["ci"] = tuple(d["ci"])
        d["gates"] = [GateResult(**g) for g in d.get("gates", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


def _clean(v: Any) -> Any:
    """numpy scalars to Python, NaN/inf to None, recursively (verdict.json is strict JSON)."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if hasattr(v, "item") and callable(v.item):
        try:
            v = v.item()
        except (ValueError, RuntimeError):
            return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


# -- the engine -------------------------------------------------------------------------------------
def judge(
    claim: Claim,
    preset: str,
    *,
    value: float | None,
    passed: bool | None,
    ci: tuple[float, float] | None = None,
    ci_kind: str = "",
    n_seeds: int = 1,
    gates: dict[str, tuple[Any, bool | None]] | None = None,
    why_not_computed: str = "",
    details: dict[str, Any] | None = None,
    note: str = "",
    null: tuple[Any, bool | None] | None = None,
    experiment: str = "",
    master_seed: int | None = None,
) -> Verdict:
    """Decide a claim's outcome from its measured statistic, its null arm and its gates.

    Args:
        claim: the registered claim.
        preset: the run's preset (``cfg.preset``).
        value: the statistic (None when it could not be computed).
        passed: whether the registered rule held (None: could not be evaluated, e.g. too few points or
            a fit that did not converge; give ``why_not_computed``).
        ci, ci_kind: the interval behind the rule and what it is.
        n_seeds: number of training seeds behind ``value``.
        gates: gate id -> (measured value, passed); every gate of the claim must appear, a missing one
            counts as not measured (inconclusive).
        why_not_computed: the reason when ``passed`` is None.
        details, note: reported with the verdict.
        null: (the null arm's statistic, whether the null arm meets the registered rule). Required for a
            claim (``kind="claim"``, not an ablation): missing or ``passed`` None gives ``inconclusive``
            ("null arm not measured"); a null arm that meets the rule gives ``inconclusive`` with
            :data:`NULL_MEETS_RULE`, whatever the real arm did.
        experiment, master_seed: the registry name and the run's master seed, for the ``post_hoc`` and
            ``pilot`` marks (:meth:`lmsci.contract.Experiment.judge` passes both).

    Outcomes: a claim gives reproduced / not reproduced / inconclusive; a check gives passed / failed /
    inconclusive (it needs no null arm). Too few seeds (``n_seeds < min_seeds`` for any uncertainty but
    ``exact``) make either decided outcome inconclusive.

    Returns:
        the :class:`Verdict`.

    Raises:
        ValueError: ``gates`` names a gate the claim does not register (a programming error).
    """
    gates = dict(gates or {})
    unknown = set(gates) - {g.id for g in claim.gates}
    if unknown:
        raise ValueError(f"claim {claim.id!r}: unregistered gates {sorted(unknown)}")
    reasons: list[str] = []
    results = []
    for g in claim.gates:
        val, ok = gates.get(g.id, (None, None))
        ok = None if ok is None else bool(ok)
        results.append(GateResult(g.id, g.rule_text, _clean(val), ok))
        if ok is None:
            reasons.append(f"gate {g.id!r} not measured ({g.rule_text})")
        elif not ok:
            reasons.append(f"gate {g.id!r} failed: {g.rule_text} (measured {_fmt(val)})")
    if preset not in claim.presets:
        reasons.append(f"preset {preset!r} is below the scale the claim is registered for "
                       f"({', '.join(claim.presets)})")
    if passed is None:
        reasons.append(why_not_computed or "the statistic could not be computed")
    if passed is not None and claim.uncertainty != "exact" and n_seeds < claim.min_seeds:
        reasons.append(f"{n_seeds} seed{'s' if n_seeds != 1 else ''}: the claim needs an interval across at least "
                       f"{claim.min_seeds} training seeds")
    null_value, null_passed = (None, None) if null is None else null
    null_passed = None if null_passed is None else bool(null_passed)
    if claim.needs_null or null is not None:
        if null_passed is None and claim.needs_null:
            reasons.append(f"null arm not measured ({claim.null or 'none registered'})")
        elif null_passed:
            reasons.append(f"{NULL_MEETS_RULE}: the null arm ({claim.null or 'as registered'}) also meets the rule "
                           f"(measured {_fmt(null_value)})")
    if reasons:
        outcome = INCONCLUSIVE
    elif claim.kind == "check":
        outcome = PASSED if passed else FAILED
    else:
        outcome = REPRODUCED if passed else NOT_REPRODUCED
    key = f"{experiment}/{claim.id}"
    post_hoc = master_seed is not None and int(master_seed) in POST_HOC.get(key, {}).get(preset, ())
    return Verdict(
        claim_id=claim.id, claim=claim.statement, source=claim.source, paper_value=claim.paper_value,
        statistic=claim.statistic_text, rule=claim.rule_text, outcome=outcome,
        value=None if value is None or (isinstance(value, float) and not math.isfinite(value)) else float(value),
        ci=None if ci is None or not all(math.isfinite(float(c)) for c in ci) else (float(ci[0]), float(ci[1])),
        ci_kind=ci_kind, n_seeds=int(n_seeds),
        rule_passed=None if passed is None else bool(passed), gates=results, reasons=reasons,
        details=_clean(details or {}), note=note, ablation=claim.ablation, kind=claim.kind, null=claim.null,
        null_value=finite_or_none(null_value), null_passed=null_passed, post_hoc=bool(post_hoc),
        pilot=master_seed is not None and int(master_seed) >= PILOT_SEED_MIN,
        master_seed=None if master_seed is None else int(master_seed),
    )


def finite_or_none(v: Any) -> float | None:
    """``float(v)`` when it is a finite number, else None (None, NaN, inf, or not a number)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def not_measured(claim: Claim, preset: str, reason: str, *, experiment: str = "",
                 master_seed: int | None = None) -> Verdict:
    """An inconclusive verdict for a claim whose statistic was not measured in this run."""
    return judge(claim, preset, value=None, passed=None, why_not_computed=reason, experiment=experiment,
                 master_seed=master_seed)


def add_gate_failure(v: Verdict, gate_id: str, rule: str, value: Any) -> Verdict:
    """Mark ``v`` inconclusive because of a run-level gate (for example a diverged training point)."""
    v.gates.append(GateResult(gate_id, rule, _clean(value), False))
    v.reasons.append(f"gate {gate_id!r} failed: {rule} (measured {_fmt(value)})")
    v.outcome = INCONCLUSIVE
    return v


def complete(claims: Sequence[Claim], verdicts: Iterable[Verdict], preset: str) -> list[Verdict]:
    """Order ``verdicts`` as the claims are registered and add an inconclusive verdict for every claim
    that has none (nothing measured it in this run).

    Raises:
        ValueError: a verdict names a claim id that is not registered.
    """
    by_id = {}
    ids = {c.id for c in claims}
    for v in verdicts:
        if v.claim_id not in ids:
            raise ValueError(f"verdict for unregistered claim {v.claim_id!r}; registered: {sorted(ids)}")
        by_id.setdefault(v.claim_id, []).append(v)
    out = []
    for c in claims:
        out.extend(by_id.get(c.id) or [not_measured(c, preset, "no finished points measured it")])
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
