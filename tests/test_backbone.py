"""Backbone: config resolution and errors, run store, resume, report, CLI exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from typing import Literal

import pandas as pd
import pytest
from pydantic import Field
from typer.testing import CliRunner

from lmsci.cli import app
from lmsci.config import ExperimentConfig, resolve_config
from lmsci.errors import ConfigError, RunDirError, UnknownNameError
from lmsci.experiments.base import Experiment, Point
from lmsci.experiments.registry import register
from lmsci.claims import Claim
from lmsci.runs import RunDir, derive_seed
from lmsci.sweep import run_experiment


class ToyConfig(ExperimentConfig):
    n_points: int = Field(4, ge=1, le=100)
    lr: float = Field(0.1, gt=0)
    kind: Literal["a", "b"] = "a"

    PRESETS = {"smoke": {"n_points": 2}, "quick": {}, "paper": {"n_points": 10}}


@register("toy-backbone")
class Toy(Experiment):
    claim = "toy claim"
    source = "none"
    time_estimate = {"smoke": "1 s", "quick": "1 s", "paper": "1 s"}
    Config = ToyConfig
    claims = [Claim("toy", "mean y is positive", "none", "> 0", "mean y", "mean y > 0", uncertainty="exact",
                    null="the same mean over -y (no positive effect)")]
    calls: list[str] = []
    fail_at = -1  # simulate Ctrl-C at this point index

    def points(self, cfg):
        return [Point(f"p{i}", {"i": i}) for i in range(cfg.n_points)]

    def run_point(self, cfg, point, ctx):
        Toy.calls.append(point.id)
        if point.params["i"] == Toy.fail_at:
            raise KeyboardInterrupt
        import numpy as np

        rng = np.random.default_rng(ctx.seed)
        ctx.log(step=0, loss=float(rng.random()))
        return {"i": point.params["i"], "y": float(rng.random())}

    def verdicts(self, cfg, results, run):
        m = float(results["y"].mean())
        return [self.judge(cfg, "toy", value=m, passed=m > 0, ci=(0.0, 1.0), ci_kind="within-run",
                           null=(-m, -m > 0))]


def test_presets_and_overrides():
    cfg = resolve_config(ToyConfig, "smoke", ["lr=1e-3", "kind=b"], seed=3)
    assert (cfg.n_points, cfg.lr, cfg.kind, cfg.seed, cfg.preset) == (2, 1e-3, "b", 3, "smoke")


@pytest.mark.parametrize(
    "preset,sets,field",
    [("quik", [], "preset"), ("quick", ["n_point=3"], "config key"), ("quick", ["n_points=0"], "n_points"),
     ("quick", ["kind=c"], "kind"), ("quick", ["lr=abc"], "lr"), ("quick", ["oops"], "--set")],
)
def test_config_errors_name_the_field(preset, sets, field):
    with pytest.raises(ConfigError) as ei:
        resolve_config(ToyConfig, preset, sets)
    assert ei.value.field == field
    if isinstance(ei.value, UnknownNameError):
        assert "Did you mean" in str(ei.value)


def test_derive_seed_is_stable_and_distinct():
    assert derive_seed(0, "a") == derive_seed(0, "a")
    assert derive_seed(0, "a") != derive_seed(0, "b") != derive_seed(1, "a")


def test_run_writes_store_and_resumes(tmp_path):
    cfg = resolve_config(ToyConfig, "quick", [])
    Toy.calls.clear()
    Toy.fail_at = 2
    try:
        with pytest.raises(KeyboardInterrupt):
            run_experiment(Toy(), cfg, tmp_path / "r", progress=False)
    finally:
        Toy.fail_at = -1
    run = RunDir(tmp_path / "r")
    assert list(run.results()["point"]) == ["p0", "p1"]  # finished points kept
    with pytest.raises(RunDirError):  # a different config may not resume here
        run_experiment(Toy(), resolve_config(ToyConfig, "quick", ["lr=0.5"]), tmp_path / "r", progress=False)
    Toy.calls.clear()
    run_experiment(Toy(), cfg, tmp_path / "r", progress=False)
    assert Toy.calls == ["p2", "p3"]  # p0, p1 are not recomputed
    assert list(run.results()["point"]) == ["p0", "p1", "p2", "p3"]
    assert "reproduced" in (tmp_path / "r" / "report.md").read_text()
    page = (tmp_path / "r" / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page and "reproduced" in page
    v = json.loads((tmp_path / "r" / "verdict.json").read_text())
    assert isinstance(v, list) and set(v[0]) >= {"claim_id", "claim", "paper_value", "statistic", "value", "ci",
                                                   "rule", "gates", "outcome"}
    assert v[0]["outcome"] == "reproduced"
    env = json.loads((tmp_path / "r" / "environment.json").read_text())
    assert {"lmsci_version", "torch", "numpy", "python", "seed", "device", "torch_threads"} <= set(env)
    m = run.metrics()
    assert set(m["point"]) == {"p0", "p1", "p2", "p3"} and len(m) == 4


def test_same_seed_same_results(tmp_path):
    cfg = resolve_config(ToyConfig, "quick", [])
    a = run_experiment(Toy(), cfg, tmp_path / "a", progress=False).results()
    b = run_experiment(Toy(), cfg, tmp_path / "b", progress=False).results()
    pd.testing.assert_frame_equal(a.drop(columns="seconds"), b.drop(columns="seconds"))


def test_kill_9_loses_only_point_in_progress(tmp_path):
    """A process killed with SIGKILL mid-sweep leaves a valid results file with the finished points."""
    script = textwrap.dedent(f"""
        import time, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_backbone import Toy, ToyConfig
        from lmsci.config import resolve_config
        from lmsci.sweep import run_experiment
        orig = Toy.run_point
        def slow(self, cfg, point, ctx):
            if point.params["i"] == 2:
                print("READY", flush=True); time.sleep(60)
            return orig(self, cfg, point, ctx)
        Toy.run_point = slow
        run_experiment(Toy(), resolve_config(ToyConfig, "quick", []), {str(tmp_path / 'k')!r}, progress=False)
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "READY"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    run = RunDir(tmp_path / "k")
    assert list(run.results()["point"]) == ["p0", "p1"]
    Toy.calls.clear()
    run_experiment(Toy(), resolve_config(ToyConfig, "quick", []), tmp_path / "k", progress=False)
    assert Toy.calls == ["p2", "p3"]


