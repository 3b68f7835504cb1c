"""lm-steer verdicts on synthetic results tables: the paper's pattern (reproduced), a clear failure (not
reproduced) and failed gates (inconclusive)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.experiments.lm_steer import ATTRS, LMSteerConfig, LMSteerExperiment, matched_gains

GRID = [-5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def _curve(slope: float, noise: float, rng) -> list[dict]:
    out = []
    for s in GRID:
        out.append({"s": s, "sentiment": 0.05 + slope * s + noise * rng.normal(),
                    "genre": 0.5 + slope * s / 2 + noise * rng.normal(),
                    "ppl": 40 + 2.0 * s * s + noise * rng.normal(), "dist_1": 0.6, "dist_2": 0.8, "dist_3": 0.8})
    return out


def table(*, gain=0.2, slope=0.04, noise=0.0, retention=0.8, transfer=0.5, spread_b=0.2, highlight=3.0, probe=6.0,
          val_nll=4.1, clf_lo=0.53, flu_nll=3.9, seeds=3, spread=0.02) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for k in range(seeds):
        j = spread * (k - 1)
        row = {"seed_index": k, "point": "steer" if k == 0 else f"steer__s{k}", "val_nll_A": val_nll,
               "unigram_nll": 5.78, "bigram_nll": 4.07, "val_nll_fluency": flu_nll, "clf_acc": clf_lo + 0.01,
               "clf_acc_lo": clf_lo, "clf_n": 30000,
               "curves": json.dumps({a: _curve(slope, noise, rng) for a in ATTRS}),
               "highlight_enrichment": highlight + j, "probe_enrichment": probe + j,
               "matched_ppl_increase": 50.0, "matched_lm_steer": 0.2, "matched_logit_offset": 0.1,
               "matched_act_add": 0.05}
        for a in ATTRS:
            row[f"{a}_gain_pos"] = gain + j
            row[f"{a}_gain_neg"] = gain - j
            row[f"comp_{a}_retention"] = retention + j
            row[f"transfer_{a}_retention"] = transfer + j
            row[f"transfer_{a}_spread_B"] = spread_b + j
            row[f"transfer_{a}_map_error"] = 0.4
        rows.append(row)
    return pd.DataFrame(rows)


def outcomes(df: pd.DataFrame, preset: str = "quick") -> dict[str, str]:
    cfg = resolve_config(LMSteerConfig, preset)
    vs = LMSteerExperiment().verdicts(cfg, df, None)
    assert [v.claim_id for v in vs] == [c.id for c in LMSteerExperiment.claims]
    return {v.claim_id: v.outcome for v in vs}


def test_paper_pattern_is_reproduced():
    out = outcomes(table())
    for cid in ("steering", "continuous", "compositional", "transfer", "highlighting", "probe"):
        assert out[cid] == "reproduced", (cid, out)
    assert out["vs-baselines"] == "inconclusive"  # reported, no rule


def test_clear_failure_is_not_reproduced():
    out = outcomes(table(gain=-0.05, slope=0.0, noise=0.05, retention=0.2, transfer=0.05, spread_b=-0.1,
                         highlight=1.0, probe=1.0))
    for cid in ("steering", "continuous", "highlighting", "probe"):
        assert out[cid] == "not reproduced", (cid, out)
    # retention divides by the single-steer gain: with no real gain it is undefined (gate), not a failure
    for cid in ("compositional", "transfer"):
        assert out[cid] == "inconclusive", (cid, out)
    # real single-steer gains that composition and transfer lose are a failure
    out = outcomes(table(retention=0.2, transfer=0.05, spread_b=-0.1))
    for cid in ("compositional", "transfer"):
        assert out[cid] == "not reproduced", (cid, out)


def test_retention_over_a_gain_indistinguishable_from_zero_is_inconclusive():
    df = table()
    df["genre_gain_pos"] = [-0.01, 0.0, 0.02]  # the quick run's genre steer: CI across seeds reaches 0
    out = outcomes(df)
    assert out["compositional"] == "inconclusive" and out["transfer"] == "inconclusive", out


def test_one_direction_failing_fails_steering():
    df = table()
    df["genre_gain_neg"] = [-0.01, 0.0, 0.01]
    assert outcomes(df)["steering"] == "not reproduced"


def test_failed_gates_make_verdicts_inconclusive():
    out = outcomes(table(clf_lo=0.48))  # genre classifier not above chance
    for cid in ("steering", "continuous", "compositional", "transfer"):
        assert out[cid] == "inconclusive", (cid, out)
    assert out["highlighting"] == out["probe"] == "reproduced"  # sentiment-only claims keep no genre gate
    out = outcomes(table(val_nll=5.2))  # the steered GPT barely beats the unigram model
    assert set(out.values()) == {"inconclusive"}
    assert outcomes(table(flu_nll=4.2))["continuous"] == "inconclusive"  # the fluency GPT is worse than A


def test_too_few_seeds_and_smoke_are_inconclusive():
    assert set(outcomes(table(seeds=1)).values()) == {"inconclusive"}
    assert set(outcomes(table(), preset="smoke").values()) == {"inconclusive"}


def test_matched_gains_interpolates_at_lm_steers_perplexity_cost():
    rows = {"lm_steer": [{"s": 5.0, "ppl": 60.0, "sentiment": 0.3}],
            "logit_offset": [{"s": 1.0, "ppl": 45.0, "sentiment": 0.1}, {"s": 2.0, "ppl": 65.0, "sentiment": 0.2}],
            "act_add": [{"s": 1.0, "ppl": 41.0, "sentiment": 0.0}, {"s": 2.0, "ppl": 42.0, "sentiment": 0.01}]}
    m = matched_gains(rows, {"ppl": 40.0, "sentiment": 0.0}, 5.0)
    assert m["ppl_increase"] == pytest.approx(20.0) and m["lm_steer"] == pytest.approx(0.3)
    assert m["logit_offset"] == pytest.approx(0.1 + 0.1 * (20 - 5) / 20)
    assert np.isnan(m["act_add"])  # LM-Steer's cost lies outside its sweep


def test_paper_preset_refuses_without_local_paths():
    from lmsci.errors import ConfigError

    cfg = resolve_config(LMSteerConfig, "paper")
    with pytest.raises(ConfigError, match="model_path") as err:
        LMSteerExperiment().validate(cfg)
    assert err.value.field == "model_path"
    with pytest.raises(ConfigError, match="rank"):
        LMSteerExperiment().validate(resolve_config(LMSteerConfig, "quick", {"rank": 1000}))  # rank above d_model


def test_weak_single_gain_is_noted_on_ratio_claims():
    df = table()
    df["genre_gain_pos"] = [-0.01, 0.0, 0.02]
    vs = {v.claim_id: v for v in LMSteerExperiment().verdicts(resolve_config(LMSteerConfig, "quick"), df, None)}
    assert "genre_pos" in vs["compositional"].note and "genre_pos" in vs["transfer"].note
    assert vs["steering"].outcome == "not reproduced"
    assert "genre" not in {v.claim_id: v for v in LMSteerExperiment().verdicts(
        resolve_config(LMSteerConfig, "quick"), table(), None)}["compositional"].note
