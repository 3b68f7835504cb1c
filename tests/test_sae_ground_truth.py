"""sae-ground-truth (issue 40): the smoke preset end to end, verdicts on hand-made tables, bad input refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.syntax.sae_ground_truth import SAEGroundTruth, SAEGroundTruthConfig
from lmsci.sweep import run_experiment


def test_smoke_end_to_end(tmp_path):
    cfg = resolve_config(SAEGroundTruthConfig, "smoke", {"threads": 1})
    run = run_experiment(SAEGroundTruth(), cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results()
    assert len(res) == 2 and set(res["arm"]) == {"real", "null"} and (res["status"] == "ok").all()
    assert (res["hook"] == "blocks.0.resid_post").all()
    for col in ("share_sae", "share_pca", "mean_f1_sae", "mean_f1_pca", "mean_f1_random", "sae_minus_pca",
                "f1_floor", "l0", "fvu", "dead_fraction", "nll_increase", "acc_bos", "cpu_s"):
        assert np.isfinite(res[col]).all(), col
    assert ((res["share_sae"] >= 0) & (res["share_sae"] <= 1)).all()
    assert (res["l0"] <= cfg.k + 1e-6).all() and (res["fvu"] >= 0).all()
    # both arms read the same strings: the same feature set and token counts
    assert res["n_features"].nunique() == 1 and res["n_eval_tokens"].nunique() == 1
    assert np.allclose(res["sae_minus_pca"], res["mean_f1_sae"] - res["mean_f1_pca"])
    f1_cols = [c for c in res.columns if c.startswith("f1_sae__")]
    assert len(f1_cols) == int(res["n_features"].iloc[0])
    assert (run.path / "figures" / "feature_recovery.png").is_file() and (run.path / run.REPORT).is_file()
    v = {x.claim_id: x for x in run.verdicts()}
    assert set(v) == {"sae-recovers", "sae-beats-pca"} and all(x.outcome == "inconclusive" for x in v.values())


def _table(share, null_share, diff=(0.1, 0.12, 0.11), null_diff=(-0.05, -0.04, -0.06), acc=0.95):
    rows = []
    for arm, sh, df in (("real", share, diff), ("null", null_share, null_diff)):
        for k, (s, d) in enumerate(zip(sh, df)):
            rows.append({"arm": arm, "seed_index": k, "share_sae": s, "sae_minus_pca": d, "status": "ok",
                         "acc_bos": acc if arm == "real" else 0.0})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("table,outcome", [
    (_table((0.8, 0.85, 0.9), (0.1, 0.0, 0.05)), ("reproduced", "reproduced")),
    (_table((0.2, 0.25, 0.3), (0.1, 0.0, 0.05), diff=(-0.1, -0.05, -0.08)), ("not reproduced", "not reproduced")),
    (_table((0.8, 0.85, 0.9), (0.8, 0.85, 0.9), null_diff=(0.1, 0.12, 0.11)), ("inconclusive", "inconclusive")),
    (_table((0.8, 0.85, 0.9), (0.1, 0.0, 0.05), acc=0.5), ("inconclusive", "inconclusive")),  # gate: not learned
    (_table((0.8, 0.85), (0.1, 0.0)), ("inconclusive", "inconclusive")),  # two seeds: below min_seeds
])
def test_verdicts_on_hand_made_tables(table, outcome):
    cfg = resolve_config(SAEGroundTruthConfig, "quick")
    v = {x.claim_id: x for x in SAEGroundTruth().verdicts(cfg, table, None)}
    assert (v["sae-recovers"].outcome, v["sae-beats-pca"].outcome) == outcome


@pytest.mark.parametrize("override,field", [
    ({"layer": 1}, "layer"), ({"layer": -2}, "layer"), ({"k": 32}, "k"), ({"aux_k": 64}, "aux_k"),
    ({"variants": ["rope", "learned"]}, "variants"),
])
def test_bad_input_refused_before_work(tmp_path, override, field):
    cfg = resolve_config(SAEGroundTruthConfig, "smoke", {"threads": 1, **override})
    with pytest.raises(ConfigError) as e:
        run_experiment(SAEGroundTruth(), cfg, tmp_path / "never", progress=False, log=lambda m: None)
    assert e.value.field == field and not (tmp_path / "never").exists()


def test_pydantic_bounds():
    with pytest.raises(Exception):
        resolve_config(SAEGroundTruthConfig, "smoke", {"d_sae": 1})
    with pytest.raises(Exception):
        resolve_config(SAEGroundTruthConfig, "smoke", {"k": 0})