def test_cli_errors_exit_2_before_work(tmp_path):
    r = CliRunner().invoke(app, ["run", "toy-backbon", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "toy-backbone" in r.output
    r = CliRunner().invoke(app, ["run", "toy-backbone", "--set", "n_points=-1", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "n_points" in r.output
    assert not (tmp_path / "x").exists()


def test_cli_run_show_report(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["run", "toy-backbone", "--preset", "smoke", "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    (out / "report.md").unlink()
    r = CliRunner().invoke(app, ["report", str(out)])
    assert r.exit_code == 0 and (out / "report.md").exists()
    r = CliRunner().invoke(app, ["show", str(out)])
    assert r.exit_code == 0 and "inconclusive" in r.output and "below the scale" in r.output  # smoke


def test_threads_set_while_points_run_and_restored(tmp_path):
    import torch

    seen = []
    orig = Toy.run_point

    def spy(self, cfg, point, ctx):
        seen.append(torch.get_num_threads())
        return orig(self, cfg, point, ctx)

    before = torch.get_num_threads()
    Toy.run_point = spy
    try:
        run_experiment(Toy(), resolve_config(ToyConfig, "smoke", ["threads=2"]), tmp_path / "t", progress=False)
    finally:
        Toy.run_point = orig
    assert seen == [2, 2] and torch.get_num_threads() == before


def test_dotted_overrides_do_not_leak_into_presets():
    from lmsci.config import StrictModel

    class Inner(StrictModel):
        d_model: int = 8

    class Outer(ExperimentConfig):
        inner: Inner = Inner()
        PRESETS = {"smoke": {"inner": {"d_model": 16}}, "quick": {}, "paper": {}}

    assert resolve_config(Outer, "smoke", ["inner.d_model=18"]).inner.d_model == 18
    assert Outer.PRESETS["smoke"] == {"inner": {"d_model": 16}}
    assert resolve_config(Outer, "smoke").inner.d_model == 16


def test_markdown_to_html_tables_images_and_escaping():
    from lmsci.report import markdown_to_html

    page = markdown_to_html("# T\n\n| a | b |\n|---|---|\n| 1 | <x> |\n\n![cap](figures/f.png)\n", title="t&t")
    assert "<h1>T</h1>" in page and "<td>1</td>" in page
    assert '<img src="figures/f.png" alt="cap"' in page
    assert "&lt;x&gt;" in page and "<x>" not in page  # raw HTML is escaped
    assert "<title>t&amp;t</title>" in page
