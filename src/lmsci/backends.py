"""Where the sweep executor computes groups of points: this process, worker processes here, or a Ray cluster.

:func:`make_backend` turns the CLI's ``--backend NAME [--address ADDR]`` into a backend for
:func:`lmsci.sweep.run_experiment`. ``local`` (default) is :class:`lmsci.sweep.LocalBackend`;
``processes`` is :class:`lmsci.process_backend.ProcessBackend` (``CPUs // threads`` worker processes on this
machine); ``ray`` is :class:`RayBackend`. Ray is an optional extra (``pip install 'lmsci[ray]'``): it is
imported only inside this module's Ray code, so lmsci works without it.

The executor stays in charge of the run directory: a Ray task computes one group (a point, or a
stack of points from ``Experiment.groups``) and returns its rows, its metrics lines and (where the
worker cannot see the run directory) the files it wrote; the driver writes them with the same atomic
appends as a local run, so resume works the same (points in ``results.csv`` are skipped) and a worker
that dies loses only its group. Experiments know nothing of this module.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from lmsci.config import ExperimentConfig, config_to_yaml
from lmsci.errors import ConfigError, UnknownNameError
from lmsci.group_task import run_group_task, take_output
from lmsci.runs import RunDir, environment
from lmsci.sweep import GroupResult, LocalBackend, PointsFailedError

if TYPE_CHECKING:
    from lmsci.contract import Experiment, Point

BACKENDS = ("local", "ray", "processes")
CONNECT_TIMEOUT_S = 5.0  # TCP probe of a Ray head address, before ray.init
RAY_EXTRA_HINT = "Ray is not installed here: pip install 'lmsci[ray]'"


def make_backend(name: str = "local", address: str | None = None, **kw: Any):
    """The backend called ``name``: ``local`` (this process), ``processes`` (worker processes on this machine)
    or ``ray`` (a Ray cluster at ``address``).

    Raises (before any work):
        UnknownNameError: ``name`` is not one of :data:`BACKENDS` (field ``backend``).
        ConfigError: ``address`` given with the local or processes backend; ``ray`` when Ray is not installed.
    """
    if name not in BACKENDS:
        raise UnknownNameError("backend", name, BACKENDS)
    if name in ("local", "processes"):
        if address is not None:
            raise ConfigError("address", address, f"only with --backend ray (the {name} backend computes points on "
                              "this machine)")
        if name == "processes":
            from lmsci.process_backend import ProcessBackend

            return ProcessBackend()
        return LocalBackend()
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ConfigError("backend", name, "local", hint=RAY_EXTRA_HINT) from None
    return RayBackend(address, **kw)


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``HOST:PORT`` or ``ray://HOST:PORT``; None for ``auto``/``local``."""
    a = address.removeprefix("ray://")
    if a in ("auto", "local") or ":" not in a:
        return None
    host, _, port = a.rpartition(":")
    if not port.isdigit():
        raise ConfigError("address", address, "HOST:PORT of a Ray head (e.g. 10.0.0.5:6379), ray://HOST:10001 or auto")
    return host.strip("[]"), int(port)


