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
from lmsci.experiments.watermark.watermark_removal import (RemovalConfig, WatermarkRemoval, ngram_overlap, propose_span,
                                                 token_logprobs)
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf_convert import to_hf
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


@pytest.mark.parametrize("s,k", [(1, 3), (4, 3), (7, 3), (9, 1)])
def test_propose_span_resamples_only_the_span_and_scores_like_a_full_pass(s, k):
    model = GPT(GPTConfig(vocab_size=20, seq_len=16, n_layers=2, n_heads=2, d_model=8), seed=1)
    hf = to_hf(model)
    x = torch.randint(0, 20, (64, 10), generator=torch.Generator().manual_seed(0))
    new, lp = propose_span(hf, x, s, k, torch.Generator().manual_seed(3))
    outside = torch.ones(10, dtype=torch.bool)
    outside[s: s + k] = False
    assert torch.equal(new[:, outside], x[:, outside])
    assert (new[:, s: s + k] != x[:, s: s + k]).any()  # 64 rows x k draws from 20 tokens: some change
    assert lp.shape == (64, 10 - s)
    assert torch.allclose(lp, token_logprobs(hf, new)[:, s - 1:], atol=1e-5)
    with pytest.raises(ValueError):
        propose_span(hf, x, 0, 2, torch.Generator())
    with pytest.raises(ValueError):
        propose_span(hf, x, 9, 2, torch.Generator())


def test_propose_span_draws_from_the_model():
    model = GPT(GPTConfig(vocab_size=20, seq_len=16, n_layers=1, n_heads=2, d_model=8), seed=2)
    hf = to_hf(model)
    x = torch.randint(0, 20, (1, 8), generator=torch.Generator().manual_seed(0)).repeat(20000, 1)
    new, _ = propose_span(hf, x, 5, 1, torch.Generator().manual_seed(4))
    p = torch.softmax(model(x[:1, :5])[0, -1], -1)
    freq = torch.bincount(new[:, 5], minlength=20).float() / len(new)
    assert (freq - p).abs().max() < 0.015  # 20,000 draws: the standard error is at most 0.0036


def _row(z0=9.0, zf=1.2, dq=0.01, seeds=3, null_zf=0.4, null_dq=0.5):
    """Rows of both arms: ``real`` the walk, ``null`` the same walk with every proposal accepted (random edits: z
    falls, the judge sees the damage); per-seed values spread by +-0.05 (z) and +-0.001 (change)."""
    rows = []
    for arm, zf_, dq_ in (("real", zf, dq), ("null", null_zf, null_dq)):
        rows += [{"point": f"{arm}-walk" + (f"__s{k}" if k else ""), "arm": arm, "status": "ok", "seed_index": k,
                  "z0_median": z0, "zf_median": zf_ + 0.05 * (k % 3 - 1), "judge_dq_median": dq_ + 0.001 * (k % 3 - 1),
                  "tau": 0.02, "traceable_share": 1.0, "trace_own_overlap": 0.4, "trace_other_max_overlap": 0.02,
                  "tokens_changed": 0.7}
                 for k in range(seeds)]
    return pd.DataFrame(rows)


def _v(df, tmp_path, preset="gpu"):
    return WatermarkRemoval().verdicts(resolve_config(RemovalConfig, preset), df, RunDir(tmp_path))[0]


def test_verdicts(tmp_path):
    v = _v(_row(), tmp_path)
    assert v.outcome == "reproduced" and v.null_passed is False and v.null_value == pytest.approx(0.4)
    assert v.value == pytest.approx(1.2) and v.ci[1] < 2 and "3 seeds" in v.ci_kind
    assert v.details["null_judge_dq_mean"] == pytest.approx(0.5)  # random edits: z falls, quality is lost
    assert v.gates[0].value == 9.0 and v.gates[0].passed
    assert _v(_row(dq=0.0195), tmp_path).outcome == "not reproduced"  # the change's interval reaches above tau
    assert _v(_row(zf=3.0), tmp_path).outcome == "not reproduced"
    assert _v(_row(dq=0.2), tmp_path).outcome == "not reproduced"  # quality lost
    assert _v(_row(z0=3.0), tmp_path).outcome == "inconclusive"  # never watermarked
    assert _v(_row(), tmp_path, "smoke").outcome == "inconclusive"
    assert _v(_row(seeds=1), tmp_path, "quick").outcome == "inconclusive"  # quick: below the claim's scale
    assert _v(_row(seeds=2), tmp_path).outcome == "inconclusive"  # fewer than 3 seeds
    df = _row()
    df.loc[1, "zf_median"] = 2.5  # one of 3 seeds keeps its watermark: the interval of the z reaches above 2
    assert _v(df, tmp_path).outcome == "not reproduced"
    df = _row(seeds=10)
    df.loc[1, "zf_median"] = 2.1  # one of 10 seeds above 2: the interval still lies below 2 (no minimum over seeds)
    assert _v(df, tmp_path).outcome == "reproduced"


