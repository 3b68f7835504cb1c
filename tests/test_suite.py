"""`lmsci suite`: every experiment's smoke preset into one directory, the claims table, resume, errors
as rows, and --compare against a doctored earlier table.

The smoke suite of the first 11 experiments took 141 s of wall time (47 s CPU) on the shared, loaded 2-core
machine, so the CLI test runs a representative subset (a trained GPT, a one-layer associative model,
attention policies, a bioS world); ``test_full_list`` checks that the full suite assembles every
shipped experiment. Set ``LMSCI_FULL_SUITE=1`` to run all of them in the CLI test.
"""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from typer.testing import CliRunner

from lmsci.claims import OUTCOMES
from lmsci.cli import app
from lmsci.errors import ConfigError, UnknownNameError
from lmsci.experiments.registry import catalog, experiment_modules
from lmsci.publish import (CLAIMS_CSV, COLUMNS, ERROR, SEED_DEPENDENT, claims_table, mark_changes, published_outcomes,
                           table_counts, update_published, value_moved)
from lmsci.suite import suite_names
from lmsci.suite_jobs import THREAD_VARS, job_env, job_threads

SUBSET = ["hallucination-stage", "passkey-retrieval", "reversal-curse", "shakespeare-lm"]
FULL = os.environ.get("LMSCI_FULL_SUITE") == "1"
runner = CliRunner()


def _suite(*args: str):
    return runner.invoke(app, ["suite", "--preset", "smoke", "--set", "threads=1", *args])


def test_full_list():
    names = suite_names()
    mods = experiment_modules()
    shipped = {n for n, cls in catalog().items() if cls.__module__ in mods}
    assert set(names) == shipped and len(names) == len(set(names))
    # every module but a family's shared modules contributes an experiment
    shared = {"knowledge.common", "reasoning.igsm_common", "steering.lm_steer_detox"}
    assert {catalog()[n].__module__ for n in names} == {m for m in mods if m.split(".", 2)[2] not in shared}
    assert all(m.count(".") == 3 for m in mods)  # lmsci.experiments.<family>.<module>
    assert {"factual-recall", "knowledge-capacity", "chinchilla-refit", "scaling-sweep", *SUBSET} <= set(names)
    assert suite_names("shakespeare-lm, reversal-curse,shakespeare-lm") == ["shakespeare-lm", "reversal-curse"]
    with pytest.raises(UnknownNameError, match="shakespeare-lm"):
        suite_names("shakespere-lm")
    with pytest.raises(ConfigError):
        suite_names(" , ")


@pytest.fixture(scope="module")
def smoke_suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite") / "smoke"
    only = [] if FULL else ["--only", ",".join(SUBSET)]
    res = _suite(*only, "--out", str(out))
    assert res.exit_code == 0, res.output
    return out, res.output


def test_smoke_suite_writes_the_claims_table(smoke_suite):
    out, output = smoke_suite
    names = suite_names() if FULL else SUBSET
    table = pd.read_csv(out / CLAIMS_CSV)
    assert set(COLUMNS) <= set(table.columns)
    # one row per registered claim of every experiment, in suite order, no error rows
    expected = [(n, c.id) for n in names for c in catalog()[n].claims]
    assert list(zip(table["experiment"], table["claim"])) == expected
    assert set(table["outcome"]) <= set(OUTCOMES)
    # smoke is below every claim's registered scale: nothing can be reproduced there
    assert (table["outcome"] == "inconclusive").all()
    assert (table["wall_s"] > 0).all() and (table["device"] == "cpu").all() and (table["seeds"] >= 1).all()
    for n in names:
        assert (out / n / "verdict.json").exists() and (out / n / "report.html").exists()
    md = (out / "claims.md").read_text()
    assert ("| experiment | claim | paper value | ours | null arm | outcome | seeds | master seeds | wall time (s) "
            "| device | commit | date |") in md
    assert "**Claims: 0 reproduced, 0 not reproduced" in md
    assert f"[{names[0]}]({names[0]}/report.md)" in md
    html = (out / "claims.html").read_text()
    assert "<table>" in html and f'href="{names[0]}/report.html"' in html
    assert "suite directory" in output