def probe(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Open (and close) a TCP connection to a Ray head's ``HOST:PORT`` within ``timeout`` seconds.

    Raises:
        ConfigError: field ``address``, when nothing answers there.
    """
    hp = _host_port(address)
    if hp is None:
        return
    try:
        with socket.create_connection(hp, timeout=timeout):
            pass
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ConfigError("address", address, "the HOST:PORT of a running Ray head (`ray start --head` prints it; "
                          "port 6379 by default)",
                          hint=f"Nothing answered there within {timeout:g} s ({why})") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


_REMOTE = None


def _remote():
    global _REMOTE
    if _REMOTE is None:
        import ray

        _REMOTE = ray.remote(run_group_task)
    return _REMOTE


class RayBackend:
    """Compute groups of points as Ray tasks on a Ray cluster; rows flow back to this driver.

    Each group is one task reserving ``max(cfg.threads, 1)`` CPUs and, when the device is CUDA, one
    GPU (Ray then makes that GPU the task's ``cuda:0``). At most ``window`` groups are in flight (default:
    twice the number of tasks the cluster can run at once), submitted in sweep order, so earlier points
    start first. A group whose task raises stops new submissions (as a local run stops); the groups in
    flight still finish and are recorded, then the error is raised. A group whose worker dies
    (killed, out of memory, node lost) is lost alone: the others go on, and :class:`PointsFailedError`
    names the lost points at the end; a rerun resumes them. Ray does not retry a task (``max_retries``).

    Args:
        address: a Ray head ``HOST:PORT`` (``ray start --head`` prints it), ``ray://HOST:10001`` (Ray
            Client), ``auto`` (the cluster running on this machine), or None: ``RAY_ADDRESS`` when set,
            else a new Ray instance on this machine (stopped at the end). When this process is already
            connected to Ray (``ray.init`` called before), that connection is used.
        ship_files: None (default): workers that see the run directory write artifacts into it, others
            return them; True: always return them (for clusters without a shared filesystem).
        max_retries: Ray's retries of a task whose worker died (0: the executor's policy, lose it and
            let the next resume recompute it).
        connect_timeout: seconds to wait for the head's port before giving up.
    """

    name = "ray"

    def __init__(self, address: str | None = None, ship_files: bool | None = None, max_retries: int = 0,
                 window: int | None = None, connect_timeout: float = CONNECT_TIMEOUT_S):
        if address is not None:
            _host_port(address)  # a malformed address is a ConfigError now
        self.address, self.ship_files, self.max_retries = address, ship_files, max_retries
        self.window, self.connect_timeout = window, connect_timeout
        self._owns_ray = False
        self._open = False

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self._open

    def open(self) -> None:
        """Connect to the cluster (or start a local instance); idempotent.

        Raises:
            ConfigError: field ``address``: nothing answers at ``address`` (probed with a
                ``connect_timeout`` TCP connection first), or Ray could not connect there.
        """
        if self._open:
            return
        import ray

        address = self.address if self.address is not None else os.environ.get("RAY_ADDRESS")
        if address:
            probe(address, self.connect_timeout)
        if ray.is_initialized():  # this process is connected already (a notebook, a test): use that connection
            self._open = True
            return
        # a driver retries the head's GCS about once a second, 20 times by default: bound it by connect_timeout
        wait_var = "RAY_gcs_server_port_wait_time_s"
        saved = os.environ.get(wait_var)
        if address and saved is None:
            os.environ[wait_var] = str(max(int(self.connect_timeout), 1))
        try:
            ray.init(address=address, include_dashboard=False, logging_level="WARNING", log_to_driver=True)
        except Exception as e:  # noqa: BLE001 (a failed start raises a bare Exception)
            ray.shutdown()  # stop whatever a failed local start left running
            first, root = _first_line(e), e
            while root.__cause__ is not None:  # e.g. an AuthenticationError under "Failed to connect"
                root = root.__cause__
            if root is not e:  # Ray embeds the last connection error's traceback: its last line says what
                lines = [x for x in str(root).strip().splitlines() if x.strip()] or [type(root).__name__]
                first += f" ({lines[-1].strip()[:400]})"
            if address:
                raise ConfigError("address", address, "a running Ray cluster's HOST:PORT, ray://HOST:10001 or auto",
                                  hint=f"Ray could not connect: {first}") from None
            raise ConfigError("address", None, "a running Ray cluster's HOST:PORT (none: start Ray on this machine, "
                              "which failed)", hint=f"Ray did not start here: {first}") from None
        finally:
            if address and saved is None:
                os.environ.pop(wait_var, None)
        self._owns_ray = True
        self._open = True

    def close(self) -> None:
        """Disconnect (and stop the local instance) if :meth:`open` connected; keep a caller's connection."""
        if self._open and self._owns_ray:
            import ray

            ray.shutdown()
        self._open = self._owns_ray = False

    def __enter__(self) -> RayBackend:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- what the executor asks --------------------------------------------------------------------
    def resources(self) -> dict[str, float]:
        import ray

        return {k: float(v) for k, v in ray.cluster_resources().items()}

    def resolve_device(self, device: str) -> str:
        """``auto``: ``cuda`` when the cluster has GPUs, else ``cpu``.

        Raises:
            ConfigError: ``cuda`` on a cluster without GPUs; ``cuda:N`` with N > 0 (Ray gives each task
                its GPU as ``cuda:0``).
        """
        gpus = self.resources().get("GPU", 0.0)
        if device == "auto":
            return "cuda" if gpus > 0 else "cpu"
        if device.startswith("cuda"):
            if device not in ("cuda", "cuda:0"):
                raise ConfigError("device", device, "auto, cpu, cuda or cuda:0 with --backend ray (Ray assigns "
                                  "each task its own GPU, seen by the task as cuda:0)")
            if gpus <= 0:
                raise ConfigError("device", device, "cpu or auto (the Ray cluster has no GPU)")
            return "cuda"
        return device

    def environment(self, seed: int, device: str) -> dict[str, Any]:
        """This driver's :func:`lmsci.runs.environment` with the device the tasks use and the cluster's
        Ray version, address and total resources (each row names the commit its worker ran)."""
        import ray

        env = environment(seed, "cpu")
        env["device"] = device
        env["cuda_device"] = None
        env["backend"] = {"name": "ray", "ray": ray.__version__, "address": ray.get_runtime_context().gcs_address,
                          "nodes": sum(1 for n in ray.nodes() if n.get("Alive")), "resources": self.resources()}
        return env

    def check(self, cfg: ExperimentConfig, device: str) -> None:
        """Raise :class:`ConfigError` (field ``threads``) when no node of the cluster has the CPUs (or GPU)
        one task reserves, so that no task would ever be scheduled."""
        import ray

        opts = self._task_options(cfg, device)
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        fits = [r for r in nodes if r.get("CPU", 0) >= opts["num_cpus"] and r.get("GPU", 0) >= opts["num_gpus"]]
        if not fits:
            most = max((int(r.get("CPU", 0)) for r in nodes if r.get("GPU", 0) >= opts["num_gpus"]), default=0)
            raise ConfigError("threads", cfg.threads, f"at most {most} (the most CPUs of one Ray node"
                              + (" with a GPU)" if opts["num_gpus"] else ")"))

    def _task_options(self, cfg: ExperimentConfig, device: str) -> dict[str, Any]:
        return {"num_cpus": max(int(cfg.threads), 1), "num_gpus": 1 if device.startswith("cuda") else 0,
                "max_retries": self.max_retries, "retry_exceptions": False}

    def _window(self, opts: dict[str, Any]) -> int:
        if self.window:
            return max(int(self.window), 1)
        res = self.resources()
        slots = res.get("CPU", 1.0) // opts["num_cpus"]
        if opts["num_gpus"]:
            slots = min(slots, res.get("GPU", 0.0) // opts["num_gpus"])
        return max(int(2 * slots), 1)

    def run_groups(self, exp: Experiment, cfg: ExperimentConfig, groups: list[list[Point]], run: RunDir,
                   device: str, progress: bool, log: Callable[[str], Any]) -> Iterator[GroupResult]:
        """Yield each group's rows as its task finishes (in completion order); see the class docstring.

        Raises (after every task in flight has finished and been recorded):
            Exception: the first exception a task raised (an lmsci error keeps its type).
            PointsFailedError: groups whose worker died.
        """
        import ray
        from ray.exceptions import RayError, RayTaskError

        if not groups:
            return
        opts = self._task_options(cfg, device)
        task = _remote().options(**opts)
        exp_ref, cfg_ref = ray.put(exp), ray.put(cfg)
        cfg_yaml = config_to_yaml(cfg)
        queue = list(groups)
        queue.reverse()
        pending: dict[Any, list[Point]] = {}
        error: BaseException | None = None
        lost: list[str] = []
        lost_why: list[str] = []
        window = self._window(opts)
        try:
            while queue or pending:
                while queue and error is None and len(pending) < window:
                    g = queue.pop()
                    ref = task.remote(exp_ref, cfg_ref, g, [exp.point_seed(cfg, p) for p in g], device,
                                      str(run.path.resolve()), cfg_yaml, self.ship_files)
                    pending[ref] = g
                if not pending:
                    break
                [ref], _ = ray.wait(list(pending), num_returns=1)
                g = pending.pop(ref)
                ids = ", ".join(p.id for p in g)
                try:
                    out = ray.get(ref)
                except RayTaskError as e:  # raised outside compute_group (e.g. unpickling the experiment)
                    cause = getattr(e, "cause", None) or e
                    log(f"{ids}: failed: {type(cause).__name__}: {cause}")
                    error = error or cause
                    continue
                except RayError as e:  # the worker died, its node was lost, or it ran out of memory
                    log(f"{ids}: lost ({type(e).__name__}): {str(e).strip().splitlines()[0][:300]}")
                    lost += [p.id for p in g]
                    lost_why.append(type(e).__name__)
                    continue
                res = take_output(out, g, run, log)
                if isinstance(res, BaseException):  # the task raised: stop submitting, as a local run stops
                    error = error or res
                    continue
                yield res
        finally:
            for ref in pending:  # the driver stopped early (Ctrl-C, generator closed): cancel what is left
                ray.cancel(ref, force=True)
        if error is not None:
            raise error
        if lost:
            raise PointsFailedError(lost, "their Ray worker died: " + ", ".join(sorted(set(lost_why))))
