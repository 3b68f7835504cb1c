"""The CLI's catalog and device options (issue 31, item 4): `lmsci list` fits 120 columns with one line per
experiment and the published quick outcome; `--long` keeps the detail; `lmsci run --device` sets the config's
device field with the same validation as `--set device=...`; `lmsci claims --status` shows published outcomes."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from lmsci.cli import app
from lmsci.cli.catalog import LIST_WIDTH, outcome_summary, published_seeds, short_time
from lmsci.experiments.registry import catalog
from lmsci.publish import table_counts

runner = CliRunner()


def _fake_results(tmp_path, rows):
    """A published quick table with ``rows`` ((experiment, claim, kind, outcome, decided_here), ...) only."""
    (tmp_path / "quick").mkdir(parents=True)
    t = pd.DataFrame([{"experiment": e, "claim": c, "kind": k, "outcome": o, "value": 1.0, "ablation": False,
                       "post_hoc": False, "decided_here": d, "date": "2026-11-27"} for e, c, k, o, d in rows])
    t.to_csv(tmp_path / "quick" / "claims.csv", index=False)
    return {"LMSCI_RESULTS": str(tmp_path)}


def test_list_fits_120_columns_one_line_per_experiment():
    res = runner.invoke(app, ["list"], terminal_width=400)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(s) for s in lines) <= LIST_WIDTH
    header = lines[1].split()
    assert header[:4] == ["name", "family", "claims", "checks"] and "gpu" in header
    names = [s.split()[0] for s in lines[2:2 + len(catalog())]]
    assert names == list(catalog())
    for s in lines[2:2 + len(catalog())]:
        name, family = s.split()[:2]
        mod = catalog()[name].__module__
        if not mod.startswith("lmsci.experiments."):  # an experiment another test registered: no family
            assert family == "-"
            continue
        assert mod == f"lmsci.experiments.{family}.{mod.split('.')[-1]}"


def test_list_outcomes_add_up_to_the_published_table(tmp_path):
    env = _fake_results(tmp_path, [("shakespeare-lm", "beats-bigram", "claim", "reproduced", True),
                                   ("shakespeare-lm", "beats-unigram", "claim", "seed-dependent", True),
                                   ("double-descent", "x", "check", "passed", True),
                                   ("double-descent", "y", "claim", "not reproduced", True),
                                   ("double-descent", "z", "claim", "inconclusive", False)])
    res = runner.invoke(app, ["list"], env=env, terminal_width=400)
    assert res.exit_code == 0, res.output
    line = {s.split()[0]: s for s in res.output.splitlines()}
    assert "1R 0N 1I" in line["shakespeare-lm"]
    assert "0R 1N 0I 1P 1u" in line["double-descent"]
    assert line["grokking"].split()[4] == "-"  # no row in this table
    assert " left out " in line["watermark"]  # no row, and decides nothing at quick: the quick suite leaves it out


def test_list_outcomes_match_the_real_published_counts():
    from lmsci.publish import CLAIMS_CSV, load_claims_table, results_root

    f = results_root() / "quick" / CLAIMS_CSV
    if not f.is_file():
        pytest.skip("no published quick table in this checkout")
    t = load_claims_table(f)
    res = runner.invoke(app, ["list"], terminal_width=400)
    total = {"R": 0, "N": 0, "I": 0}
    for s in res.output.splitlines()[2:2 + len(catalog())]:
        for cell in s.split()[4:7]:
            if cell[:-1].isdigit() and cell[-1] in total:
                total[cell[-1]] += int(cell[:-1])
    c = table_counts(t)
    assert (total["R"], total["N"], total["I"]) == (c["reproduced"], c["not reproduced"], c["inconclusive"])


def test_the_legend_names_the_published_tables_master_seeds(tmp_path):
    one = pd.DataFrame({"master_seeds": ["11,12", "11,12"]})
    assert published_seeds(one) == "master seeds 11 and 12"
    assert published_seeds(pd.DataFrame({"master_seeds": ["0,1", "11,12", "3,4"]})) == \
        "master seeds per row: 0,1 or 3,4 or 11,12"
    assert published_seeds(pd.DataFrame({"master_seeds": ["7"]})) == "master seed 7"
    assert published_seeds(pd.DataFrame({"master_seeds": [3.0, float("nan")]})) == "master seed 3"  # + an error row
    assert published_seeds(None) == "no rows" and published_seeds(pd.DataFrame()) == "no rows"
    env = _fake_results(tmp_path, [("shakespeare-lm", "beats-bigram", "claim", "reproduced", True)])
    t = pd.read_csv(tmp_path / "quick" / "claims.csv").assign(master_seeds="5,6")
    t.to_csv(tmp_path / "quick" / "claims.csv", index=False)
    res = runner.invoke(app, ["list"], env=env, terminal_width=400)
    assert res.exit_code == 0, res.output
    assert "(results/quick/claims.csv, master seeds 5 and 6):" in res.output


def test_outcome_summary_counts():
    assert outcome_summary(None) == "-" and outcome_summary(pd.DataFrame()) == "-"
    t = pd.DataFrame({"experiment": "e", "claim": list("abcde"), "kind": ["claim"] * 4 + ["check"],
                      "outcome": ["reproduced", "reproduced", "not reproduced", "inconclusive", "failed"],
                      "ablation": [False, True, False, False, False], "post_hoc": False, "decided_here": True})
    assert outcome_summary(t) == "1R 1N 1I 1F"  # the ablation is not counted


@pytest.mark.parametrize("text,short", [
    ("~260 s (estimated from the 111 s measured for 3 seeds)", "~4m"),
    ("711 s measured (3 seeds of 3000 steps), before the null arm (~+10 s, estimated)", "12m"),
    ("29.5 min on one H100, estimated (... measured on an H200)", "~30m"),
    ("~1 h on one H100 (3 seeds x ~20 min)", "~60m"),
    ("~30 s on 2 cores", "~30s"),
    ("~13.5 CPU-min estimated", "~14m"),
    ("3 seeds x 2 shapes, 5 points", "?"),
    (None, "-"),
])
def test_short_time(text, short):
    assert short_time(text) == short


@pytest.mark.parametrize("name", sorted(catalog()))
def test_every_quick_and_gpu_estimate_has_a_short_time(name):
    """Short (the columns stay narrow), and a duration wherever the estimate names one ("?" only for an estimate
    without any, such as "to be measured")."""
    est = catalog()[name].time_estimate
    for preset in ("quick", "gpu"):
        text = est.get(preset)
        short = short_time(text)
        assert len(short) <= 6
        has_duration = bool(re.search(r"\d\s*(?:CPU-)?(?:s|sec|seconds?|min|minutes?|h|hours?)\b", text or ""))
        assert (short not in ("?", "-")) == has_duration, (preset, text)


def test_list_long_keeps_the_detail():
    res = runner.invoke(app, ["list", "--long"], terminal_width=400)
    assert res.exit_code == 0, res.output
    assert "time (smoke / quick / gpu / paper)" in res.output and "source" in res.output
    assert "arXiv 2412.06538" in res.output  # factual-recall's source, not in the short list
    assert "arXiv" not in runner.invoke(app, ["list"], terminal_width=400).output


def test_run_device_sets_the_config_field(tmp_path):
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "benign-overfitting", "--preset", "smoke", "--device", "cpu", "--set",
                              "threads=1", "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert yaml.safe_load((out / "config.yaml").read_text())["device"] == "cpu"


@pytest.mark.parametrize("args,needle", [
    (["--device", "gpu"], "device"),                                 # not cpu | cuda | cuda:N | auto
    (["--device", "cpu", "--set", "device=cpu"], "--device"),        # both spellings at once
    (["--device", "cuda:x"], "device"),
])
def test_run_device_refuses_bad_input_before_any_work(tmp_path, args, needle):
    out = tmp_path / "never"
    res = runner.invoke(app, ["run", "benign-overfitting", "--preset", "smoke", *args, "--out", str(out)])
    assert res.exit_code == 2 and needle in res.output and not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is visible: --device cuda is allowed here")
def test_run_device_cuda_without_cuda_is_refused_like_set_device(tmp_path):
    out = tmp_path / "never"
    a = runner.invoke(app, ["run", "benign-overfitting", "--preset", "smoke", "--device", "cuda", "--out", str(out)])
    b = runner.invoke(app, ["run", "benign-overfitting", "--preset", "smoke", "--set", "device=cuda", "--out",
                            str(out)])
    assert a.exit_code == b.exit_code == 2 and a.output == b.output and not out.exists()


def test_run_config_file_refuses_device(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("preset: smoke\n")
    res = runner.invoke(app, ["run", "benign-overfitting", "--preset", "smoke", "--config", str(cfg), "--device",
                              "cpu", "--out", str(tmp_path / "never")])
    assert res.exit_code == 2 and "--config" in res.output


def test_claims_status_shows_each_claims_published_outcome(tmp_path):
    env = _fake_results(tmp_path, [("shakespeare-lm", "beats-bigram", "claim", "not reproduced", True)])
    res = runner.invoke(app, ["claims", "shakespeare-lm", "--status"], env=env, terminal_width=400)
    assert res.exit_code == 0, res.output
    line = {s.split("│")[2].strip(): s for s in res.output.splitlines() if s.count("│") >= 5}
    assert "not reproduced, 2026-11-27" in line["beats-bigram"]
    assert "reproduced" not in line["beats-unigram"] and "not published" in line["beats-unigram"]


def test_quick_time_is_the_published_wall_per_master_seed_when_there_is_one():
    """Issue 46 item 3: `lmsci list` shows the measured quick time (the published rows' wall time, summed over their
    master seeds, per seed) and falls back to the experiment's estimate only without one."""
    import pandas as pd

    from lmsci.cli.catalog import measured_quick

    rows = pd.DataFrame({"wall_s": [1200.0, 1200.0], "master_seeds": ["0,1", "0,1"]})
    assert measured_quick(rows) == "10m"
    assert measured_quick(pd.DataFrame({"wall_s": [90.0], "master_seeds": ["2"]})) == "2m"
    assert measured_quick(pd.DataFrame({"wall_s": [float("nan")], "master_seeds": ["0"]})) is None
    assert measured_quick(None) is None


def test_quick_time_measured_with_processes_comes_first_and_is_marked():
    import pandas as pd

    from lmsci.cli.catalog import quick_time

    rows = pd.DataFrame({"wall_s": [2400.0], "master_seeds": ["0,1"]})
    assert quick_time(rows, "10.2 min measured with --backend processes on 2 cores (S57); 20 min one by one") == "10m p"
    assert quick_time(rows, "~14 min estimated; 10 min measured with --backend processes") == "20m"  # not first
    assert quick_time(rows, "~9 min estimated with --backend processes") == "20m"  # an estimate is not shown
    assert quick_time(None, "~9 min estimated") == "~9m"
    assert quick_time(rows, "10.4 min measured with --backend ray on the 2 cores (S56)") == "10m p"
