"""``lmsci suite --check PUBLISHED``: which rows of a published claims table are current with the code at HEAD.

Each published row carries the provenance digest of the runs behind it (``digest`` in ``claims.csv``:
``config.source.libraries``, :mod:`lmsci.provenance`). The check recomputes every experiment's digest at HEAD
(its preset's resolved configuration, the import closure of its module as it is in the working tree, the
installed library versions) and sorts each experiment's rows into:

- ``current``: the row's digest equals HEAD's;
- ``current (source changed, golden unchanged)``: the configuration is the same and only the source or library
  part differs, and the experiment's smoke golden (``results/golden/<experiment>.json``, written by
  ``scripts/golden.py``) was verified at both the row's and HEAD's source and libraries: its smoke results
  (master seed 0, one thread) matched within the golden's tolerance, so the change left that run's numbers
  as they were;
- ``stale``: anything else, with the reasons: no digest recorded, ``mixed`` (the row's runs were computed by
  different code), the configuration changed, the source changed (the closure's files changed since the row's
  commit, from ``git diff``, when git and that commit are there), the libraries changed.

:func:`leave_out_published` acts on the check: the rows of an experiment that the preset's suite leaves out (it
decides nothing there) are dropped from the published table once stale, since rerunning the suite cannot bring
them current.

What a ``current`` verdict cannot promise (besides what :mod:`lmsci.provenance` cannot see): a golden is the
smoke preset at one master seed; a change whose effect shows only at quick (a code path smoke does not take,
a tolerance-sized drift that a long run amplifies) passes the golden and still moves a quick row. The golden's
tolerance (:data:`GOLDEN_RTOL`, :data:`GOLDEN_ATOL`) is chosen to hold across CPUs (AVX2 vs AVX-512, OpenBLAS
vs MKL, thread counts), so a change smaller than it is not seen either. Since 2026-12-07 a golden also holds its
smoke run's verdicts (:func:`verdict_summary`: outcome, value, interval, rule, null and gate results), compared as
the results are (:func:`verdict_diffs`), so a change to how an experiment judges its results shows where it moves a
smoke verdict. Where it does not -- smoke verdicts are mostly inconclusive (gates unmet, one seed, no interval), so
a change to a rule's threshold, an interval's computation or a quick-only branch of ``verdicts`` can leave them as
they were -- the row stays ``current (source changed, golden unchanged)`` although HEAD might judge its quick
results otherwise: rerun the rows after such a change, as after a registration change. Verdict code changed before
a golden first held verdicts (its json's ``verdicts_since``) is not seen at all.
"""

from __future__ import annotations

import fnmatch
import functools
import io
import json
import math
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from lmsci.errors import LmsciError, RunDirError
from lmsci.provenance import SRC_ROOT, provenance, split_digest

#: relative and absolute tolerance of a golden comparison: smoke runs of tiny models agree to about 1e-6
#: relative between CPU kernels; 1e-3 leaves room for a few hundred training steps to amplify that
GOLDEN_RTOL, GOLDEN_ATOL = 1e-3, 1e-6
#: results columns that describe where or how fast a run went, not its outcome (never compared)
VOLATILE_COLUMNS = frozenset({"seconds", "commit", "device", "node", "worker", "hostname", "wall_s"})
VOLATILE_SUFFIXES = ("_per_s", "_seconds", "_sec", "_mfu", "_wall_s")
#: a column one of whose ``_``-separated words is one of these times a computation (``cpu_s``, ``sec_per_fact``,
#: ``time_exact_s``, ``cpu_speedup``): never compared (``attn_s``, attention to S, is not one)
VOLATILE_WORDS = frozenset({"cpu", "sec", "secs", "seconds", "time", "wall", "speedup", "elapsed", "mfu"})
CURRENT, CURRENT_BY_GOLDEN, STALE = "current", "current (source changed, golden unchanged)", "stale"
#: Smoke results that differ between CPU classes (x86 AVX-512 vs AVX2, Intel vs AMD: another BLAS kernel, another
#: rounding) by more than the default tolerance, found by verifying every golden recorded on the Intel AVX-512 hosts
#: on an AMD EPYC AVX2 host (S54: 60 of 65 unchanged). Experiment -> {column pattern (fnmatch): (rtol, atol), or None
#: (not compared)}, used only when the golden was recorded on another (or an unknown) CPU class; on the CPU class
#: that recorded it every column is compared at the default tolerance. The reason of each is in GOLDEN_CPU_SPREAD_WHY.
GOLDEN_CPU_SPREAD: dict[str, dict[str, tuple[float, float] | None]] = {
    "alignment-attack": {"a*_nstar": None, "a*_lo": None, "a*_hi": None, "a*_scale": None, "a*_nstar_bayes": None},
    "lm-steer": {"highlight_*": None},
    "reversal-curse": {"name_gap_bits*": (1e-3, 1e-5)},
    "knowledge-neurons-lm": {"fact_specificity": (1e-2, 1e-6)},
    "length-generalization": {"entropy_*_by_layer": (1e-3, 1e-5)},
}
GOLDEN_CPU_SPREAD_WHY = {
    "alignment-attack": "the smoke model trains a few steps: its behaviour-vs-length fits per alpha (centre, interval, "
                        "scale) pass through 3-4 noisy points and move by up to 40% with the CPU's rounding",
    "lm-steer": "the smoke steer trains a few steps: which words cross the highlight threshold is a near-tie, so "
                "counts and fractions change by a word or two with the CPU's rounding",
    "reversal-curse": "a log-probability gap of ~1e-3 bits after a smoke training: 3e-6 bits apart between CPUs",
    "knowledge-neurons-lm": "specificities of ~1e-4 printed to 3 significant digits: the last digit flips",
    "length-generalization": "entropy gaps of ~1e-5 nats printed to 1 significant digit: 9e-06 vs 1e-05",
}


