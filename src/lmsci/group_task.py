"""One group of points computed away from the driver: the task body of ``--backend ray`` and ``--backend processes``.

:func:`run_group_task` computes a group with :func:`lmsci.sweep.compute_group` and returns its rows, its metrics
lines (buffered, for the driver to append) and, where the worker cannot see the run directory, its files as a tar
archive; an exception is returned as a picklable triple (:func:`_portable`) and raised again by the driver
(:func:`_restore`) with its type, since lmsci's errors do not pickle as they are. Plain Python: no Ray, no pool.
"""

from __future__ import annotations

import io
import pickle
import shutil
import socket
import tarfile
import tempfile
import time
import traceback
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmsci.config import ExperimentConfig
from lmsci.errors import LmsciError
from lmsci.runs import RunDir
from lmsci.sweep import GroupResult, compute_group

if TYPE_CHECKING:
    from lmsci.contract import Experiment, Point


@lru_cache(maxsize=1)
def _worker_commit() -> str:
    from lmsci.runs import git_commit

    return (git_commit() or "")[:12] or "unknown"


class _BufferedRun(RunDir):
    """A run directory whose metrics lines are kept in memory (returned to the driver, which appends them)."""

    def __init__(self, path: str | Path):
        super().__init__(path)
        self.buffered: list[tuple[str, dict[str, Any]]] = []

    def log_metrics(self, point_id: str, row: dict[str, Any]) -> None:
        self.buffered.append((point_id, dict(row)))


def _pack(root: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for child in sorted(root.iterdir()):
            tar.add(child, arcname=child.name)
    return buf.getvalue()


def _unpack(data: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(dest, filter="data")


def run_group_task(exp: Experiment, cfg: ExperimentConfig, group: list[Point], seeds: list[int], device: str,
                   run_path: str, config_yaml: str, ship_files: bool | None) -> dict[str, Any]:
    """One group computed on a Ray worker (the body of the Ray task; plain Python, testable without Ray).

    The worker writes point artifacts straight into the run directory when it sees it (same machine or
    a shared filesystem: ``run_path/config.yaml`` holds this run's configuration) and ``ship_files`` is
    not True; otherwise into a scratch directory whose files are returned as a tar archive for the
    driver to unpack into the run directory. Metrics lines are always returned, never written here.

    Returns:
        ``rows``, ``seconds`` (per point), ``metrics`` [(point id, line)], ``files`` (tar bytes or None),
        ``commit`` (this worker's lmsci commit), ``host``, ``log`` (messages for the driver's log).
    """
    from lmsci.contract import PointContext

    cfg_file = Path(run_path) / RunDir.CONFIG
    shared = not ship_files and cfg_file.is_file() and cfg_file.read_text() == config_yaml
    root = Path(run_path) if shared else Path(tempfile.mkdtemp(prefix="lmsci-ray-"))
    try:
        run = _BufferedRun(root)
        ctxs = [PointContext(run, p, s, device, False) for p, s in zip(group, seeds)]
        messages: list[str] = []
        t0 = time.perf_counter()
        try:
            rows = compute_group(exp, cfg, group, ctxs, messages.append)
        except Exception as e:  # returned, not raised: lmsci's errors do not survive Ray's pickling as they are
            tb = [] if isinstance(e, LmsciError) else [traceback.format_exc().rstrip()]
            return {"raised": _portable(e), "log": messages + tb}
        dt = (time.perf_counter() - t0) / max(len(group), 1)
        files = None if shared or not any(root.iterdir()) else _pack(root)
    finally:
        if not shared:
            shutil.rmtree(root, ignore_errors=True)
    return {"rows": rows, "seconds": dt, "metrics": run.buffered, "files": files, "commit": _worker_commit(),
            "host": socket.gethostname(), "log": messages}


def _portable(e: BaseException) -> tuple[type, str, dict[str, Any]] | tuple[None, str, dict[str, Any]]:
    """An exception as (class, message, attributes), which pickles even when the class's ``__init__``
    takes other arguments than its message (``ConfigError(field, value, allowed)``)."""
    try:
        state = dict(vars(e))
        pickle.dumps((type(e), state))
        return type(e), str(e), state
    except Exception:  # an unpicklable class or attribute: keep the text
        return None, f"{type(e).__name__}: {e}", {}


def _restore(raised: tuple) -> BaseException:
    cls, msg, state = raised
    if cls is None:
        return RuntimeError(msg)
    e = cls.__new__(cls)
    BaseException.__init__(e, msg)
    e.__dict__.update(state)
    return e


def take_output(out: dict[str, Any], group: list[Point], run: RunDir,
                log: Any) -> GroupResult | BaseException:
    """The driver's side of a finished :func:`run_group_task`: log the task's messages; when it raised, log it and
    return the exception (restored with its type, for the driver to raise once the groups in flight are recorded);
    else append its metrics lines to ``run``, unpack its returned files into the run directory and return its
    :class:`~lmsci.sweep.GroupResult` (rows, seconds per point, the worker's ``commit``)."""
    for m in out["log"]:
        log(m)
    if "raised" in out:
        err = _restore(out["raised"])
        log(f"{', '.join(p.id for p in group)}: failed: {type(err).__name__}: {err}")
        return err
    for pid, line in out["metrics"]:
        run.log_metrics(pid, line)
    if out["files"]:
        _unpack(out["files"], run.path)
    return GroupResult(group, out["rows"], out["seconds"], {"commit": out["commit"]})
