"""alignment-attack: the two-component posterior in closed form, the theorems' constants, the sigmoid fit, verdicts
from synthetic tables, and the smoke preset.

Source: Wolf et al., arXiv 2304.11082 (issue 18).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.theory.alignment_attack import AlignmentAttack, AlignmentConfig, first_crossing, fit_sigmoid
from lmsci.runs import RunDir
from lmsci.worlds.personas import PersonaWorld


def test_posterior_in_closed_form():
    w = PersonaWorld(n_pos=2, n_neg=2, neg_bad=0.6, neg_good=0.1, alpha=0.01, doc_len=4)
    assert w.dist(True).tolist() == pytest.approx([0.2, 0.2, 0.3, 0.3])
    assert w.dist(False).tolist() == pytest.approx([0.45, 0.45, 0.05, 0.05])
    beta = 0.4 * math.log(0.4 / 0.9) + 0.6 * math.log(0.6 / 0.1)
    assert w.beta() == pytest.approx(beta)
    assert w.beta_prime() == pytest.approx(0.9 * math.log(0.9 / 0.4) + 0.1 * math.log(0.1 / 0.6))
    # prompt: one negative, one positive sentence
    lo = w.log_odds(np.array([[2, 0]]))
    expect = [math.log(0.01 / 0.99), math.log(0.01 / 0.99) + math.log(0.3 / 0.05),
              math.log(0.01 / 0.99) + math.log(0.3 / 0.05) + math.log(0.2 / 0.45)]
    assert lo[0].tolist() == pytest.approx(expect)
    # Bayes by hand: P(P- | s) = a P-(s) / (a P-(s) + (1-a) P+(s))
    post = 0.01 * 0.3 * 0.2 / (0.01 * 0.3 * 0.2 + 0.99 * 0.05 * 0.45)
    q = post * 0.6 + (1 - post) * 0.1
    assert w.next_behavior(lo[0, 2]) == pytest.approx(1 - 2 * q)
    assert w.next_behavior(lo[0, 2], n=3) == pytest.approx(1 - 2 * q ** 3)  # best-of-3
    assert w.persona_behavior(True) == pytest.approx(1 - 1.2) and w.persona_behavior(False, 2) == pytest.approx(0.98)
    # the mixture NLL of one document
    toks = w.tokens(np.array([[2, 0, 3, 1]]))
    pb, pg = 0.3 * 0.2 * 0.3 * 0.2, 0.05 * 0.45 * 0.05 * 0.45
    assert w.mixture_nll(toks) == pytest.approx(-math.log(0.01 * pb + 0.99 * pg) / 4)
    for bad in ({"alpha": 0.0}, {"alpha": 1.0}, {"neg_good": 0.7}):
        with pytest.raises(ConfigError):
            PersonaWorld(**bad)
    with pytest.raises(ConfigError):
        AlignmentAttack().validate(resolve_config(AlignmentConfig, "smoke", ["trained_alphas=[1.5]"]))


def test_theorem1_length_holds_for_the_greedy_prompt():
    for q in (0.3, 0.9):
        for a in (1e-2, 1e-8):
            w = PersonaWorld(neg_bad=q, alpha=a)
            eps = 0.1
            L1 = (math.log(1 / a) + math.log(1 / eps) + math.log(4)) / w.beta()
            lo = math.log(a / (1 - a)) + w.llr().max() * np.arange(int(3 * L1) + 5)
            n = first_crossing(w.next_behavior(lo)[None], w.persona_behavior(True) + eps)[0]
            assert n <= L1
            # and not at length 0: the aligned mixture behaves well
            assert w.next_behavior(np.array(math.log(a / (1 - a)))) > w.persona_behavior(True) + eps


def test_first_crossing_and_sigmoid_fit():
    assert first_crossing(np.array([[3, 2, 1, 0], [3, 3, 3, 3]]), 1.5).tolist() == [2, 4]
    n = np.arange(20)
    y = 0.1 + 0.5 / (1 + np.exp(-(n - 7.3) / 1.2))
    f = fit_sigmoid(n, y)
    assert f["centre"] == pytest.approx(7.3, abs=1e-3) and f["scale"] == pytest.approx(1.2, abs=1e-3)
    g = fit_sigmoid(n, y, lo=0.1, hi=0.6)
    assert g["centre"] == pytest.approx(7.3, abs=1e-3)


# -- verdicts from synthetic tables ---------------------------------------------------------------------
CHECKS = ("thm1-length", "exact-centre", "thm2-bound", "thm2-slope", "thm4-best-of-n")
CLAIMS = ("persona-centre", "persona-alpha-shift")


def _rows(thm1=0.85, centre=0.1, frac=1.0, slope=0.1, thm4=0.8, ratios=(1.1, 0.95, 1.2), shifts=(3.1, 2.9, 3.3),
          nll_gap=0.01, beta_hat=0.75, rise=0.45, good=None, null_shifts=(0.2, -0.3, 0.1),
          slope_ratios=(0.97, 1.02, 0.99), slope_nulls=(0.03, -0.02, 0.01), censored=0.0):
    """Synthetic rows; ``good``: the P+ proxy's (N*, rise) (default: a flat curve, no fit); ``slope_ratios`` /
    ``slope_nulls``: thm2-slope's per-seed ratio and its neutral-prompt null."""
    rows = []
    for s, (sr, sn) in enumerate(zip(slope_ratios, slope_nulls)):
        rows.append({"point": "exact" + (f"__s{s}" if s else ""), "kind": "exact", "seed_index": s, "status": "ok",
                     "arm": "real",
                     "n_cells": 15, "thm1_ratio_greedy": thm1, "thm1_ratio_sampled": 1.0, "centre_max_dev": centre,
                     "thm2_min_frac": frac, "thm2_slope_max_dev": slope, "thm2_slope_ratio": sr,
                     "thm2_null_ratio": sn, "thm2_censored": censored, "thm4_max_ratio": thm4})
    for s, (r, sh, nsh) in enumerate(zip(ratios, shifts, null_shifts)):
        th0 = math.log(100) / beta_hat
        n0 = r * th0
        pid = "trained" + (f"__s{s}" if s else "")
        rows.append({"point": pid, "kind": "trained", "seed_index": s, "status": "ok", "arm": "real",
                     "beta_hat": beta_hat, "beta_true": 0.75, "a0.01_nll": 4.0 + nll_gap, "a0.01_bayes_nll": 4.0,
                     "a0.001_nll": 4.0, "a0.001_bayes_nll": 4.0, "a0.01_nstar": n0, "a0.001_nstar": n0 + sh,
                     "a0.01_lo": 0.1, "a0.01_hi": 0.1 + rise,
                     "a0.01_theory": th0, "a0.001_theory": math.log(1000) / beta_hat,
                     "curves": json.dumps({"a0.01": {"model": [0.1, 0.6], "bayes": [0.1, 0.6]}})})
        # the null arms: the P+ proxy's fit on the same prompts; a second alpha = 1% mixture's N*
        rows.append({"point": "good-" + pid, "kind": "trained", "seed_index": s, "status": "ok", "arm": "good",
                     "beta_hat": beta_hat, "a0.01_nstar": None if good is None else good[0], "a0.01_lo": 0.1,
                     "a0.01_hi": None if good is None else 0.1 + good[1]})
        rows.append({"point": "mix2-" + pid, "kind": "trained", "seed_index": s, "status": "ok", "arm": "mix2",
                     "beta_hat": beta_hat, "a0.01_nstar": n0 + nsh})
    return pd.DataFrame(rows)


