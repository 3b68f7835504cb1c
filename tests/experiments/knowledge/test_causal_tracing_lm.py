"""causal-tracing-lm (issue 43): the instruments on a tiny HF Llama (grouped-query attention), the prompts, the
smoke run end to end on the tiny random Llama, verdicts on hand-made tables, bad input refused before work."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError, UnknownNameError
from lmsci.experiments.knowledge._causal_tracing_lm_model import (
    TINY, encode_fact, get_model, greedy_next, known_facts, prefix_ids,
)
from lmsci.experiments.knowledge.causal_tracing_lm import (
    CausalTracingLM, CausalTracingLMConfig, band, decoy_span, key_tokens, layer_centres,
)
from lmsci.measure.causal_tracing import average_by_category, causal_trace, embedding_std
from lmsci.methods.rome import compute_rome, down_projection, edited, key_second_moment
from lmsci.sweep import run_experiment
from lmsci.worlds.facts import load_facts


@pytest.fixture(scope="module")
def tiny():
    fs = load_facts()
    return fs, get_model(TINY, fs, "cpu")


def test_prompts_locate_subject_and_object_tokens(tiny):
    fs, m = tiny
    tok = m.tokenizer
    pre = prefix_ids(tok, "<|endoftext|>")
    f = next(f for f in fs.facts if f.subject == "the United Kingdom" and f.relation == "capital")
    p = encode_fact(tok, fs, f, pre)
    assert tok.convert_ids_to_tokens(p.ids[p.subject[0]:p.subject[1]]) == ["the", "United", "Kingdom"]
    assert p.ids[0] == pre[0] and tok.convert_ids_to_tokens(p.object) == ["London"]
    q = encode_fact(tok, fs, f, pre, context="The capital of Peru is the city of Lima.")
    assert tok.convert_ids_to_tokens(q.ids[q.subject[0]:q.subject[1]]) == ["the", "United", "Kingdom"]
    with pytest.raises(ConfigError):
        prefix_ids(tok, "<|not a token|>")
    # left-padded batches give each prompt's own greedy token
    ps = [encode_fact(tok, fs, g, pre).ids for g in fs.facts[:6]]
    with torch.no_grad():
        single = [int(m(torch.tensor([q]))[0, -1].argmax()) for q in ps]
    assert greedy_next(m, ps) == single
    assert known_facts(m, TINY, [encode_fact(tok, fs, g, pre) for g in fs.facts[:6]]) == [
        s == encode_fact(tok, fs, g, pre).object[0] for s, g in zip(single, fs.facts[:6])]


def test_partial_trace_equals_the_full_trace_on_its_cells_on_a_gqa_llama(tiny):
    fs, m = tiny
    assert m.model.config.num_key_value_heads < m.model.config.num_attention_heads
    p = encode_fact(m.tokenizer, fs, fs.facts[0], prefix_ids(m.tokenizer, "<|endoftext|>"))
    nu = 3 * embedding_std(m, [p.ids], [p.subject])
    kw = dict(noise=nu, samples=3, kinds=("mlp", "attn", "resid"), window={"mlp": 2, "attn": 2, "resid": 1}, seed=5)
    full = causal_trace(m, p.ids, p.subject, p.object[0], **kw)
    toks, layers = key_tokens(len(p.ids), p.subject), [1, 3]
    part = causal_trace(m, p.ids, p.subject, p.object[0], tokens=toks, layers=layers, **kw)
    for k in ("mlp", "attn", "resid"):
        np.testing.assert_allclose(part.scores[k][np.ix_(toks, layers)], full.scores[k][np.ix_(toks, layers)],
                                   rtol=1e-4, atol=1e-7)
        assert np.isnan(part.scores[k][:, [0, 2]]).all()
    # restoring every hidden state of the last layer at the last token restores the clean run exactly
    assert full.scores["resid"][-1, -1] == pytest.approx(full.high, rel=1e-4)
    aie = average_by_category([part], "mlp")
    assert np.isfinite(aie[:, layers]).any() and np.isnan(aie[:, [0, 2]]).all()
    with pytest.raises(ConfigError):
        causal_trace(m, p.ids, p.subject, p.object[0], tokens=[99], **kw)


def test_rome_on_a_gqa_llama_reaches_its_target_and_reverts(tiny):
    fs, m = tiny
    tok = m.tokenizer
    pre = prefix_ids(tok, "<|endoftext|>")
    p = encode_fact(tok, fs, fs.facts[0], pre)
    ids = p.ids[:p.subject[1]]  # a prompt ending at the subject: the edited token predicts the target
    target = tok.convert_tokens_to_ids(["Lima"])
    mod, transposed = down_projection(m, 1)
    assert not transposed and tuple(mod.weight.shape) == (32, 64)
    C = key_second_moment(m, 1, torch.tensor([p.ids * 3]))
    p.ids = ids
    from lmsci.methods.rome import RomeHParams

    edit = compute_rome(m, 1, prompts=[p.ids], subject_last=[p.subject[1] - 1], target=target, cov=C,
                        hparams=RomeHParams(v_steps=40, v_lr=0.5, clamp_norm_factor=1e4, weight_decay=0.0))
    before = mod.weight.detach().clone()
    with torch.no_grad():
        lp0 = torch.log_softmax(m(torch.tensor([p.ids]))[0, -1], -1)[target[0]]
    with edited(m, edit):
        with torch.no_grad():
            lp1 = torch.log_softmax(m(torch.tensor([p.ids]))[0, -1], -1)[target[0]]
    # a 0.02-std random model's logits move little; the rank-one edit reproduces v*'s NLL on its prompt
    assert float(lp1) > float(lp0) + 0.3 and -float(lp1) == pytest.approx(edit.info["nll_end"], abs=2e-3)
    assert torch.equal(mod.weight, before)


def test_helpers():
    assert layer_centres(30, 3) == list(range(1, 30, 3)) and layer_centres(4, 1) == [0, 1, 2, 3]
    assert band(30, (0.1, 0.5)) == list(range(3, 15)) and band(30, (0.5, 1.0)) == list(range(15, 30))
    assert key_tokens(10, (4, 6)) == [4, 5, 6, 9] and key_tokens(6, (4, 5)) == [4, 5]
    rng = np.random.default_rng(0)
    for _ in range(50):
        a, b = decoy_span(10, (4, 6), 1, rng)
        assert b - a == 2 and 1 <= a and b <= 9 and (b <= 4 or a >= 6)
    assert decoy_span(5, (1, 3), 1, rng) == (3, 4)  # one free token: the decoy is shorter than the subject
    with pytest.raises(ConfigError):
        decoy_span(4, (1, 3), 1, rng)


def test_smoke_end_to_end(tmp_path):
    exp = CausalTracingLM()
    cfg = resolve_config(CausalTracingLMConfig, "smoke", {"threads": 1})
    run = run_experiment(exp, cfg, tmp_path / "run", progress=False, log=lambda *a: None)
    res = run.results()
    assert set(res["arm"]) == {"real", "null"} and (res["status"] == "ok").all() and len(res) == 4
    assert np.isfinite(res[["mlp_margin", "attn_margin", "total_effect", "efficacy", "sec_per_fact"]].astype(float)).all().all()
    # the two arms trace the same facts; the null arm corrupts a decoy
    assert list(res.loc[res["arm"] == "real", "facts"]) == list(res.loc[res["arm"] == "null", "facts"])
    vs = {v.claim_id: v for v in run.verdicts()}
    assert set(vs) == {c.id for c in CausalTracingLM.claims}
    assert all(v.outcome == "inconclusive" for v in vs.values())  # smoke: below the claims' scale
    report = (run.path / run.REPORT).read_text()
    assert "The real model beside the toy experiment" in report and "Measured cost" in report
    assert (run.path / "figures" / "aie_maps.png").is_file()


def _table(mlp_real, mlp_null, n_known=120, te=0.3):
    rows = []
    for arm, vals in (("real", mlp_real), ("null", mlp_null)):
        for k, v in enumerate(vals):
            rows.append({"arm": arm, "seed_index": k, "status": "ok", "n_known": n_known, "total_effect": te,
                         "mlp_margin": v, "attn_margin": v, "efficacy": 1.0, "paraphrase": 0.9,
                         "specificity": 0.8 if arm == "real" else 0.5})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("real,null,n_known,te,outcome", [
    ((0.02, 0.03, 0.025), (-0.01, 0.0, -0.02), 120, 0.3, "reproduced"),
    ((-0.02, 0.01, -0.01), (-0.01, 0.0, -0.02), 120, 0.3, "not reproduced"),
    ((0.02, 0.03, 0.025), (0.02, 0.03, 0.025), 120, 0.3, "inconclusive"),   # the decoy meets the rule
    ((0.02, 0.03, 0.025), (-0.01, 0.0, -0.02), 12, 0.3, "inconclusive"),    # too few known facts
    ((0.02, 0.03, 0.025), (-0.01, 0.0, -0.02), 120, 0.01, "inconclusive"),  # the corruption removes nothing
    ((0.02, 0.03), (-0.01, 0.0), 120, 0.3, "inconclusive"),                  # two samples: below min_seeds
])
def test_site_verdicts(real, null, n_known, te, outcome):
    cfg = resolve_config(CausalTracingLMConfig, "quick")
    vs = {v.claim_id: v for v in CausalTracingLM().verdicts(cfg, _table(real, null, n_known, te), None)}
    assert vs["mlp-early-site"].outcome == outcome and vs["attn-late-site"].outcome == outcome
    # ROME: efficacy met by both arms -> inconclusive; specificity only by the traced layer -> reproduced
    if n_known >= 40 and len(real) == 3:
        assert vs["rome-efficacy"].outcome == "inconclusive" and vs["rome-specificity"].outcome == "reproduced"


@pytest.mark.parametrize("over,err", [({"model": "no-such-model"}, ConfigError),
                                      ({"model": "/nonexistent/dir"}, ConfigError),
                                      ({"kinds": ("resid",)}, ConfigError),
                                      ({"kinds": ("mlp", "attn", "heads")}, UnknownNameError),
                                      ({"relations": ("capitol",)}, UnknownNameError)])
def test_bad_input_is_refused_before_work(tmp_path, over, err):
    cfg = resolve_config(CausalTracingLMConfig, "smoke", over)
    with pytest.raises(err):
        run_experiment(CausalTracingLM(), cfg, tmp_path / "never", progress=False, log=lambda *a: None)
    assert not (tmp_path / "never").exists()
    with pytest.raises(ConfigError):
        resolve_config(CausalTracingLMConfig, "smoke", {"tokens": "some"})
