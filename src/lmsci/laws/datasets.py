"""Scaling-law data: read a CSV of training runs into named arrays, with errors that name the rows.

Variables: ``N`` parameters, ``D`` training tokens, ``C`` training FLOP, ``S`` optimizer steps,
``y`` the target (final loss in nats/token, or accuracy). Under the usual approximation
``C = 6 N D`` (Kaplan et al. 2020, arXiv 2001.08361, Section 2.1) a missing ``D`` is derived from
``C`` and ``N`` and a missing ``C`` from ``N`` and ``D``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from lmsci.errors import DataError

Array = np.ndarray

#: column names tried, in order, when no explicit mapping is given
DEFAULT_COLUMNS: dict[str, tuple[str, ...]] = {
    "N": ("N", "n", "params", "n_params", "num_params", "Model Size", "model_size", "parameters"),
    "D": ("D", "tokens", "tokens_seen", "Training Tokens", "training_tokens", "n_tokens"),
    "C": ("C", "flops", "FLOPs", "Training FLOP", "training_flop", "compute"),
    "S": ("S", "steps", "step"),
    "y": ("loss", "L", "val_loss", "final_loss", "accuracy", "acc", "y"),
}


@dataclass
class ScalingData:
    """Runs as named arrays.

    Attributes:
        X: inputs ``{"N": [n], "D": [n], "C": [n], "S": [n]}`` (those available).
        y: targets ``[n]``.
        lines: the CSV line number of each run (header = line 1), for error messages.
        columns: which CSV column each variable came from (``"6ND"``/``"C/6N"`` when derived).
        source: the file read.
    """

    X: dict[str, Array]
    y: Array
    lines: Array
    columns: dict[str, str] = field(default_factory=dict)
    source: str = ""

    def __len__(self) -> int:
        return int(self.y.size)

    def subset(self, mask: Array) -> "ScalingData":
        """The runs where ``mask`` is true."""
        mask = np.asarray(mask)
        return ScalingData({k: v[mask] for k, v in self.X.items()}, self.y[mask], self.lines[mask],
                           dict(self.columns), self.source)

    def drop_highest(self, k: int) -> "ScalingData":
        """Drop the ``k`` runs with the highest target (Besiroglu et al. 2024 drop the 5 highest-loss runs)."""
        if k <= 0:
            return self
        order = np.argsort(self.y, kind="stable")
        keep = np.zeros(len(self), bool)
        keep[order[: len(self) - k]] = True
        return self.subset(keep)


def _pick(df: pd.DataFrame, var: str, explicit: str | None) -> str | None:
    if explicit is not None:
        if explicit not in df.columns:
            raise DataError(f"column {explicit!r} (for {var}) is not in the CSV; columns are {list(df.columns)}")
        return explicit
    for name in DEFAULT_COLUMNS[var]:
        if name in df.columns:
            return name
    return None


def from_frame(
    df: pd.DataFrame,
    *,
    n_col: str | None = None,
    d_col: str | None = None,
    c_col: str | None = None,
    s_col: str | None = None,
    loss_col: str | None = None,
    need: tuple[str, ...] = (),
    positive_target: bool = True,
    min_points: int = 1,
    source: str = "",
) -> ScalingData:
    """Build :class:`ScalingData` from a table, checking every value.

    Args:
        df: the runs, one per row.
        n_col, d_col, c_col, s_col, loss_col: column names; None tries :data:`DEFAULT_COLUMNS`.
        need: variables the law needs (e.g. ``("N", "D")``); D or C is derived via C = 6ND when possible.
        positive_target: require the target > 0 (losses fitted in log space).
        min_points: fewest runs allowed.

    Raises:
        DataError: a needed column is missing (the message lists the columns), a value is missing,
            non-numeric, non-finite or <= 0 (the message names the CSV lines), or too few runs.
    """
    cols = {v: _pick(df, v, e) for v, e in (("N", n_col), ("D", d_col), ("C", c_col), ("S", s_col),
                                               ("y", loss_col))}
    if cols["y"] is None:
        raise DataError(f"no loss column: pass --loss-col (tried {list(DEFAULT_COLUMNS['y'])}); "
                        f"columns are {list(df.columns)}")
    lines = np.arange(len(df)) + 2
    used = {v: c for v, c in cols.items() if c is not None}
    arrays: dict[str, Array] = {}
    problems = []
    for v, c in used.items():
        a = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(a)
        if v != "y" or positive_target:
            bad |= ~(a > 0)
        if bad.any():
            rule = "finite" if (v == "y" and not positive_target) else "finite and > 0"
            problems.append(f"column {c!r} ({v}) must be {rule}; bad values at CSV lines "
                            f"{lines[bad][:20].tolist()}{' ...' if bad.sum() > 20 else ''} "
                            f"(values {df[c].to_numpy()[bad][:5].tolist()})")
        arrays[v] = a
    if problems:
        raise DataError("; ".join(problems))
    columns = dict(used)
    if "D" not in arrays and "C" in arrays and "N" in arrays:
        arrays["D"] = arrays["C"] / (6.0 * arrays["N"])
        columns["D"] = f"{cols['C']}/(6*{cols['N']})"
    if "C" not in arrays and "N" in arrays and "D" in arrays:
        arrays["C"] = 6.0 * arrays["N"] * arrays["D"]
        columns["C"] = f"6*{cols['N']}*{cols['D']}"
    flags = {"N": "--n-col", "D": "--d-col or --c-col", "C": "--c-col (or --n-col and --d-col)", "S": "--s-col"}
    for v in need:
        if v not in arrays:
            raise DataError(f"this law needs {v} ({flags.get(v, v)}); tried columns {list(DEFAULT_COLUMNS[v])}; "
                            f"columns are {list(df.columns)}")
    y = arrays.pop("y")
    if y.size < min_points:
        raise DataError(f"{y.size} runs in {source or 'the table'}; this law needs at least {min_points}")
    return ScalingData(arrays, y, lines, columns, source)


def load_csv(path: str | Path, **kw) -> ScalingData:
    """Read a CSV of runs (see :func:`from_frame` for the arguments).

    Raises:
        DataError: the file is missing, unreadable or empty, or a check of :func:`from_frame` fails.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"data file {str(p)!r} does not exist")
    try:
        df = pd.read_csv(p)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read {str(p)!r} as CSV: {e}") from None
    if df.empty:
        raise DataError(f"{str(p)!r} has no rows")
    return from_frame(df, source=str(p), **kw)


def chinchilla_csv_path() -> Path:
    """The packaged copy of Epoch AI's extraction of Hoffmann et al.'s Figure 4 (245 runs).

    Source: Besiroglu et al. 2024, arXiv 2404.10102, repository epoch-research/analyzing-chinchilla,
    ``data/svg_extracted_data.csv``. Columns: ``Model Size`` (N), ``Training FLOP`` (C), ``loss``.
    """
    return Path(__file__).parent / "data" / "chinchilla_svg_extracted.csv"
