"""repe-lm (issue 40, item 3): representation reading (RepE LAT) of sentiment on a real LM. The smoke run uses a tiny
random tied Llama (the real model's quick run is the lead's); the reading pipeline on planted activations; verdicts
on hand-made tables; bad input refused before any work; one test on the real SmolLM2-135M, skipped without it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.registry import get
from lmsci.experiments.steering import _repe_lm_data as rd
from lmsci.sweep import run_experiment


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    exp = get("repe-lm")()
    cfg = resolve_config(exp.Config, "smoke", {"threads": 1})
    return run_experiment(exp, cfg, tmp_path_factory.mktemp("repe_lm") / "run", progress=False, log=lambda m: None)


def test_smoke_run_end_to_end_on_a_tiny_llama(smoke_run):
    res = smoke_run.results()
    assert (res["status"] == "ok").all() and len(res) == 4
    assert sorted(set(res["arm"])) == ["null", "real"]
    real, null = res[res["arm"] == "real"], res[res["arm"] == "null"]
    for col in ("pair_acc", "spread", "sentiment_pos", "sentiment_neg", "ppl_pos", "alpha", "nll_below_uniform"):
        assert np.isfinite(res[col].astype(float)).all(), col
    assert res["pair_acc"].between(0, 1).all() and (res["alpha"] > 0).all()
    assert np.allclose(res["spread"], res["sentiment_pos"] - res["sentiment_neg"])
    for col in ("pair_acc_md", "spread_md", "sentiment_zero", "explained_variance", "cos_pca_md"):
        assert np.isfinite(real[col].astype(float)).all() and null[col].isna().all(), col
    # the two arms of a seed steer at the same layer with the same norm (the real arm's)
    for k in (0, 1):
        a, b = real[real["seed_index"] == k].iloc[0], null[null["seed_index"] == k].iloc[0]
        assert a["steer_layer"] == b["steer_layer"] == a["layer"] and a["alpha"] == b["alpha"]
    assert set(json.loads(real["test_by_layer"].iloc[0])) == {"0", "1"}
    v = {x.claim_id: x for x in smoke_run.verdicts()}
    assert set(v) == {"reading", "steering", "mean-diff-reading", "mean-diff-steering"}
    assert all(x.outcome == "inconclusive" for x in v.values())  # smoke preset, 2 seeds, a random model's gate
    report = next(smoke_run.path.glob("report*.md")).read_text()
    assert "The real-model steering experiment `lm-steer-lm`" in report and "The toy experiment `lm-steer`" in report
    assert "| reading vector (PCA) | real |" in report and "| random direction (null) | null |" in report
    for f in ("accuracy_by_layer.png", "steering.png"):
        assert (smoke_run.path / "figures" / f).is_file()


@pytest.mark.parametrize("over", [{"model": "no-such-model"}, {"template": "no placeholder"},
                                  {"template": "{line} and {line}"}, {"template": "{line} {other}"},
                                  {"min_words": 9, "max_words": 4}, {"layers": [-1]}, {"layers": [0, 0]},
                                  {"layers": [7]}, {"n_train_pairs": 10000}, {"steer_scale": 0.0}])
def test_bad_input_is_refused_before_any_work(over, tmp_path):
    exp = get("repe-lm")()
    with pytest.raises((ConfigError, ValueError)):
        cfg = resolve_config(exp.Config, "smoke", over)
        run_experiment(exp, cfg, tmp_path / "run", progress=False, log=lambda m: None)
    assert not (tmp_path / "run" / "results.csv").exists()


def _planted(n, seed, layers=(0, 1, 2), good=1, d=12):
    """Pairs whose layer ``good`` differs by +-u along a fixed axis under a larger shared variance; the other layers
    carry no concept."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for l in layers:
        base = torch.randn(n, d, generator=g) * 3.0
        shift = torch.zeros(d)
        shift[0] = 1.0 if l == good else 0.0
        out[l] = (base + shift + 0.3 * torch.randn(n, d, generator=g), base - shift + 0.3 * torch.randn(n, d, generator=g))
    return out


