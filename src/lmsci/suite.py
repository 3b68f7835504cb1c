"""The claims suite: every experiment (or a subset) at one preset into one directory, and the claims table.

``lmsci suite --preset smoke|quick|gpu|paper [--only a,b] [--out DIR] [--compare EARLIER]`` runs each
experiment into ``DIR/<experiment>/`` (an ordinary run directory, so each resumes on its own and a
finished one is skipped), then writes the claims table, one row per registered claim:

    experiment, claim, source, paper value, ours (value, interval), outcome, seeds, wall time, device

as ``DIR/claims.md``, ``DIR/claims.csv`` and ``DIR/claims.html``. An experiment that fails with an
:class:`lmsci.errors.LmsciError` (a bad configuration for this preset, a corrupted run directory, ...)
becomes an error row and the suite goes on. With ``compare`` (an earlier suite directory), every claim
whose outcome changed, or whose value moved outside its interval (either run's), is marked, so a change
to the code that changes the science is seen.

The suite knows experiments only through the registry and the contract (:mod:`lmsci.contract`); every
number in the table is read back from each run directory's ``verdict.json``, ``results.csv`` and
``environment.json``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from lmsci.config import ALL_PRESET_NAMES, config_to_yaml, parse_overrides, resolve_config
from lmsci.errors import ConfigError, LmsciError, RunDirError, UnknownNameError
from lmsci.runs import RunDir, atomic_write_text, resolve_device

SUITE_FILE = "suite.json"
CLAIMS_MD, CLAIMS_CSV, CLAIMS_HTML = "claims.md", "claims.csv", "claims.html"
ERROR = "error"

#: the claims table's columns (claims.csv has these and the machine-readable ones after them)
COLUMNS = ["experiment", "claim", "source", "paper_value", "ours", "outcome", "seeds", "wall_s", "device"]
CSV_COLUMNS = COLUMNS + ["value", "ci_lo", "ci_hi", "ablation", "error", "change"]


def default_suite_out(preset: str) -> Path:
    """``runs/suite-<preset>/<timestamp>`` under the current directory."""
    return Path("runs") / f"suite-{preset}" / time.strftime("%Y-%m-%dT%H-%M-%S")


def suite_names(only: str | Sequence[str] | None = None) -> list[str]:
    """The experiments a suite runs: every experiment lmsci ships (the registry's ``EXPERIMENT_MODULES``,
    in catalog order; experiments registered elsewhere, such as a test's toy, run only when named), or
    those named in ``only`` (a comma-separated string or a list; kept in the order given, duplicates
    dropped).

    Raises:
        UnknownNameError: a name in ``only`` is not registered (with a did-you-mean).
        ConfigError: ``only`` names no experiment.
    """
    from lmsci.experiments.registry import catalog, shipped

    names = list(catalog())
    if only is None:
        return list(shipped())
    asked = [n.strip() for n in (only.split(",") if isinstance(only, str) else only) if n.strip()]
    if not asked:
        raise ConfigError("--only", only, "a comma-separated list of experiment names (see `lmsci list`)")
    for n in asked:
        if n not in names:
            raise UnknownNameError("experiment", n, names)
    return list(dict.fromkeys(asked))


@dataclass
class SuiteResult:
    """What :func:`run_suite` produced.

    Attributes:
        path: the suite directory.
        table: the claims table (``CSV_COLUMNS``), one row per claim, one error row per failed experiment.
        ran: experiments computed (or resumed) in this call; skipped: finished ones read back.
        changes: rows marked by ``compare`` (empty without it).
    """

    path: Path
    table: pd.DataFrame
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    changes: pd.DataFrame | None = None

    @property
    def errors(self) -> pd.DataFrame:
        return self.table[self.table["outcome"] == ERROR]


def _state(path: Path) -> dict[str, Any]:
    p = path / SUITE_FILE
    if not p.exists():
        return {}
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise RunDirError(f"{p} is corrupted ({e}); delete it or choose another --out") from None


def _save_state(path: Path, state: dict[str, Any]) -> None:
    atomic_write_text(path / SUITE_FILE, json.dumps(state, indent=2))


def _finished(run: RunDir, exp: Any, cfg: Any) -> bool:
    """Whether ``run`` already holds this experiment at this configuration with every point and a verdict."""
    try:
        if not (run.path / RunDir.CONFIG).exists() or not (run.path / RunDir.VERDICT).exists():
            return False
        if run.meta().get("experiment") != exp.name or run.config_yaml() != config_to_yaml(cfg):
            return False
        return {p.id for p in exp.seeded_points(cfg)} <= run.finished_ids()
    except LmsciError:
        return False


def run_suite(
    preset: str = "quick",
    only: str | Sequence[str] | None = None,
    out: str | Path | None = None,
    *,
    device: str | None = None,
    overrides: Sequence[str] | dict[str, Any] = (),
    compare: str | Path | None = None,
    progress: bool = False,
    log: Callable[[str], None] = print,
    backend: Any = None,
) -> SuiteResult:
    """Run (or resume) every experiment of the suite at ``preset`` into ``out`` and write the claims table.

    Args:
        preset: smoke | quick | gpu | paper (an experiment without that preset gives an error row).
        only: a subset of experiments (see :func:`suite_names`).
        out: the suite directory (default ``runs/suite-<preset>/<timestamp>``); rerun into it to resume.
        device: cpu | cuda | cuda:N | auto, for every experiment (default: each config's, ``auto``).
        overrides: ``key=value`` applied to every experiment's config (fields every config has:
            ``seed``, ``threads``, ``n_seeds``, ``device``).
        compare: an earlier suite directory (or its ``claims.csv``) to mark changes against.
        progress: progress bars; log: where progress lines go.
        backend: where each experiment's points are computed (:func:`lmsci.sweep.run_experiment`'s
            ``backend``; default local).

    Returns:
        :class:`SuiteResult`.

    Raises (before any work):
        UnknownNameError: unknown preset or experiment.
        ConfigError: an override or device that is not allowed (``cuda`` without CUDA).
        RunDirError: ``out`` is a file or holds a suite at another preset; ``compare`` has no claims table.
    """
    from lmsci.experiments.registry import get
    from lmsci.sweep import run_experiment

    if preset not in ALL_PRESET_NAMES:
        raise UnknownNameError("preset", preset, ALL_PRESET_NAMES)
    names = suite_names(only)
    ov = dict(overrides) if isinstance(overrides, dict) else parse_overrides(list(overrides))
    if "preset" in ov:
        raise ConfigError("preset", ov["preset"], "set with --preset, not --set")
    if device is not None:
        ov["device"] = device
    if "device" in ov:
        resolve = backend.resolve_device if backend is not None and backend.is_open else resolve_device
        resolve(str(ov["device"]))  # ConfigError for cuda without CUDA (here or on the cluster), before any work
    earlier = load_claims_table(compare) if compare is not None else None
    path = Path(out) if out is not None else default_suite_out(preset)
    if path.exists() and not path.is_dir():
        raise RunDirError(f"--out {path} is an existing file, not a suite directory")
    state = _state(path)
    if state and (state.get("preset") != preset or state.get("overrides", {}) != _jsonable_ov(ov)):
        raise RunDirError(f"{path} holds a suite at preset {state.get('preset')!r} with overrides "
                          f"{state.get('overrides')}; rerun with the same --preset/--set/--device to resume, "
                          "or choose another --out")
    path.mkdir(parents=True, exist_ok=True)
    state = {"preset": preset, "overrides": _jsonable_ov(ov), "experiments": state.get("experiments", {})}
    _save_state(path, state)

    # every configuration first: a bad override is reported before any experiment runs
    plan: list[tuple[str, Any, Any, str | None]] = []
    for name in names:
        cls = get(name)
        try:
            plan.append((name, cls(), resolve_config(cls.Config, preset, ov), None))
        except UnknownNameError as e:
            if e.field != "preset":
                raise
            plan.append((name, cls(), None, f"no {preset!r} preset (has: {', '.join(cls.Config.PRESETS)})"))
        except ConfigError as e:
            plan.append((name, cls(), None, str(e)))

    result = SuiteResult(path, pd.DataFrame(columns=CSV_COLUMNS))
    t_suite = time.perf_counter()
    for i, (name, exp, cfg, err) in enumerate(plan, 1):
        rec = state["experiments"].setdefault(name, {"wall_s": 0.0})
        run = RunDir(path / name)
        if err is None and _finished(run, exp, cfg):
            log(f"[{i}/{len(plan)}] {name}: finished earlier, skipped")
            result.skipped.append(name)
            rec["error"] = None
            _save_state(path, state)
            continue
        if err is None:
            log(f"[{i}/{len(plan)}] {name} ({preset})")
            t0 = time.perf_counter()
            try:
                run_experiment(exp, cfg, run.path, progress=progress, log=log, backend=backend)
                result.ran.append(name)
            except LmsciError as e:
                err = f"{type(e).__name__}: {e}"
            rec["wall_s"] = round(float(rec.get("wall_s") or 0.0) + time.perf_counter() - t0, 3)
        rec["error"] = err
        if err:
            log(f"[{i}/{len(plan)}] {name}: error: {err}")
        _save_state(path, state)
    state["last_wall_s"] = round(time.perf_counter() - t_suite, 3)
    _save_state(path, state)

    table = claims_table(path, [n for n, *_ in plan], state)
    changes = None
    if earlier is not None:
        table = mark_changes(table, earlier)
        changes = table[table["change"] != ""]
    result.table, result.changes = table, changes
    write_claims(path, table, preset, compare=compare, state=state)
    return result


def _jsonable_ov(ov: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(ov, default=str))


# -- the claims table ---------------------------------------------------------------------------------
def _devices(run: RunDir) -> str:
    devs = []
    for seg in run.environment_segments():
        d = seg.get("cuda_device") or seg.get("device")
        if d and d not in devs:
            devs.append(str(d))
    return ", ".join(devs)


def _wall(run: RunDir, rec: dict[str, Any]) -> float | None:
    """Wall seconds the suite spent on the experiment; for a run not made by this suite, the sum of its
    points' seconds."""
    w = rec.get("wall_s")
    if w:
        return float(w)
    res = run.results() if (run.path / RunDir.RESULTS).exists() else pd.DataFrame()
    return float(res["seconds"].sum()) if "seconds" in res else None


