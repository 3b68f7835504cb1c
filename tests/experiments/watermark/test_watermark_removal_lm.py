"""watermark-removal-lm (issue 45, item 3, the removal half): the random walk of "Watermarks in the Sand" on a
pretrained LM's KGW generations. The smoke run uses the tiny random Llama (``tiny-llama``); the walk's invariants on
the tiny model and, when the package is installed, on the real SmolLM2; bad input refused before any work."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.registry import get
from lmsci.experiments.watermark import _watermark_removal_lm_walk as walk
from lmsci.experiments.watermark._watermark_removal_walk import score_walk
from lmsci.methods import watermark as wm
from lmsci.sweep import run_experiment

NAME = "watermark-removal-lm"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    exp = get(NAME)()
    cfg = resolve_config(exp.Config, "smoke", {"threads": 1})
    run = run_experiment(exp, cfg, tmp_path_factory.mktemp("wmrm") / "run", progress=False, log=lambda m: None)
    return exp, cfg, run


def test_smoke_run_on_the_tiny_model_walks_every_arm_and_judges_both_claims(smoke_run):
    exp, cfg, run = smoke_run
    res = run.results()
    assert sorted(set(res["arm"])) == ["null", "random", "real"] and len(res) == 6 and (res["status"] == "ok").all()
    by = {a: g.sort_values("seed_index") for a, g in res.groupby("arm")}
    # the null arm makes zero steps: its texts are the watermarked originals, scored by the same code
    assert np.allclose(by["null"]["zf_median"], by["null"]["z0_median"])
    assert (by["null"]["tokens_changed"] == 0).all() and (by["null"]["judge_dq_median"].abs() < 1e-5).all()
    # the random arm walks as many steps per text as the real walk made, and accepts every proposal
    assert np.allclose(by["random"]["walk_steps_median"], by["real"]["walk_steps_median"])
    assert (by["random"]["accept_rate"] == 1).all() and (by["real"]["accept_rate"] <= 1).all()
    # resampling from the unwatermarked model lowers the watermark's z (a random model: the bias dominates)
    assert by["real"]["zf_median"].mean() < by["real"]["z0_median"].mean() - 1
    v = {x.claim_id: x for x in run.verdicts()}
    assert set(v) == {"removal", "quality"}
    assert v["removal"].null_value is not None  # quality is a check (by construction with the default judge)
    assert all(x.outcome == "inconclusive" for x in v.values())  # smoke is below every registered scale
    assert get(NAME).escape_hatches() == []
    text = exp.report_sections(cfg, res, run)
    assert "`watermark-removal`" in text and "`watermark-lm`" in text and "NOT independent" in text
    assert (run.path / "points" / "real-walk" / "curve_real.csv").exists()


def _texts(n=3, P=6, T=20, seed=0, hf=None):
    hf = hf or walk.load(walk.TINY, "cpu")
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, hf.model.config.vocab_size, (n, P), generator=g)
    wcfg = wm.watermarking_config(0.25, 2.0)
    y0 = wm.generate(hf.model, prompts, T, wcfg, 0.7, seed, n)
    return hf, prompts, y0, wm.detector(hf.model, wcfg, "cpu")


def _walk(hf, prompts, y0, det, **over):
    kw = dict(span=4, tau=0.02, stop_z=2.0, total_steps=3, target_valid=2, max_steps=6, detect_every=2, seed=1,
              log=lambda **r: None, device="cpu")
    kw.update(over)
    return walk.stopping_walk(hf.model, prompts, y0.clone(), det, **kw)


def test_the_walk_keeps_the_quality_oracle_and_its_stopping_rule():
    hf, prompts, y0, det = _texts()
    final, extra, curve = _walk(hf, prompts, y0, det)
    steps = extra["steps_per_text"]
    assert ((steps >= 1) & (steps <= 6)).all() and curve[0]["step"] == 0 and curve[-1]["walking"] == 0
    # every accepted proposal passed the quality oracle: the judge (the same weights) sees at most tau per text
    _, arrays = score_walk(hf.model, det, prompts, y0, wm.detect(det, y0)["z"], list(final), 4)
    assert (arrays["dq"] <= 0.02 + 1e-4).all()
    # a quality oracle that rejects everything leaves the texts as they were; never reaching z <= -inf caps them all
    final, extra, _ = _walk(hf, prompts, y0, det, tau=-1e9, stop_z=-np.inf)
    assert torch.equal(final, y0) and extra["accept_rate"] == 0 and extra["capped_share"] == 1
    assert (extra["steps_per_text"] == 6).all()
    # fixed steps (the null arms): exactly that many steps per text, every proposal taken
    final, extra, _ = _walk(hf, prompts, y0, det, steps=np.array([0, 2, 5]))
    assert extra["steps_per_text"].tolist() == [0, 2, 5] and torch.equal(final[0], y0[0])
    assert not torch.equal(final[2], y0[2])


@pytest.mark.parametrize("over", [{"model": "smollm-135"}, {"judge_model": "nope"}, {"attacker_model": "/no/dir"},
                                  {"span": 24}, {"walk_max_steps": 2}, {"scheme": "sha"}])
def test_bad_input_is_refused_before_any_work(over, tmp_path):
    exp = get(NAME)()
    cfg = resolve_config(exp.Config, "smoke", over)
    with pytest.raises(ConfigError):
        run_experiment(exp, cfg, tmp_path / "never", progress=False, log=lambda m: None)
    assert not (tmp_path / "never").exists()


def test_a_judge_with_another_vocabulary_is_refused(tmp_path):
    import json

    d = tmp_path / "judge"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 96}))
    (d / "model.safetensors").write_bytes(b"")
    exp = get(NAME)()
    cfg = resolve_config(exp.Config, "smoke", {"judge_model": str(d)})
    with pytest.raises(ConfigError, match="judge_model"):
        exp.validate(cfg)
    with pytest.raises(ConfigError):
        resolve_config(exp.Config, "smoke", {"gamma": 1.5})


def test_on_the_real_smollm2_the_walk_keeps_the_quality_oracle(smollm2):
    prompts = walk.sample_prompts(smollm2, 2, 8, 0)
    wcfg = wm.watermarking_config(0.25, 2.0)
    y0 = wm.generate(smollm2.model, prompts, 16, wcfg, 0.7, 0, 2)
    det = wm.detector(smollm2.model, wcfg, "cpu")
    final, extra, _ = _walk(smollm2, prompts, y0, det, total_steps=2, max_steps=2)
    assert final.shape == y0.shape and (extra["steps_per_text"] == 2).all()
    _, arrays = score_walk(smollm2.model, det, prompts, y0, wm.detect(det, y0)["z"], list(final), 4)
    assert (arrays["dq"] <= 0.02 + 1e-4).all()


def _wm_table(z_real, z_null, dq_real=(0.0, 0.01, 0.0), n=3):
    import pandas as pd

    rows = [{"arm": arm, "seed_index": k, "status": "ok", "zf_median": z[k], "judge_dq_median": dq_real[k]}
            for arm, z in (("real", z_real), ("null", z_null), ("random", z_null)) for k in range(n)]
    return pd.DataFrame(rows)


def test_verdicts_on_hand_made_tables():
    """A passing, a failing, a null-passing and a too-few-seeds table for `removal` (it has no gate), and the
    `quality` check passing and failing."""
    exp = get(NAME)()
    cfg = resolve_config(exp.Config, "quick", {})
    good = dict(z_real=(0.5, 1.0, 0.8), z_null=(5.0, 4.5, 5.5))
    v = {x.claim_id: x for x in exp.verdicts(cfg, _wm_table(**good), None)}
    assert v["removal"].outcome == "reproduced" and v["quality"].outcome == "passed"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _wm_table(z_real=(4.0, 5.0, 4.5), z_null=good["z_null"]), None)}
    assert v["removal"].outcome == "not reproduced"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _wm_table(z_real=good["z_real"], z_null=(0.6, 0.9, 0.7)), None)}
    assert v["removal"].outcome == "inconclusive" and v["removal"].null_passed  # no watermark to remove
    v = {x.claim_id: x for x in exp.verdicts(cfg, _wm_table(z_real=(0.5, 1.0), z_null=(5.0, 4.5), n=2), None)}
    assert v["removal"].outcome == "inconclusive"  # fewer than 3 prompt samples
    v = {x.claim_id: x for x in exp.verdicts(cfg, _wm_table(**good, dq_real=(0.5, 0.6, 0.4)), None)}
    assert v["quality"].outcome == "failed"


def test_gpu_preset_is_estimated_within_9_minutes_and_says_so():
    """Session 52: the gpu preset's upper-bound estimate (every text walking the cap) fits 10 minutes of one H100 and
    the documented time repeats it; the old 50 texts x cap 1000 did not; the official stopping rule is kept."""
    import re

    from lmsci.config import resolve_config
    from lmsci.experiments.watermark._watermark_removal_lm_estimate import estimate_h100_seconds
    from lmsci.experiments.watermark.watermark_removal_lm import RemovalLMConfig, WatermarkRemovalLM

    cfg = resolve_config(RemovalLMConfig, "gpu")
    est = estimate_h100_seconds(cfg)
    assert 60 < est["total"] <= 9 * 60 and est["walks"] > est["generate"] > 0
    assert estimate_h100_seconds(resolve_config(RemovalLMConfig, "gpu", {"n_texts": 50, "walk_max_steps": 1000}))[
        "total"] > 600
    text = WatermarkRemovalLM.time_estimate["gpu"]
    assert int(re.match(r"~(\d+) min", text).group(1)) == round(est["total"] / 60)
    assert f"({est['total'] / 60:.1f} min)" in text and "not measured" in text
    assert (cfg.n_seeds, cfg.walk_total_steps, cfg.target_valid_steps, cfg.T) == (3, 400, 70, 200)
    assert cfg.walk_max_steps > cfg.walk_total_steps
