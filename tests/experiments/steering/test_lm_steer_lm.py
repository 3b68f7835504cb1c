"""lm-steer-lm (issue 45, item 2): LM-Steer on a real pretrained LM. The smoke run uses a tiny random tied Llama with
a word-level tokenizer (the real model's quick run is the lead's); verdicts on hand-made tables; bad input refused
before any work."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.registry import get
from lmsci.sweep import run_experiment


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    exp = get("lm-steer-lm")()
    cfg = resolve_config(exp.Config, "smoke", {"threads": 1})
    return run_experiment(exp, cfg, tmp_path_factory.mktemp("lm_steer_lm") / "run", progress=False,
                          log=lambda m: None)


def test_smoke_run_end_to_end_on_a_tiny_llama(smoke_run):
    res = smoke_run.results()
    assert (res["status"] == "ok").all() and len(res) == 4
    assert sorted(set(res["arm"])) == ["null", "real"]
    real, null = res[res["arm"] == "real"], res[res["arm"] == "null"]
    assert (real["label_agreement"] == 1.0).all() and (null["label_agreement"] < 1.0).all()
    for col in ("spread", "loss_drop", "ppl_zero", "ppl_pos", "sentiment_neg", "w_norm", "base_nll"):
        assert np.isfinite(res[col].astype(float)).all(), col
    assert res["spread"].between(-2, 2).all()
    curves = {(a, k): json.loads(c) for a, k, c in zip(res["arm"], res["seed_index"], res["curve"])}
    assert [p["s"] for p in curves[("real", 0)]] == [-5.0, 0.0, 5.0]
    assert res["n_pool"].iloc[0] == 24 and res["vocab_size"].iloc[0] > 100
    v = {x.claim_id: x for x in smoke_run.verdicts()}
    assert set(v) == {"steering", "continuous", "ppl-cost", "compositional", "probe", "vs-baselines"}
    for col in ("comp_spread", "comp_margin", "comp_sentiment_pos", "probe_excess", "probe_random_frac",
                "clf_acc_lo", "genre_loss_drop"):
        assert np.isfinite(res[col].astype(float)).all(), col
    assert np.allclose(res["comp_margin"], res["comp_spread"] - 0.5 * res["spread"])
    assert res["probe_random_frac"].between(0, 1).all() and (res["actadd_layer"] == 1).all()
    assert np.isfinite(real["comp_genre_spread"].astype(float)).all() and null["comp_genre_spread"].isna().all()
    assert np.isfinite(real["vsb_lm_gain"].astype(float)).all() and null["baselines"].isna().all()
    sweeps = json.loads(real["baselines"].iloc[0])
    assert [p["s"] for p in sweeps["act_add"]] == [4.0] and [p["s"] for p in sweeps["logit_offset"]] == [1.0]
    assert all(x.outcome == "inconclusive" for x in v.values())  # smoke preset, 2 seeds, a random model's gates
    report = next(smoke_run.path.glob("report*.md")).read_text()
    assert "The toy experiment `lm-steer`" in report and "SVD probe of W" in report
    assert "| real | +5 |" in report and "| null | -5 |" in report
    assert "## Composition" in report and "LM-Steer vs baselines" in report and "| act_add | +4 |" in report
    assert (smoke_run.path / "figures" / "steer_curve.png").is_file()


@pytest.mark.parametrize("over", [{"model": "no-such-model"}, {"steer_grid": [-2.0, 0.0, 2.0]},
                                  {"steer_grid": [5.0, 0.0, -5.0]}, {"min_words": 9, "max_words": 4},
                                  {"n_loss_lines": 100}, {"actadd_grid": [0.0, 2.0]}, {"n_genre_lines": 10000}])
def test_bad_input_is_refused_before_any_work(over, tmp_path):
    exp = get("lm-steer-lm")()
    cfg = resolve_config(exp.Config, "smoke", over)
    with pytest.raises(ConfigError):
        run_experiment(exp, cfg, tmp_path / "run", progress=False, log=lambda m: None)
    assert not (tmp_path / "run" / "results.csv").exists()


def _table(spread_real, spread_null, rho_real=(0.9, 1.0, 0.8), rho_null=(0.1, -0.3, 0.2), drop=0.2,
           comp_real=(0.3, 0.3, 0.4), comp_null=(0.0, 0.05, -0.05), excess_real=(0.1, 0.15, 0.12),
           excess_null=(0.0, -0.02, 0.03), clf_lo=0.6, margin=(0.05, 0.1, -0.02)):
    rows = []
    for arm, sp, rho, comp, exc in (("real", spread_real, rho_real, comp_real, excess_real),
                                    ("null", spread_null, rho_null, comp_null, excess_null)):
        for k in range(3):
            rows.append({"arm": arm, "seed_index": k, "status": "ok", "spread": sp[k], "spearman": rho[k],
                         "ppl_cost": 3.0 + k, "loss_drop": drop, "nll_below_uniform": 5.0,
                         "comp_margin": comp[k] - 0.5 * sp[k], "probe_excess": exc[k], "clf_acc_lo": clf_lo,
                         "vs_baselines_margin": margin[k] if arm == "real" else np.nan})
    return pd.DataFrame(rows)


def test_verdicts_on_hand_made_tables():
    exp = get("lm-steer-lm")()
    cfg = resolve_config(exp.Config, "quick", {})
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table((0.3, 0.35, 0.4), (0.05, -0.1, 0.02)), None)}
    assert v["steering"].outcome == "reproduced" and v["continuous"].outcome == "reproduced"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table((0.3, 0.35, 0.4), (0.3, 0.32, 0.35)), None)}
    assert v["steering"].outcome == "inconclusive" and v["steering"].null_passed  # the null meets the rule
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table((0.1, -0.2, 0.05), (0.0, 0.1, -0.1)), None)}
    assert v["steering"].outcome == "not reproduced"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table((0.3, 0.35, 0.4), (0.0, 0.1, -0.1), drop=0.0), None)}
    assert v["steering"].outcome == "inconclusive"  # the steer-fits gate failed


def test_verdicts_of_the_new_claims_on_hand_made_tables():
    exp = get("lm-steer-lm")()
    cfg = resolve_config(exp.Config, "quick", {})
    good = (0.3, 0.35, 0.4), (0.05, -0.1, 0.02)
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(*good), None)}
    assert v["compositional"].outcome == "reproduced" and v["probe"].outcome == "reproduced"
    assert v["vs-baselines"].ablation and v["vs-baselines"].value == pytest.approx(np.mean([0.05, 0.1, -0.02]))
    # the composed spread keeps less than half of the own spread on every seed
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(*good, comp_real=(0.1, 0.12, 0.1)), None)}
    assert v["compositional"].outcome == "not reproduced"
    # the shuffled-label steer's composition meets the rule too: inconclusive
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(*good, comp_null=(0.3, 0.35, 0.3)), None)}
    assert v["compositional"].outcome == "inconclusive" and v["compositional"].null_passed
    # no sentiment effect to keep (gate), or a genre classifier at chance (gate): inconclusive
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table((0.1, -0.2, 0.05), good[1], comp_real=(0.3, 0.2, 0.3)),
                                              None)}
    assert v["compositional"].outcome == "inconclusive"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(*good, clf_lo=0.45), None)}
    assert v["compositional"].outcome == "inconclusive" and v["probe"].outcome == "reproduced"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(*good, excess_real=(0.01, -0.05, 0.02)), None)}
    assert v["probe"].outcome == "not reproduced"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(*good, excess_null=(0.1, 0.12, 0.11)), None)}
    assert v["probe"].outcome == "inconclusive" and v["probe"].null_passed


def test_matched_gain_and_random_directions():
    import torch

    from lmsci.experiments.steering._lm_steer_lm_data import random_direction_rate
    from lmsci.experiments.steering._lm_steer_lm_extra import matched_gain

    sweep = [{"ppl_increase": 2.0, "gain": 0.2}, {"ppl_increase": 6.0, "gain": 0.4}]
    assert matched_gain(1.0, sweep) == pytest.approx(0.1) and matched_gain(4.0, sweep) == pytest.approx(0.3)
    assert np.isnan(matched_gain(7.0, sweep)) and np.isnan(matched_gain(float("nan"), sweep))
    E = torch.randn(50, 8, generator=torch.Generator().manual_seed(0))
    hits = np.zeros(50, dtype=bool)
    assert random_direction_rate(E, hits, 2, 5, 3, seed=1) == 0.0
    assert random_direction_rate(E, ~hits, 2, 5, 3, seed=1) == 1.0
    hits[::2] = True
    a, b = (random_direction_rate(E, hits, 2, 5, 4, seed=s) for s in (1, 1))
    assert a == b and 0.0 < a < 1.0


def test_probe_section_and_prompts():
    from lmsci.experiments.steering._lm_steer_lm_data import sample_prompts
    from lmsci.experiments.steering.lm_steer_lm import probe_section

    listing = [{"dim": 0, "sigma": 1.5, "top": ["joy", "love"], "bottom": ["grief", "death"]}]
    df = pd.DataFrame([{"arm": "real", "seed_index": 0, "probe_json": json.dumps(listing), "probe_enrichment": 2.0},
                       {"arm": "null", "seed_index": 0, "probe_json": json.dumps(listing), "probe_enrichment": 1.0}])
    text = probe_section(df)
    assert "| 0 | 1.5 | joy, love | grief, death |" in text and "real 2" in text

    class Tok:
        def encode(self, s, add_special_tokens=False):
            return [len(w) for w in s.split()]

    cfg = resolve_config(get("lm-steer-lm").Config, "smoke", {})
    lines = [f"a bb ccc dddd {i}" for i in range(10)] + ["short"]
    p1, p2 = (sample_prompts(cfg, Tok(), lines, s) for s in (1, 1))
    assert p1.shape == (cfg.n_prompts, cfg.prompt_tokens) and bool((p1 == p2).all())
    with pytest.raises(ConfigError):
        sample_prompts(cfg.model_copy(update={"n_prompts": 20}), Tok(), lines, 1)
