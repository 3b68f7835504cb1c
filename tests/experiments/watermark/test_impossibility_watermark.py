"""watermark: the thin wrappers around transformers' KGW implementation (named errors, z-test arithmetic, spike
entropy and Theorem 4.2 in closed form, detection of a watermarked random-init model), verdicts from synthetic
tables, and the smoke preset.

Source: Kirchenbauer et al., arXiv 2301.10226 (issue 18).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.watermark.watermark import Watermark, WatermarkConfig, thm42_z
from lmsci.stats import clopper_pearson
from lmsci.methods import watermark as wm
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf_convert import to_hf
from lmsci.runs import RunDir


def test_bad_watermark_settings_are_named_errors():
    for kw in ({"gamma": 0.0, "delta": 2}, {"gamma": 1.0, "delta": 2}, {"gamma": 0.25, "delta": -1},
               {"gamma": 0.25, "delta": 2, "scheme": "minhash"}):
        with pytest.raises(ConfigError):
            wm.watermarking_config(**kw)
    c = wm.watermarking_config(0.25, 2.0, "selfhash")
    assert c.context_width == 4 and c.greenlist_ratio == 0.25 and c.bias == 2.0
    with pytest.raises(ConfigError):
        Watermark().validate(resolve_config(WatermarkConfig, "smoke", ["gamma=1.5"]))
    with pytest.raises(ConfigError):  # a paper-preset model must be a local directory: nothing is downloaded
        Watermark().validate(resolve_config(WatermarkConfig, "paper", ["hf_model=facebook/opt-1.3b"]))


def test_spike_entropy_and_theorem_42_in_closed_form():
    z = wm.spike_modulus(0.25, 2.0)
    a = math.exp(2.0)
    assert z == pytest.approx(0.75 * (a - 1) / (1 + 0.25 * (a - 1)))
    # uniform over V: S = 1 / (1 + z / V); one-hot: S = 1 / (1 + z)
    V = 8
    assert float(wm.spike_entropy(torch.full((V,), 1 / V), z)) == pytest.approx(1 / (1 + z / V))
    assert float(wm.spike_entropy(torch.eye(V)[0], z)) == pytest.approx(1 / (1 + z))
    s = np.full((1, 200), 0.9)
    b = wm.thm42_green_bound(s, 0.25, 2.0)
    assert b[0] == pytest.approx(0.25 * a * 180 / (1 + (a - 1) * 0.25))
    # the implied z: (frac - gamma) sqrt(T) / sqrt(gamma (1 - gamma))
    frac = b[0] / 200
    assert thm42_z(0.9, 0.25, 2.0, 200) == pytest.approx((frac - 0.25) * math.sqrt(200) / math.sqrt(0.25 * 0.75))
    lo, hi = clopper_pearson(199, 200)
    assert lo == pytest.approx(0.97244, abs=1e-4) and hi == pytest.approx(0.99987, abs=1e-4)


def test_watermark_is_detected_on_a_high_entropy_model():
    # a random-init GPT has near-uniform next-token distributions: the strongest case for the watermark
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, seq_len=80, n_layers=1, n_heads=2, d_model=16), seed=0)
    hf = to_hf(model)
    prompts = torch.randint(0, 64, (6, 4))
    cfg = wm.watermarking_config(0.25, 4.0, "lefthash")
    marked = wm.generate(hf, prompts, 60, cfg, temperature=1.0, seed=0)
    plain = wm.generate(hf, prompts, 60, None, temperature=1.0, seed=0)
    assert marked.shape == (6, 60)
    det = wm.detector(hf, cfg, "cpu", ignore_repeated_ngrams=False)
    dm, dp = wm.detect(det, marked), wm.detect(det, plain)
    assert (dm["z"] > 4).all() and np.abs(dp["z"]).max() < 4
    # the z-test arithmetic of sec. 3
    assert dm["z"][0] == pytest.approx((dm["green"][0] - 0.25 * dm["scored"][0]) / math.sqrt(dm["scored"][0] * 0.25 * 0.75))
    assert dm["scored"][0] == 59  # h = 1: the first generated token has no context
    spike = wm.step_distributions_spike(hf, prompts, marked, 0.25, 4.0, temperature=1.0)
    assert spike.shape == (6, 60) and float(spike.min()) > 0.5


# -- verdicts from synthetic tables ---------------------------------------------------------------------
def _row(tpr=0.99, tpr_s=0.98, ks=0.4, diff=5.0, zpred=6.0, seeds=3, fpr=0.0, ks_marked=1e-30):
    """Rows of both arms: ``real`` scores the watermarked texts (TPR, their KS p ``ks_marked``), ``null`` the
    unwatermarked ones (detection rate ``fpr``, KS p ``ks``)."""
    rows = []
    for arm in ("real", "null"):
        for k in range(seeds):
            r = {"point": f"{arm}-kgw" + (f"__s{k}" if k else ""), "status": "ok", "seed_index": k, "arm": arm}
            for s, t in (("lefthash", tpr), ("selfhash", tpr_s)):
                r.update({f"{s}_tpr": t if arm == "real" else fpr, f"{s}_z_median": 8.0, f"{s}_green_frac": 0.6,
                          f"{s}_ks_p": ks_marked if arm == "real" else ks})
                if arm == "real":
                    r.update({f"{s}_mean_spike": 0.8, f"{s}_thm42_z": zpred, f"{s}_thm42_diff": diff,
                              f"{s}_thm42_diff_se": 1.0, f"{s}_thm42_green": 110.0, f"{s}_thm42_bound": 110.0 - diff,
                              f"{s}_thm42_frac_above": 0.8})
            rows.append(r)
    return pd.DataFrame(rows)


def _write_z(df, tmp_path, plain=0.0, marked=8.0, n=200):
    """Each real point's ``z.npz``: the unwatermarked z-scores at the N(0, 1) quantiles shifted by ``plain``, the
    watermarked ones by ``marked`` (deterministic: no sampling)."""
    from scipy.stats import norm

    q = norm.ppf((np.arange(n) + 0.5) / n)
    for pid in df.loc[df["arm"] == "real", "point"]:
        d = tmp_path / "points" / pid
        d.mkdir(parents=True, exist_ok=True)
        np.savez(d / "z.npz", **{f"{s}_z_{w}": q + shift for s in ("lefthash", "selfhash")
                                 for w, shift in (("plain", plain), ("marked", marked))})


def _verdicts(df, tmp_path, preset="gpu", plain=0.0, marked=8.0):
    _write_z(df, tmp_path, plain, marked)
    cfg = resolve_config(WatermarkConfig, preset)
    return {v.claim_id: v for v in Watermark().verdicts(cfg, df, RunDir(tmp_path))}


CLAIMS = ("tpr-lefthash", "tpr-selfhash", "null-normal")


def test_papers_numbers_are_reproduced(tmp_path):
    vs = _verdicts(_row(tpr=0.994), tmp_path)
    assert {k: v.outcome for k, v in vs.items()} == {"tpr-lefthash": "reproduced", "tpr-selfhash": "reproduced",
                                                      "null-normal": "reproduced", "thm42-bound": "passed"}
    assert vs["thm42-bound"].kind == "check" and all(vs[k].null_passed is False for k in CLAIMS)
    assert vs["tpr-lefthash"].value == pytest.approx(0.994) and vs["tpr-lefthash"].gates[0].passed


def test_failures_are_not_reproduced(tmp_path):
    vs = _verdicts(_row(tpr=0.8, tpr_s=0.5, ks=0.001, diff=-5.0), tmp_path, plain=0.3)  # pooled z shifted by 0.3
    assert all(vs[k].outcome == "not reproduced" for k in CLAIMS) and vs["thm42-bound"].outcome == "failed"


def test_null_arm_meeting_the_rule_is_inconclusive(tmp_path):
    from lmsci.claims import NULL_MEETS_RULE

    # unwatermarked texts flagged; marked z look normal
    vs = _verdicts(_row(fpr=0.99, ks_marked=0.5), tmp_path, marked=0.0)
    for k in CLAIMS:
        assert vs[k].outcome == "inconclusive" and vs[k].null_passed is True, k
        assert any(NULL_MEETS_RULE in r for r in vs[k].reasons)


def test_null_normal_is_one_test_on_the_z_scores_pooled_over_seeds(tmp_path):
    """The KS test reads the pooled z-scores (not the per-seed p-values of the table): per-seed p-values of 0.001
    do not fail it when the pooled z-scores are normal, more seeds keep it passing, and without the z-scores it is
    not measured."""
    for seeds in (3, 8):
        v = _verdicts(_row(ks=0.001, seeds=seeds), tmp_path / str(seeds))["null-normal"]
        assert v.outcome == "reproduced" and v.value > 0.9 and v.n_seeds == seeds, (seeds, v.value)
        assert f"{200 * seeds} z-scores pooled over {seeds} seeds" in v.ci_kind and v.null_value < 1e-10
        assert v.details["per_seed_p"]["lefthash"] == [0.001] * seeds  # reported: the unwatermarked texts' own
    # a shift of 0.25 sd: 200 texts alone would not tell it at p < 0.01 (D = 0.10), the 600 pooled texts do
    v = _verdicts(_row(), tmp_path / "shift", plain=0.25)["null-normal"]
    assert v.outcome == "not reproduced" and v.value < 0.01
    no_z = Watermark().verdicts(resolve_config(WatermarkConfig, "gpu"), _row(), RunDir(tmp_path / "none"))
    v = {x.claim_id: x for x in no_z}["null-normal"]
    assert v.outcome == "inconclusive" and any("z.npz is missing" in r for r in v.reasons), v.reasons
    assert Watermark().get_claim("null-normal").null_can_meet and Watermark().get_claim("tpr-lefthash").null_can_meet


def test_low_entropy_and_scale_are_inconclusive(tmp_path):
    vs = _verdicts(_row(tpr=0.5, zpred=2.0), tmp_path)
    assert vs["tpr-lefthash"].outcome == "inconclusive"
    assert _verdicts(_row(), tmp_path, "smoke")["null-normal"].outcome == "inconclusive"
    # quick (one seed) is below the claims' scale; fewer than 3 seeds at gpu are inconclusive
    assert all(v.outcome == "inconclusive" for v in _verdicts(_row(seeds=1), tmp_path, "quick").values())
    assert _verdicts(_row(seeds=2), tmp_path)["tpr-lefthash"].outcome == "inconclusive"


def test_smoke_preset_runs(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(WatermarkConfig, "smoke", ["threads=1", "device=cpu"])
    run = run_experiment(Watermark(), cfg, tmp_path / "run", progress=False)
    df = run.results()  # reads the arm name "null" as a string (pd.read_csv would read a missing value)
    assert sorted(df["arm"]) == ["null", "real"] and (df["seed_index"] == 0).all()  # one training, both arms
    real, null = (df[df["arm"] == a].iloc[0] for a in ("real", "null"))
    assert 0 <= real["lefthash_tpr"] <= 1 and np.isfinite(null["lefthash_ks_p"]) and null["lefthash_tpr"] < 0.95
    assert real["train_loss"] == null["train_loss"] and (run.path / "points" / "real-kgw" / "z.npz").exists()
    # the TPR claims' null arm is the unwatermarked texts under the same detector and threshold (the FPR)
    z = np.load(run.path / "points" / "real-kgw" / "z.npz")
    assert null["lefthash_tpr"] == pytest.approx(float((z["lefthash_z_plain"] > 4).mean()))
    assert real["lefthash_tpr"] == pytest.approx(float((z["lefthash_z_marked"] > 4).mean()))
    assert np.isfinite(real["sweep2_ppl"]) and 0 < real["top40_mass_plain"] <= 1
    vs = {v.claim_id: v for v in run.verdicts()}
    # the smoke model (5 steps) is nearly untrained, so its watermark may not be detected, but the unwatermarked
    # texts are never flagged at z > 4: the TPR claims' null arm (the FPR) does not meet TPR >= 0.95
    for k in ("tpr-lefthash",):
        assert vs[k].null_value is not None and vs[k].null_passed is False, (k, vs[k].null_value)
    # tpr-selfhash's arm is not in the smoke preset: its null arm is not measured there (never met)
    assert vs["tpr-selfhash"].null_passed is None
    # null-normal's null arm: the KS test rejects N(0, 1) for the watermarked texts' z-scores
    assert vs["null-normal"].null_value is not None and vs["null-normal"].null_passed is False


@pytest.mark.parametrize("preset", ["smoke", "quick", "gpu", "paper"])
def test_warmup_is_a_tenth_of_the_steps_at_most_100(preset):
    """The nested train spec keeps the warmup min(100, steps // 10) the model was trained with before issue 31."""
    cfg = resolve_config(WatermarkConfig, preset)
    assert cfg.train.warmup_steps == min(100, cfg.train.steps // 10)
    assert cfg.model.pos == "learned" and cfg.train.train_config(device="cpu").warmup_steps == cfg.train.warmup_steps
    if preset == "quick":
        assert resolve_config(WatermarkConfig, preset, ["steps=300"]).train.warmup_steps == 30
    with pytest.raises(ConfigError, match="model"):
        resolve_config(WatermarkConfig, preset, ["model.n_heads=3"])  # d_model not divisible by n_heads
