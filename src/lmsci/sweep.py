"""The sweep executor: run every unfinished point of an experiment, then write the report.

Each point's result row is appended atomically as soon as the point (or its batch group)
finishes, so an interrupted run (Ctrl-C, kill -9) loses only the points in progress and a rerun
into the same directory resumes. Points are pure functions of (config, point, seed), so a backend
can compute groups anywhere: :class:`LocalBackend` (the default) computes them one after another in
this process; :class:`lmsci.backends.RayBackend` sends them to a Ray cluster as tasks. Either way the
rows come back here, to the one run directory, and are appended by this executor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmsci.config import ExperimentConfig, config_to_yaml
from lmsci.errors import LmsciError
from lmsci.provenance import provenance as run_provenance
from lmsci.runs import RunDir, environment, resolve_device
from lmsci.train.compile import compile_mode

if TYPE_CHECKING:
    from lmsci.contract import Experiment, Point, PointContext


@contextmanager
def torch_threads(n: int):
    """Use ``n`` torch intra-op threads and ``n`` BLAS/OpenMP threads for numpy and scipy (threadpoolctl) inside
    the block (0: leave both as they are), then restore. Limiting BLAS too matters for the numpy-only
    experiments: OpenBLAS threads that spin-wait on a loaded machine made a 10 s Monte Carlo take minutes."""
    import torch
    from threadpoolctl import threadpool_limits

    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        if n:
            with threadpool_limits(n):
                yield
        else:
            yield
    finally:
        torch.set_num_threads(old)


def default_out(name: str) -> Path:
    """``runs/<name>/<timestamp>`` under the current directory."""
    return Path("runs") / name / time.strftime("%Y-%m-%dT%H-%M-%S")


class PointsFailedError(LmsciError):
    """Some groups of points were lost (their worker died); the others were recorded.

    Rerunning into the same run directory recomputes only the lost points.

    Attributes:
        point_ids: the ids of the points that have no results row.
    """

    def __init__(self, point_ids: list[str], why: str):
        self.point_ids = list(point_ids)
        super().__init__(f"{len(self.point_ids)} point(s) lost ({why}): {', '.join(self.point_ids)}; the other "
                         "points are recorded; rerun the same command into the same --out to compute the lost ones")


def compute_group(exp: Experiment, cfg: ExperimentConfig, group: list[Point], ctxs: list[PointContext],
                  log: Callable[[str], Any] = print) -> list[dict[str, Any]]:
    """The results rows of one group, computed here with ``cfg.threads`` torch threads and the trainers compiling
    as ``cfg.compile`` says (:mod:`lmsci.train.compile`).

    Each row gets ``status`` ``ok`` unless ``run_group`` set it (one diverged member of a stack); a
    :class:`~lmsci.errors.DivergedError` makes every point of the group a ``diverged`` row (recorded,
    not recomputed on resume; verdicts see only ``ok`` rows). Any other exception propagates.
    """
    from lmsci.errors import DivergedError

    try:
        with torch_threads(cfg.threads), compile_mode(getattr(cfg, "compile", "auto")):
            return [{"status": "ok", **row} for row in exp.run_group(cfg, group, ctxs)]
    except DivergedError as e:
        log(f"{', '.join(p.id for p in group)}: {e}")
        return [{**p.params, "status": "diverged", "diverged_step": e.step} for p in group]


@dataclass
class GroupResult:
    """What a backend hands back for one finished group.

    Attributes:
        points: the group's points; rows: one results row per point (same order).
        seconds: wall seconds per point (the group's time over its size).
        provenance: extra per-row columns set by the backend (e.g. the worker's ``commit``); they
            override the executor's defaults.
    """

    points: list[Point]
    rows: list[dict[str, Any]]
    seconds: float
    provenance: dict[str, Any] = field(default_factory=dict)


class LocalBackend:
    """Compute groups one after another in this process (the default backend)."""

    name = "local"

    def open(self) -> None:
        """Nothing to connect to."""

    def close(self) -> None:
        """Nothing to release."""

    @property
    def is_open(self) -> bool:
        return True

    def resolve_device(self, device: str) -> str:
        """:func:`lmsci.runs.resolve_device` on this machine."""
        return resolve_device(device)

    def environment(self, seed: int, device: str) -> dict[str, Any]:
        """:func:`lmsci.runs.environment` of this machine."""
        return environment(seed, device)

    def check(self, cfg: ExperimentConfig, device: str) -> None:
        """Nothing beyond the config's own checks."""

    def run_groups(self, exp: Experiment, cfg: ExperimentConfig, groups: list[list[Point]], run: RunDir,
                   device: str, progress: bool, log: Callable[[str], Any]) -> Iterator[GroupResult]:
        """Yield each group's rows as soon as it is computed, in sweep order; an exception stops the run."""
        from lmsci.contract import PointContext

        for group in groups:
            ctxs = [PointContext(run, p, exp.point_seed(cfg, p), device, progress) for p in group]
            t0 = time.perf_counter()
            rows = compute_group(exp, cfg, group, ctxs, log)
            yield GroupResult(group, rows, (time.perf_counter() - t0) / max(len(group), 1))


def run_experiment(
    exp: Experiment,
    cfg: ExperimentConfig,
    out: str | Path | None = None,
    progress: bool = True,
    log=print,
    backend: Any = None,
) -> RunDir:
    """Run (or resume) ``exp`` with ``cfg`` into ``out`` and render its report.

    Each results row carries ``status`` (``ok`` or ``diverged``: a point whose training loss became
    non-finite is recorded, not retried; a row from ``run_group`` may set ``status`` itself, as for one
    diverged member of a stack), ``seed_index``, ``seconds``, and the ``commit`` and ``device``
    it was computed on.

    Args:
        backend: where groups are computed: :class:`LocalBackend` (default, this process) or
            :class:`lmsci.backends.RayBackend`; one not yet open is opened here and closed at the end.

    Raises:
        ConfigError: from ``exp.validate``, an unavailable ``device``, an unreachable backend or a group
            the backend cannot place (more ``threads`` than any node has), before any work starts.
        RunDirError: ``out`` is a file, holds another experiment or configuration, or a corrupted table.
        PointsFailedError: a backend lost some points (their worker died); the others are recorded
            and the report is not rendered; a rerun into ``out`` computes the lost ones.
    """
    from tqdm.auto import tqdm

    from lmsci.report import render_report

    backend = backend if backend is not None else LocalBackend()
    exp.validate(cfg)
    points = exp.seeded_points(cfg)
    ids = [p.id for p in points]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{exp.name}: duplicate point ids in the sweep")
    owned = not backend.is_open
    backend.open()  # connect (ConfigError when unreachable) before any work
    try:
        device = backend.resolve_device(cfg.device)
        backend.check(cfg, device)  # e.g. a task that no node of a cluster can hold
        run = RunDir(out or default_out(exp.name))
        env = backend.environment(cfg.seed, device)
        resumed = run.init(exp.name, config_to_yaml(cfg), env)
        run.write_provenance(run_provenance(exp.name, type(exp).__module__, cfg).to_json())
        provenance = {"commit": (env["git_commit"] or "")[:12] or "unknown", "device": device}
        done = run.finished_ids()
        todo = [p for p in points if p.id not in done]
        if resumed:
            log(f"resuming {run.path}: {len(done)} of {len(points)} points already finished")
        groups = exp.groups(cfg, todo)
        bar = tqdm(total=len(points), initial=len(points) - len(todo), desc=exp.name, disable=not progress,
                   dynamic_ncols=True)
        try:
            for res in backend.run_groups(exp, cfg, groups, run, device, progress, log):
                for p, row in zip(res.points, res.rows):
                    arm = {"arm": p.arm} if p.arm else {}
                    run.append_result(p.id, {**row, **arm, "seed_index": p.seed_index,
                                             "seconds": round(res.seconds, 3), **provenance, **res.provenance})
                    bar.update(1)
        finally:
            bar.close()
    finally:
        if owned:
            backend.close()
    render_report(exp, cfg, run)
    return run
