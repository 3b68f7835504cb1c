"""watermark-removal: the traceability overlap and token log-probabilities exactly, verdicts from synthetic tables,
and the smoke preset (the walk lowers z on a tiny model).

Source: Zhang et al., arXiv 2311.04378, Algorithm 1; Harel-Canada et al., arXiv 2505.06827 (issue 18).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.watermark_removal import RemovalConfig, WatermarkRemoval, ngram_overlap, token_logprobs
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import to_hf
from lmsci.runs import RunDir


def test_ngram_overlap_and_logprobs():
    a = np.array([1, 2, 3, 4, 5])
    assert ngram_overlap(a, a, 2) == 1.0
    assert ngram_overlap(a, np.array([9, 2, 3, 9, 4, 5]), 2) == pytest.approx(2 / 4)
    assert ngram_overlap(a, np.array([7, 8]), 3) == 0.0
    model = GPT(GPTConfig(vocab_size=20, seq_len=8, n_layers=1, n_heads=2, d_model=8), seed=0)
    hf = to_hf(model)
    x = torch.randint(0, 20, (2, 6))
    lp = token_logprobs(hf, x)
    ref = torch.log_softmax(model(x), -1)[:, :-1].gather(2, x[:, 1:, None]).squeeze(2)
    assert lp.shape == (2, 5) and torch.allclose(lp, ref, atol=1e-4)
    with pytest.raises(ConfigError):
        WatermarkRemoval().validate(resolve_config(RemovalConfig, "smoke", ["delta=-1"]))


def _row(z0=9.0, zf=1.2, dq=0.01):
    return pd.DataFrame([{"point": "walk", "status": "ok", "seed_index": 0, "z0_median": z0, "zf_median": zf,
                          "judge_dq_median": dq, "traceable_share": 1.0, "trace_own_overlap": 0.4,
                          "trace_other_max_overlap": 0.02, "tokens_changed": 0.7}])


def _v(df, tmp_path, preset="quick"):
    return WatermarkRemoval().verdicts(resolve_config(RemovalConfig, preset), df, RunDir(tmp_path))[0]


def test_verdicts(tmp_path):
    assert _v(_row(), tmp_path).outcome == "reproduced"
    assert _v(_row(zf=3.0), tmp_path).outcome == "not reproduced"
    assert _v(_row(dq=0.2), tmp_path).outcome == "not reproduced"  # quality lost
    assert _v(_row(z0=3.0), tmp_path).outcome == "inconclusive"  # never watermarked
    assert _v(_row(), tmp_path, "smoke").outcome == "inconclusive"


def test_smoke_preset_runs(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(RemovalConfig, "smoke", ["threads=1", "device=cpu"])
    run = run_experiment(WatermarkRemoval(), cfg, tmp_path / "run", progress=False)
    df = pd.read_csv(run.path / "results.csv")
    assert np.isfinite(df["zf_median"].iloc[0]) and 0 <= df["accept_rate"].iloc[0] <= 1
    assert (run.path / "points" / "walk" / "curve.csv").exists()
