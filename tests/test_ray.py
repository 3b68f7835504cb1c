"""The Ray backend of the sweep executor (issue 12, item 4): the same results table as the local backend,
resume after the driver is killed, a killed worker losing only its point, and the bad input that must
exit 2 before any work. Starts one local Ray instance with 2 CPUs for the module and shuts it down."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from typing import ClassVar

import pandas as pd
import pytest
from typer.testing import CliRunner

from lmsci.cli import app
from lmsci.config import ExperimentConfig, resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.base import Experiment, Point
from lmsci.sweep import PointsFailedError, run_experiment

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'lmsci[ray]'): the Ray backend is untested")

from lmsci.backends import RayBackend, make_backend  # noqa: E402
import toy_groups  # noqa: E402
from toy_groups import ToyBase, ToyConfig  # noqa: E402

TIMING_COLS = {"seconds", "commit"}


@pytest.fixture(scope="module")
def cluster():
    """A local Ray instance with 2 CPUs; this test module's toy experiments travel to workers by value."""
    for _ in range(2):  # on a heavily loaded machine Ray's node can miss its own 15 s startup deadline
        try:
            ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
            break
        except Exception as e:  # noqa: BLE001 (Ray raises a bare Exception)
            ray.shutdown()  # stops what the failed start left running
            why = f"{type(e).__name__}: {e}"
    else:
        pytest.skip(f"a local Ray instance did not start in 2 attempts on this machine ({why})")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(toy_groups)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.cloudpickle.unregister_pickle_by_value(toy_groups)
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        ray.shutdown()


class Toy(ToyBase):
    name = "toy-ray"


def _table(run) -> pd.DataFrame:
    df = run.results()
    return df.drop(columns=[c for c in TIMING_COLS if c in df]).sort_values("point").reset_index(drop=True)


# -- bad input: exit 2 before any work (no Ray instance needed) ------------------------------------
def test_unknown_backend_and_address_with_local_exit_2(tmp_path):
    r = CliRunner().invoke(app, ["run", "benign-overfitting", "--preset", "smoke", "--backend", "dask",
                                 "--out", str(tmp_path / "r")])
    assert r.exit_code == 2 and "backend" in r.output and "local, processes, ray" in r.output
    r = CliRunner().invoke(app, ["run", "benign-overfitting", "--preset", "smoke", "--address", "10.0.0.1:6379",
                                 "--out", str(tmp_path / "r")])
    assert r.exit_code == 2 and "address" in r.output and "--backend ray" in r.output
    assert not (tmp_path / "r").exists()


def test_unreachable_address_exits_2_quickly_before_any_work(tmp_path):
    with socket.socket() as s:  # a port on which nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = CliRunner().invoke(app, ["run", "benign-overfitting", "--preset", "smoke", "--backend", "ray",
                                 "--address", f"127.0.0.1:{port}", "--out", str(tmp_path / "r")])
    assert r.exit_code == 2, r.output
    assert f"address='127.0.0.1:{port}'" in r.output and "Nothing answered" in r.output
    assert not (tmp_path / "r").exists()
    t0 = time.perf_counter()  # an address where no Ray head is (a sandbox may accept any TCP connection)
    with pytest.raises(ConfigError, match="Nothing answered there within 1 s|Ray could not connect") as ei:
        RayBackend("10.255.255.1:6379", connect_timeout=1.0).open()
    assert ei.value.field == "address" and time.perf_counter() - t0 < 20  # bounded by the connect timeout
    r = CliRunner().invoke(app, ["suite", "--preset", "smoke", "--only", "benign-overfitting", "--backend", "ray",
                                 "--address", f"127.0.0.1:{port}", "--out", str(tmp_path / "s")])
    assert r.exit_code == 2 and "Nothing answered" in r.output and not (tmp_path / "s").exists()


def test_ray_not_installed_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'lmsci\[ray\]'"):
        make_backend("ray")
    r = CliRunner().invoke(app, ["run", "benign-overfitting", "--preset", "smoke", "--backend", "ray",
                                 "--out", str(tmp_path / "r")])
    assert r.exit_code == 2 and "pip install 'lmsci[ray]'" in r.output


