"""induction-heads-lm: the per-head instruments on a tiny random Llama (GQA), a smoke run end to end, verdicts from
hand-made tables (reproduced / not reproduced / null meets the rule / gate failed), bad input refused before work.

Source: Olsson et al. 2022, arXiv 2209.11895 (prefix matching, in-context loss, ablations)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.syntax._lm_common import TINY, load_lm, random_heads
from lmsci.experiments.syntax.induction_heads_lm import InductionHeadsLM, InductionLMConfig
from lmsci.measure import hf_heads as H
from lmsci.measure.heads import prefix_matching_scores
from lmsci.sweep import run_experiment


@pytest.fixture(scope="module")
def tiny():
    return load_lm(TINY, "cpu")


def test_hooks_read_and_replace_head_outputs(tiny):
    ids = torch.randint(4, 256, (2, 10), generator=torch.Generator().manual_seed(0))
    base = H.logits(tiny, ids)
    out, z = H.run_z(tiny, ids)
    sh = H.head_shape(tiny)
    assert z.shape == (sh.n_layers, 2, 10, sh.n_heads, sh.d_head) and sh.group == 3
    assert torch.allclose(out, base)                                  # reading changes nothing
    # mean-ablating every head with its own output changes nothing; with zeros it does
    same = H.logits_with(tiny, ids, lambda i, zz: z[i])
    assert torch.allclose(same, base, atol=1e-5)
    heads = [(l, h) for l in range(sh.n_layers) for h in range(sh.n_heads)]
    zero = H.logits_with(tiny, ids, H.mean_ablate(heads, torch.zeros(sh.n_layers, sh.n_heads, sh.d_head)))
    assert not torch.allclose(zero, base, atol=1e-4)
    # a head's write through o_proj: the sum over heads is the attention output
    w = sum(H.head_out(tiny, z[0], 0, h) for h in range(sh.n_heads))
    o = H.layers(tiny)[0].self_attn.o_proj(z[0].reshape(2, 10, -1))
    assert torch.allclose(w, o, atol=1e-5)


def test_prefix_matching_equals_the_gpt_instrument(tiny):
    L = 6
    s = torch.randint(4, 256, (3, L), generator=torch.Generator().manual_seed(1))
    ids = torch.cat([s, s], 1)
    att = H.attention(tiny, ids)
    target = torch.full((2 * L,), -1, dtype=torch.long)
    target[L:] = torch.arange(L, 2 * L) - L + 1
    assert torch.allclose(H.prefix_matching(att, target), prefix_matching_scores(att, target), atol=1e-6)
    assert torch.allclose(att.sum(-1), torch.ones_like(att.sum(-1)), atol=1e-5)


def test_ov_copying_is_in_range_and_random_heads_exclude(tiny):
    c = H.ov_copying(tiny)
    assert c.shape == (2, 3) and (c.abs() <= 1 + 1e-6).all()
    g = torch.Generator().manual_seed(0)
    r = random_heads(2, 3, 4, [(0, 0), (1, 1)], g)
    assert len(set(r)) == 4 and not {(0, 0), (1, 1)} & set(r)
    with pytest.raises(ConfigError):
        random_heads(2, 3, 5, [(0, 0), (1, 1)], g)


def test_smoke_run_end_to_end(tmp_path):
    cls = InductionHeadsLM
    run = run_experiment(cls(), resolve_config(cls.Config, "smoke", {"threads": 1}), tmp_path / "run",
                         progress=False, log=lambda m: None)
    res = run.results()
    assert (res["status"] == "ok").all() and set(res["arm"]) == {"real", "null"} and len(res) == 4
    real, null = res[res["arm"] == "real"], res[res["arm"] == "null"]
    assert (real["pm_topk"].between(0, 1)).all() and (null["pm_topk"].between(0, 1)).all()
    assert (real["heads"] == real["top_heads"]).all() and (null["heads"] != null["top_heads"]).all()
    assert np.allclose(real["icl_drop"], real["rep_icl_drop"])
    assert {v.claim_id for v in run.verdicts()} == {c.id for c in cls.claims}
    assert (run.path / "figures" / "prefix_matching_real.png").is_file()
    assert "Beside the toy experiment" in (run.path / run.REPORT).read_text()


def _table(real: dict, null: dict) -> pd.DataFrame:
    rows = []
    for arm, vals in (("real", real), ("null", null)):
        for k in range(3):
            rows.append({"arm": arm, "seed_index": k, "status": "ok", **{c: v[k] for c, v in vals.items()}})
    return pd.DataFrame(rows)


GOOD = {"icl_drop": (9.0, 9.5, 10.0), "pm_topk": (0.6, 0.65, 0.7), "copy_topk": (0.8, 0.85, 0.9),
        "adv_removed": (0.8, 0.85, 0.9)}
NULL = {"icl_drop": (0.0, 0.05, -0.05), "pm_topk": (0.02, 0.03, 0.01), "copy_topk": (-0.1, 0.0, -0.2),
        "adv_removed": (0.02, 0.05, -0.01)}


def _verdicts(real, null):
    cfg = resolve_config(InductionLMConfig, "quick")
    return {v.claim_id: v.outcome for v in InductionHeadsLM().verdicts(cfg, _table(real, null), None)}


def test_verdicts_reproduced_not_reproduced_null_meets_and_gate():
    assert set(_verdicts(GOOD, NULL).values()) == {"reproduced"}
    weak = {**GOOD, "adv_removed": (0.1, 0.15, 0.2), "pm_topk": (0.1, 0.12, 0.11)}
    v = _verdicts(weak, NULL)
    assert v["ablation-removes-advantage"] == "not reproduced" and v["prefix-matching-heads"] == "not reproduced"
    v = _verdicts(GOOD, {**NULL, "adv_removed": (0.8, 0.9, 0.85)})            # random heads remove it too
    assert v["ablation-removes-advantage"] == "inconclusive" and v["copying"] == "reproduced"
    v = _verdicts({**GOOD, "icl_drop": (0.5, 9.0, 9.0)}, NULL)                # a sample that does not use its context
    assert v["ablation-removes-advantage"] == "inconclusive"


@pytest.mark.parametrize("override,field", [({"model": "no-such-model"}, "model"),
                                            ({"model": "/nowhere/model.gguf"}, "model"),
                                            ({"model": TINY, "token_lo": 300}, "token_lo")])
def test_bad_input_is_refused_before_any_work(tmp_path, override, field):
    cfg = resolve_config(InductionLMConfig, "smoke", override)
    with pytest.raises(ConfigError) as e:
        run_experiment(InductionHeadsLM(), cfg, tmp_path / "never", progress=False, log=lambda m: None)
    assert e.value.field == field and not (tmp_path / "never").exists()
