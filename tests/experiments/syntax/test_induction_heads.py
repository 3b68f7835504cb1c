"""induction-heads: the repeated-segment world, the prefix-matching and copying scores on hand-made inputs,
verdicts from synthetic tables (reproduced / not reproduced / gated / null-passing), bad input, a smoke run.

Sources: Olsson et al. 2022, arXiv 2209.11895; Elhage et al. 2021 (OV eigenvalue copying score).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.syntax.induction_heads import InductionHeads, InductionHeadsConfig
from lmsci.measure.heads import gpt_head_weights, ov_copying_scores, prefix_matching_scores
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.runs import RunDir
from lmsci.worlds.repeated_segments import RepeatedSegments
from lmsci.worlds.repeated_text import RepeatedText


def test_world_repeats_the_segment_and_targets_point_after_the_previous_occurrence():
    w = RepeatedSegments(n_tokens=20, seq_len=30, seg_min=3, seg_max=10)
    x, m = w.sample(50, np.random.default_rng(0))
    assert x.shape == (50, 30) and (x[:, 0] == 0).all() and m.min() >= 3 and m.max() <= 10
    tgt = w.induction_targets(m)
    for i in range(50):
        mi = m[i]
        assert (x[i, 1:1 + mi] == x[i, 1 + mi:1 + 2 * mi]).all()
        for j in range(1 + mi, 2 * mi + 1):
            k = tgt[i, j]
            # the key is right after the previous occurrence (position j - m) of the query's token
            assert x[i, k - 1] == x[i, j] and k == j - mi + 1
        assert (tgt[i, : 1 + mi] == -1).all() and (tgt[i, 2 * mi + 1:] == -1).all()
    early, late = w.copy_masks(m)
    assert (early.sum(1) == m - 1).all() and (late.sum(1) == m - 1).all()


def test_repeated_text_writes_a_passage_twice_then_its_continuation():
    ids = np.arange(1000)  # distinct consecutive ids: every window is identifiable
    w = RepeatedText(ids, seq_len=40, seg_min=5, seg_max=15)
    x, m = w.sample(30, np.random.default_rng(0))
    assert x.shape == (30, 40) and m.min() >= 5 and m.max() <= 15
    tgt = w.induction_targets(m)
    for i in range(30):
        mi = m[i]
        assert (x[i, 1:1 + mi] == x[i, 1 + mi:1 + 2 * mi]).all()
        assert (np.diff(x[i, :1 + mi]) == 1).all()  # t, w: consecutive corpus tokens
        assert (x[i, 1 + 2 * mi:] == x[i, mi] + 1 + np.arange(40 - 1 - 2 * mi)).all()  # then w's continuation
        for j in range(1 + mi, 2 * mi + 1):
            assert x[i, tgt[i, j] - 1] == x[i, j]
    with pytest.raises(ConfigError, match="seq_len"):
        RepeatedText(ids[:30], seq_len=40, seg_min=5, seg_max=15)
    with pytest.raises(ConfigError, match="seq_len"):
        RepeatedText(ids, seq_len=20, seg_min=5, seg_max=15)


def test_prefix_matching_score_of_a_perfect_and_a_uniform_head():
    w = RepeatedSegments(n_tokens=10, seq_len=13, seg_min=6, seg_max=6)
    x, m = w.sample(2, np.random.default_rng(1))
    tgt = torch.from_numpy(w.induction_targets(m))
    T = 13
    pat = torch.zeros(1, 2, 2, T, T)
    for b in range(2):
        for j in range(T):
            k = int(tgt[b, j])
            pat[0, b, 0, j, k if k >= 0 else j] = 1.0
            pat[0, b, 1, j, : j + 1] = 1.0 / (j + 1)
    s = prefix_matching_scores(pat, tgt)
    assert s[0, 0] == pytest.approx(1.0)
    assert s[0, 1] == pytest.approx(np.mean([1 / (j + 1) for j in range(7, 13)]), rel=1e-5)
    with pytest.raises(ConfigError):
        prefix_matching_scores(pat, torch.full((T,), -1))


def test_copying_score_of_identity_and_negated_ov():
    V, d, D = 12, 8, 8
    torch.manual_seed(0)
    W_E = torch.randn(V, d)
    W_U = torch.linalg.pinv(W_E)  # W_E W_U ~ projection: copying when W_V W_O = I
    W_V = torch.eye(d)[None].repeat(2, 1, 1)
    W_O = torch.stack([torch.eye(d), -torch.eye(d)])
    s = ov_copying_scores(W_E, W_V, W_O, W_U)
    assert s[0] == pytest.approx(1.0, abs=1e-6) and s[1] == pytest.approx(-1.0, abs=1e-6)
    m = GPT(GPTConfig(vocab_size=11, seq_len=8, n_layers=2, n_heads=2, d_model=16, mlp="none"), seed=0)
    w = gpt_head_weights(m, 1)
    assert w["W_V"].shape == (2, 16, 8) and w["W_O"].shape == (2, 8, 16) and w["W_U"].shape == (16, 11)
    assert ov_copying_scores(**w).abs().max() <= 1.0


INIT = {"init_pm_best": "pm_best", "init_copy_best": "copy_best", "init_icl": "icl_final", "init_ratio_nat": "ratio_nat"}
OTHER = {"other_head": "best_head", "copy_other": "copy_best"}


def to_arms(rows: list[dict]) -> pd.DataFrame:
    """The arms of the sweep from rows carrying their step-0 measures and their other head's copying score (as
    run_group derives them): the real rows with an init-arm row and an otherhead-arm row each, the null rows."""
    out = []
    for r in rows:
        base = {"world": "synthetic", **{k: v for k, v in r.items() if k not in INIT}}  # as run_point writes it
        out.append(base)
        if r["arm"] == "real":
            for arm, cols in (("init", INIT), ("otherhead", OTHER)):
                out.append({"point": f"{arm}-" + r["point"], "status": "ok", "seed_index": r["seed_index"],
                            "n_layers": 2, "world": r.get("world", "synthetic"), "arm": arm,
                            **{v: r[k] for k, v in cols.items() if k in r}})
    return pd.DataFrame(out)


def rows(pm=0.8, copy=0.8, late=0.2, t_pm=(500, 1500, 2500), t_icl=(450, 1550, 2450), one_pm=0.1, init_pm=0.06,
         init_copy=0.05, other_copy=-0.6, n=3) -> pd.DataFrame:
    """Synthetic rows: the real 2-layer model and the null (the same model trained without repeats) per seed."""
    out = []
    for k in range(n):
        sfx = f"__s{k}" if k else ""
        out.append({"point": "attn2" + sfx, "arm": "real", "status": "ok", "seed_index": k, "n_layers": 2,
                    "best_head": 1, "pm_best": pm - 0.01 * k, "pm_max_any_layer": pm, "copy_best": copy + 0.01 * k,
                    "other_head": 2, "copy_other": other_copy, "icl_final": late - 3.4, "early_final": 3.4,
                    "late_final": late, "t_pm": t_pm[k], "t_icl": t_icl[k], "steps": 3000, "init_pm_best": init_pm,
                    "init_copy_best": init_copy, "init_icl": 0.0})
        out.append({"point": "null-attn2" + sfx, "arm": "null", "status": "ok", "seed_index": k, "n_layers": 2,
                    "best_head": 0, "pm_best": one_pm, "pm_max_any_layer": one_pm, "copy_best": 0.3,
                    "other_head": 1, "copy_other": 0.2, "icl_final": -0.01, "early_final": 3.4, "late_final": 3.4,
                    "t_pm": None, "t_icl": None, "steps": 3000, "init_pm_best": init_pm, "init_copy_best": 0.0,
                    "init_icl": 0.0})
    return to_arms(out)


def verdicts(df, tmp_path, preset="quick"):
    cfg = resolve_config(InductionHeadsConfig, preset, {})
    return {v.claim_id: v for v in InductionHeads().verdicts(cfg, df, RunDir(tmp_path))}


def test_passing_table_is_reproduced(tmp_path):
    v = verdicts(rows(), tmp_path)
    assert {v[c].outcome for c in ("prefix-matching-head", "phase-change", "copying")} == {"reproduced"}
    assert v["phase-change"].value == pytest.approx(50 / 3000) and v["phase-change"].null_passed is False


def test_failing_table_is_not_reproduced(tmp_path):
    v = verdicts(rows(pm=0.45, copy=0.2), tmp_path)
    assert v["prefix-matching-head"].outcome == "not reproduced" and v["copying"].outcome == "not reproduced"
    # no head crosses 0.5: the phase-change events never occur (t_pm missing) -> not reproduced
    v = verdicts(rows(t_pm=(500, None, 550)), tmp_path)
    assert v["phase-change"].outcome == "not reproduced"
    v = verdicts(rows(t_pm=(500, 2600, 2500)), tmp_path)  # one seed's head forms 1050 steps after the drop
    assert v["phase-change"].outcome == "not reproduced"


def test_gated_null_passing_and_few_seeds_are_inconclusive(tmp_path):
    v = verdicts(rows(late=2.0), tmp_path)  # did not learn to use the context: gate fails
    assert {v[c].outcome for c in ("prefix-matching-head", "phase-change", "copying")} == {"inconclusive"}
    v = verdicts(rows(one_pm=0.7), tmp_path)  # a head that prefix-matches without repeats: the rule cannot tell
    assert v["prefix-matching-head"].outcome == "inconclusive" and v["prefix-matching-head"].null_passed
    # both events at the same steps in every seed (a shared schedule): any pairing of seeds fits the window too
    v = verdicts(rows(t_pm=(500, 510, 520), t_icl=(505, 500, 515)), tmp_path)
    assert v["phase-change"].outcome == "inconclusive" and v["phase-change"].null_passed
    v = verdicts(rows(other_copy=0.9), tmp_path)  # every layer-2 head copies: copying is not specific to the head
    assert v["copying"].outcome == "inconclusive" and v["copying"].null_value == pytest.approx(0.9)
    v = verdicts(rows(init_copy=0.9), tmp_path)  # the random-init model is no longer the copying null
    assert v["copying"].outcome == "reproduced"
    v = verdicts(rows(n=2), tmp_path)
    assert v["prefix-matching-head"].outcome == "inconclusive"


def sh_rows(pm=0.8, copy=0.8, ratio=0.3, val=3.8, one_pm=0.1, one_ratio=0.8, init_pm=0.05, init_copy=0.05,
            init_ratio=1.0, t_pm=(300, 1000, 1700), t_icl=(250, 1050, 1650), other_copy=-0.5, n=3) -> pd.DataFrame:
    """Shakespeare rows (real and shuffled-window null per seed) as run_shakespeare writes them."""
    out = []
    for k in range(n):
        sfx = f"__s{k}" if k else ""
        common = {"status": "ok", "seed_index": k, "world": "shakespeare", "steps": 2000, "bigram_nll": 4.07,
                  "init_pm_best": init_pm, "init_copy_best": init_copy, "init_ratio_nat": init_ratio,
                  "icl_nat": -2.0, "icl_plain": -0.3}
        out.append({**common, "point": "shakespeare_attn2" + sfx, "arm": "real", "n_layers": 2,
                    "pm_best": pm - 0.01 * k, "pm_max_any_layer": pm, "pm_nat_best": 0.4, "copy_best": copy,
                    "other_head": 0, "copy_other": other_copy, "ratio_nat": ratio + 0.01 * k, "val_nll": val,
                    "t_pm": t_pm[k], "t_icl": t_icl[k]})
        out.append({**common, "point": "null-shakespeare_attn2" + sfx, "arm": "null", "n_layers": 2,
                    "pm_best": one_pm, "pm_max_any_layer": one_pm, "pm_nat_best": 0.1, "copy_best": 0.2,
                    "ratio_nat": one_ratio, "val_nll": 4.3, "t_pm": None, "t_icl": None})
    return to_arms(out)


SH = ("shakespeare-prefix-matching-head", "shakespeare-copying", "shakespeare-repeat-icl", "shakespeare-phase-change")


def test_shakespeare_passing_table_is_reproduced_and_synthetic_claims_are_not_computed(tmp_path):
    v = verdicts(sh_rows(), tmp_path)
    assert {v[c].outcome for c in SH} == {"reproduced"}
    assert v["shakespeare-repeat-icl"].value == pytest.approx(0.31)
    assert v["shakespeare-phase-change"].value == pytest.approx(50 / 2000)
    assert v["prefix-matching-head"].value is None and v["prefix-matching-head"].outcome == "inconclusive"
    both = verdicts(pd.concat([rows(), sh_rows()], ignore_index=True), tmp_path)
    assert {both[c].outcome for c in SH + ("prefix-matching-head", "copying", "phase-change")} == {"reproduced"}


def test_shakespeare_failing_table_is_not_reproduced(tmp_path):
    v = verdicts(sh_rows(pm=0.3, copy=-0.5, ratio=0.7, t_pm=(None,) * 3), tmp_path)
    assert {v[c].outcome for c in SH} == {"not reproduced"}
    v = verdicts(sh_rows(t_pm=(300, 1400, 1700)), tmp_path)  # 350 steps apart in one seed > 0.1 x 2000
    assert v["shakespeare-phase-change"].outcome == "not reproduced"
    v = verdicts(sh_rows(ratio=0.495), tmp_path)  # one seed at 0.505 > 0.5: the rule holds in every seed or fails
    assert v["shakespeare-repeat-icl"].outcome == "not reproduced"


def test_shakespeare_gated_and_null_passing_tables_are_inconclusive(tmp_path):
    v = verdicts(sh_rows(val=4.2), tmp_path)  # worse than the bigram baseline: did not learn the language
    assert {v[c].outcome for c in SH} == {"inconclusive"}
    v = verdicts(sh_rows(one_pm=0.6), tmp_path)
    assert v["shakespeare-prefix-matching-head"].outcome == "inconclusive"
    assert v["shakespeare-prefix-matching-head"].null_passed
    v = verdicts(sh_rows(other_copy=0.7), tmp_path)
    assert v["shakespeare-copying"].outcome == "inconclusive" and v["shakespeare-copying"].null_passed
    v = verdicts(sh_rows(one_ratio=0.45), tmp_path)  # bag-of-context copying halves the loss: the rule cannot tell
    assert v["shakespeare-repeat-icl"].outcome == "inconclusive" and v["shakespeare-repeat-icl"].null_passed
    v = verdicts(sh_rows(init_ratio=0.4), tmp_path)
    assert v["shakespeare-repeat-icl"].null_passed
    v = verdicts(sh_rows(t_pm=(400, 500, 450), t_icl=(420, 480, 410)), tmp_path)  # any pairing fits the window
    assert v["shakespeare-phase-change"].outcome == "inconclusive"
    v = verdicts(sh_rows(n=2), tmp_path)
    assert v["shakespeare-prefix-matching-head"].outcome == "inconclusive"


def test_bad_config_is_a_named_error():
    with pytest.raises(ConfigError, match="seq_len"):
        InductionHeads().validate(resolve_config(InductionHeadsConfig, "smoke", {"seq_len": 12, "seg_max": 8}))
    with pytest.raises(ConfigError, match="seg_min"):
        InductionHeads().validate(resolve_config(InductionHeadsConfig, "smoke", {"seg_min": 9, "seg_max": 8}))
    with pytest.raises(ConfigError, match="model"):  # GPTSpec refuses d_model % n_heads != 0 at resolution
        resolve_config(InductionHeadsConfig, "smoke", {"model.d_model": 18, "model.n_heads": 4})
    with pytest.raises(ConfigError, match="model.n_layers"):
        InductionHeads().validate(resolve_config(InductionHeadsConfig, "smoke", {"model.n_layers": 1}))
    with pytest.raises(ConfigError, match="model.mlp"):
        InductionHeads().validate(resolve_config(InductionHeadsConfig, "smoke", {"model.mlp": "gelu"}))
    with pytest.raises(ConfigError, match="shakespeare_seq_len"):
        InductionHeads().validate(resolve_config(InductionHeadsConfig, "smoke", {"shakespeare_seq_len": 16}))
    with pytest.raises(ConfigError, match="shakespeare_seg_min"):
        InductionHeads().validate(resolve_config(InductionHeadsConfig, "smoke", {"shakespeare_seg_min": 9}))
    with pytest.raises(ConfigError, match="worlds"):
        resolve_config(InductionHeadsConfig, "smoke", {"worlds": ["tolstoy"]})
    with pytest.raises(ConfigError, match="shakespeare_tokenizer"):
        resolve_config(InductionHeadsConfig, "smoke", {"shakespeare_tokenizer": "words"})
    # the synthetic world alone needs no corpus and no Shakespeare checks
    InductionHeads().validate(resolve_config(InductionHeadsConfig, "smoke", {"worlds": ["synthetic"],
                                                                             "shakespeare_seq_len": 16}))


def test_smoke_run(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(InductionHeadsConfig, "smoke", {"threads": 1})
    run = run_experiment(InductionHeads(), cfg, tmp_path / "run", progress=False, log=lambda *a, **k: None)
    res = run.results()
    assert (res["status"] == "ok").all() and set(res["n_layers"]) == {2}
    assert set(res["world"]) == {"synthetic", "shakespeare"} and len(res) == 8
    assert set(res["arm"]) == {"real", "null", "init", "otherhead"}
    for w in ("synthetic", "shakespeare"):  # the copying null reads a head that is not the real model's best one
        real, oh = (res[(res["world"] == w) & (res["arm"] == a)].iloc[0] for a in ("real", "otherhead"))
        assert oh["best_head"] != real["best_head"] and oh["best_head"] == real["other_head"]
        assert oh["copy_best"] == real["copy_other"] and -1 <= oh["copy_best"] <= 1
    sh_oh = res[(res["world"] == "shakespeare") & (res["arm"] == "otherhead")].iloc[0]
    res = res[~res["arm"].isin(["init", "otherhead"])]  # the derived rows: pm and copy scores only
    assert res["pm_best"].between(0, 1).all() and res["copy_best"].between(-1, 1).all()
    assert (run.path / "figures" / "induction_heads.png").exists()
    assert (run.path / "figures" / "induction_heads_shakespeare.png").exists()
    vs = {v.claim_id: v for v in run.verdicts()}
    # the null arms are measured and do not meet the rules after 6 steps
    assert vs["prefix-matching-head"].null_value is not None and vs["prefix-matching-head"].null_passed is False
    assert vs["copying"].null_value is not None
    assert vs["phase-change"].null_value is None  # one seed: no other seed to pair its events with
    assert res["late_final"].max() > 0.25 * math.log(cfg.n_tokens)  # untrained: the gate cannot pass
    sh = res[res["world"] == "shakespeare"]
    assert (sh["val_nll"] > sh["bigram_nll"]).all()  # 6 steps: the learned-language gate cannot pass
    for c in ("shakespeare-prefix-matching-head", "shakespeare-repeat-icl"):
        assert vs[c].null_passed is False, c  # the Shakespeare null arms are measured and do not meet the rules
    # one random head of a 6-step model: its copying score is measured, at whatever value its draw gives
    assert vs["shakespeare-copying"].null_value == pytest.approx(float(sh_oh["copy_best"]))
    assert vs["shakespeare-prefix-matching-head"].null_value is not None
    assert vs["shakespeare-repeat-icl"].null_value is not None


def test_copying_null_draws_a_non_best_head_and_phase_change_null_pairs_other_seeds():
    from lmsci.experiments.syntax._induction_shakespeare import cross_seed, cross_seed_window, other_head

    draws = [other_head(s, 4, 2) for s in range(200)]
    assert 2 not in draws and set(draws) == {0, 1, 3}  # never the best head, every other head reachable
    assert other_head(7, 4, 2) == other_head(7, 4, 2) and other_head(0, 2, 1) == 0
    df = pd.DataFrame({"seed_index": [2, 0, 1], "t_pm": [30, 10, 20], "t_icl": [33, 11, 22], "steps": 100})
    sh = cross_seed(df)
    # seed k's t_pm now meets seed k+1's t_icl (cyclically): no seed is paired with itself
    assert list(sh["seed_index"]) == [0, 1, 2] and list(sh["t_pm"]) == [10, 20, 30]
    assert list(sh["t_icl"]) == [22, 33, 11]
    assert cross_seed_window(df) == (pytest.approx(0.19), False)
    assert cross_seed(df.iloc[:1]) is None and cross_seed_window(df.iloc[:1]) is None
    assert cross_seed_window(df.assign(t_icl=[None, 11, 22]))[0] is None  # an event missing: cannot meet the rule


def test_null_arm_is_evaluated_about_ten_times_the_real_arm_at_its_cadence():
    from lmsci.experiments.syntax._induction_shakespeare import eval_cadence

    assert eval_cadence(50, 3000, True) == 50 and eval_cadence(50, 3000, False) == 300
    assert eval_cadence(2, 6, False) == 2  # never finer than the configured cadence