def cpu_class() -> str:
    """This machine's CPU class for goldens: the CPU vendor and the vector ISA PyTorch's kernels use (``"AuthenticAMD
    AVX2"``, ``"GenuineIntel AVX512"``)."""
    import torch

    vendor = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                vendor = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{vendor} {torch.backends.cpu.get_cpu_capability()}"


def golden_diffs(name: str, golden: pd.DataFrame, new: pd.DataFrame, record: dict[str, Any] | None) -> list[str]:
    """:func:`compare_results` at the golden's own tolerance (``record``: its json), allowing the known spread between
    CPU classes (:data:`GOLDEN_CPU_SPREAD`) when the golden was recorded on another or an unknown CPU class."""
    record = record or {}
    spread = GOLDEN_CPU_SPREAD.get(name) if spread_applies(name, record) else None
    return compare_results(golden, new, record.get("rtol", GOLDEN_RTOL), record.get("atol", GOLDEN_ATOL), spread)


def spread_applies(name: str, record: dict[str, Any] | None) -> bool:
    """Whether the known spread between CPU classes (:data:`GOLDEN_CPU_SPREAD`) is allowed when comparing with the
    golden of ``name`` (``record``: its json): the experiment has one and the golden was recorded on another or an
    unknown CPU class."""
    return name in GOLDEN_CPU_SPREAD and (record or {}).get("cpu") != cpu_class()


def smoke_diffs(name: str, golden: pd.DataFrame, record: dict[str, Any], new: pd.DataFrame,
                verdicts: dict[str, Any] | None) -> list[str]:
    """Every difference between a golden (its results ``golden`` and json ``record``) and a new smoke run (its
    results ``new`` and :func:`verdict_summary` ``verdicts``; None: not compared): :func:`golden_diffs` then
    :func:`verdict_diffs`."""
    return golden_diffs(name, golden, new, record) + ([] if verdicts is None else verdict_diffs(name, record, verdicts))


#: the fields of a smoke verdict a golden keeps (since 2026-12-07): numbers compared as results are, the rest exactly
VERDICT_FIELDS = ("outcome", "value", "ci", "n_seeds", "rule_passed", "null_value", "null_passed")


def verdict_summary(verdicts: list[Any]) -> dict[str, dict[str, Any]]:
    """``{claim id: {field: value}}`` of a run's verdicts (:data:`VERDICT_FIELDS` and each gate's value and
    result), JSON-ready: what a golden keeps so that a change to how an experiment judges its results shows."""
    out = {}
    for v in verdicts:
        d = {f: _plain(getattr(v, f, None)) for f in VERDICT_FIELDS}
        d["ci"] = None if v.ci is None else [_plain(x) for x in v.ci]
        d["gates"] = {g.id: [_plain(g.value), g.passed] for g in v.gates}
        out[v.claim_id] = json.loads(json.dumps(d, default=str))
    return out


