"""Running the claims suite: every experiment (or a subset) at one preset into one directory.

``lmsci suite --preset smoke|quick|gpu|paper [--only a,b] [--out DIR] [--seeds 0,1] [--compare EARLIER]
[--update PUBLISHED]`` runs each experiment into ``DIR/<experiment>/`` (an ordinary run directory, so each
resumes on its own and a finished one is skipped), and with several master seeds (``--seeds``) the further
ones into ``DIR/<experiment>.seed<S>/``; then it writes the claims table (:mod:`lmsci.publish`) as
``DIR/claims.md``, ``DIR/claims.csv`` and ``DIR/claims.html``. Pilot seeds (>= 1,000,000) are refused.

An experiment that fails with an :class:`lmsci.errors.LmsciError` (a bad configuration for this preset, a corrupted
run directory, ...) becomes an error row and the suite goes on. ``--jobs N`` runs up to N experiments at once, each
its own ``lmsci run`` process with the CPUs shared among them (:func:`job_env`); ``--budget`` stops the call after
so many wall seconds (finished points are kept, the rest resumes). With ``compare`` (an earlier suite directory)
changed claims are marked; ``--update PUBLISHED`` (for example ``results/quick/``) then replaces the rows of the
experiments this call ran in the published table and keeps the others (:func:`lmsci.publish.update_published`).

The suite's runs share a training cache, ``DIR/training-cache`` (:mod:`lmsci.train.cache`; a set
``$LMSCI_TRAINING_CACHE`` wins): an experiment that trains another's models (``cfg-probing``: its
``training_scope`` is ``cfg-learning``) loads them instead of training them again, and ``--jobs`` never runs two
runs of one training scope and master seed at once (the second would wait on the first's trainings), so the second
starts when the first has finished.

Each run records its provenance digest (:mod:`lmsci.provenance`) and the table carries it per row;
``lmsci suite --check PUBLISHED`` (:mod:`lmsci.table_check`) lists the rows that are not current at HEAD.

The suite knows experiments only through the registry and the contract (:mod:`lmsci.contract`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from lmsci.claims import PILOT_SEED_MIN
from lmsci.config import ALL_PRESET_NAMES, config_to_yaml, parse_overrides, resolve_config
from lmsci.errors import ConfigError, LmsciError, RunDirError, UnknownNameError
from lmsci.publish import (CSV_COLUMNS, ERROR, claims_table, load_claims_table, load_state, mark_changes,
                           seed_run_name, update_published, write_claims)
from lmsci.runs import RunDir, resolve_device
from lmsci.suite_jobs import NOT_RUN_BUDGET, run_parallel, save_state, training_cache



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


def decides_at(name: str, preset: str) -> bool:
    """Whether experiment ``name`` has a claim or check registered for ``preset`` (one it can decide there)."""
    from lmsci.experiments.registry import get

    return any(preset in c.presets for c in get(name).claims)


def undecided(names: list[str], preset: str) -> list[str]:
    """The experiments of ``names`` that decide nothing at ``preset`` (every claim registered for other presets):
    a whole-suite run at ``quick`` leaves them out rather than spend its minutes training toward gates they cannot
    pass (issue 46 item 3); with ``--update``, their published rows are kept while current at HEAD and dropped
    once stale (:func:`lmsci.table_check.leave_out_published`)."""
    return [n for n in names if not decides_at(n, preset)]


@dataclass
class SuiteResult:
    """What :func:`run_suite` produced.

    Attributes:
        path: the suite directory.
        table: the claims table (``CSV_COLUMNS``), one row per claim, one error row per failed experiment.
        ran: experiments computed (or resumed) in this call; skipped: finished ones read back.
        changes: rows marked by ``compare`` (empty without it).
        left_out: experiments not run because they decide nothing at the preset (:func:`undecided`).
    """

    path: Path
    table: pd.DataFrame
    left_out: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    changes: pd.DataFrame | None = None

    @property
    def errors(self) -> pd.DataFrame:
        """The error rows of ``table`` (outcome ``error``: an experiment that failed, had no such preset or was not run)."""
        return self.table[self.table["outcome"] == ERROR]


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
            ``jobs > 1`` with a ray or processes backend, a pilot seed with ``update``, or a device that is not there.
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
        raise ConfigError("--jobs", jobs, f"1 with --backend {backend.name} (it schedules the points)")
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
    state = load_state(path)
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
    save_state(path, state)
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
            save_state(path, state)
            continue
        if err is not None:
            rec["error"] = err
            log(f"[{i}/{len(plan)}] {run_name}: error: {err}")
            save_state(path, state)
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
            save_state(path, state)
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
        save_state(path, state)


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
    include_undecided: bool = False,
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
        include_undecided: at ``quick`` without ``only``, also run the experiments that decide nothing at quick
            (default: they are left out and listed in ``SuiteResult.left_out`` and ``suite.json``; naming them in
            ``only`` runs them).

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
    left_out = undecided(names, preset) if only is None and preset == "quick" and not include_undecided else []
    for n in left_out:
        log(f"{n}: left out (decides nothing at {preset}: its claims are registered for other presets; "
            "--include-undecided or --only runs it)")
    names = [n for n in names if n not in left_out]
    ov, seed_list = _suite_overrides(overrides, device, seeds, jobs, budget, backend, update)
    earlier = load_claims_table(compare) if compare is not None else None
    path = Path(out) if out is not None else default_suite_out(preset)
    state = _open_suite_dir(path, preset, ov, seed_list)
    plan = _plan(names, seed_list, preset, ov)
    if left_out:
        state["left_out"] = left_out
        save_state(path, state)

    result = SuiteResult(path, pd.DataFrame(columns=CSV_COLUMNS), left_out=left_out)
    t_suite = time.perf_counter()
    todo = _todo(plan, path, state, result, log)

    def over_budget() -> bool:
        return budget is not None and time.perf_counter() - t_suite >= budget

    with training_cache(path):
        if jobs == 1:
            _run_serial(todo, len(plan), path, preset, state, result, over_budget, log, progress, backend)
        else:
            run_parallel(todo, len(plan), path, preset, state, result, jobs, over_budget, log)
    state["last_wall_s"] = round(time.perf_counter() - t_suite, 3)
    save_state(path, state)

    table = claims_table(path, list(dict.fromkeys(n for n, *_ in plan)), state, seeds=seed_list)
    changes = None
    if earlier is not None:
        table = mark_changes(table, earlier)
        changes = table[table["change"] != ""]
    result.table, result.changes = table, changes
    write_claims(path, table, preset, compare=compare, state=state)
    if update is not None:
        update_published(update, table, preset, log=log)
        if left_out:
            from lmsci.table_check import leave_out_published

            leave_out_published(update, left_out, preset, log=log)
    return result


def _jsonable_ov(ov: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(ov, default=str))


def merge_suites(out: str | Path, sources: Sequence[str | Path],
                 only: str | Sequence[str] | None = None) -> tuple[list[str], dict[str, Any]]:
    """Assemble one suite directory at several master seeds from suites run apart (each at one or more seeds, the
    same preset and overrides): ``out`` gets a link per finished run (the first seed's as ``<name>``, the others'
    as ``<name>.seed<S>``, :func:`lmsci.publish.seed_run_name`) and a ``suite.json`` with every run's wall seconds
    and the seeds in ascending order, so that ``lmsci suite --seeds S1,S2,... --out OUT`` finds every run finished
    and only builds the table (``--update``/``--compare`` as usual). Where two sources hold the same experiment at the
    same seed, the later source wins (list reruns last). Used at stop 60 to publish seeds 11 and 12 run as two
    suites.

    Args:
        out: the new suite directory (created; an existing one may hold an earlier merge, not runs of its own).
        sources: suite directories, each with a ``suite.json`` naming its ``seeds``.
        only: experiments to take (comma-separated or a list; default every experiment finished at every seed).

    Returns:
        (the experiments merged, in order; the written state, ``suite.json``).

    Raises:
        RunDirError: a source is not a suite directory with seeds, the sources differ in preset or overrides, an
            experiment named in ``only`` is not finished at every seed (without ``only``: none is), or ``out`` holds
            runs of its own.
    """
    found: dict[tuple[str, int], tuple[Path, dict[str, Any]]] = {}
    preset = overrides = None
    for src in map(Path, sources):
        st = load_state(src)
        if not st or not st.get("seeds"):
            raise RunDirError(f"{src} is not a suite directory run with --seeds (no seeds in its suite.json)")
        if preset is not None and (st["preset"], st.get("overrides", {})) != (preset, overrides):
            raise RunDirError(f"{src} is a suite at preset {st['preset']!r} with overrides {st.get('overrides')}; "
                              f"the others are at {preset!r} with {overrides}")
        preset, overrides = st["preset"], st.get("overrides", {})
        for run_name, rec in st.get("experiments", {}).items():
            name, _, tail = run_name.rpartition(".seed") if ".seed" in run_name else (run_name, "", "")
            sd = int(tail) if tail else int(st["seeds"][0])
            if (src / run_name / RunDir.VERDICT).exists():
                found[(name, sd)] = (src / run_name, rec)
    seeds = sorted({sd for _, sd in found})
    names = list(dict.fromkeys(n for n, _ in found))
    if only is not None:
        want = [n.strip() for n in only.split(",")] if isinstance(only, str) else list(only)
        missing = [f"{n} at seed {sd}" for n in want for sd in seeds if (n, sd) not in found]
        if missing:
            raise RunDirError(f"not finished in any source: {', '.join(missing)}")
        names = want
    else:
        names = [n for n in names if all((n, sd) in found for sd in seeds)]
    if not names:
        raise RunDirError(f"no experiment is finished at every master seed {seeds} in {', '.join(map(str, sources))}")
    out = Path(out)
    own = [rn for rn in load_state(out).get("experiments", {}) if (out / rn).exists() and not (out / rn).is_symlink()]
    if own:
        raise RunDirError(f"{out} holds runs of its own ({', '.join(own[:3])}...): merge into a new directory")
    out.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {"preset": preset, "overrides": overrides, "seeds": seeds, "experiments": {}}
    for n in names:
        for k, sd in enumerate(seeds):
            run, rec = found[(n, sd)]
            link = out / seed_run_name(n, sd, k == 0)
            if link.is_symlink():
                link.unlink()
            link.symlink_to(run.resolve(), target_is_directory=True)
            state["experiments"][link.name] = {"wall_s": rec.get("wall_s", 0.0), "error": None}
    save_state(out, state)
    return names, state
