"""The executor's contract with experiments: seeds, per-row provenance, diverged points, resume segments,
and the faults a new user meets (an --out that is a file, a corrupted results table, CUDA that is not
there) ending in named errors (exit 2), never a traceback."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest
import torch
from typer.testing import CliRunner

from lmsci import runs
from lmsci.claims import INCONCLUSIVE, REPRODUCED, Claim
from lmsci.stats import across_seeds
from lmsci.cli import app
from lmsci.config import ExperimentConfig, resolve_config
from lmsci.errors import ConfigError, DivergedError, RunDirError
from lmsci.experiments.base import Experiment, Point
from lmsci.runs import RunDir
from lmsci.sweep import run_experiment


class ToyConfig(ExperimentConfig):
    diverge: bool = False
    PRESETS: ClassVar[dict] = {"smoke": {}, "quick": {"n_seeds": 3}, "paper": {}}


class Toy(Experiment):
    """Each point 'trains' a number from its seed; the claim: the mean over seeds is positive."""

    name = "toy"
    claim = "toy"
    source = "none"
    Config = ToyConfig
    claims = [Claim("positive", "the value is positive", "test", "1", "mean value", "CI across seeds above 0",
                    null="the same interval around the values minus their mean (no positive effect)")]

    def points(self, cfg):
        return [Point("a", {"x": 1}), Point("b", {"x": 2})]

    def run_point(self, cfg, point, ctx):
        if cfg.diverge and point.id.startswith("b"):
            raise DivergedError(7, float("nan"))
        g = torch.Generator().manual_seed(ctx.seed)
        return {"x": point.params["x"], "value": 1.0 + 0.1 * float(torch.rand(1, generator=g)), "seed": ctx.seed}

    def verdicts(self, cfg, results, run):
        per_seed = results.groupby("seed_index")["value"].mean()
        s = across_seeds(per_seed)
        z = across_seeds(per_seed - per_seed.mean())
        return [self.judge(cfg, "positive", value=s.mean, ci=s.ci, ci_kind=s.kind, n_seeds=s.n,
                           passed=s.ci is not None and s.lo > 0, null=(z.mean, z.ci is not None and z.lo > 0))]


def test_seeds_expand_points_with_their_own_seeds_and_rows_carry_provenance(tmp_path):
    cfg = resolve_config(ToyConfig, "quick")
    run = run_experiment(Toy(), cfg, tmp_path / "r", progress=False, log=lambda m: None)
    df = run.results()
    assert sorted(df["point"]) == ["a", "a__s1", "a__s2", "b", "b__s1", "b__s2"]
    assert sorted(df["seed_index"].tolist()) == [0, 0, 1, 1, 2, 2]
    assert df["seed"].nunique() == 6
    assert set(df["status"]) == {"ok"} and set(df["device"]) == {"cpu"} and df["commit"].notna().all()
    (v,) = run.verdicts()
    assert v.outcome == REPRODUCED and v.n_seeds == 3 and "across 3 seeds" in v.ci_kind
    text = (run.path / "report.md").read_text()
    assert "positive" in text and "reproduced" in text


def test_one_seed_cannot_reproduce_a_seed_claim(tmp_path):
    run = run_experiment(Toy(), resolve_config(ToyConfig, "smoke"), tmp_path / "r", progress=False, log=lambda m: None)
    (v,) = run.verdicts()
    assert v.outcome == INCONCLUSIVE  # smoke is below the claim's scale, and 1 seed


def test_diverged_point_is_recorded_and_makes_verdicts_inconclusive(tmp_path):
    cfg = resolve_config(ToyConfig, "quick", ["diverge=true"])
    msgs = []
    run = run_experiment(Toy(), cfg, tmp_path / "r", progress=False, log=msgs.append)
    df = run.results()
    assert (df["status"] == "diverged").sum() == 3 and (df.loc[df.status == "diverged", "diverged_step"] == 7).all()
    (v,) = run.verdicts()
    assert v.outcome == INCONCLUSIVE and any(g.id == "no-divergence" and g.passed is False for g in v.gates)
    assert any("non-finite" in m for m in msgs)
    # a rerun resumes: diverged points are finished, not retried
    run_experiment(Toy(), cfg, tmp_path / "r", progress=False, log=msgs.append)
    assert len(run.results()) == 6


def test_resume_on_another_commit_adds_an_environment_segment(tmp_path, monkeypatch):
    cfg = resolve_config(ToyConfig, "quick")
    out = tmp_path / "r"
    run_experiment(Toy(), cfg, out, progress=False, log=lambda m: None)
    df = RunDir(out).results()
    df[~df["point"].str.startswith("b")].to_csv(out / "results.csv", index=False)  # as if b's points were lost
    monkeypatch.setattr(runs, "git_commit", lambda: "f" * 40)
    run = run_experiment(Toy(), cfg, out, progress=False, log=lambda m: None)
    segs = run.environment_segments()
    assert len(segs) == 2 and segs[1]["git_commit"] == "f" * 40
    df = run.results()
    assert set(df.loc[df["point"].str.startswith("b"), "commit"]) == {"f" * 12}
    assert "f" * 12 not in set(df.loc[df["point"].str.startswith("a"), "commit"])


def test_out_that_is_a_file_and_corrupted_results_are_named_errors(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("hello")
    cfg = resolve_config(ToyConfig, "smoke")
    with pytest.raises(RunDirError, match="existing file"):
        run_experiment(Toy(), cfg, f, progress=False)
    out = tmp_path / "r"
    run_experiment(Toy(), cfg, out, progress=False, log=lambda m: None)
    (out / "results.csv").write_bytes(b'point,value\n"a,1\nb,\x00\x00"\n\n1,2,3,4,5\n')
    with pytest.raises(RunDirError, match="corrupted|no 'point'"):
        RunDir(out).results()
    with pytest.raises(RunDirError):
        run_experiment(Toy(), cfg, out, progress=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_a_config_error():
    with pytest.raises(ConfigError, match="no CUDA"):
        runs.resolve_device("cuda")
    with pytest.raises(ConfigError):
        run_experiment(Toy(), resolve_config(ToyConfig, "smoke", ["device=cuda"]), None, progress=False)


def test_cli_faults_exit_2_with_the_path_or_field(tmp_path):
    r = CliRunner()
    f = tmp_path / "file.txt"
    f.write_text("x")
    res = r.invoke(app, ["run", "shakespeare-lm", "--preset", "smoke", "--out", str(f), "--no-progress"])
    assert res.exit_code == 2 and "existing file" in res.output
    if not torch.cuda.is_available():
        res = r.invoke(app, ["run", "shakespeare-lm", "--preset", "smoke", "--set", "device=cuda", "--no-progress"])
        assert res.exit_code == 2 and "device" in res.output
    d = tmp_path / "run"
    d.mkdir()
    (d / "run.json").write_text(json.dumps({"experiment": "shakespeare-lm"}))
    from lmsci.config import config_to_yaml
    from lmsci.experiments.registry import get

    (d / "config.yaml").write_text(config_to_yaml(resolve_config(get("shakespeare-lm").Config, "smoke")))
    (d / "results.csv").write_text("nonsense\n")
    res = r.invoke(app, ["show", str(d)])
    assert res.exit_code == 2 and "results.csv" in res.output


def test_deterministic_experiment_refuses_seeds():
    class Det(Toy):
        seeded = False

    with pytest.raises(ConfigError, match="n_seeds"):
        Det().seeded_points(resolve_config(ToyConfig, "quick"))


def test_claims_command_lists_registered_claims():
    res = CliRunner().invoke(app, ["claims", "factual-recall", "--json"])
    assert res.exit_code == 0
    data = json.loads(res.output)
    assert list(data) == ["factual-recall"] and all("rule" in c and "digest" in c for c in data["factual-recall"])
    res = CliRunner().invoke(app, ["claims", "no-such-exp"])
    assert res.exit_code == 2 and "experiment" in res.output
