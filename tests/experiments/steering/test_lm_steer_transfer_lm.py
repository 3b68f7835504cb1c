"""lm-steer-transfer-lm (issue 45, item 2): a steer trained on a real LM carried to a toy Shakespeare GPT. The smoke
run uses a tiny random tied Llama and a 1-layer toy GPT (the real model's quick run is the lead's); bad input refused
before any work; the map and the toy perplexity checked on their own."""

from __future__ import annotations

import numpy as np
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.registry import get
from lmsci.sweep import run_experiment

NAME = "lm-steer-transfer-lm"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    exp = get(NAME)()
    cfg = resolve_config(exp.Config, "smoke", {"threads": 1})
    return run_experiment(exp, cfg, tmp_path_factory.mktemp("lm_steer_transfer_lm") / "run", progress=False,
                          log=lambda m: None)


def test_smoke_run_end_to_end(smoke_run):
    res = smoke_run.results()
    assert (res["status"] == "ok").all() and len(res) == 4
    assert sorted(set(res["arm"])) == ["null", "real"]
    real, null = res[res["arm"] == "real"], res[res["arm"] == "null"]
    assert (real["label_agreement"] == 1.0).all() and (null["label_agreement"] < 1.0).all()
    for col in ("toy_spread", "loss_drop", "toy_self_ppl_zero", "w_norm_toy", "map_heldout_error", "toy_val_nll"):
        assert np.isfinite(res[col].astype(float)).all(), col
    assert res["toy_spread"].between(-2, 2).all()
    assert np.allclose(res["toy_spread"], res["toy_sentiment_pos"] - res["toy_sentiment_neg"])
    assert (res["n_shared_tokens"] > res["map_n_fit"]).all() and (res["toy_vocab_size"] == 1024).all()
    for col in ("toy_ppl_zero", "toy_ppl_pos", "toy_ppl_cost", "source_spread"):
        assert np.isfinite(real[col].astype(float)).all() and null[col].isna().all(), col
    assert np.allclose(real["toy_ppl_cost"], (real["toy_ppl_pos"] + real["toy_ppl_neg"]) / 2 - real["toy_ppl_zero"])
    v = {x.claim_id: x for x in smoke_run.verdicts()}
    assert set(v) == {"transfer", "ppl-under-toy"}
    assert all(x.outcome == "inconclusive" for x in v.values())  # smoke preset, 2 seeds, a random source's gates
    report = next(smoke_run.path.glob("report*.md")).read_text()
    assert "The toy experiment `lm-steer`" in report and "## Transfer and perplexity under the toy" in report


@pytest.mark.parametrize("over", [{"model": "no-such-model"}, {"min_words": 9, "max_words": 4},
                                  {"n_loss_lines": 100}, {"toy_model.n_heads": 3}, {"gen_tokens": 40},
                                  {"map_method": "adam"}, {"n_train_lines": 10000}])
def test_bad_input_is_refused_before_any_work(over, tmp_path):
    exp = get(NAME)()
    with pytest.raises((ConfigError, ValueError)):
        cfg = resolve_config(exp.Config, "smoke", over)
        run_experiment(exp, cfg, tmp_path / "run", progress=False, log=lambda m: None)
    assert not (tmp_path / "run" / "results.csv").exists()


def test_transfer_map_on_shared_tokens_recovers_a_linear_relation():
    """Two 'models' whose output embeddings are an exact linear image of each other on shared token strings: the
    fitted map is exact on held-out tokens, and a mapped steer is W' = B^T W A^T."""
    import torch

    from lmsci.methods.lm_steer import LMSteer
    from lmsci.methods.lm_steer_transfer import fit_embedding_map, shared_tokens

    g = torch.Generator().manual_seed(0)
    words = [f"w{i}" for i in range(200)]
    vs = {w: i for i, w in enumerate(words)}
    vt = {w: 199 - i for i, w in enumerate(words[:150])}  # 150 shared, another order
    src, tgt = shared_tokens(vs, vt)
    assert len(src) == 150 and all(vt[words[int(s)]] == int(t) for s, t in zip(src, tgt))
    Es = torch.randn(200, 12, generator=g)
    M = torch.randn(12, 8, generator=g)
    Et = torch.zeros(200, 8)
    Et[tgt] = Es[src] @ M
    emap = fit_embedding_map(Es[src], Et[tgt], "lstsq", holdout=0.2, seed=1)
    assert emap.heldout_error < 1e-4
    steer = LMSteer(12, rank=None, seed=3)
    moved = emap.map_steer(steer)
    W = steer.matrix("attr")
    assert torch.allclose(moved.matrix("attr"), emap.B.T @ W @ emap.A.T, atol=1e-4)


def _xfer_table(real, null, loss_drop=0.05, below_uniform=5.0, toy_below=1.0):
    import pandas as pd

    rows = []
    for arm, sp in (("real", real), ("null", null)):
        for k in range(3):
            rows.append({"arm": arm, "seed_index": k, "status": "ok", "toy_spread": sp[k],
                         "toy_ppl_cost": 10.0 if arm == "real" else np.nan, "loss_drop": loss_drop,
                         "nll_below_uniform": below_uniform, "toy_below_unigram": toy_below})
    return pd.DataFrame(rows)


def test_verdicts_on_hand_made_tables():
    """`transfer` on a passing, a failing, a gated and a null-passing table."""
    exp = get("lm-steer-transfer-lm")()
    cfg = resolve_config(exp.Config, "quick", {})
    good = dict(real=(0.3, 0.35, 0.32), null=(0.01, -0.02, 0.0))
    v = {x.claim_id: x for x in exp.verdicts(cfg, _xfer_table(**good), None)}
    assert v["transfer"].outcome == "reproduced" and v["ppl-under-toy"].ablation
    v = {x.claim_id: x for x in exp.verdicts(cfg, _xfer_table(real=(0.1, -0.1, 0.02), null=good["null"]), None)}
    assert v["transfer"].outcome == "not reproduced"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _xfer_table(**good, loss_drop=0.0), None)}
    assert v["transfer"].outcome == "inconclusive"  # the steer did not fit its training lines
    v = {x.claim_id: x for x in exp.verdicts(cfg, _xfer_table(**good, toy_below=-0.5), None)}
    assert v["transfer"].outcome == "inconclusive"  # the toy GPT learned nothing
    v = {x.claim_id: x for x in exp.verdicts(cfg, _xfer_table(real=good["real"], null=(0.3, 0.31, 0.29)), None)}
    assert v["transfer"].outcome == "inconclusive" and v["transfer"].null_passed