def test_reading_pipeline_picks_the_planted_layer_and_a_random_direction_reads_near_chance():
    fit, test = _planted(40, 0), _planted(200, 1)
    real = rd.select_layer("pca", fit, test, seed=3)
    assert real["layer"] == 1 and real["test"]["pair_acc"] > 0.95
    assert abs(float(real["vector"].direction[0])) > 0.9
    again = rd.select_layer("pca", fit, test, seed=3)
    assert again["layer"] == real["layer"] and again["test"] == real["test"]
    md = rd.select_layer("mean_diff", fit, test, seed=3)
    assert md["layer"] == 1 and md["test"]["pair_acc"] > 0.95
    null = [rd.select_layer("random", fit, test, seed=s)["test"]["pair_acc"] for s in range(8)]
    assert np.mean(null) < 0.85  # a random direction in 12 dimensions with a fitted sign
    with pytest.raises(ConfigError):
        rd.select_layer("ica", fit, test, seed=0)
    u = rd.random_direction(12, 5, "cpu")
    assert abs(float(u.norm()) - 1) < 1e-5 and torch.equal(u, rd.random_direction(12, 5, "cpu"))


def _table(acc_real, acc_null, spread_real, spread_null, gate=5.0):
    rows = []
    for arm, acc, sp in (("real", acc_real, spread_real), ("null", acc_null, spread_null)):
        for k in range(3):
            rows.append({"arm": arm, "seed_index": k, "status": "ok", "pair_acc": acc[k], "spread": sp[k],
                         "nll_below_uniform": gate, "pair_acc_md": acc[k] if arm == "real" else np.nan,
                         "spread_md": sp[k] if arm == "real" else np.nan})
    return pd.DataFrame(rows)


def test_verdicts_on_hand_made_tables():
    exp = get("repe-lm")()
    cfg = resolve_config(exp.Config, "quick", {})
    good = dict(acc_real=(0.85, 0.88, 0.86), acc_null=(0.55, 0.6, 0.5), spread_real=(0.2, 0.25, 0.22),
                spread_null=(0.05, -0.05, 0.02))
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(**good), None)}
    assert v["reading"].outcome == "reproduced" and v["steering"].outcome == "reproduced"
    assert v["mean-diff-reading"].ablation and v["mean-diff-steering"].ablation
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(**{**good, "acc_null": (0.85, 0.86, 0.87)}), None)}
    assert v["reading"].outcome == "inconclusive" and v["reading"].null_passed  # the random direction meets it
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(**{**good, "acc_real": (0.6, 0.7, 0.62)}), None)}
    assert v["reading"].outcome == "not reproduced"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(**{**good, "spread_real": (0.1, -0.1, 0.05)}), None)}
    assert v["steering"].outcome == "not reproduced"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(**{**good, "spread_null": (0.2, 0.22, 0.21)}), None)}
    assert v["steering"].outcome == "inconclusive" and v["steering"].null_passed
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(**good, gate=0.5), None)}
    assert v["reading"].outcome == "inconclusive" and v["steering"].outcome == "inconclusive"  # random weights


def test_on_the_real_smollm2_the_pieces_read_and_steer(smollm2):
    """The real model (skipped without it): activations at two blocks in one forward equal those of the library's
    one-layer reader, and the reading vector added at +alpha changes what the model writes."""
    from lmsci.experiments.steering import _lm_steer_lm_data as lmd
    from lmsci.methods.rep_reading import as_steer, contrast_activations
    from lmsci.methods.steering import generate

    cfg = resolve_config(get("repe-lm").Config, "quick", {"n_prompts": 2, "gen_tokens": 3})
    tok = smollm2.tokenizer
    pos = ["O happy day, my love, my joy!", "Sweet friend, thy kindness is a blessing."]
    neg = ["Cursed be this foul and bloody hand.", "Death and grief and bitter woe."]
    ids_p, ids_n = (rd.stimulus_ids(tok, cfg.template, s, cfg.max_length) for s in (pos, neg))
    pad = tok.pad_token_id
    acts = {s: rd.layer_activations(smollm2, ids, [10, 20], pad, 8) for s, ids in (("pos", ids_p), ("neg", ids_n))}
    assert acts["pos"][20].shape == (2, 576)
    ref, _ = contrast_activations(smollm2, ids_p, ids_n, 20, pad_id=pad)
    assert torch.allclose(ref, acts["pos"][20], atol=1e-4)
    rv = rd.fit_direction("pca", acts["pos"][20], acts["neg"][20], 0, 20)
    prompts = torch.tensor([lmd.encode(tok, "And then he said")[:4]] * 2)
    alpha = 0.5 * rd.median_norm(smollm2, prompts, 20)
    steer = as_steer(rv, 20, alpha, name="attr")
    plain = generate(smollm2, prompts, None, None, 3, do_sample=False)
    steered = generate(smollm2, prompts, steer, {"attr": 8.0}, 3, do_sample=False)
    assert alpha > 0 and not torch.equal(plain, steered)