def test_rerun_skips_finished_experiments_and_an_error_is_a_row(smoke_suite, tmp_path):
    out, _ = smoke_suite
    before = pd.read_csv(out / CLAIMS_CSV)
    res = _suite("--only", ",".join(SUBSET[:2]), "--out", str(out))
    assert res.exit_code == 0, res.output
    assert res.output.count("finished earlier, skipped") == 2
    after = pd.read_csv(out / CLAIMS_CSV)
    pd.testing.assert_frame_equal(after, before[before["experiment"].isin(SUBSET[:2])].reset_index(drop=True))

    # an experiment whose run directory is unusable (a file in its place) is an error row; the rest go on
    bad = tmp_path / "s"
    bad.mkdir()
    (bad / "reversal-curse").write_text("not a run directory")
    res = _suite("--only", "reversal-curse,shakespeare-lm", "--out", str(bad))
    assert res.exit_code == 0, res.output
    t = pd.read_csv(bad / CLAIMS_CSV)
    err = t[t["outcome"] == ERROR]
    assert list(err["experiment"]) == ["reversal-curse"] and "RunDirError" in err["error"].iloc[0]
    assert (t[t["experiment"] == "shakespeare-lm"]["outcome"] == "inconclusive").all()
    assert "error: reversal-curse" in res.output


def test_compare_marks_changed_claims(smoke_suite, tmp_path):
    out, _ = smoke_suite
    only = ",".join(suite_names() if FULL else SUBSET)
    assert _suite("--only", only, "--out", str(out)).exit_code == 0  # every experiment finished: all skipped
    table = pd.read_csv(out / CLAIMS_CSV)
    earlier = table.copy()
    # doctor the earlier table: one outcome differs, one value sits outside the (earlier) interval
    i_out = 0
    i_val = int(table.index[table["value"].notna()][-1])
    assert i_val != i_out
    earlier.loc[i_out, "outcome"] = "reproduced"
    v = float(table.loc[i_val, "value"])
    earlier.loc[i_val, ["value", "ci_lo", "ci_hi"]] = [v + 10.0, v + 9.0, v + 11.0]
    prev = tmp_path / "earlier"
    prev.mkdir()
    earlier.to_csv(prev / CLAIMS_CSV, index=False)

    res = _suite("--only", only, "--out", str(out), "--compare", str(prev))
    assert res.exit_code == 0, res.output
    now = pd.read_csv(out / CLAIMS_CSV, keep_default_na=False)
    changed = now.index[now["change"] != ""].tolist()
    assert changed == sorted({i_out, i_val})
    assert now.loc[i_out, "change"].startswith("outcome: reproduced -> inconclusive")
    assert "value:" in now.loc[i_val, "change"] and "outside" in now.loc[i_val, "change"]
    assert "2 claim(s) changed" in res.output
    md = (out / "claims.md").read_text()
    assert "**2 claims changed**" in md and "| change |" in md

    # the same table compared with itself: nothing moved
    assert (mark_changes(table, table)["change"] == "").all()


def test_value_moved_rules():
    assert not value_moved(1.0, 1.05, (0.9, 1.1), (0.95, 1.15))
    assert value_moved(1.0, 1.3, (0.9, 1.1), (1.2, 1.4))           # outside both intervals
    assert value_moved(1.0, 1.3, (0.9, 1.1), (None, None))         # outside the earlier interval
    assert not value_moved(2.0, 2.0 + 1e-9)                         # exact statistic, same value
    assert value_moved(2.0, 2.01)                                   # exact statistic, moved
    assert value_moved(None, 1.0) and not value_moved(None, None)


def test_bad_input_exits_2_before_any_work(tmp_path):
    import torch

    out = tmp_path / "never"
    res = _suite("--only", "shakespere-lm", "--out", str(out))
    assert res.exit_code == 2 and "shakespeare-lm" in res.output
    res = runner.invoke(app, ["suite", "--preset", "tiny", "--out", str(out)])
    assert res.exit_code == 2 and "preset" in res.output
    res = _suite("--compare", str(tmp_path / "nowhere"), "--out", str(out))
    assert res.exit_code == 2 and "claims.csv" in res.output
    if not torch.cuda.is_available():
        res = _suite("--device", "cuda", "--out", str(out))
        assert res.exit_code == 2 and "device" in res.output and "cpu" in res.output
    assert not out.exists()


