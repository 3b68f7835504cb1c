"""watermark-lm (issue 45, item 3): KGW on a pretrained LM's generations, born on the claims engine. The smoke run uses
a tiny random Llama saved in the test (the real model's quick run is in results/quick); verdicts on hand-made tables;
bad input refused before any work."""

from __future__ import annotations

import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.registry import get
from lmsci.sweep import run_experiment


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(cfg).save_pretrained(d)
    return d


def test_smoke_run_on_a_tiny_model_judges_every_claim_with_the_engine(tiny_llama, tmp_path):
    exp = get("watermark-lm")()
    cfg = resolve_config(exp.Config, "smoke", {"model": str(tiny_llama), "threads": 1})
    run = run_experiment(exp, cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results()
    assert sorted(set(res["arm"])) == ["control", "null", "real"] and len(res) == 6 and (res["status"] == "ok").all()
    # the watermark tilts a random model's near-uniform choices: z of the real arm above the unwatermarked arms
    z = res.groupby("arm")["mean_z"].mean()
    assert z["real"] > z["null"] + 1 and z["real"] > z["control"] + 1
    v = {x.claim_id: x for x in run.verdicts()}
    assert v["tpr"].null_value is not None and v["ppl-cost"].null_value is not None
    assert all(x.outcome == "inconclusive" for x in v.values())  # smoke is below every registered scale
    assert get("watermark-lm").escape_hatches() == []


def _table(tpr_real, tpr_null, nll=(3.0, 2.5, 2.5), scored=0.9):
    rows = []
    for k in range(3):
        for arm, tpr, n in (("real", tpr_real[k], nll[0]), ("null", tpr_null[k], nll[1]), ("control", 0.0, nll[2])):
            rows.append({"arm": arm, "seed_index": k, "tpr": tpr, "mean_z": 0.1 if arm != "real" else 6.0,
                         "scored_frac": scored, "nll": n + 0.01 * k, "status": "ok"})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("real,null,scored,outcome", [
    ((0.98, 0.99, 1.0), (0.0, 0.0, 0.04), 0.9, "reproduced"),
    ((0.5, 0.6, 0.55), (0.0, 0.0, 0.04), 0.9, "not reproduced"),
    ((0.98, 0.99, 1.0), (0.98, 0.97, 0.99), 0.9, "inconclusive"),   # the null arm meets the rule
    ((0.98, 0.99, 1.0), (0.0, 0.0, 0.04), 0.3, "inconclusive"),     # gate: too few tokens scored
])
def test_tpr_verdicts(real, null, scored, outcome):
    exp = get("watermark-lm")()
    cfg = resolve_config(exp.Config, "quick")
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(real, null, scored=scored), None)}
    assert v["tpr"].outcome == outcome
    assert v["ppl-cost"].outcome == "reproduced" and v["ppl-cost"].value == pytest.approx(0.5)
    assert v["null-z"].kind == "check" and v["null-z"].outcome == "passed"


def test_bad_input_is_refused_before_any_work(tmp_path):
    exp = get("watermark-lm")()
    for over in ({"model": "smollm-135"}, {"model": str(tmp_path / "missing")}, {"scheme": "sha"}):
        cfg = resolve_config(exp.Config, "smoke", over) if "gamma" not in over else None
        with pytest.raises(ConfigError):
            run_experiment(exp, cfg, tmp_path / "never", progress=False, log=lambda m: None)
        assert not (tmp_path / "never").exists()
    with pytest.raises(ConfigError):
        resolve_config(exp.Config, "smoke", {"gamma": 1.5})


def test_step_nll_read_during_generation_equals_a_second_pass(tiny_llama):
    """StepNLL (the NLL read off generate's own cached forwards) equals generated_nll's second full forward, and the
    hook leaves the sampled texts unchanged; two batches (gen_batch 3 of 5 texts)."""
    import numpy as np
    import torch
    from transformers import LlamaForCausalLM

    from lmsci.experiments.watermark.watermark_lm import StepNLL, generated_nll
    from lmsci.methods import watermark as wm

    model = LlamaForCausalLM.from_pretrained(tiny_llama, attn_implementation="sdpa").eval()
    prompts = torch.randint(0, 96, (5, 6), generator=torch.Generator().manual_seed(1))
    wcfg = wm.watermarking_config(0.25, 2.0)
    plain = wm.generate(model, prompts, 12, wcfg, 0.7, seed=3, batch_size=3)
    with StepNLL(model) as rec:
        texts = wm.generate(model, prompts, 12, wcfg, 0.7, seed=3, batch_size=3)
    assert torch.equal(plain, texts)
    a, b = rec.nll(texts), generated_nll(model, prompts, texts, 3)
    assert a.shape == (5,) and np.allclose(a, b, rtol=1e-4, atol=1e-5)
