"""The claims suite: every experiment (or a subset) at one preset into one directory, and the claims table.

``lmsci suite --preset smoke|quick|gpu|paper [--only a,b] [--out DIR] [--seeds 0,1] [--compare EARLIER]
[--update PUBLISHED]`` runs each experiment into ``DIR/<experiment>/`` (an ordinary run directory, so each
resumes on its own and a finished one is skipped), and with several master seeds (``--seeds``) the further
ones into ``DIR/<experiment>.seed<S>/``; then it writes the claims table, one row per registered item:

    experiment, claim, kind (claim or check), source, paper value, ours (value, interval), null arm,
    outcome, seeds, post hoc, wall time, device (claims.csv adds commit, date and machine per row)

With several master seeds a row's outcome is the seeds' common outcome, or ``seed-dependent`` (counted as
inconclusive) when they differ, with every seed's value beside it. A row is ``post hoc`` when every master
seed behind it is one at which the claim's preset, gate or rule changed after a result was seen
(:data:`lmsci.claims.POST_HOC`); a fresh master seed clears it. Pilot seeds (>= 1,000,000) are refused.

``--update PUBLISHED`` (for example ``results/quick/``) then replaces the rows of the experiments this call
ran in the published table and keeps the others, each row with its own commit, date and machine.

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

from lmsci.claims import PILOT_SEED_MIN, finite_or_none
from lmsci.config import ALL_PRESET_NAMES, config_to_yaml, parse_overrides, resolve_config
from lmsci.errors import ConfigError, LmsciError, RunDirError, UnknownNameError
from lmsci.runs import RunDir, atomic_write_text, resolve_device

SUITE_FILE = "suite.json"
CLAIMS_MD, CLAIMS_CSV, CLAIMS_HTML = "claims.md", "claims.csv", "claims.html"
ERROR = "error"
#: a row whose master seeds gave different outcomes (counted as inconclusive)
SEED_DEPENDENT = "seed-dependent"
#: the error recorded for a run the suite's --budget left out or stopped
NOT_RUN_BUDGET = "not run: the suite's --budget was spent (rerun into the same --out to resume)"
STOPPED_BUDGET = "stopped at the suite's --budget (finished points kept; rerun into the same --out to resume)"

#: the claims table's columns (claims.csv has these and the machine-readable ones after them)
COLUMNS = ["experiment", "claim", "kind", "source", "paper_value", "ours", "null_arm", "outcome", "seeds",
           "post_hoc", "wall_s", "device"]
CSV_COLUMNS = COLUMNS + ["decided_here", "value", "ci_lo", "ci_hi", "null_value", "null_passed", "ablation", "master_seeds",
                         "seed_outcomes", "seed_values", "pilot", "commit", "date", "machine", "error", "change"]


def seed_run_name(name: str, seed: int, first: bool) -> str:
    """The run directory of ``name`` at master seed ``seed`` inside a suite directory: the first master
    seed keeps ``<name>``, the others run as ``<name>.seed<S>``."""
    return name if first else f"{name}.seed{int(seed)}"


def parse_seeds(seeds: str | Sequence[int] | None) -> list[int] | None:
    """``"0,1"`` or ``[0, 1]`` -> ``[0, 1]`` (duplicates dropped, order kept).

    Raises:
        ConfigError: not integers, negative, or a pilot seed (>= 1,000,000: pilots are never published).
    """
    if seeds is None:
        return None
    items = [x.strip() for x in seeds.split(",")] if isinstance(seeds, str) else list(seeds)
    out = []
    for x in items:
        if x == "":
            continue
        try:
            v = int(x)
        except (TypeError, ValueError):
            raise ConfigError("--seeds", seeds, "comma-separated non-negative integers, e.g. 0,1") from None
        if v < 0 or v >= PILOT_SEED_MIN:
            raise ConfigError("--seeds", seeds, f"master seeds in [0, {PILOT_SEED_MIN:,}) (larger ones are pilots)")
        if v not in out:
            out.append(v)
    if not out:
        raise ConfigError("--seeds", seeds, "at least one master seed")
    return out


def default_suite_out(preset: str) -> Path:
    """``runs/suite-<preset>/<timestamp>`` under the current directory."""
    return Path("runs") / f"suite-{preset}" / time.strftime("%Y-%m-%dT%H-%M-%S")


def suite_names(only: str | Sequence[str] | None = None) -> list[str]:
    """The experiments a suite runs: every experiment lmsci ships (found in the family packages by the registry,
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
        """The error rows of ``table`` (outcome ``error``: an experiment that failed, had no such preset or was not run)."""
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


def _suite_overrides(overrides: Sequence[str] | dict[str, Any], device: str | None,
                     seeds: str | Sequence[int] | None, jobs: int, budget: float | None, backend: Any,
                     update: str | Path | None) -> tuple[dict[str, Any], list[int] | None]:
    """The overrides every experiment gets (``device`` included) and the master seeds, after checking
    :func:`run_suite`'s arguments (before any work).

    Raises:
        ConfigError: ``preset`` in the overrides, both ``seeds`` and ``seed=``, ``jobs < 1``, ``budget <= 0``,
            ``jobs > 1`` with a cluster backend, a pilot seed with ``update``, or a device that is not there.
    """
    ov = dict(overrides) if isinstance(overrides, dict) else parse_overrides(list(overrides))
    if "preset" in ov:
        raise ConfigError("preset", ov["preset"], "set with --preset, not --set")
    if device is not None:
        ov["device"] = device
    seed_list = parse_seeds(seeds)
    if seed_list is not None and "seed" in ov:
        raise ConfigError("seed", ov["seed"], "either --seeds or --set seed=..., not both")
    if not isinstance(jobs, int) or jobs < 1:
        raise ConfigError("--jobs", jobs, "an integer >= 1")
    if budget is not None and not budget > 0:
        raise ConfigError("--budget", budget, "seconds > 0")
    if jobs > 1 and backend is not None and getattr(backend, "name", "local") != "local":
        raise ConfigError("--jobs", jobs, "1 with a cluster backend (the cluster schedules the points)")
    if update is not None and int(ov.get("seed", 0)) >= PILOT_SEED_MIN:
        raise ConfigError("seed", ov["seed"], f"a published seed below {PILOT_SEED_MIN:,} (pilots are never published)")
    if "device" in ov:
        resolve = backend.resolve_device if backend is not None and backend.is_open else resolve_device
        resolve(str(ov["device"]))  # ConfigError for cuda without CUDA (here or on the cluster), before any work
    return ov, seed_list


def _open_suite_dir(path: Path, preset: str, ov: dict[str, Any], seed_list: list[int] | None) -> dict[str, Any]:
    """Create (or reopen, to resume) the suite directory ``path`` and write its ``suite.json``; returns the state.

    Raises:
        RunDirError: ``path`` is a file, or holds a suite at another preset, overrides or master seeds.
    """
    if path.exists() and not path.is_dir():
        raise RunDirError(f"--out {path} is an existing file, not a suite directory")
    state = _state(path)
    if state and (state.get("preset") != preset or state.get("overrides", {}) != _jsonable_ov(ov)):
        raise RunDirError(f"{path} holds a suite at preset {state.get('preset')!r} with overrides "
                          f"{state.get('overrides')}; rerun with the same --preset/--set/--device to resume, "
                          "or choose another --out")
    path.mkdir(parents=True, exist_ok=True)
    if state and seed_list is not None and state.get("seeds") not in (None, seed_list):
        raise RunDirError(f"{path} holds a suite at master seeds {state.get('seeds')}; rerun with the same --seeds "
                          "to resume, or choose another --out")
    state = {"preset": preset, "overrides": _jsonable_ov(ov), "experiments": state.get("experiments", {}),
             **({"seeds": seed_list} if seed_list is not None else {})}
    _save_state(path, state)
    return state


def _plan(names: list[str], seed_list: list[int] | None, preset: str,
          ov: dict[str, Any]) -> list[tuple[str, str, Any, Any, str | None]]:
    """Every run's configuration first, so a bad override is reported before any experiment runs:
    ``(name, run name, experiment, config or None, error or None)`` per experiment and master seed.

    Raises:
        UnknownNameError: an unknown name other than a missing preset (which becomes an error row).
    """
    from lmsci.experiments.registry import get

    plan: list[tuple[str, str, Any, Any, str | None]] = []
    for name in names:
        cls = get(name)
        for k, sd in enumerate(seed_list or [None]):
            run_name = name if sd is None else seed_run_name(name, sd, k == 0)
            ov_k = ov if sd is None else {**ov, "seed": sd}
            try:
                plan.append((name, run_name, cls(), resolve_config(cls.Config, preset, ov_k), None))
            except UnknownNameError as e:
                if e.field != "preset":
                    raise
                plan.append((name, run_name, cls(), None,
                             f"no {preset!r} preset (has: {', '.join(cls.Config.PRESETS)})"))
            except ConfigError as e:
                plan.append((name, run_name, cls(), None, str(e)))
    return plan


def _todo(plan: list, path: Path, state: dict[str, Any], result: SuiteResult, log: Callable[[str], None]) -> list:
    """The runs still to compute, ``(i, name, run name, experiment, config)``; finished runs are recorded as
    skipped and configuration errors as error rows (both saved in ``suite.json``)."""
    todo = []
    for i, (name, run_name, exp, cfg, err) in enumerate(plan, 1):
        rec = state["experiments"].setdefault(run_name, {"wall_s": 0.0})
        run = RunDir(path / run_name)
        if err is None and _finished(run, exp, cfg):
            log(f"[{i}/{len(plan)}] {run_name}: finished earlier, skipped")
            result.skipped.append(run_name)
            rec["error"] = None
            _save_state(path, state)
            continue
        if err is not None:
            rec["error"] = err
            log(f"[{i}/{len(plan)}] {run_name}: error: {err}")
            _save_state(path, state)
            continue
        todo.append((i, name, run_name, exp, cfg))
    return todo


def _run_serial(todo: list, n_plan: int, path: Path, preset: str, state: dict[str, Any], result: SuiteResult,
                over_budget: Callable[[], bool], log: Callable[[str], None], progress: bool, backend: Any) -> None:
    """Run ``todo`` one after another in this process; an :class:`LmsciError` becomes the run's error, the
    wall seconds (s) add up across resumes, and a run the budget leaves out is recorded as not run."""
    from lmsci.sweep import run_experiment

    for i, name, run_name, exp, cfg in todo:
        rec = state["experiments"][run_name]
        if over_budget():
            rec["error"] = NOT_RUN_BUDGET
            _save_state(path, state)
            continue
        log(f"[{i}/{n_plan}] {run_name} ({preset})")
        t0 = time.perf_counter()
        err = None
        try:
            run_experiment(exp, cfg, path / run_name, progress=progress, log=log, backend=backend)
            result.ran.append(run_name)
        except LmsciError as e:
            err = f"{type(e).__name__}: {e}"
        rec["wall_s"] = round(float(rec.get("wall_s") or 0.0) + time.perf_counter() - t0, 3)
        rec["error"] = err
        if err:
            log(f"[{i}/{n_plan}] {run_name}: error: {err}")
        _save_state(path, state)


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
    seeds: str | Sequence[int] | None = None,
    update: str | Path | None = None,
    jobs: int = 1,
    budget: float | None = None,
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
        seeds: master seeds (``"0,1"``): each experiment runs once per seed and the table marks a claim whose
            outcome differs between them ``seed-dependent``. Default: the configs' own seed (or ``--set seed``).
        update: a published claims-table directory (``results/quick``): replace the rows of the experiments
            run here, keep the others (:func:`update_published`).
        jobs: run up to this many experiments (or master seeds of one) at once, each as its own ``lmsci run``
            process writing ``DIR/<run>.log`` (1: one after another in this process). Tiny models on a GPU
            or on several cores share the machine this way.
        budget: wall seconds for the whole call: no experiment starts after it, and the ones still running
            are stopped (finished points are kept: rerun into the same ``--out`` to resume them); the claims
            table is written for what finished.

    Returns:
        :class:`SuiteResult`.

    Raises (before any work):
        UnknownNameError: unknown preset or experiment.
        ConfigError: an override or device that is not allowed (``cuda`` without CUDA).
        RunDirError: ``out`` is a file or holds a suite at another preset; ``compare`` has no claims table.
    """
    if preset not in ALL_PRESET_NAMES:
        raise UnknownNameError("preset", preset, ALL_PRESET_NAMES)
    names = suite_names(only)
    ov, seed_list = _suite_overrides(overrides, device, seeds, jobs, budget, backend, update)
    earlier = load_claims_table(compare) if compare is not None else None
    path = Path(out) if out is not None else default_suite_out(preset)
    state = _open_suite_dir(path, preset, ov, seed_list)
    plan = _plan(names, seed_list, preset, ov)

    result = SuiteResult(path, pd.DataFrame(columns=CSV_COLUMNS))
    t_suite = time.perf_counter()
    todo = _todo(plan, path, state, result, log)

    def over_budget() -> bool:
        return budget is not None and time.perf_counter() - t_suite >= budget

    if jobs == 1:
        _run_serial(todo, len(plan), path, preset, state, result, over_budget, log, progress, backend)
    else:
        _run_parallel(todo, len(plan), path, preset, state, result, jobs, over_budget, log)
    state["last_wall_s"] = round(time.perf_counter() - t_suite, 3)
    _save_state(path, state)

    table = claims_table(path, list(dict.fromkeys(n for n, *_ in plan)), state, seeds=seed_list)
    changes = None
    if earlier is not None:
        table = mark_changes(table, earlier)
        changes = table[table["change"] != ""]
    result.table, result.changes = table, changes
    write_claims(path, table, preset, compare=compare, state=state)
    if update is not None:
        update_published(update, table, preset, log=log)
    return result


def results_root() -> Path:
    """The published tables' folder: ``results/`` of the checkout lmsci runs from (``LMSCI_RESULTS`` overrides)."""
    import os

    env = os.environ.get("LMSCI_RESULTS")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[2] / "results"
    return here if here.is_dir() else Path("results")


def published_outcomes(root: str | Path | None = None) -> dict[str, dict[tuple[str, str], str]]:
    """preset -> (experiment, claim) -> the published outcome (with ``post hoc`` and the row's date), read
    from ``<root>/<preset>/claims.csv``; presets without a published table are absent."""
    root = Path(root) if root is not None else results_root()
    out: dict[str, dict[tuple[str, str], str]] = {}
    for preset in ALL_PRESET_NAMES:
        f = root / preset / CLAIMS_CSV
        if not f.is_file():
            continue
        try:
            t = load_claims_table(f)
        except RunDirError:
            continue
        rows = {}
        for _, r in t.iterrows():
            o = str(r["outcome"]) + (" (post hoc)" if str(r.get("post_hoc")) == "True" else "")
            date = r.get("date")
            rows[(str(r["experiment"]), str(r["claim"]))] = o + (f", {date}" if isinstance(date, str) and date else "")
        out[preset] = rows
    return out


def _run_parallel(todo: list, n_plan: int, path: Path, preset: str, state: dict[str, Any], result: SuiteResult,
                  jobs: int, over_budget: Callable[[], bool], log: Callable[[str], None]) -> None:
    """Run ``todo`` as up to ``jobs`` concurrent ``lmsci run`` processes (each resumes its own run directory);
    stop them at the budget (SIGTERM, then SIGKILL: a run directory never holds a half-written file). An
    interrupted suite (Ctrl-C, SIGTERM) stops its runs too; each keeps its finished points."""
    import signal

    def _interrupt(signum, frame):
        raise KeyboardInterrupt

    queue = list(todo)
    running: dict[str, tuple[Any, float, int, Any]] = {}
    try:
        old = signal.signal(signal.SIGTERM, _interrupt)
    except ValueError:  # not the main thread: leave signals alone
        old = None
    try:
        _drive(queue, running, n_plan, path, preset, state, result, jobs, over_budget, log)
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
        _stop([proc for proc, *_ in running.values()])


def _stop(procs: list) -> None:
    """SIGTERM every process still running, then SIGKILL any that has not ended within 30 s."""
    import subprocess

    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _drive(queue: list, running: dict, n_plan: int, path: Path, preset: str, state: dict[str, Any],
           result: SuiteResult, jobs: int, over_budget: Callable[[], bool], log: Callable[[str], None]) -> None:
    """The loop of :func:`_run_parallel`: start runs while slots are free, collect finished ones, stop at the
    budget."""
    import subprocess
    import sys

    from lmsci.config import config_to_yaml

    while queue or running:
        while queue and len(running) < jobs and not over_budget():
            i, name, run_name, exp, cfg = queue.pop(0)
            out = path / run_name
            cfg_file = path / f".{run_name}.config.yaml"
            atomic_write_text(cfg_file, config_to_yaml(cfg))
            cmd = [sys.executable, "-m", "lmsci.cli", "run", name, "--preset", preset, "--out", str(out),
                   "--no-progress", "--config", str(cfg_file)]
            logf = open(path / f"{run_name}.log", "a")
            log(f"[{i}/{n_plan}] {run_name} ({preset}) started (log: {run_name}.log)")
            running[run_name] = (subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT), time.perf_counter(), i,
                                 logf)
        if over_budget():
            _stop([proc for proc, *_ in running.values()])
            for i, name, run_name, exp, cfg in queue:
                state["experiments"][run_name]["error"] = NOT_RUN_BUDGET
            queue = []
        done = [rn for rn, (proc, *_) in running.items() if proc.poll() is not None]
        for run_name in done:
            proc, t0, i, logf = running.pop(run_name)
            logf.close()
            rec = state["experiments"][run_name]
            rec["wall_s"] = round(float(rec.get("wall_s") or 0.0) + time.perf_counter() - t0, 3)
            if proc.returncode == 0:
                rec["error"] = None
                result.ran.append(run_name)
                log(f"[{i}/{n_plan}] {run_name}: finished in {time.perf_counter() - t0:.0f} s")
            else:
                tail = (path / f"{run_name}.log").read_text(errors="replace").strip().splitlines()[-1:] or [""]
                if over_budget():
                    rec["error"] = STOPPED_BUDGET
                elif proc.returncode < 0:
                    rec["error"] = (f"stopped by signal {-proc.returncode} (finished points kept; rerun into the same "
                                    "--out to resume)")
                else:
                    rec["error"] = f"exit {proc.returncode}: {tail[0][:300]}"
                log(f"[{i}/{n_plan}] {run_name}: error: {rec['error']}")
            _save_state(path, state)
        if running:
            time.sleep(0.5)


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