# -- the task body, without Ray ------------------------------------------------------------------------
def test_task_body_returns_rows_metrics_and_files(tmp_path):
    from lmsci.group_task import _restore, _unpack, run_group_task
    from lmsci.config import config_to_yaml
    from lmsci.runs import RunDir, environment

    cfg = resolve_config(ToyConfig, "smoke", ["threads=1"])
    exp, pts = Toy(), Toy().points(cfg)
    run = RunDir(tmp_path / "r")
    run.init(exp.name, config_to_yaml(cfg), environment(cfg.seed, "cpu"))
    seeds = [exp.point_seed(cfg, p) for p in pts[:2]]
    out = run_group_task(exp, cfg, pts[:2], seeds, "cpu", str(run.path), config_to_yaml(cfg), None)
    assert out["files"] is None and (run.path / "points" / "b" / "value.txt").read_text() == "1"  # sees the dir
    assert [r["x"] for r in out["rows"]] == [0, 1] and {r["status"] for r in out["rows"]} == {"ok"}
    assert [pid for pid, _ in out["metrics"]] == ["a", "b"] and not (run.path / RunDir.METRICS).exists()
    shipped = run_group_task(exp, cfg, pts[2:], seeds, "cpu", str(tmp_path / "elsewhere"), config_to_yaml(cfg), None)
    _unpack(shipped["files"], tmp_path / "back")  # a worker without the run directory returns its files
    assert (tmp_path / "back" / "points" / "d" / "value.txt").read_text() == "3"
    assert not (tmp_path / "elsewhere").exists()
    bad = resolve_config(ToyConfig, "smoke", ["fail=true"])
    err = run_group_task(exp, bad, pts[1:2], seeds[:1], "cpu", str(run.path), config_to_yaml(bad), None)
    e = _restore(err["raised"])
    assert isinstance(e, ConfigError) and e.field == "x" and "toy's bad point" in str(e)


# -- on a local 2-CPU Ray instance -------------------------------------------------------------------
def test_smoke_run_gives_the_local_results_table(cluster, tmp_path):
    from lmsci.experiments.registry import get

    cls = get("benign-overfitting")  # deterministic, the fastest multi-point smoke run (one seed of it)
    cfg = resolve_config(cls.Config, "smoke", ["threads=1", "n_seeds=1"])
    local = run_experiment(cls(), cfg, tmp_path / "local", progress=False, log=lambda m: None)
    remote = run_experiment(cls(), cfg, tmp_path / "ray", progress=False, log=lambda m: None, backend=RayBackend())
    a, b = _table(local), _table(remote)
    assert len(a) == len(cls().seeded_points(cfg)) > 5 and list(a["point"]) == list(b["point"]) and list(a.columns) == list(b.columns)
    num = [c for c in a.columns if pd.api.types.is_numeric_dtype(a[c])]
    other = [c for c in a.columns if c not in num]
    assert len(num) > 5
    pd.testing.assert_frame_equal(a[num], b[num], check_exact=False, rtol=1e-9, atol=1e-12)
    assert a[other].equals(b[other])
    va, vb = local.verdicts(), remote.verdicts()
    assert [(v.claim_id, v.outcome) for v in va] == [(v.claim_id, v.outcome) for v in vb]
    assert remote.environment()["backend"]["name"] == "ray"


def test_killed_worker_loses_only_its_point_and_resume_recomputes_it(cluster, tmp_path):
    cfg = resolve_config(ToyConfig, "smoke", [f"crash={tmp_path / 'crashed'}", "threads=1"])
    msgs: list[str] = []
    with pytest.raises(PointsFailedError) as ei:
        run_experiment(Toy(), cfg, tmp_path / "r", progress=False, log=msgs.append, backend=RayBackend())
    assert ei.value.point_ids == ["c"] and any("c: lost" in m for m in msgs)
    run = run_experiment(Toy(), cfg, tmp_path / "r", progress=False, log=msgs.append, backend=RayBackend())
    df = run.results()
    assert sorted(df["point"]) == ["a", "b", "c", "d"] and df["point"].is_unique
    assert df.iloc[-1]["point"] == "c" and any("resuming" in m for m in msgs)
    assert (run.path / "points" / "c" / "value.txt").read_text() == "2"
    m = run.metrics()
    assert sorted(m["point"]) == ["a", "b", "c", "d"]  # metrics come back to the driver, once per point


