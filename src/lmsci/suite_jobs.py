"""The suite's runs as concurrent processes (``lmsci suite --jobs N``): each run its own ``lmsci run`` with the CPUs
shared among them (:func:`job_env`), runs that share trainings kept apart (:func:`next_startable`), the training
cache they share (:func:`training_cache`, :mod:`lmsci.train.cache`), and the suite's budget and interruption.
:mod:`lmsci.suite` plans the runs and writes the table; this module only runs them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from lmsci.process_backend import THREAD_VARS, machine_cpus
from lmsci.publish import SUITE_FILE
from lmsci.runs import atomic_write_text

#: the error recorded for a run the suite's --budget left out or stopped
NOT_RUN_BUDGET = "not run: the suite's --budget was spent (rerun into the same --out to resume)"
STOPPED_BUDGET = "stopped at the suite's --budget (finished points kept; rerun into the same --out to resume)"


def save_state(path: Path, state: dict[str, Any]) -> None:
    atomic_write_text(path / SUITE_FILE, json.dumps(state, indent=2))


def job_threads(jobs: int, cpus: int | None = None) -> int:
    """Threads for each of ``jobs`` concurrent runs: ``cpus`` (default: this process's,
    :func:`lmsci.process_backend.machine_cpus`) shared out, at least 1."""
    cpus = machine_cpus() if cpus is None else cpus
    return max(1, int(cpus) // max(1, int(jobs)))


def training_cache(path: Path):
    """Within it, ``$LMSCI_TRAINING_CACHE`` names ``path/training-cache`` (unless it is set already), for this
    process's runs and the ``lmsci run`` processes and workers it starts (:func:`lmsci.train.cache.using`)."""
    from lmsci.train.cache import using

    return using(path / "training-cache", keep_set=True)


def training_scope(name: str, exp: Any, cfg: Any) -> tuple[str, Any]:
    """``(scope, master seed)`` of a run: runs with the same pair train the same models (the experiment's
    ``training_scope``, :class:`lmsci.contract.Experiment`; default its name)."""
    return (getattr(exp, "training_scope", "") or name, getattr(cfg, "seed", None))


def next_startable(queue: list, running_scopes: Sequence[tuple[str, Any]]) -> int | None:
    """The index of the first run of ``queue`` (``(i, name, run name, experiment, config)``) whose training scope and
    master seed no running run has, or None."""
    for k, (_, name, _, exp, cfg) in enumerate(queue):
        if training_scope(name, exp, cfg) not in running_scopes:
            return k
    return None


def job_env(jobs: int, base: dict[str, str] | None = None, cpus: int | None = None) -> dict[str, str]:
    """The environment of one of ``jobs`` concurrent ``lmsci run`` processes: ``base`` (default ``os.environ``) with
    each :data:`THREAD_VARS` not set given :func:`job_threads`, so that two runs with ``threads`` 0 do not put 4
    spinning threads on 2 cores (stop 56: shakespeare-lm's quick at 4.7k tokens/s so, 21k alone). A set ``threads``
    wins (:func:`lmsci.sweep.torch_threads`) and is no science field: no digest changes."""
    env = dict(os.environ if base is None else base)
    for var in THREAD_VARS:
        env.setdefault(var, str(job_threads(jobs, cpus)))
    return env


def run_parallel(todo: list, n_plan: int, path: Path, preset: str, state: dict[str, Any], result: Any,
                  jobs: int, over_budget: Callable[[], bool], log: Callable[[str], None]) -> None:
    """Run ``todo`` as up to ``jobs`` concurrent ``lmsci run`` processes (each resumes its own run directory);
    stop them at the budget (SIGTERM, then SIGKILL: a run directory never holds a half-written file). An
    interrupted suite (Ctrl-C, SIGTERM) stops its runs too; each keeps its finished points."""
    import signal

    def _interrupt(signum, frame):
        raise KeyboardInterrupt

    queue = list(todo)
    running: dict[str, tuple[Any, float, int, Any, tuple[str, Any]]] = {}
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
           result: Any, jobs: int, over_budget: Callable[[], bool], log: Callable[[str], None]) -> None:
    """The loop of :func:`run_parallel`: start runs while slots are free, collect finished ones, stop at the
    budget."""
    import subprocess
    import sys

    from lmsci.config import config_to_yaml

    env = job_env(jobs)
    while queue or running:
        while queue and len(running) < jobs and not over_budget():
            k = next_startable(queue, [sc for *_, sc in running.values()])
            if k is None:  # every queued run shares its trainings with a running one: wait for it
                break
            i, name, run_name, exp, cfg = queue.pop(k)
            out = path / run_name
            cfg_file = path / f".{run_name}.config.yaml"
            atomic_write_text(cfg_file, config_to_yaml(cfg))
            cmd = [sys.executable, "-m", "lmsci.cli", "run", name, "--preset", preset, "--out", str(out),
                   "--no-progress", "--config", str(cfg_file)]
            logf = open(path / f"{run_name}.log", "a")
            log(f"[{i}/{n_plan}] {run_name} ({preset}) started (log: {run_name}.log)")
            running[run_name] = (subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env),
                                 time.perf_counter(), i, logf, training_scope(name, exp, cfg))
        if over_budget():
            _stop([proc for proc, *_ in running.values()])
            for i, name, run_name, exp, cfg in queue:
                state["experiments"][run_name]["error"] = NOT_RUN_BUDGET
            queue = []
        done = [rn for rn, (proc, *_) in running.items() if proc.poll() is not None]
        for run_name in done:
            proc, t0, i, logf, _ = running.pop(run_name)
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
            save_state(path, state)
        if running:
            time.sleep(0.5)