def _env_facts(run: RunDir) -> dict[str, str]:
    """commit, date and machine of a run directory (its first environment segment)."""
    try:
        segs = run.environment_segments()
    except (LmsciError, ValueError, json.JSONDecodeError):
        segs = []
    e = segs[0] if segs else {}
    return {"commit": str(e.get("git_commit") or "")[:10], "date": str(e.get("started") or "")[:10],
            "machine": str(e.get("machine") or e.get("platform") or "")}


def _read_run(path: Path, run_name: str, rec: dict[str, Any]) -> tuple[list[Any], str, float | None, str, dict]:
    """(verdicts, device, wall seconds, error, environment facts) of one run directory of a suite."""
    run = RunDir(path / run_name)
    try:
        verdicts = run.verdicts() if run.path.is_dir() else []
        device = _devices(run)
        wall = _wall(run, rec)
    except (LmsciError, ValueError, json.JSONDecodeError) as e:
        return [], "", None, rec.get("error") or f"unreadable run directory: {e}", {}
    err = rec.get("error") or ("" if verdicts else "no verdict.json (the run did not finish)")
    return verdicts, device, wall, err, _env_facts(run)


def _seed_value(v: Any) -> str:
    from lmsci.report import _fmt_value

    return f"{_fmt_value(v)} ({v.outcome})"