def claims_table(path: str | Path, names: Sequence[str], state: dict[str, Any] | None = None) -> pd.DataFrame:
    """The claims table of a suite directory, read back from each ``<path>/<name>/`` run directory.

    One row per verdict in ``verdict.json``; an experiment recorded with an error (in ``suite.json``)
    or without a verdict gets one error row.
    """
    from lmsci.report import _fmt_value

    path = Path(path)
    state = state if state is not None else _state(path)
    rows = []
    for name in names:
        rec = (state.get("experiments") or {}).get(name, {})
        run = RunDir(path / name)
        try:
            verdicts = run.verdicts() if run.path.is_dir() else []
            device = _devices(run)
            wall = _wall(run, rec)
        except (LmsciError, ValueError, json.JSONDecodeError) as e:
            verdicts, device, wall = [], "", None
            rec = {**rec, "error": rec.get("error") or f"unreadable run directory: {e}"}
        if rec.get("error") or not verdicts:
            rows.append({"experiment": name, "claim": "(error)", "source": "", "paper_value": "",
                         "ours": "", "outcome": ERROR, "seeds": None, "wall_s": wall, "device": device,
                         "value": None, "ci_lo": None, "ci_hi": None, "ablation": False,
                         "error": rec.get("error") or "no verdict.json (the run did not finish)", "change": ""})
            continue
        for v in verdicts:
            rows.append({"experiment": name, "claim": v.claim_id, "source": v.source, "paper_value": v.paper_value,
                         "ours": _fmt_value(v), "outcome": v.outcome, "seeds": v.n_seeds,
                         "wall_s": None if wall is None else round(wall, 1), "device": device,
                         "value": v.value, "ci_lo": v.ci[0] if v.ci else None, "ci_hi": v.ci[1] if v.ci else None,
                         "ablation": bool(v.ablation), "error": "", "change": ""})
    return pd.DataFrame(rows, columns=CSV_COLUMNS)


