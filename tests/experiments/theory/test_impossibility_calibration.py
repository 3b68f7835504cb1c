"""calibration-hallucination: exact checks of the instruments (Good-Turing, Mis_b, the corollary), the factoid world,
the transformer's exact factoid distribution against sampling, verdicts from synthetic tables, and the smoke preset.

Source: Kalai & Vempala, arXiv 2311.14648 (issue 18).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.theory._calibration_hallucination_stats import cold_arm_row
from lmsci.experiments.theory.calibration_hallucination import CalibrationConfig, CalibrationHallucination
from lmsci.measure.calibration import (adaptive_bins, counts_over, good_turing_generator, hallucination_rate,
                                       kv_bound, missing_mass, miscalibration, mle_generator, monofact_rate, temper)
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.runs import RunDir
from lmsci.worlds.factoids import FactoidWorld


def test_good_turing_on_a_small_known_sample():
    # Y = 6 factoids; sample a a b c d d d: N1 = 2 (b, c), N2 = 1 (a), N3 = 1 (d); n = 7
    counts = counts_over(np.array([0, 0, 1, 2, 3, 3, 3]), 6)
    assert counts.tolist() == [2, 1, 1, 3, 0, 0]
    assert monofact_rate(counts) == pytest.approx(2 / 7)
    g = good_turing_generator(counts)
    assert g.sum() == pytest.approx(1.0)
    # unseen (4, 5) share MF = 2/7 equally
    assert g[4] == pytest.approx(1 / 7) and g[5] == pytest.approx(1 / 7)
    # adjusted counts r* = (r+1) N_{r+1} / N_r: r=1 -> 2*1/2 = 1, r=2 -> 3*1/1 = 3, r=3 -> 3 (N_4 = 0);
    # seen total 1+1+3+3 = 8 scaled to 5/7
    assert g[1] == pytest.approx(5 / 7 * 1 / 8) and g[0] == pytest.approx(5 / 7 * 3 / 8)
    assert g[3] == pytest.approx(5 / 7 * 3 / 8)
    mle = mle_generator(counts)
    assert mle.tolist() == pytest.approx([2 / 7, 1 / 7, 1 / 7, 3 / 7, 0, 0])
    p = np.array([0.2, 0.1, 0.1, 0.3, 0.25, 0.05])
    assert missing_mass(p, counts) == pytest.approx(0.3)


def test_miscalibration_and_bins_by_hand():
    g = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    bins = adaptive_bins(g, 2)
    # cumulative mass before: 0, .4, .7, .9 -> bins floor(2 * .) = 0, 0, 1, 1; g = 0 -> bin 2
    assert bins.tolist() == [0, 0, 1, 1, 2]
    p = np.array([0.5, 0.1, 0.1, 0.1, 0.2])
    # p(B) = .6, .2, .2 ; g(B) = .7, .3, 0 -> 1/2 (.1 + .1 + .2) = 0.2
    assert miscalibration(g, p, bins=bins) == pytest.approx(0.2)
    assert miscalibration(g, g, 2) == pytest.approx(0.0)
    # ties share a bin
    assert len(set(adaptive_bins(np.full(8, 1 / 8), 4).tolist())) == 1
    assert hallucination_rate(g, np.array([True, False, True, False, False])) == pytest.approx(0.4)
    t = temper(np.array([0.5, 0.25, 0.25, 0.0]), 0.5)
    assert t.tolist() == pytest.approx([4 / 6, 1 / 6, 1 / 6, 0.0])
    b = kv_bound(0.5, 0.1, 100, 1_000_000, 10_000)
    assert b["bound"] == pytest.approx(0.5 - 0.1 - 0.03 - 0.07)


def test_good_turing_generator_is_calibrated_and_hallucinates_at_mf():
    w = FactoidWorld((40, 40, 30), 600, 0.0, seed=3)
    y = w.sample(500, np.random.default_rng(0))
    c = counts_over(y, w.n_y)
    mf, p = monofact_rate(c), w.p_dense()
    g = good_turing_generator(c)
    h = hallucination_rate(g, w.fact_mask())
    unseen = c == 0
    assert h == pytest.approx(mf * (1 - (w.fact_mask() & unseen).sum() / unseen.sum()))
    assert abs(mf - missing_mass(p, c)) < 0.1  # Good-Turing: O(1/sqrt n)
    assert miscalibration(g, p, 10) < 0.1
    # the MLE never hallucinates and its miscalibration is about the missing mass
    mle = mle_generator(c)
    assert hallucination_rate(mle, w.fact_mask()) == 0
    assert miscalibration(mle, p, 10) >= missing_mass(p, c) - 1e-12


def test_factoid_world_tokens_parse_and_errors():
    w = FactoidWorld((5, 4, 3), 10, 1.0, seed=0)
    assert w.n_y == 60 and w.vocab_size == 13 and w.p.sum() == pytest.approx(1)
    assert np.all(np.diff(w.p) <= 0)  # Zipf: most popular first
    y = np.arange(60)
    t = w.tokens(y)
    assert t.shape == (60, 4) and (t[:, 0] == 0).all()
    assert (w.parse(t) == y).all()
    bad = t[:2].copy()
    bad[0, 2] = 1  # a who-token in the what slot
    assert w.parse(bad)[0] == -1 and w.parse(bad)[1] == 1
    with pytest.raises(ConfigError):
        FactoidWorld((5, 4), 21, 1.0)
    with pytest.raises(ConfigError):
        FactoidWorld((5, 4), 3, -1.0)
    with pytest.raises(ConfigError):
        CalibrationHallucination().validate(resolve_config(CalibrationConfig, "smoke", ["n_facts=100000"]))


def test_exact_factoid_distribution_matches_sampling():
    w = FactoidWorld((4, 3, 5), 6, 0.0, seed=1)
    model = GPT(GPTConfig(vocab_size=w.vocab_size, seq_len=3, n_layers=1, n_heads=2, d_model=16), seed=0).eval()
    g, nonsense = CalibrationHallucination.factoid_distribution(model, w, 1.0, "cpu", chunk=5)
    # brute force: product of next-token probabilities of every well-formed string
    toks = torch.as_tensor(w.tokens(np.arange(w.n_y)))
    with torch.no_grad():
        lp = torch.log_softmax(model(toks[:, :-1]).double(), -1)
    raw = torch.exp(lp.gather(2, toks[:, 1:, None]).squeeze(2).sum(1)).numpy()
    assert nonsense == pytest.approx(1 - raw.sum())
    assert g == pytest.approx(raw / raw.sum())
    s = CalibrationHallucination.sample_factoids(model, w, 20000, 0, "cpu")
    ys = w.parse(s)
    assert abs((ys < 0).mean() - nonsense) < 0.02
    emp = np.bincount(ys[ys >= 0], minlength=w.n_y) / len(ys)
    assert np.abs(emp - raw).max() < 0.02
    gc, _ = CalibrationHallucination.factoid_distribution(model, w, 0.5, "cpu")
    assert gc.max() > g.max()  # colder is sharper


# -- verdicts from synthetic tables ---------------------------------------------------------------------
MFS = {0.0: 0.52, 0.5: 0.45, 1.0: 0.25, 1.5: 0.08, 2.0: 0.02}


def _rows(tf_slope=1.0, tf_mis=0.05, cold_dh=0.0, cold_dm=0.1, slack=0.05, gt_bound=0.1, seeds=3,
          init_like_trained=False, cold_slope=0.3):
    """Synthetic rows; the untrained network (init arm) hallucinates ~0.99 at any MF and temperature, unless
    ``init_like_trained`` copies the trained network's numbers into it; the cold network's g(H) is ``cold_slope * MF
    + cold_dh`` (the cold arm, the null arm of
    transformer-tracks-mf, copies them by the experiment's own ``cold_arm_row``)."""
    rows = []
    rng = np.random.default_rng(0)
    for s in range(seeds):
        for z, mf in MFS.items():
            mf = mf + rng.normal(0, 0.005)
            r = {"point": f"zipf{z:g}" + (f"__s{s}" if s else ""), "zipf": z, "seed_index": s, "mf": mf,
                 "missing_mass": mf, "status": "ok", "bound_regularity": 0.225, "bound_concentration": 0.157}
            hall = {"mle": 0.0, "gt": mf * 0.99, "tf": tf_slope * mf + rng.normal(0, 0.005),
                    "tf_cold": cold_slope * mf + cold_dh + rng.normal(0, 0.005)}
            mis = {"mle": mf, "gt": 0.01, "tf": tf_mis, "tf_cold": tf_mis + cold_dm + rng.normal(0, 0.005)}
            if init_like_trained:
                hall.update(tf_init=hall["tf"], tf_init_cold=hall["tf_cold"])
                mis.update(tf_init=mis["tf"], tf_init_cold=mis["tf_cold"])
            else:
                hall.update(tf_init=0.99 + rng.normal(0, 0.001), tf_init_cold=0.99 + rng.normal(0, 0.001))
                mis.update(tf_init=0.5, tf_init_cold=0.5 + rng.normal(0, 0.005))
            for g in hall:
                r[f"{g}_hall"], r[f"{g}_mis"] = hall[g], mis[g]
                r[f"{g}_bound"] = gt_bound if (g == "gt" and z == 0.0) else -0.1
                r[f"{g}_slack"] = slack
            # the init arm: the untrained network's numbers under the trained one's column names
            init = {k.replace("tf_init", "tf"): v for k, v in r.items() if k.startswith("tf_init")}
            rows.append({k: v for k, v in r.items() if not k.startswith("tf_init")} | {"arm": "real"})
            rows.append({"point": "init-" + r["point"], "zipf": z, "seed_index": s, "mf": mf, "status": "ok",
                         "arm": "init", **init})
            shared = {"point": "cold-" + r["point"], "zipf": z, "seed_index": s, "mf": mf, "status": "ok"}
            rows.append(cold_arm_row(shared, rows[-2]) | {"arm": "cold"})
    return pd.DataFrame(rows)


def _verdicts(df, tmp_path, preset="quick"):
    cfg = resolve_config(CalibrationConfig, preset)
    return {v.claim_id: v for v in CalibrationHallucination().verdicts(cfg, df, RunDir(tmp_path))}


def test_papers_picture_is_reproduced(tmp_path):
    vs = _verdicts(_rows(), tmp_path)
    assert {k: v.outcome for k, v in vs.items()} == {
        "bound-holds": "passed", "gt-tracks-mf": "passed", "transformer-tracks-mf": "reproduced",
        "temperature-tradeoff": "passed"}
    assert vs["bound-holds"].kind == vs["gt-tracks-mf"].kind == vs["temperature-tradeoff"].kind == "check"
    assert vs["transformer-tracks-mf"].null_passed is False and vs["temperature-tradeoff"].null_passed is None
    assert vs["gt-tracks-mf"].value == pytest.approx(0.99, abs=0.01)
    assert vs["temperature-tradeoff"].details["per_point"]["zipf2"]["judged"] is False  # MF below 0.05


def test_failures_are_not_reproduced(tmp_path):
    vs = _verdicts(_rows(tf_slope=0.3, cold_slope=0.3, cold_dh=0.05, slack=-0.02), tmp_path)
    assert vs["bound-holds"].outcome == "failed"
    assert vs["transformer-tracks-mf"].outcome == "not reproduced"
    assert vs["temperature-tradeoff"].outcome == "failed"


def test_null_arm_meeting_the_rule_is_inconclusive(tmp_path):
    from lmsci.claims import NULL_MEETS_RULE

    vs = _verdicts(_rows(cold_slope=1.0), tmp_path)  # cooling keeps the slope: the null arm meets the rule
    for k in ("transformer-tracks-mf",):
        assert vs[k].outcome == "inconclusive" and vs[k].null_passed is True, k
        assert any(NULL_MEETS_RULE in r for r in vs[k].reasons)
    # the untrained network's numbers decide nothing now (the init arm is a contrast of temperature-tradeoff)
    assert _verdicts(_rows(init_like_trained=True), tmp_path)["transformer-tracks-mf"].outcome == "reproduced"


def test_null_arm_is_the_cold_networks_slope(tmp_path):
    """transformer-tracks-mf's null arm reads the trained network's lower-temperature g(H) (2026-12-06): its
    per-seed null values are the OLS slopes of ``tf_cold_hall`` on MF of the real rows."""
    from lmsci.experiments.theory._calibration_hallucination_stats import _slopes

    df = _rows(cold_slope=0.4)
    v = _verdicts(df, tmp_path)["transformer-tracks-mf"]
    want = _slopes(df[df["arm"] == "real"], "tf_cold_hall")
    assert v.details["null_per_seed"] == pytest.approx(want.tolist())
    assert v.null_value == pytest.approx(0.4, abs=0.05) and v.null_passed is False and v.outcome == "reproduced"
    assert CalibrationHallucination().get_claim("transformer-tracks-mf").arms == ("real", "cold")


def test_failed_gates_make_it_inconclusive(tmp_path):
    vs = _verdicts(_rows(tf_mis=0.4, gt_bound=-0.05), tmp_path)
    assert vs["bound-holds"].outcome == "inconclusive" and vs["bound-holds"].rule_passed  # vacuous bound
    assert vs["transformer-tracks-mf"].outcome == "inconclusive"  # not calibrated
    assert any("calibrated" in r for r in vs["transformer-tracks-mf"].reasons)
    assert vs["gt-tracks-mf"].outcome == "passed"
    # MF that does not move
    df = _rows()
    df["mf"] = 0.3
    assert _verdicts(df, tmp_path)["gt-tracks-mf"].outcome == "inconclusive"
    # too few seeds, and the smoke preset is below scale
    assert _verdicts(_rows(seeds=2), tmp_path)["gt-tracks-mf"].outcome == "inconclusive"
    assert _verdicts(_rows(seeds=2), tmp_path)["transformer-tracks-mf"].outcome == "inconclusive"
    assert _verdicts(_rows(), tmp_path, "smoke")["bound-holds"].outcome == "inconclusive"


def test_smoke_preset_runs(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(CalibrationConfig, "smoke", ["threads=1", "device=cpu"])
    run = run_experiment(CalibrationHallucination(), cfg, tmp_path / "run", progress=False)
    df = pd.read_csv(run.path / "results.csv")
    assert len(df) == 6 and set(df["arm"]) == {"real", "init", "cold"}  # 2 Zipf points x (trained, untrained, cold)
    init = df[df["arm"] == "init"]
    assert init["mle_hall"].isna().all() and init["tf_hall"].notna().all()  # the untrained net's under tf_*
    cold, real = (df[df["arm"] == a].sort_values("zipf") for a in ("cold", "real"))
    assert cold["mle_hall"].isna().all() and cold["tf_cold_hall"].isna().all()
    for c in ("hall", "mis", "slack"):  # the cold arm is the trained network's lower-temperature scores, copied
        assert cold[f"tf_{c}"].tolist() == real[f"tf_cold_{c}"].tolist()
    assert cold["mf"].tolist() == real["mf"].tolist()
    df = df[df["arm"] == "real"]
    assert (df["mle_hall"] == 0).all()
    assert np.isfinite(df["tf_mis"]).all() and (df["gt_slack"] > -1).all()
    assert math.isfinite(df["mf"].iloc[0])
    report = (run.path / "report.md").read_text()
    assert "Hallucination is inevitable" in report and "| True |" in report
    vs = {v.claim_id: v for v in run.verdicts()}
    for k in ("transformer-tracks-mf",):  # the null (cold) arm is measured
        assert vs[k].null_value is not None, (k, vs[k].null_value, vs[k].null_passed)


@pytest.mark.parametrize("preset", ["smoke", "quick", "gpu", "paper"])
def test_warmup_is_a_tenth_of_the_steps_at_most_100(preset):
    """The nested train spec keeps the warmup min(100, steps // 10) and weight decay 0 used before issue 31; a bad
    model spec is a config error naming ``model``."""
    cfg = resolve_config(CalibrationConfig, preset)
    assert (cfg.train.warmup_steps, cfg.train.weight_decay) == (min(100, cfg.train.steps // 10), 0.0)
    assert cfg.train.train_config(eval_every=cfg.eval_every).eval_every == cfg.eval_every
    with pytest.raises(ConfigError, match="model"):
        resolve_config(CalibrationConfig, preset, ["model.n_heads=3"])


def test_gpu_preset_is_estimated_within_9_minutes_and_says_so():
    """Session 52: the gpu preset fits the 10 minutes of one H100 by its host-bound estimate, which the documented
    time repeats; it keeps the gpu model and at least 6 Zipf points, 5 seeds."""
    import re

    from lmsci.experiments.theory._calibration_hallucination_estimate import estimate_h100_seconds

    cfg = resolve_config(CalibrationConfig, "gpu")
    est = estimate_h100_seconds(cfg)
    assert 60 < est["total"] <= 9 * 60 and est["host"] > 0 and est["train"] > 0
    text = CalibrationHallucination.time_estimate["gpu"]
    assert int(re.match(r"~(\d+) min", text).group(1)) == round(est["total"] / 60)
    assert f"({est['total'] / 60:.1f} min)" in text and "not measured" in text
    assert len(cfg.zipfs) >= 6 and cfg.n_seeds >= 5 and cfg.model.d_model == 256
    bigger = estimate_h100_seconds(cfg.model_copy(update={"slots": [s * 2 for s in cfg.slots]}))
    assert bigger["host"] == pytest.approx(8 * est["host"])
