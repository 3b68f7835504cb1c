"""``--backend processes``: an experiment's groups of points computed at once in worker processes on this machine.

A one-thread experiment on a 2-core machine leaves a core idle when its points run one after another (the local
backend). This backend starts ``CPUs // threads`` worker processes (``spawn``; at most one per group) and gives each
group to the next free worker; the rows come back to the driver, which appends them to the one run directory as
a local run does (so resume and the results are the same: points are pure functions of config, point and seed).
The workers write point artifacts straight into the run directory (same machine) through the task body the Ray
backend uses (:func:`lmsci.group_task.run_group_task`); metrics lines travel back with the rows.

Measured (S57, 2-core AMD EPYC): see ``time_estimate`` of ``cfg-learning`` and ``cfg-probing``, whose quick halves
this way. One group, or one worker's worth of CPUs, runs in this process as the local backend does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

from lmsci.config import ExperimentConfig, config_to_yaml
from lmsci.errors import ConfigError
from lmsci.group_task import run_group_task, take_output
from lmsci.runs import RunDir, environment, resolve_device
from lmsci.sweep import GroupResult, LocalBackend, PointsFailedError

if TYPE_CHECKING:
    from lmsci.contract import Experiment, Point

#: the thread-count variables a process sets before its libraries start their pools (OpenMP: torch's intra-op
#: pool; MKL, OpenBLAS: numpy's and scipy's BLAS): a worker here, each ``lmsci suite --jobs`` run there
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def machine_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one, else ``os.cpu_count()``)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # macOS, Windows
        return max(os.cpu_count() or 1, 1)


def plan_workers(threads: int, n_groups: int, cpus: int | None = None) -> tuple[int, int]:
    """(worker processes, threads per worker) for ``n_groups`` groups of an experiment whose config asks for
    ``threads`` torch threads (0: "as it is", here one CPU's share) on ``cpus`` CPUs (default: this machine's).

    Workers: ``cpus // max(threads, 1)``, at most ``n_groups``, at least 1."""
    cpus = machine_cpus() if cpus is None else max(int(cpus), 1)
    per = max(int(threads), 1)
    workers = max(min(cpus // per, int(n_groups)), 1)
    return workers, (per if threads else max(cpus // workers, 1))


def _init_worker(threads: int) -> None:
    """A worker's start: ``threads`` intra-op threads for torch and the BLAS pools (before any task)."""
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    threadpool_limits(threads)


class ProcessBackend:
    """Compute an experiment's groups of points in worker processes on this machine; rows come back here.

    Workers: :func:`plan_workers` (``CPUs // threads``, at most one per group), each started with ``spawn`` and
    ``threads`` torch/BLAS threads (one CPU's share when the config's ``threads`` is 0). Groups are submitted in
    sweep order, at most two per worker in flight, and yielded as they finish. A group that raises stops new
    submissions; the groups in flight finish and are recorded, then the error is raised (an lmsci error keeps its
    type). A worker that dies (killed, out of memory) breaks the pool: the groups in flight are lost,
    :class:`PointsFailedError` names them, and a rerun into the same directory computes them. With one worker
    (one group, or threads >= CPUs) the groups run in this process as :class:`lmsci.sweep.LocalBackend` runs them.

    Args:
        cpus: CPUs to plan for (default: this process's affinity mask).
    """

    name = "processes"

    def __init__(self, cpus: int | None = None):
        self.cpus = machine_cpus() if cpus is None else max(int(cpus), 1)

    @property
    def is_open(self) -> bool:
        return True

    def open(self) -> None:
        """Nothing to connect to (workers start with each run)."""

    def close(self) -> None:
        """Nothing held between runs."""

    def resolve_device(self, device: str) -> str:
        """:func:`lmsci.runs.resolve_device` on this machine."""
        return resolve_device(device)

    def environment(self, seed: int, device: str) -> dict[str, Any]:
        """:func:`lmsci.runs.environment` of this machine, with the backend and the CPUs it plans for."""
        env = environment(seed, device)
        env["backend"] = {"name": self.name, "cpus": self.cpus}
        return env

    def check(self, cfg: ExperimentConfig, device: str) -> None:
        """Raise :class:`ConfigError` (field ``threads``) when one group asks for more threads than the CPUs."""
        if cfg.threads > self.cpus:
            raise ConfigError("threads", cfg.threads, f"at most {self.cpus} (this machine's CPUs) with --backend "
                              "processes, or 0")

    def run_groups(self, exp: Experiment, cfg: ExperimentConfig, groups: list[list[Point]], run: RunDir,
                   device: str, progress: bool, log: Callable[[str], Any]) -> Iterator[GroupResult]:
        """Yield each group's rows as its worker finishes (in completion order); see the class docstring.

        Raises (after every group in flight has finished and been recorded):
            Exception: the first exception a group raised.
            PointsFailedError: groups whose worker died.
        """
        import multiprocessing

        workers, threads = plan_workers(cfg.threads, len(groups), self.cpus)
        if workers <= 1:
            yield from LocalBackend().run_groups(exp, cfg, groups, run, device, progress, log)
            return
        log(f"{exp.name}: {len(groups)} groups on {workers} worker processes, {threads} thread(s) each")
        queue = list(reversed(groups))
        cfg_yaml, path = config_to_yaml(cfg), str(run.path.resolve())
        pending: dict[Future, list[Point]] = {}
        error: BaseException | None = None
        lost: list[str] = []
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_worker, initargs=(threads,))
        done_ok = False
        try:
            while queue or pending:
                while queue and error is None and not lost and len(pending) < 2 * workers:
                    g = queue.pop()
                    fut = pool.submit(run_group_task, exp, cfg, g, [exp.point_seed(cfg, p) for p in g], device,
                                      path, cfg_yaml, False)
                    pending[fut] = g
                if not pending:
                    break
                finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for fut in finished:
                    g = pending.pop(fut)
                    ids = ", ".join(p.id for p in g)
                    try:
                        out = fut.result()
                    except BrokenProcessPool as e:  # a worker died: every group in flight is lost with it
                        log(f"{ids}: lost (a worker process died: {e})")
                        lost += [p.id for p in g]
                        continue
                    res = take_output(out, g, run, log)
                    if isinstance(res, BaseException):  # the group raised: stop submitting, as a local run stops
                        error = error or res
                        continue
                    yield res
            done_ok = True
        finally:
            if not done_ok:  # the driver stopped early (Ctrl-C, a closed generator): stop the workers too
                pool.shutdown(wait=False, cancel_futures=True)
                for proc in list((getattr(pool, "_processes", None) or {}).values()):
                    proc.terminate()
            else:
                pool.shutdown(wait=True)
        if error is not None:
            raise error
        if lost:
            left = [p.id for g in reversed(queue) for p in g]
            raise PointsFailedError(lost + left, "a worker process died; the groups in flight with it are lost"
                                    + (", the rest not started" if left else ""))

