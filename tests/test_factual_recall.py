"""Factual-recall world, associative models, capacity search, fit, verdicts, and smoke runs.

Source of the set-up: Nichani, Lee, Bietti, arXiv 2412.06538 (task, Theorems 3-4 and 6).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.factual_recall import (
    FactualRecall,
    FactualRecallConfig,
    _Member,
    loglog_fit,
    next_probes,
    train_stack,
    update_bracket,
)
from lmsci.experiments.hallucination_stage import (
    HallucinationConfig,
    HallucinationStage,
    answer_losses,
    detect_plateau,
)
from lmsci.models.associative import LinearAttentionModel, OneLayerSpec, OneLayerTransformer
from lmsci.runs import RunDir
from lmsci.sweep import run_experiment
from lmsci.worlds.factual_recall import FactualRecallWorld, sample_stack



# -- world ---------------------------------------------------------------------------------------
def test_world_layout_and_sampling():
    w = FactualRecallWorld(7, 3, 5, seq_len=10, seed=3)
    assert (w.vocab_size, w.n_answers, w.eos, w.n_noise) == (7 + 3 + 10 + 1, 15, 20, 10)
    # Assumption 1: each relation's answers lie in its own block
    for r in range(3):
        assert set(w.fact_table[:, r].tolist()) <= set(w.answer_block(r))
    b = w.sample(2000, torch.Generator().manual_seed(0))
    x = b.input_ids
    assert x.shape == (2000, 10) and (x[:, -1] == w.eos).all()
    subj = (x < 7)
    rel = (x >= 7) & (x < 10)
    noise = (x >= 10) & (x < 20)
    assert (subj[:, :-1].sum(1) == 1).all() and (rel[:, :-1].sum(1) == 1).all()
    assert (noise[:, :-1].sum(1) == 10 - 3).all()
    s = x[subj]
    r = x[rel] - 7
    assert torch.equal(s, b.subjects) and torch.equal(r, b.relations)
    assert torch.equal(b.targets, w.fact_table[s, r])
    # positions of subject and relation cover all of the first T-1 positions, never the last
    assert set(subj.float().argmax(1).tolist()) == set(range(9))
    # fresh noise every batch, same facts: the eval set differs from the training batch
    b2 = w.sample(2000, torch.Generator().manual_seed(1))
    assert not torch.equal(b.input_ids, b2.input_ids)
    assert torch.equal(w.eval_set(50, 4).input_ids, w.eval_set(50, 4).input_ids)
    st = FactualRecallWorld(16, 4, 8, 20, 32, facts="structured")
    assert st.fact_table[3, 2].item() == 2 * 8 + 1
    # H(a*|r): log D for the balanced structured table, less for a random one
    assert abs(st.relation_entropy() - math.log(8)) < 1e-9
    assert st.relation_entropy() > FactualRecallWorld(16, 4, 8, 20, 32, facts="random").relation_entropy() > 0


def test_sample_stack_matches_worlds():
    ws = [FactualRecallWorld(3, 2, 4, seq_len=8, seed=1), FactualRecallWorld(9, 5, 2, n_noise=4, seq_len=8, seed=2)]
    b = sample_stack(ws, 300, torch.Generator().manual_seed(0))
    assert b.input_ids.shape == (2, 300, 8)
    for k, w in enumerate(ws):
        x = b.input_ids[k]
        assert (x[:, -1] == w.eos).all() and int(x.max()) <= w.eos
        assert torch.equal(b.targets[k], w.fact_table[b.subjects[k], b.relations[k]])
        assert ((x >= w.noise_offset) & (x < w.eos)).sum(1).eq(8 - 3).all()
    with pytest.raises(ConfigError):
        sample_stack([ws[0], FactualRecallWorld(3, 2, seq_len=9)], 4, torch.Generator())
    with pytest.raises(ConfigError):
        FactualRecallWorld(0, 2)


# -- models --------------------------------------------------------------------------------------
def _naive_one_layer(model, i, spec, ids):
    """Per-position reference implementation of F_TF (arXiv 2412.06538)."""
    E = model.embed[i]
    X = E[ids]  # [B, T, d]
    out = 0
    for h in range(spec.n_heads):
        Q, K, V = (w[i, h, :, : spec.d_head] for w in (model.W_Q, model.W_K, model.W_V))
        O = model.W_O[i, h, : spec.d_head]
        scores = torch.einsum("btd,de,be->bt", X, K, X[:, -1] @ Q) / math.sqrt(spec.d_head)
        out = out + torch.einsum("bt,bte->be", torch.softmax(scores, -1), X @ V) @ O
    if spec.d_mlp:
        z = torch.relu(out @ model.W_in[i, :, : spec.d_mlp] + model.b_in[i, : spec.d_mlp])
        out = out + z @ model.W_out[i, : spec.d_mlp]
    return out @ model.unembed[i, : spec.n_answers].T


def test_one_layer_matches_reference_and_masks_padding():
    w = FactualRecallWorld(6, 4, 3, seq_len=9, seed=0)
    specs = [OneLayerSpec(3, 5, 7, 12), OneLayerSpec(1, 2, 0, 6)]
    model = OneLayerTransformer(10, w.vocab_size, 12, specs, seed=[5, 6])
    ids = w.sample(16, torch.Generator().manual_seed(0)).input_ids
    logits = model(torch.stack([ids, ids]))
    for i, s in enumerate(specs):
        torch.testing.assert_close(logits[i, :, : s.n_answers], _naive_one_layer(model, i, s, ids),
                                   rtol=1e-4, atol=1e-5)
    assert torch.isinf(logits[1, :, 6:]).all()
    # a member is the same model alone or in a stack
    alone = OneLayerTransformer(10, w.vocab_size, 12, OneLayerSpec(1, 2, 0, 6), seed=6)
    torch.testing.assert_close(alone(ids)[:, :6], logits[1, :, :6])
    # the slow (any last token) path agrees with the fast (shared last token) path
    _, mhsa = model.attention(torch.stack([ids, ids]))
    torch.testing.assert_close(mhsa, model.mhsa(torch.stack([ids, ids])), rtol=1e-4, atol=1e-5)
    # padded weights get no gradient; embeddings are frozen
    torch.nn.functional.cross_entropy(logits[1], ids[:, 0] % 6).backward()
    assert model.W_Q.grad[1, 1:].abs().max() == 0 and model.W_Q.grad[1, :, :, 2:].abs().max() == 0
    assert model.W_O.grad[1, :, 2:].abs().max() == 0 and model.W_in.grad[1].abs().max() == 0
    names = {n for n, _ in model.named_parameters()}
    assert "embed" not in names and "unembed" not in names


def test_param_count_is_the_papers():
    assert OneLayerSpec(8, 4, 0).num_params(32) == 4 * 8 * 4 * 32
    assert OneLayerSpec(8, 4, 64).num_params(32) == 4 * 8 * 4 * 32 + 2 * 64 * 32
    m = OneLayerTransformer(16, 20, 10, [OneLayerSpec(2, 3, 5), OneLayerSpec(4, 2, 0)])
    assert m.num_params() == [4 * 2 * 3 * 16 + 2 * 5 * 16, 4 * 4 * 2 * 16]
    m.keep([1])
    assert m.n_models == 1 and m.W_Q.shape[0] == 1 and m.num_params() == [4 * 4 * 2 * 16]


def test_linear_attention_model_formula():
    w = FactualRecallWorld(4, 2, 3, n_noise=3, seq_len=6, facts="structured")
    m = LinearAttentionModel(w.vocab_size, w.n_answers, init_scale=0.0)
    with torch.no_grad():
        m.A.copy_(torch.randn(w.vocab_size, w.vocab_size, generator=torch.Generator().manual_seed(0)))
        m.V.copy_(torch.randn(w.vocab_size, w.n_answers, generator=torch.Generator().manual_seed(1)))
    ids = w.sample(5, torch.Generator().manual_seed(0)).input_ids
    X = torch.eye(w.vocab_size)[ids]  # one-hot [B, T, d]
    ref = torch.einsum("btd,bd->bt", X, X[:, -1] @ m.A)  # x_T^T A x_t
    ref = torch.einsum("bt,btd->bd", ref, X) @ m.V
    torch.testing.assert_close(m(ids), ref)
    with pytest.raises(ConfigError):
        LinearAttentionModel(5, 3, embedding="sphere")


# -- training, search, fit -----------------------------------------------------------------------
def test_train_stack_learns_and_stops_early():
    torch.manual_seed(0)
    w = FactualRecallWorld(3, 2, 4, seq_len=8, seed=0)
    ms = [_Member(("a", 1, lr), w, OneLayerSpec(2, 8, 16), lr, 7) for lr in (3e-2, 1e-9)]
    train_stack(ms, 16, steps=400, batch_size=64, eval_every=20, n_eval=128, threshold=0.95,
                schedule="constant", seed=0, done_key=lambda m: m.key[:2])
    assert ms[0].reached_at is not None and ms[0].best_acc >= 0.95
    # the LR retry rule: one LR storing the facts ends the other runs of the same size
    assert ms[1].steps_run == ms[0].steps_run < 400 and ms[1].best_acc < 0.95
    # same seeds, same results (CPU determinism)
    again = [_Member(("a", 1, lr), w, OneLayerSpec(2, 8, 16), lr, 7) for lr in (3e-2, 1e-9)]
    train_stack(again, 16, steps=400, batch_size=64, eval_every=20, n_eval=128, threshold=0.95,
                schedule="constant", seed=0, done_key=lambda m: m.key[:2])
    assert [(m.best_acc, m.steps_run, m.final_loss) for m in again] == \
        [(m.best_acc, m.steps_run, m.final_loss) for m in ms]


def test_search_helpers():
    # first round: probes around the guess, inside the range
    assert next_probes(1, 65, 10, 3, 2, 64) == [7, 10, 14]
    # gallop up when everything stored, down when nothing stored; k-ary split of a bracket
    assert min(next_probes(14, 65, 10, 2, 2, 64)) > 14
    assert max(next_probes(1, 7, 10, 2, 2, 64)) < 7
    assert next_probes(10, 14, 10, 3, 2, 64) == [11, 12, 13]
    assert next_probes(10, 11, 10, 3, 2, 64) == []
    assert update_bracket(1, 65, {7: True, 10: True, 14: False}, 64) == (10, 14)
    assert update_bracket(10, 14, {11: False, 12: True, 13: False}, 64) == (12, 13)  # non-monotone noise
    assert update_bracket(1, 65, {7: False}, 64) == (1, 7)


def test_capacity_search_finds_the_threshold():
    """A simulated learner storing up to 37 facts: the search must land exactly on level 12 (36 facts)."""
    lo, hi, guess = 3, 65, 12
    for _ in range(10):
        probes = next_probes(lo, hi, guess, 3, 4, 64)
        if not probes:
            break
        lo, hi = update_bracket(lo, hi, {p: ((p + 1) // 2) * (p // 2) <= 37 for p in probes}, 64)
    assert (lo, hi) == (12, 13)


def test_loglog_fit_recovers_slope_and_ci():
    rng = np.random.default_rng(0)
    params = np.geomspace(100, 1e5, 12)
    facts = 0.15 * params * np.exp(rng.normal(0, 0.05, params.size))
    f = loglog_fit(params, facts)
    assert abs(f["slope"] - 1) < 0.05 and f["ci_lo"] < 1 < f["ci_hi"]
    g = np.array(["a", "b"] * 6)
    f2 = loglog_fit(params, facts * np.where(g == "a", 1, 3), g)  # different intercepts, same slope
    assert abs(f2["slope"] - 1) < 0.05 and f2["ci_hi"] - f2["ci_lo"] < 0.2
    f3 = loglog_fit(params, params**0.5)
    assert abs(f3["slope"] - 0.5) < 1e-9
    with pytest.raises(ValueError):
        loglog_fit(params[:2], facts[:2])


def _cap_rows(slope):
    rows = []
    noise = iter(np.exp(np.random.default_rng(1).normal(0, 0.1, 10)))
    for fam in ("attn_a2", "attn+mlp_a0.5_b2"):
        for p in (200, 400, 800, 1600, 3200):
            rows.append({"kind": "capacity", "family": fam, "params": p, "facts": 0.05 * p**slope * next(noise),
                         "censored": "", "facts_per_param": 0.05 * p ** (slope - 1), "trials": "[]"})
    return pd.DataFrame(rows)


def test_verdict_follows_the_measured_slope(tmp_path):
    exp, cfg = FactualRecall(), resolve_config(FactualRecallConfig, "smoke", ["tradeoff=false"])
    v_lin = exp.verdicts(cfg, _cap_rows(1.0), RunDir(tmp_path))[0]
    v_sqrt = exp.verdicts(cfg, _cap_rows(0.5), RunDir(tmp_path))[0]
    assert v_lin.reproduced and v_lin.ci[0] <= 1 <= v_lin.ci[1]
    assert not v_sqrt.reproduced and abs(v_sqrt.value - 0.5) < 0.05


def test_config_errors():
    with pytest.raises(ConfigError):
        resolve_config(FactualRecallConfig, "quick", ["threshold=1.5"])
    with pytest.raises(ConfigError) as ei:
        FactualRecall().validate(resolve_config(FactualRecallConfig, "quick", ["size_max=3", "size_min=5"]))
    assert ei.value.field == "size_max"
    with pytest.raises(ConfigError):
        resolve_config(HallucinationConfig, "quick", ["variants=[cubic]"])


# -- hallucination stage -------------------------------------------------------------------------
def test_answer_losses_definitions():
    D = 4
    logits = torch.full((1, 8), -1e9)
    logits[0, :4] = 0.0  # uniform over relation 0's block
    out = answer_losses(logits, torch.tensor([2]), D)
    assert abs(out["rel_loss"].item()) < 1e-6
    assert abs(out["loss"].item() - math.log(4)) < 1e-5 and abs(out["subj_loss"].item() - math.log(4)) < 1e-5


def test_detect_plateau():
    steps = np.arange(0, 1000, 10)
    loss = np.where(steps < 200, 3.4, np.where(steps < 600, 2.1, 0.05)).astype(float)
    pl = detect_plateau(steps, loss, flat_tol=0.15, margin=0.25, min_len=50, per=100)
    assert pl is not None and 200 <= pl["start"] <= 220 and 580 <= pl["end"] <= 600 and abs(pl["level"] - 2.1) < 1e-9
    smooth = 3.4 * np.exp(-steps / 200)
    assert detect_plateau(steps, smooth, flat_tol=0.15, margin=0.25, min_len=50, per=100) is None


# -- end to end ----------------------------------------------------------------------------------
def test_factual_recall_smoke_run(tmp_path):
    exp = FactualRecall()
    cfg = resolve_config(FactualRecallConfig, "smoke", [])
    run = run_experiment(exp, cfg, tmp_path / "fr", progress=False)
    res = run.results()
    cap = res[res["kind"] == "capacity"]
    assert len(cap) == 4 and len(res[res["kind"] == "tradeoff"]) == 4
    assert (cap["facts"] == cap["S"] * cap["R"]).all()
    trials = json.loads(cap["trials"].iloc[-1])
    assert trials and all(t["facts"] == t["S"] * t["R"] for t in trials)
    for f in ("facts_vs_params.png", "capacity_search.png", "tradeoff_map.png"):
        assert (tmp_path / "fr" / "figures" / f).exists()
    assert "Capacity per model" in (tmp_path / "fr" / "report.md").read_text()
    assert json.loads((tmp_path / "fr" / "verdict.json").read_text())
    # resume: nothing is recomputed
    run2 = run_experiment(exp, cfg, tmp_path / "fr", progress=False, log=lambda *_: None)
    pd.testing.assert_frame_equal(run2.results(), res)


def test_hallucination_smoke_run(tmp_path):
    cfg = resolve_config(HallucinationConfig, "smoke", [])
    run = run_experiment(HallucinationStage(), cfg, tmp_path / "hs", progress=False)
    r = run.results().iloc[0]
    assert r["initial_loss"] == pytest.approx(math.log(32), abs=1e-3)
    assert r["final_loss"] < 0.5  # the subjects are learned by the end
    v = run.verdicts()[0]
    assert v.reproduced and abs(v.value - 1) < 0.15  # plateau level / H(a|r)
    assert abs(r["plateau_level"] - math.log(8)) < 0.3
    assert (tmp_path / "hs" / "figures" / "losses_linear-onehot.png").exists()
