"""The sweep executor: run every unfinished point of an experiment, then write the report.

Each point's result row is appended atomically as soon as the point (or its batch group)
finishes, so an interrupted run (Ctrl-C, kill -9) loses only the points in progress and a rerun
into the same directory resumes. Local execution only; points are pure functions of
(config, point, seed), so a multi-machine backend can distribute them without changing experiments.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from lmsci.config import ExperimentConfig, config_to_yaml
from lmsci.runs import RunDir, environment, resolve_device

if TYPE_CHECKING:
    from lmsci.contract import Experiment


@contextmanager
def torch_threads(n: int):
    """Use ``n`` torch intra-op threads inside the block (0: leave torch's setting), then restore."""
    import torch

    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def default_out(name: str) -> Path:
    """``runs/<name>/<timestamp>`` under the current directory."""
    return Path("runs") / name / time.strftime("%Y-%m-%dT%H-%M-%S")


def run_experiment(
    exp: Experiment,
    cfg: ExperimentConfig,
    out: str | Path | None = None,
    progress: bool = True,
    log=print,
) -> RunDir:
    """Run (or resume) ``exp`` with ``cfg`` into ``out`` and render its report.

    Each results row carries ``status`` (``ok`` or ``diverged``: a point whose training loss became
    non-finite is recorded, not retried; a row from ``run_group`` may set ``status`` itself, as for one
    diverged member of a stack), ``seed_index``, ``seconds``, and the ``commit`` and ``device``
    it was computed on.

    Raises:
        ConfigError: from ``exp.validate`` or an unavailable ``device``, before any work starts.
        RunDirError: ``out`` is a file, holds another experiment or configuration, or a corrupted table.
    """
    from tqdm.auto import tqdm

    from lmsci.contract import PointContext
    from lmsci.report import render_report

    from lmsci.errors import DivergedError

    exp.validate(cfg)
    points = exp.seeded_points(cfg)
    ids = [p.id for p in points]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{exp.name}: duplicate point ids in the sweep")
    device = resolve_device(cfg.device)
    run = RunDir(out or default_out(exp.name))
    env = environment(cfg.seed, device)
    resumed = run.init(exp.name, config_to_yaml(cfg), env)
    provenance = {"commit": (env["git_commit"] or "")[:12] or "unknown", "device": device}
    done = run.finished_ids()
    todo = [p for p in points if p.id not in done]
    if resumed:
        log(f"resuming {run.path}: {len(done)} of {len(points)} points already finished")
    groups = exp.groups(cfg, todo)
    bar = tqdm(total=len(points), initial=len(points) - len(todo), desc=exp.name, disable=not progress,
               dynamic_ncols=True)
    for group in groups:
        ctxs = [PointContext(run, p, exp.point_seed(cfg, p), device, progress) for p in group]
        t0 = time.perf_counter()
        try:
            with torch_threads(cfg.threads):
                rows = [{"status": "ok", **row} for row in exp.run_group(cfg, group, ctxs)]  # a row may say "diverged"
        except DivergedError as e:  # recorded, not recomputed on resume; verdicts see only "ok" rows
            log(f"{', '.join(p.id for p in group)}: {e}")
            rows = [{**p.params, "status": "diverged", "diverged_step": e.step} for p in group]
        dt = (time.perf_counter() - t0) / max(len(group), 1)
        for p, row in zip(group, rows):
            run.append_result(p.id, {**row, "seed_index": p.seed_index, "seconds": round(dt, 3), **provenance})
            bar.update(1)
    bar.close()
    render_report(exp, cfg, run)
    return run