def test_null_arm_meeting_the_rule_is_inconclusive(tmp_path):
    from lmsci.claims import NULL_MEETS_RULE

    v = _v(_row(null_dq=0.0), tmp_path)  # a judge blind to the random edits' damage: the null meets the rule
    assert v.outcome == "inconclusive" and v.null_passed is True
    assert any(NULL_MEETS_RULE in r for r in v.reasons)
    assert WatermarkRemoval().get_claim("removal").null_can_meet


def test_smoke_preset_runs(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(RemovalConfig, "smoke", ["threads=1", "device=cpu"])
    run = run_experiment(WatermarkRemoval(), cfg, tmp_path / "run", progress=False)
    df = run.results()  # reads the arm name "null" as a string (pd.read_csv would read a missing value)
    real, null = (df[df["arm"] == a].iloc[0] for a in ("real", "null"))
    assert np.isfinite(real["zf_median"]) and 0 <= real["accept_rate"] <= 1
    # the null arm walks the same texts with every proposal accepted: as many steps, more tokens changed
    assert null["z0_median"] == real["z0_median"] and null["accept_rate"] == 1.0
    assert null["tokens_changed"] > 0 and np.isfinite(null["judge_dq_median"])
    assert (run.path / "points" / "real-walk" / "curve.csv").exists()
    random = pd.read_csv(run.path / "points" / "null-walk" / "curve_random.csv")
    assert list(random["step"]) == list(pd.read_csv(run.path / "points" / "real-walk" / "curve.csv")["step"])
    v = run.verdicts()[0]
    assert v.null_value == pytest.approx(null["zf_median"]) and v.null_passed is not None


def _export(tmp_path, name, vocab_size, tokenizer=None, seed=0):
    from lmsci.models.hf_convert import export_hf

    model = GPT(GPTConfig(vocab_size=vocab_size, seq_len=48, n_layers=1, n_heads=2, d_model=16), seed=seed)
    return str(export_hf(model, tmp_path / name, tokenizer))


def test_local_models_are_checked_before_any_work(tmp_path):
    g = _export(tmp_path, "g", 64)
    a = _export(tmp_path, "a", 64, seed=1)
    other = _export(tmp_path, "other", 80)
    ex = WatermarkRemoval()
    for sets, field in ([[f"generator_model={g}"], "attacker_model"],  # the three go together
                        [[f"generator_model={g}", f"attacker_model={a}", "judge_model=facebook/opt-1.3b"],
                         "judge_model"],  # never downloaded
                        [[f"generator_model={g}", f"attacker_model={a}", f"judge_model={other}"], "attacker_model"]):
        with pytest.raises(ConfigError) as err:
            ex.validate(resolve_config(RemovalConfig, "smoke", sets))
        assert err.value.field == field
    ex.validate(resolve_config(RemovalConfig, "smoke", [f"generator_model={g}", f"attacker_model={a}",
                                                         f"judge_model={a}"]))


def test_smoke_preset_runs_on_local_hugging_face_models(tmp_path):
    from transformers import PreTrainedTokenizerFast

    from lmsci.sweep import run_experiment
    from lmsci.worlds import shakespeare as sh

    corpus = sh.prepare("bpe", 1024)
    tok = PreTrainedTokenizerFast(tokenizer_object=corpus.tokenizer.hf)
    dirs = [_export(tmp_path, n, corpus.vocab_size, tok if n == "g" else None, seed=i)
            for i, n in enumerate(("g", "a", "j"))]
    cfg = resolve_config(RemovalConfig, "smoke", ["threads=1", "device=cpu", f"generator_model={dirs[0]}",
                                                  f"attacker_model={dirs[1]}", f"judge_model={dirs[2]}"])
    run = run_experiment(WatermarkRemoval(), cfg, tmp_path / "run", progress=False)
    df = pd.read_csv(run.path / "results.csv")
    assert df["status"].iloc[0] == "ok" and np.isfinite(df["zf_median"].iloc[0])
    assert not (run.path / "metrics.jsonl").exists() or "generator" not in (run.path / "metrics.jsonl").read_text()


@pytest.mark.parametrize("preset", ["smoke", "quick", "gpu", "paper"])
def test_each_model_warms_up_a_tenth_of_its_steps_at_most_100(preset):
    """The nested train spec keeps the warmup min(100, steps // 10) of the three models before issue 31."""
    cfg = resolve_config(RemovalConfig, preset)
    assert cfg.train.warmup_steps == min(100, cfg.train.steps // 10)
    with pytest.raises(ConfigError, match="model"):
        resolve_config(RemovalConfig, preset, ["model.n_heads=3"])  # d_model not divisible by n_heads