def test_files_shipped_back_and_task_errors_keep_their_type(cluster, tmp_path):
    cfg = resolve_config(ToyConfig, "smoke", ["threads=1"])
    run = run_experiment(Toy(), cfg, tmp_path / "s", progress=False, log=lambda m: None,
                         backend=RayBackend(ship_files=True))  # as on a cluster without a shared filesystem
    assert [(run.path / "points" / k / "value.txt").read_text() for k in "abcd"] == ["0", "1", "2", "3"]
    local = run_experiment(Toy(), cfg, tmp_path / "l", progress=False, log=lambda m: None)
    assert _table(run).equals(_table(local))
    bad = resolve_config(ToyConfig, "smoke", ["threads=1", "fail=true"])
    with pytest.raises(ConfigError, match="toy's bad point") as ei:
        run_experiment(Toy(), bad, tmp_path / "f", progress=False, log=lambda m: None, backend=RayBackend(window=1))
    assert ei.value.field == "x"
    with pytest.raises(ConfigError, match="at most 2") as ei:  # no node has 64 CPUs: no task could ever start
        run_experiment(Toy(), resolve_config(ToyConfig, "smoke", ["threads=64"]), tmp_path / "t", progress=False,
                       backend=RayBackend())
    assert ei.value.field == "threads" and not (tmp_path / "t").exists()
    assert sorted(RunDirResults(tmp_path / "f")) == ["a"]  # window 1: b failed, nothing after it was started


def RunDirResults(path):
    from lmsci.runs import RunDir

    return list(RunDir(path).results()["point"])


class SlowConfig(ExperimentConfig):
    PRESETS: ClassVar[dict] = {"smoke": {}, "quick": {}}


class Slow(Experiment):
    """Six points of one second each: a driver killed after the first rows leaves points in flight."""

    name = "toy-slow"
    Config = SlowConfig
    claims = []

    def points(self, cfg):
        return [Point(f"p{i}", {"i": i}) for i in range(6)]

    def run_point(self, cfg, point, ctx):
        time.sleep(1.0)
        return {"i": point.params["i"], "seed": ctx.seed}

    def verdicts(self, cfg, results, run):
        return []


DRIVER = textwrap.dedent('''
    import sys
    sys.path.insert(0, sys.argv[3])
    import ray
    import test_ray
    from lmsci.cli import app
    from lmsci.experiments.registry import register

    ray.cloudpickle.register_pickle_by_value(test_ray)  # the toy travels to the workers by value
    register("toy-slow")(test_ray.Slow)
    app(["run", "toy-slow", "--preset", "smoke", "--set", "threads=1", "--backend", "ray",
         "--address", sys.argv[1], "--out", sys.argv[2], "--no-progress"])
''')


def test_resume_after_the_driver_is_killed(cluster, tmp_path):
    script, out = tmp_path / "driver.py", tmp_path / "run"
    script.write_text(DRIVER)
    p = subprocess.Popen([sys.executable, str(script), cluster, str(out), os.path.dirname(__file__)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.time()
        while not (out / "results.csv").exists() and time.time() - t0 < 400 and p.poll() is None:
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)  # the driver dies with points in flight
        err = p.communicate()[1]
    finally:
        if p.poll() is None:
            p.kill()
    assert (out / "results.csv").exists(), err[-2000:]
    first = RunDirResults(out)
    assert 1 <= len(first) < 6, first
    msgs: list[str] = []
    run = run_experiment(Slow(), resolve_config(SlowConfig, "smoke", ["threads=1"]), out, progress=False,
                         log=msgs.append, backend=RayBackend())
    assert f"resuming {out}: {len(first)} of 6 points already finished" in msgs
    final = list(run.results()["point"])
    assert sorted(final) == [f"p{i}" for i in range(6)] and final[:len(first)] == first  # each once, kept
