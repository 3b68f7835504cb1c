"""The values-only ``gpu`` presets of igsm-retry, igsm-depth, igsm-ood, igsm-noop, igsm-probing and retry-finetune fit one H100 for 10 minutes
by their estimate (session 52), their documented time is that estimate, and their claims are decided at paper only."""

import re

import pytest

from lmsci.config import resolve_config
from lmsci.experiments.reasoning._igsm_gpu_budget import BUDGET_S, decode_seconds, host_data_seconds
from lmsci.experiments.reasoning.igsm_common import IGSMCommonConfig
from lmsci.experiments.registry import catalog

NAMES = ["igsm-retry", "igsm-depth", "retry-finetune", "igsm-ood", "igsm-noop", "igsm-probing"]


@pytest.mark.parametrize("name", NAMES)
def test_gpu_preset_is_estimated_within_nine_minutes_and_decides_nothing(name):
    cls = catalog()[name]
    cfg = resolve_config(cls.Config, "gpu")
    est = cls().estimate_gpu_seconds(cfg)
    assert 0 < est["total"] <= BUDGET_S and est["total"] == pytest.approx(sum(v for k, v in est.items() if k != "total"))
    assert all(est[k] > 0 for k in ("train", "data", "decode"))
    assert int(re.match(r"~(\d+) min", cls.time_estimate["gpu"]).group(1)) == round(est["total"] / 60)
    assert all("gpu" not in c.presets and "paper" in c.presets for c in cls.claims)
    # the paper preset is far beyond the budget: what the claims need does not fit
    assert cls().estimate_gpu_seconds(resolve_config(cls.Config, "paper"))["total"] > 10 * BUDGET_S


def test_budget_parts_scale_with_their_inputs():
    cfg = IGSMCommonConfig(world="igsm-small", n_eval=128, eval_batch=128, max_new_tokens=0, seq_len=768)
    one = decode_seconds(cfg, (4, 4, 256), 1)
    assert decode_seconds(cfg, (4, 4, 256), 3) == pytest.approx(3 * one)
    assert decode_seconds(cfg, (4, 4, 256), 1, beam=4) > 3 * one  # 4 batches of 32 prompts x 4 beams
    assert decode_seconds(cfg.model_copy(update={"max_new_tokens": 384}), (4, 4, 256), 1) == pytest.approx(one / 2)
    assert host_data_seconds(cfg, 2) == pytest.approx(2 * host_data_seconds(cfg, 1))


def test_depth_gpu_shapes_keep_the_comparison():
    cls = catalog()["igsm-depth"]
    cfg = resolve_config(cls.Config, "gpu")
    cls().validate(cfg)
    (ld, hd, dd), (ls, hs, ds) = cfg.deep, cfg.shallow
    assert ld > ls and dd == 64 * hd and ds == 64 * hs  # GPT2-l-h: deeper and narrower
    assert 12 * ls * ds ** 2 >= 12 * ld * dd ** 2  # the shallow model is no smaller: the comparison is conservative