def test_two_master_seeds_mark_seed_dependent_claims_and_update_the_published_table(tmp_path):
    import json

    out = tmp_path / "two"
    res = _suite("--only", "shakespeare-lm", "--seeds", "0,1", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert (out / "shakespeare-lm" / "verdict.json").exists() and (out / "shakespeare-lm.seed1" / "verdict.json").exists()
    t = pd.read_csv(out / CLAIMS_CSV, keep_default_na=False)
    assert (t["master_seeds"].astype(str) == "0,1").all()
    assert all("seed 0:" in v and "seed 1:" in v for v in t["seed_values"])
    assert set(t["outcome"]) == {"inconclusive"}  # smoke: below every claim's scale on both seeds

    # the second seed's verdict differs on one claim: that claim becomes seed-dependent
    vp = out / "shakespeare-lm.seed1" / "verdict.json"
    data = json.loads(vp.read_text())
    first = data["verdicts"][0] if isinstance(data, dict) else data[0]
    first["outcome"] = "not reproduced"
    vp.write_text(json.dumps(data))
    t2 = claims_table(out, ["shakespeare-lm"])
    assert t2.loc[0, "outcome"] == SEED_DEPENDENT and (t2.loc[1:, "outcome"] == "inconclusive").all()
    assert table_counts(t2)["seed-dependent"] == 0  # smoke decides nothing: not counted
    assert table_counts(t2)["not decided at this preset"] == len(t2)
    assert table_counts(t2.assign(decided_here=True))["seed-dependent"] == 1

    # publishing: a first table, then an update of one experiment keeps the other experiment's rows
    pub = tmp_path / "results" / "smoke"
    other = t2.copy()
    other["experiment"] = "hallucination-stage"
    update_published(pub, pd.concat([other, t2], ignore_index=True), "smoke", log=lambda m: None)
    merged = update_published(pub, claims_table(out, ["shakespeare-lm"]).assign(commit="abc"), "smoke",
                              log=lambda m: None)
    assert list(merged["experiment"]).count("hallucination-stage") == len(other)
    assert set(merged[merged["experiment"] == "shakespeare-lm"]["commit"]) == {"abc"}
    assert (merged[merged["experiment"] == "hallucination-stage"]["outcome"] == other["outcome"].values).all()
    assert "**Claims:" in (pub / "claims.md").read_text()
    outcomes = published_outcomes(tmp_path / "results")
    assert outcomes["smoke"][("shakespeare-lm", t2.loc[0, "claim"])].startswith(SEED_DEPENDENT)
    with pytest.raises(Exception, match="preset"):
        update_published(pub, t2, "quick", log=lambda m: None)


def test_pilot_seeds_and_conflicting_seed_options_are_refused(tmp_path):
    out = tmp_path / "never"
    res = _suite("--only", "shakespeare-lm", "--seeds", "0,1000000", "--out", str(out))
    assert res.exit_code == 2 and "--seeds" in res.output
    res = runner.invoke(app, ["suite", "--preset", "smoke", "--only", "shakespeare-lm", "--seeds", "0,1",
                              "--set", "seed=3", "--out", str(out)])
    assert res.exit_code == 2 and "seed" in res.output
    assert not out.exists()


def test_claims_status_shows_the_published_outcome():
    res = runner.invoke(app, ["claims", "shakespeare-lm", "--status"])
    assert res.exit_code == 0, res.output
    assert "beats-bigram" in res.output and ("not published" in res.output or "reproduced" in res.output
                                             or "inconclusive" in res.output)


def test_jobs_run_experiments_as_concurrent_processes_with_the_same_results(smoke_suite, tmp_path):
    out0, _ = smoke_suite
    pair = "hallucination-stage,passkey-retrieval"
    out = tmp_path / "jobs"
    res = _suite("--only", pair, "--jobs", "2", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert res.output.count("started (log:") == 2 and (out / "passkey-retrieval.log").exists()
    t = pd.read_csv(out / CLAIMS_CSV)
    ref = pd.read_csv(out0 / CLAIMS_CSV)
    ref = ref[ref["experiment"].isin(pair.split(","))].reset_index(drop=True)
    assert list(t["claim"]) == list(ref["claim"]) and (t["outcome"] != ERROR).all()
    pd.testing.assert_series_equal(t["value"], ref["value"], check_names=False)  # same computation as in-process
    # each process got its share of the CPUs (torch's pool as it starts, before the experiment's own ``threads``)
    if "OMP_NUM_THREADS" not in os.environ:
        for name in pair.split(","):
            env = json.loads((out / name / "environment.json").read_text())
            assert env["torch_threads"] == job_threads(2), (name, env["torch_threads"])
    # rerun: every run finished, nothing is started again
    res = _suite("--only", pair, "--jobs", "2", "--out", str(out))
    assert res.exit_code == 0 and res.output.count("finished earlier, skipped") == 2


def test_runs_that_share_trainings_run_apart_and_the_second_loads_the_firsts(tmp_path):
    # cfg-probing trains cfg-learning's models (training_scope): with two slots free, the suite still starts it only
    # after cfg-learning has finished, and it loads the two GPT_rot trainings from the suite's cache
    from lmsci.runs import RunDir

    out = tmp_path / "cfg"
    res = _suite("--only", "cfg-learning,cfg-probing", "--jobs", "2", "--out", str(out))
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    done = next(k for k, x in enumerate(lines) if "cfg-learning: finished" in x)
    started = next(k for k, x in enumerate(lines) if "cfg-probing (smoke) started" in x)
    assert done < started, res.output
    assert len(list((out / "training-cache").iterdir())) == 3
    m = RunDir(out / "cfg-probing").metrics()
    assert (m["cache"] == "hit").sum() == 2 and "stored" not in set(m["cache"])


def test_next_startable_skips_a_run_whose_training_scope_and_seed_are_running():
    from types import SimpleNamespace

    from lmsci.suite_jobs import next_startable, training_scope

    learn, probe, other = SimpleNamespace(), SimpleNamespace(training_scope="cfg-learning"), SimpleNamespace()
    cfg0, cfg1 = SimpleNamespace(seed=0), SimpleNamespace(seed=1)
    assert training_scope("cfg-probing", probe, cfg0) == ("cfg-learning", 0)
    assert training_scope("grokking", other, cfg1) == ("grokking", 1)
    q = [(1, "cfg-probing", "cfg-probing", probe, cfg0), (2, "cfg-probing", "cfg-probing.seed1", probe, cfg1),
         (3, "grokking", "grokking", other, cfg0)]
    running = [training_scope("cfg-learning", learn, cfg0)]
    assert next_startable(q, running) == 1  # seed 1 trains other models
    assert next_startable(q[:1] + q[2:], running) == 1 and next_startable(q[:1], running) is None
    assert next_startable(q, []) == 0


def test_job_env_shares_the_cpus_among_jobs_and_keeps_what_the_user_set():
    assert [job_threads(j, cpus=2) for j in (1, 2, 3)] == [2, 1, 1]
    assert job_threads(2, cpus=16) == 8 and job_threads(1) >= 1
    env = job_env(2, base={"PATH": "/bin", "MKL_NUM_THREADS": "3"}, cpus=8)
    assert env == {"PATH": "/bin", "MKL_NUM_THREADS": "3", "OMP_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "4"}
    assert set(THREAD_VARS) <= set(job_env(4, base={}, cpus=2)) and job_env(4, base={}, cpus=2)["OMP_NUM_THREADS"] == "1"


def test_budget_stops_the_suite_and_leaves_the_rest_resumable(tmp_path):
    out = tmp_path / "budget"
    res = _suite("--only", "hallucination-stage,passkey-retrieval", "--jobs", "2", "--budget", "0.000001",
                 "--out", str(out))
    assert res.exit_code == 0, res.output
    t = pd.read_csv(out / CLAIMS_CSV)
    assert (t["outcome"] == ERROR).all() and t["error"].str.contains("budget").all()
    res = _suite("--only", "hallucination-stage,passkey-retrieval", "--jobs", "0", "--out", str(out))
    assert res.exit_code == 2 and "--jobs" in res.output


def test_a_quick_suite_leaves_out_the_experiments_that_decide_nothing_at_quick(tmp_path, monkeypatch):
    """Issue 46 item 3: the whole-suite run at quick does not spend minutes on experiments whose claims are all
    registered for gpu/paper; naming one in --only (or --include-undecided) still runs it."""
    import lmsci.suite as suite
    from lmsci.experiments.registry import shipped

    und = suite.undecided(list(shipped()), "quick")
    for n, cls in shipped().items():
        assert (n in und) == (not any("quick" in c.presets for c in cls.claims))
    assert "ioi-circuit" in und and "shakespeare-lm" not in und
    # a "whole suite" of two: one decided at quick, one not; the budget stops the run before any work
    monkeypatch.setattr(suite, "suite_names", lambda only=None: ["shakespeare-lm", "ioi-circuit"] if only is None
                        else [only] if isinstance(only, str) else list(only))
    res = suite.run_suite("quick", None, tmp_path / "q", overrides=["threads=1"], budget=1e-9, log=lambda m: None)
    assert res.left_out == ["ioi-circuit"]
    assert set(res.table["experiment"]) == {"shakespeare-lm"}
    res = suite.run_suite("quick", None, tmp_path / "q2", overrides=["threads=1"], budget=1e-9, log=lambda m: None,
                          include_undecided=True)
    assert res.left_out == [] and set(res.table["experiment"]) == {"shakespeare-lm", "ioi-circuit"}


def test_merge_assembles_suites_run_at_other_seeds_into_one_two_seed_table(tmp_path):
    """Stop 60 published seeds 11 and 12 run as two suites (and reruns): --merge links their finished runs into one
    suite directory; nothing is recomputed and the table has both seeds, the later source winning."""
    a, b, again = tmp_path / "s3", tmp_path / "s4", tmp_path / "s3-again"
    for d, sd in ((a, "3"), (b, "4"), (again, "3")):
        res = _suite("--only", "hallucination-stage", "--seeds", sd, "--out", str(d))
        assert res.exit_code == 0, res.output
    m, pub = tmp_path / "merged", tmp_path / "results" / "smoke"
    res = _suite("--merge", f"{a},{b},{again}", "--out", str(m), "--update", str(pub))
    assert res.exit_code == 0, res.output
    assert "finished earlier, skipped" in res.output and "started" not in res.output
    assert os.readlink(m / "hallucination-stage") == str((again / "hallucination-stage").resolve())
    assert os.readlink(m / "hallucination-stage.seed4") == str((b / "hallucination-stage").resolve())
    t = pd.read_csv(pub / CLAIMS_CSV, keep_default_na=False)
    assert set(t["experiment"]) == {"hallucination-stage"} and (t["master_seeds"].astype(str) == "3,4").all()
    # bad input: a folder that is no suite, an experiment not run, a target holding runs of its own
    assert _suite("--merge", str(tmp_path / "none"), "--out", str(tmp_path / "m2")).exit_code == 2
    res = _suite("--merge", f"{a},{b}", "--only", "passkey-retrieval", "--out", str(tmp_path / "m3"))
    assert res.exit_code == 2 and "passkey-retrieval at seed 3" in res.output
    assert _suite("--merge", f"{a},{b}", "--out", str(a)).exit_code == 2
    assert _suite("--merge", f"{a},{b}").exit_code == 2  # no --out
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "suite.json").write_text(json.dumps({"preset": "smoke", "overrides": {"threads": 1}, "seeds": [5],
                                                  "experiments": {}}))
    res = _suite("--merge", str(empty), "--out", str(tmp_path / "m4"))
    assert res.exit_code == 2 and "no experiment is finished" in res.output
