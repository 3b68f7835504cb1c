"""Statistics of a results table as values: one number per training seed, for one arm of the sweep.

A :class:`Stat` names what a claim measures: a column of the results table, the rows that count (a filter
besides the arm), how the rows of one training seed reduce to one number, and optionally a paired contrast
(this minus or over another statistic of the same seed). :meth:`Stat.per_seed` computes it on the rows of one
arm; the claims engine (:mod:`lmsci.claims.engine`) applies it to the real arm and, identically, to the null
arm. Like a rule, a statistic renders its words (:meth:`Stat.text`) and its definition (:meth:`Stat.spec`,
hashed into the claim's digest: a changed column, filter or reduction is a registered change).

For a statistic no column expresses (a fit across points, a rank of heads), ``fn`` takes the rows of one arm
and returns one value per seed (a :class:`pandas.Series` indexed by seed); its source code is hashed into the
digest.

Example::

    >>> import pandas as pd
    >>> t = pd.DataFrame({"arm": ["real"] * 4, "seed_index": [0, 0, 1, 1], "probe": ["a", "b"] * 2,
    ...                   "acc": [0.9, 0.5, 0.8, 0.4]})
    >>> Stat("acc", where={"probe": "a"}).per_seed(t).tolist()
    [0.9, 0.8]
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

AGGS = ("mean", "max", "min", "sum", "median", "first", "last", "count")
SEED = "seed_index"


def _norm_where(where: Any) -> tuple[tuple[str, Any], ...]:
    if not where:
        return ()
    items = where.items() if isinstance(where, dict) else where
    out = []
    for k, v in items:
        out.append((str(k), tuple(v) if isinstance(v, (list, tuple, set, frozenset)) else v))
    return tuple(sorted(out, key=lambda kv: kv[0]))


def fn_digest(fn: Callable) -> str:
    """12 hex digits of a hash of ``fn``'s qualified name and source code (its source is its definition)."""
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        src = repr(fn)
    name = getattr(fn, "__qualname__", type(fn).__name__)
    return hashlib.sha256(f"{name}\n{src}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Stat:
    """One value per training seed from the rows of one arm of a results table.

    Attributes:
        column: the results column read (ignored when ``fn`` is given).
        agg: how the rows of one seed reduce to one value, one of :data:`AGGS`.
        where: a row filter besides the arm, ``{column: value}`` or ``{column: (allowed values)}``.
        minus, over: a paired contrast: per seed, this value minus (or divided by) ``minus`` (``over``)
            computed on the same arm's rows of the same seed (or on ``arm`` of the sub-statistic when set).
        arm: evaluate on this arm whatever arm the claim asks for (for the contrast's other term, e.g. a
            ``"control"`` arm); empty = the arm being judged.
        fn: an escape hatch, ``rows -> pd.Series`` indexed by seed (``rows``: the arm's finished rows); hashed
            by its source.
        words: the statistic in words, with units (what the reports print first).
        per: the column that identifies a training seed (``"seed_index"``).

    Raises:
        ValueError: ``agg`` not in :data:`AGGS`, or neither ``column`` nor ``fn`` given.
    """

    column: str = ""
    agg: str = "mean"
    where: Any = ()
    minus: "Stat | None" = None
    over: "Stat | None" = None
    arm: str = ""
    fn: Callable[[pd.DataFrame], pd.Series] | None = field(default=None, compare=False)
    words: str = ""
    per: str = SEED

    def __post_init__(self):
        object.__setattr__(self, "where", _norm_where(self.where))
        if self.agg not in AGGS:
            raise ValueError(f"Stat.agg = {self.agg!r} not in {AGGS}")
        if not self.column and self.fn is None:
            raise ValueError("Stat needs a column or a fn")
        if self.minus is not None and self.over is not None:
            raise ValueError("Stat takes minus or over, not both")

    # -- computing ------------------------------------------------------------------------------
    def rows(self, table: pd.DataFrame) -> pd.DataFrame:
        """The rows of ``table`` that pass :attr:`where`."""
        keep = pd.Series(True, index=table.index)
        for col, val in self.where:
            if col not in table:
                return table.iloc[0:0]
            keep &= table[col].isin(val) if isinstance(val, tuple) else (table[col] == val)
        return table[keep]

    def per_seed(self, arm_rows: pd.DataFrame, all_rows: pd.DataFrame | None = None,
                 arm_column: str = "arm") -> pd.Series:
        """The statistic per seed on ``arm_rows`` (one arm's finished rows).

        Args:
            arm_rows: the rows of the arm being judged.
            all_rows: the whole finished table, for a sub-statistic that names its own :attr:`arm`.
            arm_column: the column holding the arm name.

        Returns:
            a float Series indexed by seed, sorted, non-finite values dropped (empty when nothing matched).
        """
        rows = arm_rows
        if self.arm and all_rows is not None:
            rows = all_rows[all_rows[arm_column] == self.arm] if arm_column in all_rows else all_rows.iloc[0:0]
        if self.fn is not None:
            s = pd.Series(self.fn(self.rows(rows)), dtype=float)
        else:
            sub = self.rows(rows)
            if sub.empty or self.column not in sub:
                return pd.Series(dtype=float)
            per = sub[self.per] if self.per in sub else pd.Series(0, index=sub.index)
            vals = pd.to_numeric(sub[self.column], errors="coerce")
            s = getattr(vals.groupby(per.values), self.agg)().astype(float)
        for other, op in ((self.minus, np.subtract), (self.over, np.divide)):
            if other is not None:
                o = other.per_seed(arm_rows, all_rows, arm_column)
                idx = s.index.intersection(o.index)
                s = pd.Series(op(s.loc[idx].to_numpy(), o.loc[idx].to_numpy()), index=idx, dtype=float)
        s = s[np.isfinite(s.to_numpy(dtype=float))] if len(s) else s
        return s.sort_index()

    # -- describing -----------------------------------------------------------------------------
    def definition(self) -> str:
        """The computation in a few words (column, filter, reduction, contrast)."""
        if self.fn is not None:
            core = f"{getattr(self.fn, '__name__', 'fn')}(rows)"
        else:
            core = f"{self.agg} of `{self.column}`"
        if self.where:
            core += " where " + ", ".join(f"{k} = {v}" for k, v in self.where)
        if self.arm:
            core += f" on arm {self.arm!r}"
        if self.minus is not None:
            core = f"({core}) minus ({self.minus.definition()})"
        if self.over is not None:
            core = f"({core}) / ({self.over.definition()})"
        return core

    def text(self) -> str:
        """Words and definition, per training seed."""
        d = f"per training seed, {self.definition()}"
        return f"{self.words} ({d})" if self.words else d

    def spec(self) -> dict[str, Any]:
        """The definition as plain data (hashed into the claim's digest)."""
        where = [[k, list(v) if isinstance(v, tuple) else v] for k, v in self.where]  # JSON round-trips lists
        return {"column": self.column, "agg": self.agg, "where": where,
                "minus": None if self.minus is None else self.minus.spec(),
                "over": None if self.over is None else self.over.spec(), "arm": self.arm,
                "fn": None if self.fn is None else fn_digest(self.fn), "per": self.per}
