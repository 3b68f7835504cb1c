"""knowledge-neurons-lm (issue 43 item 2): the cached integrated gradients equal the library's on a tiny HF Llama,
the null arm's random neurons, the smoke run end to end on the tiny random Llama, the engine's verdicts on
hand-made tables, the claims registered, bad input refused before work."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError, UnknownNameError
from lmsci.experiments.knowledge._causal_tracing_lm_model import TINY, encode_fact, get_model, prefix_ids
from lmsci.experiments.knowledge._knowledge_neurons_lm_ig import cached_integrated_gradients
from lmsci.experiments.knowledge.knowledge_neurons_lm import (
    KnowledgeNeuronsLM, KnowledgeNeuronsLMConfig, arm_rows, same_layer_random,
)
from lmsci.measure.attribution import integrated_gradients
from lmsci.sweep import run_experiment
from lmsci.worlds.facts import load_facts


@pytest.fixture(scope="module")
def tiny():
    fs = load_facts()
    return fs, get_model(TINY, fs, "cpu")


def test_cached_integrated_gradients_equal_the_library_on_a_gqa_llama(tiny):
    fs, m = tiny
    pre = prefix_ids(m.tokenizer, "<|endoftext|>")
    for j, f in enumerate(fs.facts[:3]):
        p = encode_fact(m.tokenizer, fs, f, pre, paraphrase=j % 2)
        want = integrated_gradients(m, p.ids, p.object[0], steps=5)
        got = cached_integrated_gradients(m, p.ids, p.object[0], steps=5)
        assert got.shape == want.shape == (4, 64)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
        part = cached_integrated_gradients(m, p.ids, p.object[0], steps=5, layers=[1, 3])
        torch.testing.assert_close(part, want[[1, 3]], rtol=1e-4, atol=1e-4 * float(want.abs().max()))
    # the completeness of integrated gradients: per layer, the sum of attributions approaches P(x) - P(0 at the
    # layer) as m grows; a coarse check that the gradients are taken at the right place: not all zero
    assert float(got.abs().sum()) > 0
    with pytest.raises(ConfigError):
        cached_integrated_gradients(m, p.ids, p.object[0], steps=0)
    with pytest.raises(ConfigError):
        cached_integrated_gradients(m, p.ids, p.object[0], layers=[4])


def test_same_layer_random_keeps_the_count_per_layer_and_avoids_the_chosen():
    rng = np.random.default_rng(0)
    neurons = [(0, 1), (0, 5), (3, 2)]
    for _ in range(20):
        r = same_layer_random({0: 8, 3: 8}, neurons, rng)
        assert sorted(l for l, _ in r) == [0, 0, 3] and not set(r) & set(neurons) and len(set(r)) == 3
    assert same_layer_random({0: 8}, [], rng) == []


def test_arm_rows_average_the_facts_with_neurons():
    recs = [{"fact": "a", "n_neurons": 2, "n_coarse": 5.0, "layers": [28, 29], "p_before": 0.4,
             **{f"{a}_{c}": v for a in ("real", "null") for c, v in
                zip(("suppress", "amplify", "other", "specificity", "suppress_per_prompt", "amplify_per_prompt"),
                    ((-0.5, 0.4, -0.1, -0.4, -0.6, 0.9) if a == "real" else (-0.01, 0.01, 0.0, -0.01, 0.0, 0.0)))}},
            {"fact": "b", "n_neurons": 0, "n_coarse": 1.0, "layers": [], "p_before": 0.9}]
    rows = arm_rows({"n_layers": 30}, recs)
    assert rows["real"]["suppress"] == -0.5 and rows["null"]["suppress"] == -0.01
    assert rows["real"]["frac_with_neurons"] == 0.5 and rows["real"]["mean_neurons"] == 1.0
    assert json.loads(rows["real"]["neuron_layers"]) == [28, 29] and rows["null"]["p_before"] == 0.4


def test_smoke_end_to_end(tmp_path):
    exp = KnowledgeNeuronsLM()
    cfg = resolve_config(KnowledgeNeuronsLMConfig, "smoke", {"threads": 1})
    run = run_experiment(exp, cfg, tmp_path / "run", progress=False, log=lambda *a: None)
    res = run.results()
    assert set(res["arm"]) == {"real", "null"} and (res["status"] == "ok").all() and len(res) == 4
    assert np.isfinite(res[["suppress", "amplify", "other", "specificity", "sec_per_fact"]].astype(float)).all().all()
    # both arms edit the same facts, one attribution per sample; the samples differ
    real, null = res[res["arm"] == "real"], res[res["arm"] == "null"]
    assert list(real["facts"]) == list(null["facts"]) and real["facts"].iloc[0] != real["facts"].iloc[1]
    assert list(real["suppress"]) != list(null["suppress"])
    vs = {v.claim_id: v for v in run.verdicts()}
    assert set(vs) == {c.id for c in KnowledgeNeuronsLM.claims}
    assert all(v.outcome == "inconclusive" for v in vs.values())  # smoke: a random model knows no fact
    report = (run.path / run.REPORT).read_text()
    assert "knowledge-neurons" in report and "Measured cost" in report and "Where the knowledge neurons are" in report
    assert (run.path / "figures" / "per_fact_change.png").is_file()
    assert (run.path / "figures" / "neuron_layers.png").is_file()


def _table(real, null, n_known=120, found=0.9):
    rows = []
    for arm, vals in (("real", real), ("null", null)):
        for k, v in enumerate(vals):
            rows.append({"arm": arm, "seed_index": k, "status": "ok", "n_known": n_known, "frac_with_neurons": found,
                         "suppress": v, "amplify": -v, "specificity": v})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("real,null,n_known,found,outcome", [
    ((-0.3, -0.25, -0.35), (-0.01, 0.0, -0.02), 120, 0.9, "reproduced"),
    ((-0.05, 0.01, -0.03), (-0.01, 0.0, -0.02), 120, 0.9, "not reproduced"),
    ((-0.3, -0.25, -0.35), (-0.3, -0.25, -0.35), 120, 0.9, "inconclusive"),   # random neurons erase facts too
    ((-0.3, -0.25, -0.35), (-0.01, 0.0, -0.02), 12, 0.9, "inconclusive"),     # too few known facts
    ((-0.3, -0.25, -0.35), (-0.01, 0.0, -0.02), 120, 0.2, "inconclusive"),    # knowledge neurons rarely found
    ((-0.3, -0.25), (-0.01, 0.0), 120, 0.9, "inconclusive"),                    # two samples: below min_seeds
])
def test_verdicts(real, null, n_known, found, outcome):
    cfg = resolve_config(KnowledgeNeuronsLMConfig, "quick")
    vs = {v.claim_id: v for v in KnowledgeNeuronsLM().verdicts(cfg, _table(real, null, n_known, found), None)}
    assert {vs[c].outcome for c in ("suppress-erases", "amplify-strengthens", "suppress-specific")} == {outcome}


def test_claims_are_registered():
    from pathlib import Path

    stored = json.loads((Path(__file__).resolve().parents[2] / "data" / "claims.json").read_text())
    assert [c["id"] for c in stored["knowledge-neurons-lm"]] == [c.id for c in KnowledgeNeuronsLM.claims]
    assert KnowledgeNeuronsLM.escape_hatches() == []  # every claim is judged by the engine from its Stat


@pytest.mark.parametrize("over,err", [({"model": "no-such-model"}, ConfigError),
                                      ({"model": "/nonexistent/dir"}, ConfigError),
                                      ({"relations": ("capitol",)}, UnknownNameError),
                                      ({"min_neurons": 6.0}, ConfigError)])
def test_bad_input_is_refused_before_work(tmp_path, over, err):
    cfg = resolve_config(KnowledgeNeuronsLMConfig, "smoke", over)
    with pytest.raises(err):
        run_experiment(KnowledgeNeuronsLM(), cfg, tmp_path / "never", progress=False, log=lambda *a: None)
    assert not (tmp_path / "never").exists()
    with pytest.raises(ConfigError):
        resolve_config(KnowledgeNeuronsLMConfig, "smoke", {"ig_steps": 0})


def test_cached_integrated_gradients_on_the_real_model(smollm2):
    fs = load_facts()
    f = next(f for f in fs.facts if f.subject == "France" and f.relation == "capital")
    p = encode_fact(smollm2.tokenizer, fs, f, prefix_ids(smollm2.tokenizer, "<|endoftext|>"), paraphrase=0)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        want = integrated_gradients(smollm2, p.ids, p.object[0], steps=4, layers=[2, 29])
        got = cached_integrated_gradients(smollm2, p.ids, p.object[0], steps=4, layers=[2, 29])
    finally:
        torch.set_num_threads(n)
    assert got.shape == (2, 1536)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4 * float(want.abs().max()))