def verdict_diffs(name: str, golden: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """The differences between a golden's smoke verdicts (its json's ``verdicts``; None: it has none yet, nothing to
    compare) and a new run's (:func:`verdict_summary`): outcomes, rule and null results and gates exactly; values,
    intervals and gate values at the golden's tolerance, not compared on another CPU class for an experiment with a
    known spread (:data:`GOLDEN_CPU_SPREAD`: its verdict values derive from the columns that spread)."""
    if not golden or golden.get("verdicts") is None:
        return []
    old = golden["verdicts"]
    rtol, atol = golden.get("rtol", GOLDEN_RTOL), golden.get("atol", GOLDEN_ATOL)
    numbers = not spread_applies(name, golden)
    diffs = [f"verdicts differ: only golden {sorted(set(old) - set(new))}, only new {sorted(set(new) - set(old))}"] \
        if set(old) != set(new) else []
    for cid in sorted(set(old) & set(new)):
        a, b = old[cid], new[cid]
        for f in ("outcome", "n_seeds", "rule_passed", "null_passed"):
            if a.get(f) != b.get(f):
                diffs.append(f"verdict {cid} / {f}: {a.get(f)!r} -> {b.get(f)!r}")
        ga, gb = a.get("gates") or {}, b.get("gates") or {}
        if {k: v[1] for k, v in ga.items()} != {k: v[1] for k, v in gb.items()}:
            diffs.append(f"verdict {cid} / gates passed: {ga!r} -> {gb!r}")
        if numbers:
            for f, x, y in [("value", a.get("value"), b.get("value")), ("ci", a.get("ci"), b.get("ci")),
                            ("null_value", a.get("null_value"), b.get("null_value")),
                            *((f"gate {k}", ga[k][0], gb[k][0]) for k in set(ga) & set(gb))]:
                if not values_close(x, y, rtol, atol):
                    diffs.append(f"verdict {cid} / {f}: {x!r} -> {y!r}")
    return diffs


REPO_ROOT = SRC_ROOT.parents[1]


def golden_dir(root: str | Path | None = None) -> Path:
    """``results/golden`` of the checkout (or under ``root``, a results folder)."""
    from lmsci.publish import results_root

    return Path(root if root is not None else results_root()) / "golden"


def outcome_columns(df: pd.DataFrame) -> list[str]:
    """The columns of a results table that a golden compares: all but :data:`VOLATILE_COLUMNS` and timing ones
    (:data:`VOLATILE_SUFFIXES`, :data:`VOLATILE_WORDS`)."""
    return [c for c in df.columns if c not in VOLATILE_COLUMNS and not str(c).endswith(VOLATILE_SUFFIXES)
            and not VOLATILE_WORDS.intersection(str(c).split("_"))]


def as_stored(df: pd.DataFrame) -> pd.DataFrame:
    """A results table as a golden CSV stores it: written and read back as :meth:`lmsci.runs.RunDir.results`
    reads (so an ``arm`` named ``null`` stays the string ``"null"`` on both sides of a comparison)."""
    return read_golden_csv(io.StringIO(df.to_csv(index=False)))


def read_golden_csv(path_or_buf: Any) -> pd.DataFrame:
    """A golden (or any results) CSV read as :meth:`lmsci.runs.RunDir.results` reads one: only empty cells and
    pandas' NaN spellings are missing values, not the words ``null``/``None``/``NA``."""
    from lmsci.runs import NA_VALUES

    return pd.read_csv(path_or_buf, keep_default_na=False, na_values=NA_VALUES)


def _num(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    return None


def _plain(x: Any) -> Any:
    """A numpy scalar as its Python value; NaN (an empty cell) as None."""
    x = x.item() if hasattr(x, "item") and not isinstance(x, (str, bytes)) else x
    return None if isinstance(x, float) and math.isnan(x) else x


def values_close(a: Any, b: Any, rtol: float = GOLDEN_RTOL, atol: float = GOLDEN_ATOL) -> bool:
    """Whether two cells agree: numbers within ``rtol``/``atol`` (NaN equals NaN), JSON strings (lists and
    objects, as experiments store per-trial records) element by element, anything else exactly."""
    na, nb = _num(a), _num(b)
    if na is not None and nb is not None:
        if math.isnan(na) or math.isnan(nb):
            return math.isnan(na) and math.isnan(nb)
        return math.isclose(na, nb, rel_tol=rtol, abs_tol=atol)
    if isinstance(a, str) and isinstance(b, str) and a != b and a[:1] in "[{" and b[:1] in "[{":
        try:
            return values_close(json.loads(a), json.loads(b), rtol, atol)
        except json.JSONDecodeError:
            return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_close(x, y, rtol, atol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_close(a[k], b[k], rtol, atol) for k in a)
    return a == b


def compare_results(golden: pd.DataFrame, new: pd.DataFrame, rtol: float = GOLDEN_RTOL,
                    atol: float = GOLDEN_ATOL, spread: dict[str, tuple[float, float] | None] | None = None) -> list[str]:
    """The differences between a golden results table and a new one (empty: unchanged within tolerance),
    matched on the ``point`` column: missing or extra points and columns, and each cell that moved. ``spread``:
    column pattern (fnmatch) -> its own ``(rtol, atol)``, or None to leave the column out (the first pattern that
    matches a column decides)."""
    diffs = []
    gc, nc = set(outcome_columns(golden)), set(outcome_columns(new))
    if gc != nc:
        diffs.append(f"columns differ: only golden {sorted(gc - nc)}, only new {sorted(nc - gc)}")
    key = "point" if "point" in golden and "point" in new else None
    g = golden.set_index(key) if key else golden
    n = new.set_index(key) if key else new
    if set(g.index) != set(n.index):
        diffs.append(f"points differ: only golden {sorted(map(str, set(g.index) - set(n.index)))}, "
                     f"only new {sorted(map(str, set(n.index) - set(g.index)))}")
    for idx in [i for i in g.index if i in set(n.index)]:
        for c in sorted((gc & nc) - {key}):
            tol = next((t for pat, t in (spread or {}).items() if fnmatch.fnmatchcase(str(c), pat)), (rtol, atol))
            if tol is None:
                continue
            a, b = (_plain(x) for x in (g.at[idx, c], n.at[idx, c]))
            if not values_close(a, b, *tol):
                diffs.append(f"{idx} / {c}: {a!r} -> {b!r}")
    return diffs


def load_golden(name: str, root: str | Path | None = None) -> dict[str, Any] | None:
    """The golden record of an experiment (``<golden_dir>/<name>.json``), or None."""
    p = golden_dir(root) / f"{name}.json"
    return json.loads(p.read_text()) if p.is_file() else None


def golden_vouches(golden: dict[str, Any] | None, row: dict[str, str], head: dict[str, str]) -> bool:
    """Whether a golden was verified unchanged at both the row's and HEAD's (source, libraries)."""
    if not golden:
        return False
    seen = {(v.get("source"), v.get("libraries")) for v in golden.get("verified", [])}
    return (row["source"], row["libraries"]) in seen and (head["source"], head["libraries"]) in seen


@functools.lru_cache(maxsize=256)
def _changed_since(commit: str) -> frozenset[str] | None:
    try:
        out = subprocess.run(["git", "diff", "--name-only", commit, "--", "src/lmsci"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return frozenset(ln.removeprefix("src/") for ln in out.stdout.splitlines() if ln.strip())


def changed_files(commit: str, paths: list[str]) -> list[str] | None:
    """The files among ``paths`` (relative to ``src/``) that differ between ``commit`` and the working tree,
    from ``git diff`` (one call per commit); None when git or the commit is not there."""
    changed = _changed_since(commit) if commit else None
    return None if changed is None else sorted(set(paths) & changed)


@dataclass
class RowCheck:
    """The check of one experiment's rows (they share runs, so commit and digest)."""

    experiment: str
    rows: int
    status: str
    row_digest: str
    head_digest: str
    commit: str = ""
    reasons: list[str] = field(default_factory=list)
    files: list[str] | None = None

    def line(self) -> str:
        files = "" if not self.files else f" [changed since {self.commit}: {', '.join(self.files)}]"
        if self.files is None and self.commit and "source changed" in self.reasons:
            # a commit git cannot find here (a shallow clone, a commit that never landed): say so, not "no files"
            files = f" [files not listed: git cannot diff against {self.commit} here]"
        why = f": {'; '.join(self.reasons)}" if self.reasons else ""
        return f"{self.experiment} ({self.rows} rows): {self.status}{why}{files}"


@dataclass
class CheckReport:
    """What :func:`check_published` found: one :class:`RowCheck` per experiment, in table order."""

    where: str
    preset: str
    checks: list[RowCheck]

    @property
    def stale(self) -> list[RowCheck]:
        return [c for c in self.checks if c.status == STALE]

    @property
    def clean(self) -> bool:
        return not self.stale

    def counts(self) -> dict[str, int]:
        return {s: sum(c.rows for c in self.checks if c.status == s) for s in (CURRENT, CURRENT_BY_GOLDEN, STALE)}

    def text(self) -> str:
        c = self.counts()
        head = (f"{self.where} (preset {self.preset}): {c[CURRENT]} rows current, {c[CURRENT_BY_GOLDEN]} current by "
                f"their golden, {c[STALE]} stale, in {len(self.stale)} of {len(self.checks)} experiments")
        return "\n".join([head, *(f"  {r.line()}" for r in self.checks)])


def head_provenance(name: str, preset: str) -> Any:
    """The :class:`lmsci.provenance.Provenance` of experiment ``name`` at ``preset`` at HEAD (no overrides)."""
    from lmsci.config import resolve_config
    from lmsci.experiments.registry import get

    cls = get(name)
    return provenance(name, cls.__module__, resolve_config(cls.Config, preset, {}))


def check_rows(table: pd.DataFrame, preset: str, heads: dict[str, Any], goldens: dict[str, Any],
               where: str = "", diff=changed_files) -> CheckReport:
    """The check of a claims table against the HEAD provenance of each experiment (``heads``: name -> Provenance
    or an error string) and the goldens (name -> record or None); ``diff(commit, paths)`` lists changed files."""
    checks = []
    for name, rows in table.groupby("experiment", sort=False):
        r0 = rows.iloc[0]
        digest = str(r0.get("digest")) if isinstance(r0.get("digest"), str) else ""
        commit = str(r0.get("commit")) if isinstance(r0.get("commit"), str) else ""
        head = heads.get(name)
        if isinstance(head, str) or head is None:
            checks.append(RowCheck(name, len(rows), STALE, digest, "", commit,
                                   [f"no digest at HEAD: {head or 'not a registered experiment'}"]))
            continue
        row_parts, head_parts = split_digest(digest), split_digest(head.digest)
        if row_parts == head_parts:
            checks.append(RowCheck(name, len(rows), CURRENT, digest, head.digest, commit))
            continue
        files = diff(commit, sorted(head.files)) if commit else None
        if row_parts is None:
            why = "mixed digests (its runs were computed by different code)" if digest else "no digest recorded"
            checks.append(RowCheck(name, len(rows), STALE, digest, head.digest, commit, [why], files))
            continue
        reasons = [f"{part} changed" for part in ("config", "source", "libraries")
                   if row_parts[part] != head_parts[part]]
        if row_parts["config"] == head_parts["config"] and golden_vouches(goldens.get(name), row_parts, head_parts):
            checks.append(RowCheck(name, len(rows), CURRENT_BY_GOLDEN, digest, head.digest, commit, reasons, files))
        else:
            if goldens.get(name) is None and row_parts["config"] == head_parts["config"]:
                reasons.append("no golden")
            checks.append(RowCheck(name, len(rows), STALE, digest, head.digest, commit, reasons, files))
    return CheckReport(where, preset, checks)


def check_published(where: str | Path, golden_root: str | Path | None = None) -> CheckReport:
    """Check a published table (a folder with ``claims.csv`` and ``published.json``, or a suite directory).

    Raises:
        RunDirError: no claims table there.
    """
    from lmsci.publish import load_claims_table

    where = Path(where)
    table = load_claims_table(where)
    meta_p = (where if where.is_dir() else where.parent) / "published.json"
    suite_p = (where if where.is_dir() else where.parent) / "suite.json"
    preset = "quick"
    for p in (meta_p, suite_p):
        if p.is_file():
            preset = json.loads(p.read_text()).get("preset", preset)
            break
    heads: dict[str, Any] = {}
    for name in dict.fromkeys(table["experiment"]):
        try:
            heads[name] = head_provenance(name, preset)
        except (LmsciError, ValueError) as e:  # an unregistered name, a preset that no longer exists: reported
            heads[name] = f"{type(e).__name__}: {e}"
    goldens = {n: load_golden(n, golden_root) for n in heads}
    return check_rows(table, preset, heads, goldens, where=str(where))


def leave_out_published(published: str | Path, names: Sequence[str], preset: str,
                        log: Callable[[str], None] = print) -> list[str]:
    """Drop from a published table the rows of experiments that the suite leaves out at ``preset`` (they decide
    nothing there, :func:`lmsci.suite.undecided`) when those rows are stale at HEAD (``lmsci suite --check``):
    a row the preset's suite no longer produces cannot be brought current by rerunning the suite, so it is
    removed rather than published stale; ``claims.md`` then lists the experiment under "Left out at this
    preset". Rows that are still current are kept.

    Returns:
        the experiments whose rows were dropped.

    Raises:
        RunDirError: no published table there, or it holds another preset.
    """
    from lmsci.publish import CLAIMS_CSV, _write_published, load_claims_table

    pub = Path(published)
    meta_p = pub / "published.json"
    if not (pub / CLAIMS_CSV).is_file() or not meta_p.is_file():
        raise RunDirError(f"{pub}: no published table (claims.csv and published.json)")
    published_preset = json.loads(meta_p.read_text()).get("preset", preset)
    if published_preset != preset:
        raise RunDirError(f"{pub} publishes preset {published_preset!r}, not {preset!r}")
    old = load_claims_table(pub)
    present = [n for n in dict.fromkeys(names) if n in set(old["experiment"])]
    if not present:
        return []
    heads = {n: head_provenance(n, preset) for n in present}  # only the left-out experiments' digests
    rows = old[old["experiment"].isin(present)]
    goldens = {n: load_golden(n) for n in present}
    status = {c.experiment: c.status for c in check_rows(rows, preset, heads, goldens).checks}
    drop = [n for n in present if status.get(n) != CURRENT]
    if drop:
        _write_published(pub, old[~old["experiment"].isin(drop)].reset_index(drop=True), preset)
        log(f"published table {pub / CLAIMS_CSV}: dropped the stale rows of {len(drop)} experiment(s) left out at "
            f"{preset} ({', '.join(drop)})")
    return drop


def update_golden(name: str, results: pd.DataFrame, record: dict[str, Any], out: str | Path,
                  extra: dict[str, Any] | None = None, verdicts: dict[str, Any] | None = None) -> tuple[str, list[str]]:
    """Compare a smoke run's results (and verdicts) with the experiment's golden in ``out`` and record the outcome.

    ``record`` is the run's ``provenance.json`` (:meth:`lmsci.provenance.Provenance.to_json`); ``verdicts`` its
    :func:`verdict_summary`. Unchanged within tolerance (results and, where the golden holds them, verdicts:
    :func:`verdict_diffs`): the run's (source, libraries) joins the golden's ``verified`` list (the table is kept;
    a golden without verdicts gets these, from then on compared). No golden, or a changed one: ``<name>.csv`` is
    rewritten and ``verified`` restarts with this run, so rows computed before the change can no longer be vouched
    for.

    Returns:
        (``"new"``, ``"unchanged"`` or ``"changed"``; the differences found).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    csv_p, json_p = out / f"{name}.csv", out / f"{name}.json"
    cols = outcome_columns(results)
    new = results[cols].sort_values("point", kind="stable") if "point" in cols else results[cols]
    entry = {"source": record.get("source"), "libraries": record.get("libraries_digest"),
             "digest": record.get("digest"), **(extra or {})}
    old = json.loads(json_p.read_text()) if json_p.is_file() and csv_p.is_file() else None
    diffs: list[str] = []
    if old is not None:
        diffs = smoke_diffs(name, read_golden_csv(csv_p), old, as_stored(new), verdicts)
        if not diffs:
            known = {(v.get("source"), v.get("libraries")) for v in old.get("verified", [])}
            grown = False
            if (entry["source"], entry["libraries"]) not in known:
                old.setdefault("verified", []).append(entry)
                grown = True
            if verdicts is not None and "verdicts" not in old:
                old["verdicts"], old["verdicts_since"] = verdicts, entry.get("commit") or entry.get("digest")
                grown = True
            if grown:
                json_p.write_text(json.dumps(old, indent=2) + "\n")
            return "unchanged", []
    csv_p.write_text(new.to_csv(index=False))
    json_p.write_text(json.dumps({
        "experiment": name, "preset": "smoke", "seed": 0, "threads": 1, "config": record.get("config"),
        "rtol": GOLDEN_RTOL, "atol": GOLDEN_ATOL, "cpu": cpu_class(), "libraries": record.get("libraries", {}),
        "verified": [entry], **({"verdicts": verdicts} if verdicts is not None else {})}, indent=2) + "\n")
    return ("new" if old is None else "changed"), diffs
