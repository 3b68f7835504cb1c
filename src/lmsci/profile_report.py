"""Write the profile table (:mod:`lmsci.profile_table`) as markdown and CSV: ``lmsci profile``'s output.

The header states the measured peak (CPU, matrix size, threads, repeats), the formulas and their sources; then the
experiments with the lowest MFU and the largest non-training share, one row per experiment, the run directories
used, the ones skipped (unfinished or superseded) and the expected experiments without a kept run directory.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from lmsci.errors import RunDirError
from lmsci.profile_table import COLUMNS, measure_peak_flops, profile_rows, select_runs


def _fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def _cell(row: dict[str, Any], key: str, fmt) -> str:
    v = row.get(key)
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt(v)


def render_markdown(rows: Sequence[dict[str, Any]], peak: dict[str, Any], notes: Sequence[str] = (),
                    missing: Sequence[str] = (), header: str = "") -> str:
    """The profile table as markdown: header (peak, CPU, formulas), the lowest MFU and largest non-training share
    first, then every experiment, the run directories used and what was skipped or is missing."""
    lines = ["# Profile of the quick runs: wall time, training tokens/s and MFU per experiment", "",
             f"Peak: **{peak['peak_flops'] / 1e9:.1f} GFLOP/s** float32 `torch.matmul` of [{peak['n']}, {peak['n']}] "
             f"matrices at {peak['threads']} thread (best of {peak['repeats']} repeats over {peak['seconds']:.1f} CPU-s, "
             f"timed by CPU time; median {peak['median_flops'] / 1e9:.1f} GFLOP/s; the best repeat's wall-clock rate "
             f"{peak.get('wall_flops', float('nan')) / 1e9:.1f} GFLOP/s shows the machine's load) on {peak['cpu']}, "
             "measured by `lmsci profile`. The runs' tokens/s are wall-clock rates, measured where and while the runs "
             "ran.", "",
             "Wall: seconds per master seed (mean over the seeds; `wall_source` says whether from the suite's "
             "`suite.json` or the sum of the results' `seconds`). Tokens: training target tokens per master seed "
             "(positions with a loss: where only answer or class positions carry one, every step processes more "
             "tokens and the FLOP/s and MFU are understated). "
             "Train share: time in training steps (sum of window tokens / tokens_per_s) over wall. "
             "N: parameters per trained model (results.csv column, else 12·n_layers·d_model² for the standard block "
             "+ vocab_size·d_model; see `lmsci.profile_table`). FLOP/s = 6·N·tokens/s (Kaplan et al. 2020, "
             "arXiv:2001.08361 eq. 2.1, training; ignores attention's n_ctx term), pooled over windows; "
             "MFU = FLOP/s / peak. Stack: models trained as one stacked step (1 = not stacked).", ""]
    if header:
        lines += [header, ""]
    trained = [r for r in rows if r.get("mfu") is not None]
    with_share = [r for r in rows if r.get("train_share") is not None]
    lines.append("Lowest MFU: " + ", ".join(f"{r['experiment']} {r['mfu']:.2%}"
                                             for r in sorted(trained, key=lambda r: r["mfu"])[:5]) + ".")
    lines.append("Largest non-training share of wall (experiments with training records): " + ", ".join(
        f"{r['experiment']} {1 - r['train_share']:.0%}" for r in sorted(with_share, key=lambda r: r["train_share"])[:5])
        + ".")
    lines += ["", "| experiment | seeds | points | wall s/seed | tokens/seed | train s/seed | train share | "
              "median tok/s | stack | N | GFLOP/s | MFU | note |", "|" + "---|" * 13]
    for r in rows:
        n = "-" if r.get("params_min") is None else (
            _fmt_int(r["params_min"]) if r["params_min"] == r["params_max"]
            else f"{_fmt_int(r['params_min'])}–{_fmt_int(r['params_max'])}")
        lines.append("| " + " | ".join([
            r["experiment"], r["master_seeds"], r["points"], f"{r['wall_s']:.1f} ({r['wall_s_by_seed']})",
            _cell(r, "tokens_trained", _fmt_int), _cell(r, "train_s", lambda v: f"{v:.1f}"),
            _cell(r, "train_share", lambda v: f"{v:.0%}"), _cell(r, "median_tokens_per_s", _fmt_int),
            _cell(r, "max_stack", str), n, _cell(r, "achieved_flops", lambda v: f"{v / 1e9:.2f}"),
            _cell(r, "mfu", lambda v: f"{v:.2%}"), str(r.get("note", "") or "")]) + " |")
    lines += ["", "Wall source: " + "; ".join(sorted({f"{r['experiment']}: {r['wall_source']}" for r in rows
                                                      if r["wall_source"] != "suite.json"}) or ["suite.json for all"]),
              "", "## Run directories used", ""]
    lines += [f"- {r['experiment']}: " + ", ".join(f"`{d}`" for d in r["run_dirs"].split()) for r in rows]
    if notes:
        lines += ["", "## Skipped", ""] + [f"- {x}" for x in notes]
    if missing:
        lines += ["", "## Missing (no kept run directory)", "", ", ".join(missing)]
    return "\n".join(lines) + "\n"


def published_experiments(table: str | Path) -> list[str]:
    """The experiments of a published table directory (``results/quick``): its ``claims.csv``'s ``experiment``s.

    Raises:
        RunDirError: no ``claims.csv`` with an ``experiment`` column in ``table``.
    """
    f = Path(table) / "claims.csv"
    if not f.is_file():
        raise RunDirError(f"{table} is not a published table directory (no claims.csv)")
    df = pd.read_csv(f)
    if "experiment" not in df:
        raise RunDirError(f"{f} has no experiment column")
    return sorted(set(df["experiment"].astype(str)))


def write_profile(run_dirs: Sequence[str | Path], out: str | Path, peak: dict[str, Any] | None = None,
                  expected: Sequence[str] = (), header: str = "",
                  peak_seconds: float = 2.0) -> tuple[Path, Path, list[dict[str, Any]], dict[str, Any]]:
    """Profile ``run_dirs`` and write ``OUT.md`` and ``OUT.csv`` (``out`` without suffix).

    Args:
        peak: a :func:`measure_peak_flops` result (measured here, for ``peak_seconds``, when None: after the run
            directories were read, so a bad path fails before the measurement).
        expected: experiment names the table should have; those without a run are listed as missing.
        header: a line for the markdown header (how the runs were made).

    Returns:
        ``(markdown path, csv path, rows, peak)``.

    Raises:
        RunDirError: a path that is not an lmsci run directory; ValueError: no finished run among them, or
            ``peak_seconds <= 0``.
    """
    runs, notes = select_runs(run_dirs)
    if not runs:
        raise ValueError("lmsci profile: no finished run directory among the paths given")
    peak = peak if peak is not None else measure_peak_flops(seconds=peak_seconds)
    rows = profile_rows(runs, peak["peak_flops"])
    have = {r["experiment"] for r in rows}
    missing = sorted(set(expected) - have)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    md, csv = out.with_suffix(".md"), out.with_suffix(".csv")
    md.write_text(render_markdown(rows, peak, notes, missing, header))
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["peak_flops"] = peak["peak_flops"]
    df.to_csv(csv, index=False)
    return md, csv, rows, peak