def load_claims_table(where: str | Path) -> pd.DataFrame:
    """An earlier suite's claims table: a suite directory or its ``claims.csv``.

    Raises:
        RunDirError: no such file or directory, or not a claims table.
    """
    p = Path(where)
    if p.is_dir():
        p = p / CLAIMS_CSV
    if not p.is_file():
        raise RunDirError(f"--compare {where}: no {CLAIMS_CSV} there (give an earlier suite directory)")
    try:
        df = pd.read_csv(p, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise RunDirError(f"--compare {p} cannot be read ({type(e).__name__})") from None
    missing = {"experiment", "claim", "outcome", "value"} - set(df.columns)
    if missing:
        raise RunDirError(f"--compare {p} is not a claims table (missing columns {sorted(missing)})")
    return df


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _outside(x: float, lo: float | None, hi: float | None) -> bool:
    return lo is not None and hi is not None and not (min(lo, hi) <= x <= max(lo, hi))


def value_moved(old: float | None, new: float | None, old_ci=(None, None), new_ci=(None, None),
                rel_tol: float = 1e-6) -> bool:
    """Whether a claim's value moved beyond its interval between two suites.

    With an interval on either side: the new value lies outside the old interval, or the old value
    outside the new one. Without any interval (an exact statistic, or one seed): the values differ by
    more than ``rel_tol`` (relative). A value that appeared or disappeared counts as moved.
    """
    if old is None and new is None:
        return False
    if old is None or new is None:
        return True
    have_ci = (old_ci[0] is not None and old_ci[1] is not None) or (new_ci[0] is not None and new_ci[1] is not None)
    if have_ci:
        return _outside(new, *old_ci) or _outside(old, *new_ci)
    return abs(new - old) > rel_tol * max(1.0, abs(old), abs(new))


def mark_changes(table: pd.DataFrame, earlier: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its ``change`` column filled against ``earlier`` (matched on experiment and claim;
    ablation rows too): ``outcome: A -> B``, ``value: a -> b (outside ...)``, ``new claim`` or empty."""
    from lmsci.report import _fmt

    prev = {}
    for _, r in earlier.iterrows():
        prev.setdefault((str(r["experiment"]), str(r["claim"])), r)
    table = table.copy()
    marks = []
    for _, r in table.iterrows():
        key = (str(r["experiment"]), str(r["claim"]))
        if key not in prev:
            marks.append("new claim (not in the earlier suite)")
            continue
        o = prev[key]
        parts = []
        if str(o["outcome"]) != str(r["outcome"]):
            parts.append(f"outcome: {o['outcome']} -> {r['outcome']}")
        ov, nv = _num(o.get("value")), _num(r.get("value"))
        oci = (_num(o.get("ci_lo")), _num(o.get("ci_hi")))
        nci = (_num(r.get("ci_lo")), _num(r.get("ci_hi")))
        if r["outcome"] != ERROR and value_moved(ov, nv, oci, nci):
            ci = oci if oci[0] is not None else nci
            where = f" (outside [{_fmt(ci[0])}, {_fmt(ci[1])}])" if ci[0] is not None else ""
            parts.append(f"value: {_fmt(ov) if ov is not None else 'n/a'} -> "
                         f"{_fmt(nv) if nv is not None else 'n/a'}{where}")
        marks.append("; ".join(parts))
    table["change"] = marks
    return table


def _md_cell(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x).replace("|", "/").replace("\n", " ")


def claims_markdown(table: pd.DataFrame, preset: str, *, link: str = "report.md", compare: Any = None,
                    state: dict[str, Any] | None = None) -> str:
    """The claims table as a markdown page (experiment names link to ``<name>/<link>``)."""
    state = state or {}
    counts = table["outcome"].value_counts().to_dict() if not table.empty else {}
    summary = " · ".join(f"{k}: {counts[k]}" for k in ("reproduced", "not reproduced", "inconclusive", ERROR)
                         if k in counts)
    parts = [f"# lmsci claims suite: preset `{preset}`\n",
             f"{table['experiment'].nunique() if not table.empty else 0} experiments, "
             f"{int((table['outcome'] != ERROR).sum()) if not table.empty else 0} claims. {summary}\n"]
    if state.get("last_wall_s") is not None:
        parts.append(f"Wall time of the last `lmsci suite` call: {state['last_wall_s']:.0f} s "
                     "(experiments finished earlier were skipped).\n")
    if compare is not None:
        n = int((table["change"] != "").sum())
        parts.append(f"Compared with `{compare}`: **{n} claim{'s' * (n != 1)} changed** (outcome, or value "
                     "outside its interval).\n")
    cols = ["experiment", "claim", "source", "paper value", "ours", "outcome", "seeds", "wall time (s)", "device"]
    if compare is not None:
        cols.append("change")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in table.iterrows():
        claim = r["claim"] + (" (ablation)" if str(r["ablation"]) == "True" else "")
        outcome = f"**{r['outcome']}**"
        ours = r["ours"] if r["outcome"] != ERROR else r["error"]
        cells = [f"[{r['experiment']}]({r['experiment']}/{link})", claim, r["source"], r["paper_value"], ours,
                 outcome, "" if r["seeds"] is None or pd.isna(r["seeds"]) else str(int(r["seeds"])),
                 r["wall_s"], r["device"]]
        if compare is not None:
            cells.append(f"**{r['change']}**" if r["change"] else "")
        lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def write_claims(path: str | Path, table: pd.DataFrame, preset: str, *, compare: Any = None,
                 state: dict[str, Any] | None = None) -> None:
    """Write ``claims.csv``, ``claims.md`` (links to each report.md) and ``claims.html`` (links to each
    report.html) into the suite directory."""
    from lmsci.report import markdown_to_html

    path = Path(path)
    atomic_write_text(path / CLAIMS_CSV, table.to_csv(index=False))
    atomic_write_text(path / CLAIMS_MD, claims_markdown(table, preset, compare=compare, state=state))
    html_md = claims_markdown(table, preset, link="report.html", compare=compare, state=state)
    atomic_write_text(path / CLAIMS_HTML, markdown_to_html(html_md, title=f"lmsci claims suite ({preset})"))