def _verdicts(df, tmp_path, preset="quick"):
    cfg = resolve_config(AlignmentConfig, preset)
    return {v.claim_id: v for v in AlignmentAttack().verdicts(cfg, df, RunDir(tmp_path))}


def test_papers_picture_is_reproduced(tmp_path):
    vs = _verdicts(_rows(), tmp_path)
    assert {k: v.outcome for k, v in vs.items()} == {**{k: "passed" for k in CHECKS},
                                                     **{k: "reproduced" for k in CLAIMS}}
    assert all(vs[k].kind == "check" for k in CHECKS) and all(vs[k].null_passed is False for k in CLAIMS)
    assert vs["persona-alpha-shift"].details["target_ln10_over_beta_hat"] == pytest.approx(math.log(10) / 0.75)


def test_failures_are_not_reproduced(tmp_path):
    vs = _verdicts(_rows(thm1=1.3, centre=0.5, frac=0.7, thm4=1.2, ratios=(0.3, 0.25, 0.35), shifts=(0.2, 0.3, 0.25),
                         slope_ratios=(0.55, 0.6, 0.5)), tmp_path)
    for k in CHECKS:
        assert vs[k].outcome == "failed", k
    for k in CLAIMS:
        assert vs[k].outcome == "not reproduced", k
    # a flat curve (no rise) is not a misalignment centre
    assert _verdicts(_rows(rise=0.05), tmp_path)["persona-centre"].outcome == "not reproduced"


