"""sae-bios (issue 40, item 2): the smoke preset end to end, the ground-truth features, verdicts on hand-made
tables, bad input refused before any work."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.knowledge._sae_bios_data import (feature_matrix, feature_names, split_people, value_rows,
                                                        world_and_docs)
from lmsci.experiments.knowledge.common import BiosModelSpec
from lmsci.experiments.knowledge.sae_bios import SAEBios, SAEBiosConfig
from lmsci.sweep import run_experiment
from lmsci.worlds.bios import ATTRS


def test_smoke_end_to_end(tmp_path):
    cfg = resolve_config(SAEBiosConfig, "smoke", {"threads": 1})
    run = run_experiment(SAEBios(), cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results()
    assert len(res) == 2 and set(res["arm"]) == {"real", "null"} and (res["status"] == "ok").all()
    assert (res["hook"] == "blocks.0.resid_post").all()
    for col in ("share_sae", "share_pca", "mean_f1_sae", "mean_f1_pca", "mean_f1_random", "sae_minus_pca",
                "f1_floor", "l0", "fvu", "dead_fraction", "nll_increase", "recall", "cpu_s"):
        assert np.isfinite(res[col]).all(), col
    assert ((res["share_sae"] >= 0) & (res["share_sae"] <= 1)).all()
    assert (res["l0"] <= cfg.k + 1e-6).all() and (res["fvu"] >= 0).all()
    # both arms read the same biographies, split and features
    assert res["n_features"].nunique() == 1 and res["n_eval_rows"].nunique() == 1
    assert res["n_train_tokens"].nunique() == 1
    assert (res["n_eval_rows"] == 6 * (cfg.bios.n_people - cfg.bios.n_people // 2)).all()
    assert int(sum(res[f"n_features__{a}"].iloc[0] for a in ATTRS)) == int(res["n_features"].iloc[0])
    assert np.allclose(res["sae_minus_pca"], res["mean_f1_sae"] - res["mean_f1_pca"])
    assert (run.path / "figures" / "feature_recovery.png").is_file()
    report = (run.path / run.REPORT).read_text()
    assert "sae-ground-truth" in report and "Mean best F1 per attribute" in report
    v = {x.claim_id: x for x in run.verdicts()}
    assert set(v) == {"sae-recovers", "sae-beats-pca"} and all(x.outcome == "inconclusive" for x in v.values())


def test_features_follow_the_worlds_ground_truth():
    spec = BiosModelSpec(n_people=20, multiplicity=1, permute=False, fullname=False)
    world, docs = world_and_docs(spec, 3)
    flat = [d for ds in docs for d in ds]
    pos, at, words = value_rows(world, flat)
    assert len(pos) == 6 * len(flat) and at[:6] == list(ATTRS)
    for r, d in enumerate(flat):
        for j, a in enumerate(ATTRS):
            p = pos[6 * r + j]
            # the value position is the token right before the value; the feature's word is the value's first token
            first = world.value_words(d.person, a)[0]
            assert p + 1 == d.spans[a][0][0] and d.ids[p + 1] == world.vocab.encode([first])[0]
            assert words[6 * r + j] == first.replace("@@", "")
    a, b = split_people(20, 7)
    assert len(a) == 10 and len(b) == 10 and not set(a) & set(b)
    names = feature_names((at, words), (at, words), 1)
    F = feature_matrix(at, words, names)
    assert F.shape == (len(pos), len(names)) and (F.sum(1) <= 1).all()
    # a row is on for exactly its own attribute's word, when that feature is kept
    keys = [f"{x}={w}" for x, w in zip(at, words)]
    assert all(F[r].any() == (keys[r] in names) for r in range(len(keys)))
    assert feature_names((at, words), (at, words), 1000) == []


def _table(share, null_share, diff=(0.1, 0.12, 0.11), null_diff=(-0.05, -0.04, -0.06), recall=0.97):
    rows = []
    for arm, sh, df in (("real", share, diff), ("null", null_share, null_diff)):
        for k, (s, d) in enumerate(zip(sh, df)):
            rows.append({"arm": arm, "seed_index": k, "share_sae": s, "sae_minus_pca": d, "status": "ok",
                         "recall": recall if arm == "real" else 0.0})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("table,outcome", [
    (_table((0.8, 0.85, 0.9), (0.1, 0.0, 0.05)), ("reproduced", "reproduced")),
    (_table((0.2, 0.25, 0.3), (0.1, 0.0, 0.05), diff=(-0.1, -0.05, -0.08)), ("not reproduced", "not reproduced")),
    (_table((0.8, 0.85, 0.9), (0.8, 0.85, 0.9), null_diff=(0.1, 0.12, 0.11)), ("inconclusive", "inconclusive")),
    (_table((0.8, 0.85, 0.9), (0.1, 0.0, 0.05), recall=0.5), ("inconclusive", "inconclusive")),  # not memorised
    (_table((0.8, 0.85), (0.1, 0.0)), ("inconclusive", "inconclusive")),  # two seeds: below min_seeds
])
def test_verdicts_on_hand_made_tables(table, outcome):
    cfg = resolve_config(SAEBiosConfig, "quick")
    v = {x.claim_id: x for x in SAEBios().verdicts(cfg, table, None)}
    assert (v["sae-recovers"].outcome, v["sae-beats-pca"].outcome) == outcome


@pytest.mark.parametrize("override,field", [
    ({"layer": 1}, "layer"), ({"layer": -2}, "layer"), ({"k": 32}, "k"), ({"aux_k": 64}, "aux_k"),
    ({"bios.seq_len": 64}, "bios.seq_len"), ({"min_count": 7}, "bios.n_people"),
])
def test_bad_input_refused_before_work(tmp_path, override, field):
    cfg = resolve_config(SAEBiosConfig, "smoke", {"threads": 1, **override})
    with pytest.raises(ConfigError) as e:
        run_experiment(SAEBios(), cfg, tmp_path / "never", progress=False, log=lambda m: None)
    assert e.value.field == field and not (tmp_path / "never").exists()


def test_pydantic_bounds_and_presets():
    with pytest.raises(Exception):
        resolve_config(SAEBiosConfig, "smoke", {"d_sae": 1})
    with pytest.raises(Exception):
        resolve_config(SAEBiosConfig, "smoke", {"k": 0})
    for preset in ("quick", "gpu", "paper"):
        cfg = resolve_config(SAEBiosConfig, preset)
        SAEBios().validate(cfg)
        assert preset in SAEBios.time_estimate


def test_gpu_preset_is_estimated_within_9_minutes_and_says_so():
    """Session 52: the gpu preset fits the 10 minutes of one H100 by its estimate (for the whole exposure budget and
    both arms' SAEs), which the documented time repeats; the old N = 2000 did not leave the margin."""
    import re

    from lmsci.config import resolve_config
    from lmsci.experiments.knowledge._sae_bios_estimate import estimate_h100_seconds
    from lmsci.experiments.knowledge.sae_bios import SAEBios, SAEBiosConfig

    cfg = resolve_config(SAEBiosConfig, "gpu")
    est = estimate_h100_seconds(cfg)
    assert 60 < est["total"] <= 9 * 60 and est["pretrain"] > 0 and est["sae"] > 0
    assert estimate_h100_seconds(resolve_config(SAEBiosConfig, "gpu", {"bios.n_people": 2000}))["total"] > 540
    text = SAEBios.time_estimate["gpu"]
    assert int(re.match(r"~(\d+) min", text).group(1)) == round(est["total"] / 60)
    assert f"({est['total'] / 60:.1f} min)" in text and "not measured" in text
    assert cfg.n_seeds >= 3 and cfg.sae_steps == 6000 and cfg.bios.model.n_layers == 8
