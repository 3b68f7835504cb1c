"""`lmsci profile` (lmsci.profile_table, lmsci.profile_report): a tiny run directory written by hand, every number computed by hand.

The toy run (master seed 0, wall 100 s from its suite.json) has four points:
  a  (results n_params = 1000): windows 100 tok / 50 tok/s = 2 s and 100 tok / 100 tok/s = 1 s, plus an eval record;
  b  (N from the config: 2 * (4*8*2*4 + 2*8*32) + 16*8 = 1664): phase=pre 300 tok at 100/s = 3 s, then a restarted
     tokens_seen (50 tok at 25/s = 2 s); phase=ft 150 tok at 60/s = 2.5 s;
  s0, s1 (config N 1664): one stacked step: 40 tok at 20/s and 60 tok at 30/s, both 2 s -> one 2 s window of 100 tok.
Tokens 800, training seconds 2+1+3+2+2.5+2 = 12.5, window rates 50, 100, 100, 25, 60, 50 -> median 55,
FLOPs 6*1000*200 + 6*1664*600 = 7,190,400 -> 575,232 FLOP/s.
(Windows of different models at one step with the same seconds would read as one stacked step: none here but s0/s1.)
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lmsci.errors import RunDirError
from lmsci.profile_report import write_profile
from lmsci.profile_table import derive_params, measure_peak_flops, profile_rows, select_runs

PEAK = {"peak_flops": 1e6, "median_flops": 1e6, "wall_flops": 1e6, "n": 8, "repeats": 3, "threads": 1,
        "seconds": 2.0, "cpu": "test cpu"}


def _write_run(folder, name, seed, wall, started="2026-12-06T10:00:00", experiment="toy", metrics=True,
               model=None, finished=True):
    run = folder / name
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"experiment": experiment}))
    (run / "environment.json").write_text(json.dumps({"started": started}))
    model = model or "model:\n  n_layers: 2\n  d_model: 8\n  n_heads: 2\n  d_head: null\n  d_mlp: null\n  mlp: gelu\n"
    (run / "config.yaml").write_text(f"preset: quick\nseed: {seed}\nvocab_size: 16\n{model}")
    pd.DataFrame({"point": ["a", "b", "s0", "s1"], "status": "ok", "n_params": [1000, None, None, None],
                  "seconds": [10.0, 10.0, 5.0, 5.0]}).to_csv(run / "results.csv", index=False)
    recs = [
        {"point": "a", "step": 10, "loss": 1.0, "tokens_seen": 100, "tokens_per_s": 50.0},
        {"point": "a", "step": 10, "acc": 0.5},
        {"point": "a", "step": 20, "loss": 0.9, "tokens_seen": 200, "tokens_per_s": 100.0},
        {"point": "b", "phase": "pre", "step": 10, "loss": 1.0, "tokens_seen": 300, "tokens_per_s": 100.0},
        {"point": "b", "phase": "pre", "step": 20, "loss": 1.0, "tokens_seen": 50, "tokens_per_s": 25.0},
        {"point": "b", "phase": "ft", "step": 10, "loss": 1.0, "tokens_seen": 150, "tokens_per_s": 60.0},
        {"point": "s0", "step": 5, "loss": 1.0, "tokens_seen": 40, "tokens_per_s": 20.0},
        {"point": "s1", "step": 5, "loss": 1.0, "tokens_seen": 60, "tokens_per_s": 30.0},
    ]
    if metrics:
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    if finished:
        (run / "report.md").write_text("# report\n")
    suite = folder / "suite.json"
    data = json.loads(suite.read_text()) if suite.is_file() else {"experiments": {}}
    data["experiments"][name] = {"wall_s": wall, "error": None}
    suite.write_text(json.dumps(data))
    return run


def test_derive_params_standard_block_and_embedding():
    assert derive_params({"n_layers": 3, "d_model": 16, "n_heads": 4}) == (12 * 3 * 16 ** 2, False)
    n, emb = derive_params({"n_layers": 2, "d_model": 8, "n_heads": 2, "mlp": "gelu", "vocab_size": 16})
    assert (n, emb) == (2 * (4 * 8 * 2 * 4 + 2 * 8 * 32) + 16 * 8, True) and n == 1664
    assert derive_params({"n_layers": 2, "d_model": 8, "n_heads": 2, "mlp": "none"})[0] == 2 * 4 * 64
    assert derive_params({"n_layers": 2, "d_model": 8, "mlp": "swiglu"}, {"d_mlp": 10})[0] == 2 * (4 * 64 + 3 * 80)
    assert derive_params({"n_layers": 2, "d_model": 8, "mlp": "moe"}) == (None, False)


def test_one_run_every_number_by_hand(tmp_path):
    _write_run(tmp_path / "toy", "toy", 0, 100.0)
    runs, notes = select_runs([tmp_path / "toy" / "toy"])
    assert notes == [] and len(runs) == 1
    r = runs[0]
    assert (r.tokens, r.train_s, r.wall_source) == (800, pytest.approx(12.5), "suite.json")
    assert r.params == {"a": 1000.0, "b": 1664.0, "s0": 1664.0, "s1": 1664.0}
    [row] = profile_rows(runs, PEAK["peak_flops"])
    assert row["points"] == "4" and row["wall_s"] == 100.0 and row["max_stack"] == 2
    assert row["tokens_trained"] == 800 and row["train_share"] == pytest.approx(0.125)
    assert row["median_tokens_per_s"] == pytest.approx(55.0)
    assert (row["params_min"], row["params_max"]) == (1000.0, 1664.0)
    assert row["achieved_flops"] == pytest.approx(7_190_400 / 12.5)
    assert row["mfu"] == pytest.approx(0.575232)


def test_two_seeds_superseded_unfinished_and_pretrained(tmp_path):
    a = _write_run(tmp_path / "new", "toy", 0, 100.0, started="2026-12-06T12:00:00")
    b = _write_run(tmp_path / "new", "toy.seed1", 1, 300.0, started="2026-12-06T12:00:00")
    old = _write_run(tmp_path / "old", "toy", 0, 999.0, started="2026-12-05T12:00:00")
    unfinished = _write_run(tmp_path / "run", "toy", 0, 1.0, finished=False)
    # a suite still running this seed records wall_s 0.0 and no error field yet
    (tmp_path / "run" / "suite.json").write_text(json.dumps({"experiments": {"toy": {"wall_s": 0.0}}}))
    pre = _write_run(tmp_path / "lm", "lm", 0, 50.0, experiment="lm", metrics=False, model="model: smollm2-135m\n")
    runs, notes = select_runs([old, a, b, unfinished, pre])
    assert [(r.experiment, r.seed, r.path) for r in runs] == [("lm", 0, pre), ("toy", 0, a), ("toy", 1, b)]
    assert any(str(old) in n and "superseded" in n for n in notes)
    assert any(str(unfinished) in n and "not finished" in n for n in notes)
    lm, toy = profile_rows(runs, 1e6)
    assert toy["wall_s"] == 200.0 and toy["wall_s_by_seed"] == "100.0/300.0" and toy["master_seeds"] == "0,1"
    assert toy["tokens_trained"] == 800 and toy["train_share"] == pytest.approx(25 / 400)
    assert toy["mfu"] == pytest.approx(0.575232)
    assert lm.get("mfu") is None and "pretrained model (smollm2-135m)" in lm["note"]


def test_write_profile_files_and_bad_input(tmp_path):
    run = _write_run(tmp_path / "toy", "toy", 0, 100.0)
    md, csv, rows, peak = write_profile([run], tmp_path / "out" / "profile", peak=PEAK, expected=["toy", "gone"])
    text = md.read_text()
    assert "1.0 GFLOP/s" not in text and "0.0 GFLOP/s" in text  # 1e6 FLOP/s is 0.0 GFLOP/s
    assert "| toy | 0 | 4 | 100.0 (100.0) | 800 | 12.5 | 12% | 55 | 2 | 1,000–1,664 |" in text
    assert "Missing (no kept run directory)" in text and "gone" in text and str(run) in text
    df = pd.read_csv(csv)
    assert df.loc[0, "mfu"] == pytest.approx(0.575232) and df.loc[0, "peak_flops"] == 1e6
    with pytest.raises(RunDirError):
        write_profile([tmp_path / "nope"], tmp_path / "x", peak=PEAK)


def test_measure_peak_flops_is_positive_and_checks_input():
    p = measure_peak_flops(n=64, seconds=0.02)
    assert p["peak_flops"] > 0 and p["repeats"] >= 3 and p["peak_flops"] >= p["median_flops"]
    with pytest.raises(ValueError):
        measure_peak_flops(n=0)


def test_cli_profile(tmp_path):
    from typer.testing import CliRunner

    from lmsci.cli import app

    run = _write_run(tmp_path / "toy", "toy", 0, 100.0)
    table = tmp_path / "table"
    table.mkdir()
    pd.DataFrame({"experiment": ["toy", "other"], "claim": ["c", "d"]}).to_csv(table / "claims.csv", index=False)
    res = CliRunner().invoke(app, ["profile", str(run), "--out", str(tmp_path / "p"), "--peak-seconds", "0.05",
                                   "--table", str(table), "--note", "made by the test"])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "p.md").read_text()
    assert "made by the test" in text and "other" in text.split("Missing")[1]
    bad = CliRunner().invoke(app, ["profile", str(tmp_path / "nope"), "--out", str(tmp_path / "q"),
                                   "--table", str(table)])
    assert bad.exit_code == 2