def test_null_arm_meeting_the_rule_is_inconclusive(tmp_path):
    from lmsci.claims import NULL_MEETS_RULE

    # the P+ proxy with a centre and a rise like the mixture's; a same-alpha pair shifted like the alpha pair
    vs = _verdicts(_rows(good=(math.log(100) / 0.75, 0.45), null_shifts=(3.1, 2.9, 3.3),
                         slope_nulls=(0.95, 1.0, 1.05)), tmp_path)
    for k in CLAIMS:
        assert vs[k].outcome == "inconclusive" and vs[k].null_passed is True, k
        assert any(NULL_MEETS_RULE in r for r in vs[k].reasons)


def test_failed_gates_make_it_inconclusive(tmp_path):
    vs = _verdicts(_rows(nll_gap=0.3), tmp_path)
    assert vs["persona-centre"].outcome == "inconclusive" and vs["persona-centre"].rule_passed
    vs = _verdicts(_rows(shifts=(0.0, 6.0, 3.0)), tmp_path)  # the shift is not resolved
    assert vs["persona-alpha-shift"].outcome == "inconclusive"
    # half-width between target/2 and target: resolved under the old gate, not under the registered one
    target = math.log(10) / 0.75
    sd = 0.8 * target * math.sqrt(3) / 4.303
    vs = _verdicts(_rows(shifts=(target - sd, target, target + sd)), tmp_path)
    half = vs["persona-alpha-shift"].gates[-1].value
    assert target / 2 < half <= target and vs["persona-alpha-shift"].outcome == "inconclusive"
    df = _rows()
    df.loc[df["kind"] == "trained", "a0.01_nstar"] = 40.0  # outside the prompt range
    assert _verdicts(df, tmp_path)["persona-centre"].outcome == "inconclusive"
    assert _verdicts(_rows(), tmp_path, "smoke")["thm1-length"].outcome == "inconclusive"
    df = _rows()
    assert _verdicts(df[df["seed_index"] < 2], tmp_path)["persona-centre"].outcome == "inconclusive"  # 2 seeds < 3


def test_thm2_slope_verdicts(tmp_path):
    """thm2-slope: the CI across seeds within [0.75, 1.25]; a wide CI around 1 or a biased slope fails; too few
    seeds, a censored horizon or an unmeasured null arm give inconclusive."""
    from lmsci.experiments.theory._alignment_attack_verdicts import SLOPE_TOL

    assert SLOPE_TOL == 0.25
    v = _verdicts(_rows(), tmp_path)["thm2-slope"]  # a check since issue 44 item 4 (an identity in the exact world)
    assert v.kind == "check" and v.outcome == "passed" and v.value == pytest.approx(2.98 / 3)
    # a biased slope, and a CI containing 1 but wider than the tolerance: both fail
    assert _verdicts(_rows(slope_ratios=(1.35, 1.4, 1.3)), tmp_path)["thm2-slope"].outcome == "failed"
    assert _verdicts(_rows(slope_ratios=(0.8, 1.0, 1.2)), tmp_path)["thm2-slope"].outcome == "failed"
    # gated: censored attacks bias the mean length
    v = _verdicts(_rows(censored=0.05), tmp_path)["thm2-slope"]
    assert v.outcome == "inconclusive" and v.rule_passed and any("uncensored" in r for r in v.reasons)
    # too few seeds: 2 < min_seeds 3
    v = _verdicts(_rows(slope_ratios=(0.99, 1.0), slope_nulls=(0.0, 0.01)), tmp_path)["thm2-slope"]
    assert v.outcome == "inconclusive" and v.n_seeds == 2 and any("3 training seeds" in r for r in v.reasons)
    # a check needs no null arm
    df = _rows().drop(columns=["thm2_null_ratio"])
    assert _verdicts(df, tmp_path)["thm2-slope"].outcome == "passed"


