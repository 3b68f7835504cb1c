"""Decision rules as values: what a claim's statistic must satisfy, testable on their own.

A :class:`Rule` takes the per-training-seed values of a statistic (``[n_seeds]`` floats) and says whether the rule
holds. It renders its own words (:meth:`Rule.text`, what ``lmsci claims`` and the reports print) and its
parameters (:meth:`Rule.spec`, what :meth:`lmsci.claims.Claim.digest` hashes), so the rule that decides is the
rule that is registered: a changed threshold is a changed digest.

Rules on the across-seed interval (:func:`ci_above`, :func:`ci_below`, :func:`ci_inside`, :func:`ci_excludes`,
:func:`equivalent_within`) use the Student-t interval of :func:`lmsci.stats.across_seeds` at ``level``; they
do not get stricter as seeds are added, unlike a minimum over seeds (:func:`every_at_least`), which is meant for
gates. Rules on a single exact value (``uncertainty="exact"`` claims and checks) use :func:`at_least`,
:func:`at_most`, :func:`between` and apply to the one value (or to the mean of several).

The idea follows inspect_ai's scorers and lm-evaluation-harness' ``metric_list``: a scorer is a value.

Example::

    >>> r = ci_above(1.0)
    >>> r([1.5, 1.6, 1.55]), r.text()
    (True, 'the 95% CI across seeds (Student t) lies above 1')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from lmsci.stats import SeedStat, across_seeds


def _num(x: float) -> str:
    return f"{x:.4g}"


def _values(values: Iterable[float]) -> np.ndarray:
    x = np.asarray([float(v) for v in values], dtype=float)
    return x[np.isfinite(x)]


@dataclass(frozen=True)
class Rule:
    """Base class of decision rules.

    Subclasses implement :meth:`holds_on` (the decision on a :class:`~lmsci.stats.SeedStat` and the finite
    per-seed values) and :meth:`text`. Calling a rule on per-seed values returns a bool; with no finite value it
    returns False (the engine reports "could not be computed" before it gets there).

    Attributes:
        level: confidence level of the across-seed interval the rule reads (0.95 by default).
    """

    level: float = 0.95

    def __call__(self, values: Iterable[float] | SeedStat) -> bool:
        if isinstance(values, SeedStat):
            return bool(self.holds_on(values, np.array([values.mean])))
        x = _values(values if isinstance(values, Iterable) else [values])
        if x.size == 0:
            return False
        return bool(self.holds_on(across_seeds(x, self.level), x))

    def summary(self, values: Sequence[float]) -> SeedStat:
        """The across-seed mean and interval of ``values`` at this rule's level."""
        return across_seeds(_values(values), self.level)

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def margin(self, values: Iterable[float]) -> float:
        """How far the rule is from failing on ``values``, in the statistic's units: >= 0 where it holds (> 0 for
        a strict rule), negative where it fails; -inf with no finite value. The engine reports the group of a
        ``for_each`` claim with the smallest margin and the null arm, of several, with the largest."""
        x = _values(values)
        return -math.inf if x.size == 0 else float(self.margin_on(across_seeds(x, self.level), x))

    def margin_on(self, s: SeedStat, x: np.ndarray) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def text(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def spec(self) -> dict[str, Any]:
        """The rule's kind and parameters as plain data (hashed into the claim's digest)."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return {"rule": type(self).__name__, **d}

    @property
    def interval(self) -> bool:
        """Whether the rule reads the across-seed interval (needs >= 2 seeds to mean anything)."""
        return False

    def _ci(self) -> str:
        return f"the {round(self.level * 100)}% CI across seeds (Student t)"


@dataclass(frozen=True)
class CIAbove(Rule):
    """The interval's lower end lies above ``x`` (strictly)."""

    x: float = 0.0

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:
        return s.lo > self.x

    def margin_on(self, s: SeedStat, x: np.ndarray) -> float:
        return s.lo - self.x

    def text(self) -> str:
        return f"{self._ci()} lies above {_num(self.x)}"

    @property
    def interval(self) -> bool:
        return True


@dataclass(frozen=True)
class CIBelow(Rule):
    """The interval's upper end lies below ``x`` (strictly)."""

    x: float = 0.0

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:
        return s.hi < self.x

    def margin_on(self, s: SeedStat, x: np.ndarray) -> float:
        return self.x - s.hi

    def text(self) -> str:
        return f"{self._ci()} lies below {_num(self.x)}"

    @property
    def interval(self) -> bool:
        return True


@dataclass(frozen=True)
class CIInside(Rule):
    """The whole interval lies inside ``[a, b]``."""

    a: float = 0.0
    b: float = 0.0

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:
        return self.a <= s.lo and s.hi <= self.b

    def margin_on(self, s: SeedStat, x: np.ndarray) -> float:
        return min(s.lo - self.a, self.b - s.hi)

    def text(self) -> str:
        return f"{self._ci()} lies inside [{_num(self.a)}, {_num(self.b)}]"

    @property
    def interval(self) -> bool:
        return True


@dataclass(frozen=True)
class CIExcludes(Rule):
    """The interval excludes ``x`` (lies wholly on one side of it)."""

    x: float = 0.0

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:
        return s.lo > self.x or s.hi < self.x

    def margin_on(self, s: SeedStat, x: np.ndarray) -> float:
        return max(s.lo - self.x, self.x - s.hi)

    def text(self) -> str:
        return f"{self._ci()} excludes {_num(self.x)}"

    @property
    def interval(self) -> bool:
        return True


@dataclass(frozen=True)
class MeanAtLeast(Rule):
    """The mean over seeds is at least ``x``."""

    x: float = 0.0

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:
        return s.mean >= self.x

    def margin_on(self, s: SeedStat, x: np.ndarray) -> float:
        return s.mean - self.x

    def text(self) -> str:
        return f"the mean over seeds is >= {_num(self.x)}"


@dataclass(frozen=True)
class MeanAtMost(Rule):
    """The mean over seeds is at most ``x``."""

    x: float = 0.0

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:
        return s.mean <= self.x

    def margin_on(self, s: SeedStat, x: np.ndarray) -> float:
        return self.x - s.mean

    def text(self) -> str:
        return f"the mean over seeds is <= {_num(self.x)}"


@dataclass(frozen=True)
class MeanBelow(Rule):
    """The mean over seeds is below ``x`` (strictly)."""

    x: float = 0.0

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:
        return s.mean < self.x

    def margin_on(self, s: SeedStat, x: np.ndarray) -> float:
        return self.x - s.mean

    def text(self) -> str:
        return f"the mean over seeds is < {_num(self.x)}"


@dataclass(frozen=True)
class Between(Rule):
    """The value (the mean over seeds where there are several) lies in ``[a, b]``; for exact statistics."""

    a: float = -math.inf
    b: float = math.inf

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:
        return self.a <= s.mean <= self.b

    def margin_on(self, s: SeedStat, x: np.ndarray) -> float:
        return min(s.mean - self.a, self.b - s.mean)

    def text(self) -> str:
        if self.b == math.inf:
            return f">= {_num(self.a)}"
        if self.a == -math.inf:
            return f"<= {_num(self.b)}"
        return f"inside [{_num(self.a)}, {_num(self.b)}]"


@dataclass(frozen=True)
class EveryAtLeast(Rule):
    """Every seed's value is at least ``x`` (a minimum over seeds: stricter as seeds grow; meant for gates)."""

    x: float = 0.0

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:
        return bool(np.all(x >= self.x))

    def margin_on(self, s: SeedStat, x: np.ndarray) -> float:
        return float(np.min(x)) - self.x

    def text(self) -> str:
        return f"every seed's value is >= {_num(self.x)}"


@dataclass(frozen=True)
class EveryAtMost(Rule):
    """Every seed's value is at most ``x`` (a maximum over seeds; meant for gates)."""

    x: float = 0.0

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:
        return bool(np.all(x <= self.x))

    def margin_on(self, s: SeedStat, x: np.ndarray) -> float:
        return self.x - float(np.max(x))

    def text(self) -> str:
        return f"every seed's value is <= {_num(self.x)}"


@dataclass(frozen=True)
class AllOf(Rule):
    """A conjunction of rules on the same statistic: every rule in :attr:`rules` holds (each at its own level).

    Renders as "A and B"; its spec lists the rules' specs, so each threshold is in the claim's digest. The across-seed
    summary the engine reports is the first rule's. Build it with :func:`all_of`.
    """

    rules: tuple = ()

    def __call__(self, values: Iterable[float] | SeedStat) -> bool:
        if not isinstance(values, SeedStat):
            values = list(values) if isinstance(values, Iterable) else [values]
        return all(r(values) for r in self.rules)

    def summary(self, values: Sequence[float]) -> SeedStat:
        return self.rules[0].summary(values)

    def holds_on(self, s: SeedStat, x: np.ndarray) -> bool:
        return all(r.holds_on(s, x) for r in self.rules)

    def margin(self, values: Iterable[float]) -> float:
        values = list(values)
        return min(r.margin(values) for r in self.rules)

    def text(self) -> str:
        return " and ".join(r.text() for r in self.rules)

    def spec(self) -> dict[str, Any]:
        return {"rule": "AllOf", "rules": [r.spec() for r in self.rules]}

    @property
    def interval(self) -> bool:
        return any(r.interval for r in self.rules)


def ci_above(x: float, level: float = 0.95) -> Rule:
    """The across-seed interval's lower end lies above ``x``."""
    return CIAbove(level=level, x=float(x))


def ci_below(x: float, level: float = 0.95) -> Rule:
    """The across-seed interval's upper end lies below ``x``."""
    return CIBelow(level=level, x=float(x))


def ci_inside(a: float, b: float, level: float = 0.95) -> Rule:
    """The whole across-seed interval lies inside ``[a, b]``.

    Raises:
        ValueError: ``a > b``.
    """
    if a > b:
        raise ValueError(f"ci_inside: a = {a} > b = {b}")
    return CIInside(level=level, a=float(a), b=float(b))


def ci_excludes(x: float, level: float = 0.95) -> Rule:
    """The across-seed interval lies wholly above or wholly below ``x``."""
    return CIExcludes(level=level, x=float(x))


def equivalent_within(delta: float, level: float = 0.95) -> Rule:
    """Equivalence: the whole interval lies inside ``[-delta, delta]`` (a TOST-style rule).

    Raises:
        ValueError: ``delta <= 0``.
    """
    if delta <= 0:
        raise ValueError(f"equivalent_within: delta = {delta} must be > 0")
    return CIInside(level=level, a=-float(delta), b=float(delta))


def mean_at_least(x: float) -> Rule:
    """The mean over seeds is at least ``x``."""
    return MeanAtLeast(x=float(x))


def mean_at_most(x: float) -> Rule:
    """The mean over seeds is at most ``x``."""
    return MeanAtMost(x=float(x))


def mean_below(x: float) -> Rule:
    """The mean over seeds is below ``x`` (strictly)."""
    return MeanBelow(x=float(x))


def at_least(x: float) -> Rule:
    """An exact value (or the mean of several) is at least ``x``."""
    return Between(a=float(x))


def at_most(x: float) -> Rule:
    """An exact value (or the mean of several) is at most ``x``."""
    return Between(b=float(x))


def between(a: float, b: float) -> Rule:
    """An exact value (or the mean of several) lies in ``[a, b]``.

    Raises:
        ValueError: ``a > b``.
    """
    if a > b:
        raise ValueError(f"between: a = {a} > b = {b}")
    return Between(a=float(a), b=float(b))


def every_at_least(x: float) -> Rule:
    """Every seed's value is at least ``x`` (for gates: a minimum gets stricter as seeds grow)."""
    return EveryAtLeast(x=float(x))


def every_at_most(x: float) -> Rule:
    """Every seed's value is at most ``x`` (for gates)."""
    return EveryAtMost(x=float(x))


def all_of(*rules: Rule) -> Rule:
    """Every one of ``rules`` holds on the same statistic (for example ``all_of(mean_at_least(0.3), ci_above(0))``:
    a mean at least 0.3 and an interval above 0); renders "A and B".

    Raises:
        ValueError: fewer than two rules, or an argument that is not a :class:`Rule`.
    """
    if len(rules) < 2 or not all(isinstance(r, Rule) for r in rules):
        raise ValueError(f"all_of needs at least two Rule objects, got {rules!r}")
    return AllOf(rules=tuple(rules))