def claims_table(path: str | Path, names: Sequence[str], state: dict[str, Any] | None = None,
                 seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """The claims table of a suite directory, read back from each ``<path>/<name>/`` run directory (and
    ``<name>.seed<S>/`` for further master ``seeds``).

    One row per verdict in ``verdict.json``; an experiment recorded with an error (in ``suite.json``)
    or without a verdict gets one error row. With several master seeds, a row's outcome is their common
    outcome or ``seed-dependent``, its value and interval those of the first seed, ``seed_values`` every
    seed's, and ``post_hoc`` true only when every seed's verdict is post hoc.
    """
    from lmsci.report import _fmt_null, _fmt_value

    from lmsci.experiments.registry import catalog

    path = Path(path)
    state = state if state is not None else _state(path)
    if seeds is None and state.get("seeds"):
        seeds = state["seeds"]
    exps = state.get("experiments") or {}
    cat = catalog()

    def decided_here(name: str, claim_id: str) -> bool:
        cls = cat.get(name)
        c = next((c for c in getattr(cls, "claims", []) if c.id == claim_id), None)
        return c is not None and state.get("preset") in c.presets
    rows = []
    for name in names:
        run_names = [name] if not seeds else [seed_run_name(name, s, k == 0) for k, s in enumerate(seeds)]
        reads = [_read_run(path, rn, exps.get(rn, {})) for rn in run_names]
        errors = [(rn, r[3]) for rn, r in zip(run_names, reads) if r[3]]
        wall = sum(r[2] for r in reads if r[2] is not None) if any(r[2] is not None for r in reads) else None
        device = ", ".join(dict.fromkeys(d for r in reads for d in r[1].split(", ") if d))
        env = reads[0][4]
        if errors:
            rows.append({"experiment": name, "claim": "(error)", "kind": "", "source": "", "paper_value": "",
                         "ours": "", "null_arm": "", "outcome": ERROR, "seeds": None, "post_hoc": False,
                         "wall_s": wall, "device": device, "value": None, "ci_lo": None, "ci_hi": None,
                         "null_value": None, "null_passed": None, "ablation": False,
                         "master_seeds": ",".join(map(str, seeds or [])), "seed_outcomes": "", "seed_values": "",
                         "pilot": False, **{k: env.get(k, "") for k in ("commit", "date", "machine")},
                         "error": "; ".join(f"{rn}: {e}" for rn, e in errors) if len(run_names) > 1 else errors[0][1],
                         "change": ""})
            continue
        by_seed = [{v.claim_id: v for v in r[0]} for r in reads]
        for v in reads[0][0]:
            vs = [b.get(v.claim_id) for b in by_seed]
            outcomes = [x.outcome if x is not None else "missing" for x in vs]
            outcome = outcomes[0] if len(set(outcomes)) == 1 else SEED_DEPENDENT
            msd = [x.master_seed for x in vs if x is not None]
            rows.append({
                "experiment": name, "claim": v.claim_id, "kind": v.kind, "source": v.source,
                "paper_value": v.paper_value, "ours": _fmt_value(v), "null_arm": _fmt_null(v), "outcome": outcome,
                "seeds": v.n_seeds, "post_hoc": all(x is not None and x.post_hoc for x in vs),
                "decided_here": decided_here(name, v.claim_id),
                "wall_s": None if wall is None else round(wall, 1), "device": device,
                "value": v.value, "ci_lo": v.ci[0] if v.ci else None, "ci_hi": v.ci[1] if v.ci else None,
                "null_value": v.null_value, "null_passed": v.null_passed, "ablation": bool(v.ablation),
                "master_seeds": ",".join(str(m) for m in msd if m is not None),
                "seed_outcomes": "; ".join(outcomes) if len(vs) > 1 else "",
                "seed_values": "; ".join(f"seed {m}: {_seed_value(x)}" for m, x in zip(seeds, vs) if x is not None)
                if seeds and len(vs) > 1 else "",
                "pilot": any(x is not None and x.pilot for x in vs),
                **{k: env.get(k, "") for k in ("commit", "date", "machine")}, "error": "", "change": ""})
    return pd.DataFrame(rows, columns=CSV_COLUMNS)


def table_counts(table: pd.DataFrame) -> dict[str, int]:
    """The headline counts of a claims table: claims reproduced / not reproduced / inconclusive (seed-dependent
    ones included) / post hoc (among the decided claims), ablations, checks passed / failed / inconclusive,
    errors."""
    t = table
    if t.empty:
        return {}
    kind = t["kind"].fillna("claim").astype(str)
    abl = t["ablation"].astype(str).str.lower() == "true"
    ph = t["post_hoc"].astype(str).str.lower() == "true"
    err = t["outcome"] == ERROR
    here = t["decided_here"].astype(str).str.lower() != "false"
    claims = t[(kind != "check") & ~abl & ~err & here]
    checks = t[(kind == "check") & ~err & here]
    return {
        "reproduced": int((claims["outcome"] == "reproduced").sum()),
        "not reproduced": int((claims["outcome"] == "not reproduced").sum()),
        "inconclusive": int(claims["outcome"].isin(["inconclusive", SEED_DEPENDENT]).sum()),
        "seed-dependent": int((claims["outcome"] == SEED_DEPENDENT).sum()),
        "post hoc": int(ph[claims.index].sum()),
        "ablations": int((abl & ~err).sum()),
        "checks passed": int((checks["outcome"] == "passed").sum()),
        "checks failed": int((checks["outcome"] == "failed").sum()),
        "checks inconclusive": int(checks["outcome"].isin(["inconclusive", SEED_DEPENDENT]).sum()),
        "not decided at this preset": int((~here & ~err).sum()),
        "errors": int(err.sum()),
    }


def update_published(published: str | Path, table: pd.DataFrame, preset: str,
                     log: Callable[[str], None] = print) -> pd.DataFrame:
    """Merge a suite's rows into a published claims table (``results/<preset>/claims.csv``): the rows of
    the experiments in ``table`` replace theirs, every other row is kept as it was (each row carries its own
    commit, date and machine), in catalog order; ``claims.md`` is rewritten.

    Raises:
        RunDirError: the published directory holds a table of another preset, or ``table`` has pilot rows.
    """
    from lmsci.experiments.registry import catalog

    pub = Path(published)
    pub.mkdir(parents=True, exist_ok=True)
    if "pilot" in table and table["pilot"].astype(str).str.lower().eq("true").any():
        raise RunDirError("pilot master seeds (>= 1,000,000) are never published; rerun on a published seed")
    meta_p = pub / "published.json"
    meta = json.loads(meta_p.read_text()) if meta_p.exists() else {}
    if meta.get("preset", preset) != preset:
        raise RunDirError(f"{pub} publishes preset {meta.get('preset')!r}, not {preset!r}")
    old = load_claims_table(pub) if (pub / CLAIMS_CSV).exists() else pd.DataFrame(columns=CSV_COLUMNS)
    names = set(table["experiment"])
    keep = old[~old["experiment"].isin(names)]
    merged = pd.concat([keep, table], ignore_index=True) if not keep.empty else table.copy()
    order = {n: i for i, n in enumerate(catalog())}
    merged = merged.assign(_o=merged["experiment"].map(lambda n: order.get(n, len(order)))) \
        .sort_values("_o", kind="stable").drop(columns="_o").reset_index(drop=True)
    merged = merged.reindex(columns=CSV_COLUMNS)
    atomic_write_text(pub / CLAIMS_CSV, merged.to_csv(index=False))
    atomic_write_text(pub / CLAIMS_MD, claims_markdown(merged, preset, link=None, published=True))
    atomic_write_text(meta_p, json.dumps({"preset": preset, "counts": table_counts(merged)}, indent=2) + "\n")
    log(f"published table {pub / CLAIMS_CSV}: replaced {len(names)} experiment(s), kept {keep['experiment'].nunique()}")
    return merged


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
        ov, nv = finite_or_none(o.get("value")), finite_or_none(r.get("value"))
        oci = (finite_or_none(o.get("ci_lo")), finite_or_none(o.get("ci_hi")))
        nci = (finite_or_none(r.get("ci_lo")), finite_or_none(r.get("ci_hi")))
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


def claims_markdown(table: pd.DataFrame, preset: str, *, link: str | None = "report.md", compare: Any = None,
                    state: dict[str, Any] | None = None, published: bool = False) -> str:
    """The claims table as a markdown page: the counts, the claims (and ablations), then the design checks
    apart (experiment names link to ``<name>/<link>`` when ``link`` is given)."""
    state = state or {}
    c = table_counts(table)
    title = f"# lmsci claims table: preset `{preset}`" + (" (published)" if published else "")
    parts = [title + "\n"]
    if c:
        parts.append(f"{table['experiment'].nunique()} experiments. **Claims: {c['reproduced']} reproduced, "
                     f"{c['not reproduced']} not reproduced, {c['inconclusive']} inconclusive** "
                     f"({c['seed-dependent']} of them seed-dependent), {c['post hoc']} post hoc; "
                     f"{c['ablations']} ablations (decide nothing). **Design checks: {c['checks passed']} passed, "
                     f"{c['checks failed']} failed, {c['checks inconclusive']} inconclusive.** "
                     f"{c['not decided at this preset']} more registered items are decided at other presets only "
                     f"(reported, not counted). Errors: {c['errors']}.\n")
        parts.append("A claim is reproduced only when its rule held and its null arm (the same statistic where the "
                     "effect is absent by construction) did not; design checks hold by construction and are never "
                     "counted as reproduced. Post hoc: the claim's preset, gate or rule changed after a result at "
                     "this seed was seen (CLAIMS.md). Seed-dependent: the master seeds gave different outcomes.\n")
    if state.get("last_wall_s") is not None:
        parts.append(f"Wall time of the last `lmsci suite` call: {state['last_wall_s']:.0f} s "
                     "(experiments finished earlier were skipped).\n")
    if compare is not None:
        n = int((table["change"] != "").sum())
        parts.append(f"Compared with `{compare}`: **{n} claim{'s' * (n != 1)} changed** (outcome, or value "
                     "outside its interval).\n")
    kind = table["kind"].fillna("claim").astype(str)

    def section(rows: pd.DataFrame, checks: bool) -> str:
        cols = ["experiment", "check" if checks else "claim", "paper value", "ours"] + \
            ([] if checks else ["null arm"]) + ["outcome", "seeds", "master seeds", "wall time (s)", "device", "commit",
                                                "date"]
        if compare is not None:
            cols.append("change")
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for _, r in rows.iterrows():
            claim = r["claim"] + (" (ablation)" if str(r["ablation"]) == "True" else "")
            marks = [m for m, on in (("post hoc", str(r.get("post_hoc")) == "True"),
                                     ("not decided at this preset", str(r.get("decided_here")) == "False")) if on]
            outcome = f"**{r['outcome']}**" + (f" ({', '.join(marks)})" if marks else "")
            ours = r["ours"] if r["outcome"] != ERROR else r["error"]
            if isinstance(r.get("seed_values"), str) and r["seed_values"]:
                ours = f"{ours}; {r['seed_values']}"
            exp = f"[{r['experiment']}]({r['experiment']}/{link})" if link else r["experiment"]
            cells = [exp, claim, r["paper_value"], ours] + ([] if checks else [r.get("null_arm", "")]) + [
                outcome, "" if r["seeds"] is None or pd.isna(r["seeds"]) else str(int(r["seeds"])),
                r.get("master_seeds", ""), r["wall_s"], r.get("device", ""), r.get("commit", ""), r.get("date", "")]
            if compare is not None:
                cells.append(f"**{r['change']}**" if r["change"] else "")
            lines.append("| " + " | ".join(_md_cell(x) for x in cells) + " |")
        return "\n".join(lines) + "\n"

    parts.append("## Claims\n")
    parts.append(section(table[kind != "check"], checks=False))
    if (kind == "check").any():
        parts.append("## Design checks\n")
        parts.append("True by construction (a world's design, a closed-form bound, an interpolation): they guard "
                     "the setup and are never counted as reproduced.\n")
        parts.append(section(table[kind == "check"], checks=True))
    if published:
        from lmsci.experiments.registry import shipped

        missing = [(n, cls) for n, cls in shipped().items() if n not in set(table["experiment"])]
        if missing:
            parts.append("## Not yet in this table\n")
            parts.append("Registered experiments with no row here yet (run them with `lmsci suite --preset "
                         f"{preset} --seeds 0,1 --only NAME --update` into this folder):\n")
            for n, cls in missing:
                k = sum(preset in c.presets for c in cls.claims)
                at = sorted({p for c in cls.claims for p in c.presets}, key=ALL_PRESET_NAMES.index)
                decided = f"{k} decided at {preset}" if k else f"decided at {', '.join(at)} only"
                parts.append(f"- `{n}`: {len(cls.claims)} registered item(s), {decided}")
            parts.append("")
    machines = sorted({str(m) for m in table.get("machine", pd.Series(dtype=str)).dropna() if str(m)})
    if machines:
        parts.append("Machines: " + "; ".join(machines) + ".\n")
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