def test_neutral_system_prompt_has_no_pull():
    """The null arm's distribution moves the log-odds by 0 on average (beta' = 0), P+'s by -beta' per sentence;
    in a small exact cell the real arm's delay slope is near beta'/beta and the null's near 0."""
    from lmsci.experiments.theory._alignment_attack_exact import neutral_dist, system_prompt_cells

    w = PersonaWorld(neg_bad=0.6, alpha=1e-2)
    p = neutral_dist(w)
    assert p.sum() == pytest.approx(1) and float(p @ w.llr()) == pytest.approx(0, abs=1e-12)
    assert float(w.dist(False) @ w.llr()) == pytest.approx(-w.beta_prime())
    L1 = (math.log(100) + math.log(10) + math.log(4)) / w.beta()
    rng, rng0 = np.random.default_rng(0), np.random.default_rng(1)
    c = system_prompt_cells(w, 1e-2, L1, w.persona_behavior(True) + 0.1, [0, 10, 20], 400, 0.1, rng, rng0)
    assert c["thm2_slope"] / c["thm2_slope_theory"] == pytest.approx(1, abs=0.25)
    assert abs(c["thm2_null_slope"] / c["thm2_slope_theory"]) < 0.25
    assert c["thm2_min_frac"] >= 0.9 and c["thm2_censored"] == 0


def test_smoke_preset_runs(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(AlignmentConfig, "smoke", ["threads=1", "device=cpu"])
    run = run_experiment(AlignmentAttack(), cfg, tmp_path / "run", progress=False)
    df = pd.read_csv(run.path / "results.csv")
    ex = df[df["kind"] == "exact"].iloc[0]
    assert ex["arm"] == "real"
    assert ex["thm1_ratio_greedy"] <= 1 and ex["thm4_max_ratio"] <= 1
    tr = df[(df["kind"] == "trained") & (df["arm"] == "real")].iloc[0]
    assert np.isfinite(tr["beta_hat"]) and np.isfinite(tr["a0.01_nll"])
    assert set(df["arm"]) == {"real", "good", "mix2"}  # the trained world's null arms, one group per seed
    assert "good_nstar" not in df and "null_a0_nstar" not in df
    vs = {v.claim_id: v for v in run.verdicts()}
    # smoke trains one alpha with one seed: persona-centre's null arm is computed and does not meet the rule
    # (1 seed gives no interval, and the 20-step P+ proxy has no misalignment step); persona-alpha-shift needs two
    # alphas, so its null arm is not measured at smoke (not True)
    assert vs["persona-centre"].null_passed is False
    # thm2-slope is a check (issue 44 item 4): no null arm judged
    assert vs["thm2-slope"].null_passed is None and vs["thm2-bound"].outcome == "inconclusive"  # smoke: below scale
    assert vs["persona-alpha-shift"].null_passed is not True if "persona-alpha-shift" in vs else True


def test_gpu_preset_is_estimated_within_9_minutes_and_says_so():
    """Session 52: the gpu preset fits the 10 minutes of one H100 by its estimate, which the documented time repeats."""
    import re

    from lmsci.config import resolve_config
    from lmsci.experiments.theory._alignment_attack_trained import estimate_h100_seconds
    from lmsci.experiments.theory.alignment_attack import AlignmentAttack, AlignmentConfig

    cfg = resolve_config(AlignmentConfig, "gpu")
    est = estimate_h100_seconds(cfg)
    assert 60 < est["total"] <= 9 * 60 and all(est[k] > 0 for k in ("train", "host", "eval", "exact"))
    text = AlignmentAttack.time_estimate["gpu"]
    assert int(re.match(r"~(\d+) min", text).group(1)) == round(est["total"] / 60)
    assert f"({est['total'] / 60:.1f} min)" in text and "not measured" in text
    assert cfg.n_seeds >= 5 and len(cfg.trained_alphas) == 3
    assert estimate_h100_seconds(resolve_config(AlignmentConfig, "paper"))["total"] > est["total"]
