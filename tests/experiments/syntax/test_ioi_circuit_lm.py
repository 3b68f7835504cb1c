"""ioi-circuit-lm: IOI prompts for a real tokenizer, the path-patching instruments on a tiny random Llama (GQA), a
smoke run end to end, verdicts from hand-made tables, bad input refused before work.

Source: Wang et al. 2022, arXiv 2211.00593 (p_IOI, p_ABC, logit difference, path patching, copy score,
faithfulness)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.syntax import _ioi_lm_measures as M
from lmsci.experiments.syntax._lm_common import TINY, load_lm
from lmsci.experiments.syntax.ioi_circuit_lm import IOICircuitLM, IOILMConfig
from lmsci.measure import hf_heads as H
from lmsci.sweep import run_experiment


@pytest.fixture(scope="module")
def tiny():
    return load_lm(TINY, "cpu")


@pytest.fixture(scope="module")
def prompts(tiny):
    return M.make_prompts(tiny.tokenizer, 2, 4, np.random.default_rng(0))


def test_prompts_are_aligned_pairs(prompts):
    p, rows = prompts, torch.arange(8)
    assert p.clean.shape == p.abc.shape and (p.clean[rows, p.io_pos] == p.io).all()
    assert (p.clean[rows, p.s1_pos] == p.s).all() and ((p.clean != p.abc).sum(1) == 3).all()
    assert set(p.template.tolist()) == {0, 1, 2, 3}
    for k in range(8):  # neither clean name is in the ABC prompt
        assert not {int(p.io[k]), int(p.s[k])} & set(p.abc[k].tolist())
    assert M.natural("Then , {S} and {IO} went to the {PLACE} .") == "Then, {S} and {IO} went to the {PLACE}."


def test_patching_identities(tiny, prompts):
    p, sh = prompts, H.head_shape(tiny)
    clean = M.forward(tiny, p.clean, p, grad=True)
    abc = M.forward(tiny, p.abc, p)
    direct, dO = M.direct_effects(tiny, clean, abc, p)
    # no heads patched: the clean logit difference, by every route
    assert torch.allclose(M.direct_ld(tiny, clean, dO, p, []), clean.ld, atol=1e-4)
    assert torch.allclose(M.query_patched_ld(tiny, p, dO, [], [(1, 0)]), clean.ld, atol=1e-4)
    every = [(l, h) for l in range(sh.n_layers) for h in range(sh.n_heads)]
    means = M.template_means(abc.z, p.template)
    assert torch.allclose(M.forward(tiny, p.clean, p, edit=M.ablate_except(every, means, sh.n_heads)).ld, clean.ld,
                          atol=1e-4)
    # the linearised direct effect of one head agrees with exact direct-path patching to first order
    l, h = M.bottom(direct, 1)[0]
    exact = float((M.direct_ld(tiny, clean, dO, p, [(l, h)]) - clean.ld).mean())
    assert abs(exact - float(direct[l, h])) <= 0.2 * abs(float(direct[l, h])) + 1e-4
    # attribution and query effects are finite and shaped per head; senders at or above the receiver get nothing
    q = M.query_effects(tiny, clean, dO, [(1, 0)])
    assert q.shape == (2, 3) and torch.isfinite(q).all() and (q[1] == 0).all()
    assert M.attribution(clean, abc).shape == (2, 3)
    # path patching a real sender changes the LD (the receivers' queries do read it)
    moved = M.query_patched_ld(tiny, p, dO, [(0, 0), (0, 1), (0, 2)], [(1, 0), (1, 1), (1, 2)])
    assert not torch.allclose(moved, clean.ld, atol=1e-6)


def test_copy_score_is_a_share(tiny, prompts):
    run = M.forward(tiny, prompts.clean, prompts)
    resid, names = M.name_positions(run, prompts)
    c = H.copy_score(tiny, resid, names, [(0, 0), (1, 2)])
    assert c.shape == (2,) and ((c >= 0) & (c <= 1)).all()


def test_smoke_run_end_to_end(tmp_path):
    run = run_experiment(IOICircuitLM(), resolve_config(IOILMConfig, "smoke", {"threads": 1}), tmp_path / "run",
                         progress=False, log=lambda m: None)
    res = run.results()
    assert (res["status"] == "ok").all() and set(res["arm"]) == {"real", "null"}
    real, null = res[res["arm"] == "real"].set_index("seed_index"), res[res["arm"] == "null"].set_index("seed_index")
    assert np.allclose(real["ld_clean"], null["ld_clean"])                  # both arms see the same prompts
    assert np.allclose(null["ld"], null["ld_abc"]) and np.allclose(real["ld"], real["ld_clean"])
    assert (real["heads_nm"] == real["name_movers"]).all() and (null["heads_nm"] != null["name_movers"]).all()
    assert {v.claim_id for v in run.verdicts()} == {c.id for c in IOICircuitLM.claims}
    assert "Heads found" in (run.path / run.REPORT).read_text()


GOOD = {"ld": (4.0, 4.5, 5.0), "ld_clean": (4.0, 4.5, 5.0), "nm_share": (0.5, 0.55, 0.6), "copy": (0.9, 0.95, 0.9),
        "si_share": (0.3, 0.35, 0.4), "faith": (0.8, 0.85, 0.9)}
NULL = {"ld": (0.0, 0.1, -0.1), "ld_clean": (4.0, 4.5, 5.0), "nm_share": (0.0, 0.02, -0.01),
        "copy": (0.1, 0.05, 0.0), "si_share": (0.0, 0.01, 0.02), "faith": (0.0, 0.1, -0.1)}


def _verdicts(real, null):
    rows = [{"arm": arm, "seed_index": k, "status": "ok", **{c: v[k] for c, v in vals.items()}}
            for arm, vals in (("real", real), ("null", null)) for k in range(3)]
    cfg = resolve_config(IOILMConfig, "quick")
    return {v.claim_id: v.outcome for v in IOICircuitLM().verdicts(cfg, pd.DataFrame(rows), None)}


def test_verdicts():
    assert set(_verdicts(GOOD, NULL).values()) == {"reproduced"}
    v = _verdicts({**GOOD, "faith": (0.1, 0.2, 0.15)}, NULL)
    assert v["faithfulness"] == "not reproduced" and v["logit-diff"] == "reproduced"
    v = _verdicts(GOOD, {**NULL, "copy": (0.9, 0.95, 0.92)})                 # random heads copy too
    assert v["name-mover-copy"] == "inconclusive"
    low = {**GOOD, "ld_clean": (0.5, 4.0, 4.0)}                               # a sample where the model fails IOI
    v = _verdicts(low, NULL)
    assert v["faithfulness"] == "inconclusive" and v["s-inhibition"] == "inconclusive"


@pytest.mark.parametrize("override,field", [({"model": "gpt-7"}, "model"), ({"model": "/no/such/dir"}, "model")])
def test_bad_input_is_refused_before_any_work(tmp_path, override, field):
    cfg = resolve_config(IOILMConfig, "smoke", override)
    with pytest.raises(ConfigError) as e:
        run_experiment(IOICircuitLM(), cfg, tmp_path / "never", progress=False, log=lambda m: None)
    assert e.value.field == field and not (tmp_path / "never").exists()
    with pytest.raises(ConfigError):
        resolve_config(IOILMConfig, "smoke", {"n_templates": 16})


def test_real_model_prompts_and_hooks(smollm2):
    """On SmolLM2-135M: its tokenizer gives single-token names and aligned prompt pairs; the head hooks read
    ``[30, B, T, 9, 64]`` without changing the logits (GQA: 3 key/value heads)."""
    sh = H.head_shape(smollm2)
    assert (sh.n_layers, sh.n_heads, sh.n_kv_heads, sh.d_head) == (30, 9, 3, 64)
    names, places, objects = M.vocabulary(smollm2.tokenizer)
    assert len(names) >= 20 and places and objects
    p = M.make_prompts(smollm2.tokenizer, 1, 2, np.random.default_rng(0))
    rows = torch.arange(2)
    assert (p.clean[rows, p.io_pos] == p.io).all() and ((p.clean != p.abc).sum(1) == 3).all()
    base = H.logits(smollm2, p.clean)
    out, z = H.run_z(smollm2, p.clean)
    assert z.shape[:2] == (30, 2) and z.shape[-2:] == (9, 64) and torch.allclose(out, base, atol=1e-5)
