"""length-lm (issue 45, item 1): length generalization and LM-Infinite on a real pretrained model. The smoke run uses a
tiny random Llama built from its config (the real model's quick run is in results/quick); verdicts on hand-made
tables; bad input refused before any work; the GQA -> MHA rewrite that the official LM-Infinite code needs is exact."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.registry import get
from lmsci.sweep import run_experiment


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    exp = get("length-lm")()
    cfg = resolve_config(exp.Config, "smoke", {"threads": 1})
    return run_experiment(exp, cfg, tmp_path_factory.mktemp("length_lm") / "run", progress=False, log=lambda m: None)


def test_smoke_run_on_a_tiny_model_judges_every_claim_with_the_engine(smoke_run):
    res = smoke_run.results()
    assert sorted(set(res["arm"])) == sorted(["vanilla", "lm_infinite", "sliding_window", "attention_sinks", "first",
                                              "middle"])
    assert len(res) == 12 and (res["status"] == "ok").all()
    meth = res[res["arm"].isin(["vanilla", "lm_infinite"])]
    assert meth["logit_rise"].notna().all() and meth["entropy_rise"].notna().all()
    # LM-Infinite streamed: its cache never held more than n_global + n_local entries (2 + 16)
    lmi = res[res["arm"] == "lm_infinite"]
    assert (lmi["cache_max"] <= 18).all() and (lmi["cache_max"] > 0).all()
    # vanilla keeps every key, LM-Infinite a fixed number: entropy grows for vanilla only
    assert res.loc[res["arm"] == "vanilla", "entropy_rise"].min() > lmi["entropy_rise"].max()
    v = {x.claim_id: x for x in smoke_run.verdicts()}
    assert len(v) == 8 and all(x.outcome == "inconclusive" for x in v.values())  # smoke is below every preset
    assert v["vanilla-nll-rises"].null_value is not None
    assert get("length-lm").escape_hatches() == []
    figs = {p.name for p in (smoke_run.path / "figures").iterdir()}
    assert {"nll_by_position.png", "logit_entropy.png"} <= figs
    assert "beside the toy experiment" in (smoke_run.path / "report.md").read_text()


def test_lm_infinite_streamed_equals_one_pass_and_vanilla_below_the_window():
    """The streamed LM-Infinite (bounded cache) gives the one-pass NLL; within its window it is vanilla."""
    from lmsci.experiments.length import _length_lm_measure as M
    from lmsci.experiments.length.length_lm import LengthLM, load, policy_of

    cfg = resolve_config(LengthLM.Config, "smoke", {"threads": 1})
    hf = load(cfg, "cpu")
    ids = torch.randint(0, 128, (1, 80), generator=torch.Generator().manual_seed(3))
    pol = policy_of(cfg, "lm_infinite")
    one, _, _ = M.policy_nll(hf.model, ids, pol, record=False)
    streamed, _, cache = M.policy_nll(hf.model, ids, pol, chunk=16, record=False)
    plain = M.plain_nll(hf.model, ids)
    assert np.allclose(one, streamed, atol=1e-4) and cache <= cfg.n_global + cfg.n_local
    assert np.allclose(one[: cfg.n_local - 1], plain[: cfg.n_local - 1], atol=1e-4)
    assert not np.allclose(one[-20:], plain[-20:], atol=1e-4)


def _table(real, null, column="rise", arms=("vanilla", "lm_infinite"), cache=0):
    rows = []
    for k in range(3):
        for arm, val in ((arms[0], real[k]), (arms[1], null[k])):
            rows.append({"arm": arm, "seed_index": k, column: val, "cache_excess": cache, "status": "ok"})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("cid,arms,column,real,null,outcome", [
    ("vanilla-nll-rises", ("vanilla", "lm_infinite"), "rise", (1.2, 1.0, 1.4), (0.02, 0.05, 0.01), "reproduced"),
    ("vanilla-nll-rises", ("vanilla", "lm_infinite"), "rise", (0.1, 0.05, 0.2), (0.02, 0.05, 0.01), "not reproduced"),
    ("vanilla-nll-rises", ("vanilla", "lm_infinite"), "rise", (1.2, 1.0, 1.4), (0.9, 1.0, 1.1), "inconclusive"),
    ("lm-infinite-flat", ("lm_infinite", "vanilla"), "rise", (0.02, 0.05, 0.01), (1.2, 1.0, 1.4), "reproduced"),
    ("lm-infinite-flat", ("lm_infinite", "vanilla"), "rise", (0.02, 0.05, 0.01), (0.02, 0.03, 0.0), "inconclusive"),
    ("sliding-window-degrades", ("sliding_window", "attention_sinks"), "rise", (3.0, 2.5, 2.8), (0.1, 0.0, 0.05),
     "reproduced"),
    ("theorem1-logits-explode", ("vanilla", "lm_infinite"), "logit_rise", (2.0, 2.2, 1.9), (0.0, 0.1, -0.1),
     "reproduced"),
    ("entropy-grows", ("vanilla", "lm_infinite"), "entropy_rise", (0.01, -0.02, 0.0), (0.0, 0.0, 0.0),
     "not reproduced"),
    ("start-tokens-distinct", ("first", "middle"), "separation", (20.0, 25.0, 22.0), (0.2, 0.3, 0.25), "reproduced"),
    ("start-tokens-distinct", ("first", "middle"), "separation", (20.0, 25.0, 22.0), (3.0, 3.1, 2.9), "inconclusive"),
])
def test_verdicts_on_hand_made_tables(cid, arms, column, real, null, outcome):
    exp = get("length-lm")()
    cfg = resolve_config(exp.Config, "quick")
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(real, null, column, arms), None)}
    assert v[cid].outcome == outcome


def test_memory_gate_fails_when_the_cache_grows():
    exp = get("length-lm")()
    cfg = resolve_config(exp.Config, "quick")
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table((0.0, 0.01, 0.02), (1.0, 1.2, 1.1),
                                                         arms=("lm_infinite", "vanilla"), cache=5), None)}
    assert v["lm-infinite-flat"].outcome == "inconclusive"


def test_bad_input_is_refused_before_any_work(tmp_path):
    exp = get("length-lm")()
    for over in ({"model": "smollm-135"}, {"model": str(tmp_path / "missing")}, {"dtype": "float16"},
                 {"stream_len": 20}, {"n_sink": 16}, {"train_len": 40}):
        cfg = resolve_config(exp.Config, "smoke", over)
        with pytest.raises(ConfigError):
            run_experiment(exp, cfg, tmp_path / "never", progress=False, log=lambda m: None)
        assert not (tmp_path / "never").exists()
    with pytest.raises(ConfigError):
        resolve_config(exp.Config, "smoke", {"length_factor": 0.5})


def test_repeat_kv_heads_is_an_exact_rewrite_on_a_tiny_gqa_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmsci.methods.lm_infinite import repeat_kv_heads

    cfg = LlamaConfig(vocab_size=96, hidden_size=36, intermediate_size=64, num_hidden_layers=2, num_attention_heads=6,
                      num_key_value_heads=2, max_position_embeddings=128, attention_bias=True)
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():  # non-zero biases, so their repetition is tested too
            p.add_(0.01 * torch.randn_like(p))
    x = torch.randint(0, 96, (2, 40))
    r = repeat_kv_heads(m)
    assert r.config.num_key_value_heads == 6 and m.config.num_key_value_heads == 2
    assert r.model.layers[0].self_attn.k_proj.weight.shape == (36, 36)
    with torch.no_grad():
        torch.testing.assert_close(r(x).logits, m(x).logits, rtol=0, atol=1e-5)
    with pytest.raises(ConfigError):
        repeat_kv_heads(torch.nn.Linear(2, 2))


def test_repeat_kv_heads_on_the_real_model(smollm2):
    """SmolLM2-135M (9 query / 3 key-value heads) rewritten to 9 key-value heads: the same logits."""
    from lmsci.methods.lm_infinite import repeat_kv_heads

    r = repeat_kv_heads(smollm2)
    assert r.config.num_key_value_heads == 9
    x = smollm2.tokenizer("Shall I compare thee to a summer's day?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(r(x).logits, smollm2.model(x).logits, rtol=0, atol=1e-4)


def test_vanilla_fast_path_equals_the_harness_on_the_recorded_rows():
    """The vanilla arm's SDPA reading with row-selected statistics gives the harness's full-policy NLL, max logit
    and entropy on the rows it records, and NaN elsewhere."""
    from lmsci.experiments.length import _length_lm_measure as M
    from lmsci.experiments.length.length_lm import LengthLM, load
    from lmsci.methods.lm_infinite import full_policy

    cfg = resolve_config(LengthLM.Config, "smoke", {"threads": 1})
    hf = load(cfg, "cpu")
    ids = torch.randint(0, 128, (1, 100), generator=torch.Generator().manual_seed(3))
    rows = np.array([0, 5, 50, 99])
    nll, st = M.vanilla_row_stats(hf.model, ids, rows)
    nll2, st2, _ = M.policy_nll(hf.model, ids, full_policy(block_size=16))
    assert np.allclose(nll, nll2, atol=1e-5)
    assert np.allclose(st.max_logit[:, rows], st2.max_logit[:, rows], atol=1e-5)
    assert np.allclose(st.entropy[:, rows], st2.entropy[:, rows], atol=1e-5)
    assert np.isnan(st.max_logit[:, 1]).all() and hf.model.config._attn_implementation == "sdpa"
