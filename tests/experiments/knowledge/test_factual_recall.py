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
from lmsci.experiments.knowledge.factual_recall import (
    FactualRecall,
    FactualRecallConfig,
    _Member,
    loglog_fit,
    next_probes,
    train_stack,
    update_bracket,
)
from lmsci.experiments.dynamics.hallucination_stage import (
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


def test_scoring_unseen_facts_leaves_training_unchanged_and_could_meet():
    """The facts-per-param null arm: the same training as ``train_stack`` (identical results), each model also scored
    on an independently drawn table of its shape (about 1/D, far below the threshold); with one answer per relation
    (D = 1) the unseen table equals the trained one, so the null stores it: the null could meet the rule through an
    accuracy measure that credits the format."""
    from lmsci.experiments.knowledge._factual_recall_unseen import train_stack_scoring_unseen, unseen_world

    def run(D, scoring):
        w = FactualRecallWorld(3, 2, D, seq_len=8, seed=0)
        ms = [_Member(("a", 1, lr), w, OneLayerSpec(2, 8, 16), lr, 7) for lr in (3e-2, 1e-9)]
        kw = dict(steps=300, batch_size=64, eval_every=20, n_eval=128, threshold=0.95, schedule="cosine", seed=0,
                  done_key=lambda m: m.key[:2])
        if scoring:
            u = unseen_world(w, 99)
            assert (u.vocab_size, u.n_answers, u.T) == (w.vocab_size, w.n_answers, w.T)
            train_stack_scoring_unseen(ms, [u, u], 16, sample=sample_stack, **kw)
        else:
            train_stack(ms, 16, **kw)
        return ms

    plain, scored = run(4, False), run(4, True)
    assert [(m.best_acc, m.steps_run, m.final_loss, m.reached_at) for m in scored] == \
        [(m.best_acc, m.steps_run, m.final_loss, m.reached_at) for m in plain]
    assert scored[0].reached_at is not None and scored[0].unseen_best_acc < 0.7 and scored[0].unseen_reached_at is None
    one = run(1, True)
    assert one[0].unseen_reached_at is not None and one[0].unseen_best_acc == 1.0
    with pytest.raises(ConfigError):
        train_stack_scoring_unseen(plain, [unseen_world(plain[0].world, 1)], 16, sample=sample_stack, steps=1,
                                   batch_size=2, eval_every=1, n_eval=16, threshold=0.9, schedule="constant", seed=0)
    with pytest.raises(ConfigError, match="extra_targets"):  # the trainer's hook checks one [n_eval] tensor per member
        train_stack(plain, 16, steps=1, batch_size=2, eval_every=1, n_eval=16, threshold=0.9,
                    schedule="constant", seed=0, extra_targets=[torch.zeros(16, dtype=torch.long)])


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


PAPER_D = (8, 11, 16, 22, 32, 45)


def _cap_rows(slope=1.0, ratio=0.15, n_seeds=3, censored=()):
    """Capacity rows in the shape ``run_point`` writes them: two families (attention-only, attention+MLP),
    facts = ratio * params**slope with 10% noise, one row per (family, d, seed)."""
    rng = np.random.default_rng(1)
    rows = []
    for k in range(n_seeds):
        for fam, beta in (("attn_a2", 0.0), ("attn+mlp_a0.5_b2", 2.0)):
            for d in PAPER_D:
                p = 16 * d * d if beta == 0 else 4 * d * d + 4 * d * d
                facts = ratio * p * (p / 1000) ** (slope - 1) * math.exp(rng.normal(0, 0.1))
                cens = "at_size_max" if d in censored else ""
                shape = {"kind": "capacity", "family": fam, "alpha": 2.0 if beta == 0 else 0.5, "beta": beta,
                         "d_model": d, "n_heads": 4, "params": p, "censored": cens, "usable": int(cens == ""),
                         "seed_index": k, "status": "ok"}
                pid = f"cap_{fam}_d{d}" + (f"__s{k}" if k else "")
                rows.append({"arm": "real", "point": f"real-{pid}", **shape, "facts": facts, "S": 0, "R": 0,
                             "facts_per_param": facts / p, "trials": "[]"})
                # the null arm: the same models on unseen fact tables (accuracy 0.125 < threshold: none stored)
                rows.append({"arm": "null", "point": f"null-{pid}", **shape, "facts": 0, "facts_per_param": 0.0,
                             "unseen_acc_max": 0.125})
    return pd.DataFrame(rows)


def _trade_rows(cfg, mlp_boundary, n_seeds=3):
    """Trade-off rows: a cell stores (accuracy 1) when its MLP params reach ``mlp_boundary(attn, seed)``."""
    rows = []
    d, dh = cfg.tradeoff_d_model, cfg.tradeoff_d_head
    for k in range(n_seeds):
        for h in cfg.tradeoff_heads:
            for m in cfg.tradeoff_mlps:
                attn, mlp = d * dh * h, d * m
                rows.append({"arm": "real", "point": f"trade_H{h}_m{m}" + (f"__s{k}" if k else ""), "kind": "tradeoff",
                             "d_model": d, "n_heads": h, "d_head": dh, "d_mlp": m, "attn_params": attn,
                             "mlp_params": mlp, "size": cfg.tradeoff_size, "facts": cfg.tradeoff_size**2,
                             "accuracy": 1.0 if mlp >= mlp_boundary(attn, k) else 0.4, "seed_index": k,
                             "status": "ok"})
    return pd.DataFrame(rows)


def _by_id(vs):
    out = {}
    for v in vs:
        out.setdefault(v.claim_id, []).append(v)
    return out


def _quick():
    return resolve_config(FactualRecallConfig, "quick")


def _decided():
    """The gpu preset (where every claim but facts-per-param is decided) with the quick trade-off map, whose cells
    the synthetic tables below are written for."""
    return resolve_config(FactualRecallConfig, "gpu", ["tradeoff_d_model=16", "tradeoff_d_head=4", "tradeoff_size=10",
                                                       "tradeoff_mlps=[0, 8, 16, 24, 32, 48, 64, 96]"])


def test_verdicts_from_the_papers_numbers_are_reproduced(tmp_path):
    exp, cfg = FactualRecall(), _decided()
    # the paper's boundary shape (MLP = c - attn/2), scaled to the quick map's 100 facts
    tr = _trade_rows(cfg, lambda a, k: 500 - 20 * k - a / 2)
    vs = _by_id(exp.verdicts(cfg, pd.concat([_cap_rows(1.0), tr]), RunDir(tmp_path)))
    for cid in ("linear-attention-only", "linear-attention-mlp", "tradeoff-boundary"):
        assert [v.outcome for v in vs[cid]] == ["reproduced"], (cid, vs[cid][0].reasons)
        assert vs[cid][0].n_seeds == 3 and "across 3 seeds" in vs[cid][0].ci_kind
    assert vs["linear-attention-only"][0].ci[0] < 1 < vs["linear-attention-only"][0].ci[1]
    assert vs["linear-pooled"][0].ablation and vs["linear-pooled"][0].rule_passed
    assert abs(vs["tradeoff-boundary"][0].value + 0.5) < 0.15
    assert "2300" in vs["tradeoff-boundary"][0].details["paper_boundary"]
    # facts per parameter is decided at the paper preset only; at quick its value is reported
    fpp = vs["facts-per-param"][0]
    assert fpp.outcome == "inconclusive" and fpp.rule_passed and any("below the scale" in r for r in fpp.reasons)
    # at quick the trade-off boundary is reported, not decided (issue 29: its mlp-stores gate cannot pass there)
    q = _by_id(exp.verdicts(_quick(), pd.concat([_cap_rows(1.0), tr]), RunDir(tmp_path)))
    assert [v.outcome for v in q["linear-attention-only"]] == ["reproduced"]
    assert q["tradeoff-boundary"][0].outcome == "inconclusive" and q["tradeoff-boundary"][0].rule_passed
    paper = resolve_config(FactualRecallConfig, "paper")
    v = _by_id(exp.verdicts(paper, _cap_rows(1.0), RunDir(tmp_path)))["facts-per-param"][0]
    assert v.outcome == "reproduced" and abs(v.value - 0.15) < 0.02
    assert v.null_value == 0 and v.null_passed is False  # no model stores facts it never saw
    for cid in ("linear-attention-only", "linear-attention-mlp", "tradeoff-boundary"):
        assert vs[cid][0].null_passed is False and vs[cid][0].null_value is not None, cid


def test_a_null_arm_that_meets_the_rule_is_inconclusive(tmp_path, monkeypatch):
    """The null arms are permutations of the fitted values; a 'permutation' that leaves them in place makes each
    null arm equal to the real one, which meets the rule: inconclusive. facts-per-param: trained
    models that store 64 facts of tables they never saw (an accuracy measure crediting the format) at 0.15 facts per
    parameter."""
    import lmsci.experiments.knowledge._factual_recall_verdicts as fr

    exp, cfg = FactualRecall(), _decided()
    monkeypatch.setattr(fr, "permuted", lambda v, seed: np.asarray(v))
    tr = _trade_rows(cfg, lambda a, k: 500 - 20 * k - a / 2)
    vs = _by_id(exp.verdicts(cfg, pd.concat([_cap_rows(1.0), tr]), RunDir(tmp_path)))
    for cid in ("linear-attention-only", "linear-attention-mlp", "tradeoff-boundary"):
        v = vs[cid][0]
        assert v.outcome == "inconclusive" and v.rule_passed and v.null_passed is True, cid
        assert any("cannot tell the effect from its absence" in r for r in v.reasons)
    paper = resolve_config(FactualRecallConfig, "paper")
    rows = []
    for k in range(3):
        for j, p in enumerate((400, 420, 430, 440, 450, 460)):
            shape = {"kind": "capacity", "family": "attn_a2", "alpha": 2.0, "beta": 0.0, "d_model": 8 + j,
                     "n_heads": 8, "params": p, "censored": "", "usable": 1, "seed_index": k, "status": "ok"}
            rows.append({"arm": "real", "point": f"real-cap_a_d{j}" + (f"__s{k}" if k else ""), **shape,
                         "facts": 0.15 * p * (1 + 0.01 * k), "S": 0, "R": 0,
                         "facts_per_param": 0.15 * (1 + 0.01 * k), "trials": "[]"})
            rows.append({"arm": "null", "point": f"null-cap_a_d{j}" + (f"__s{k}" if k else ""), **shape,
                         "facts": 64, "facts_per_param": 64 / p, "unseen_acc_max": 1.0})
    v = _by_id(exp.verdicts(paper, pd.DataFrame(rows), RunDir(tmp_path)))["facts-per-param"][0]
    assert v.rule_passed and v.null_passed is True and v.outcome == "inconclusive"


def test_verdicts_from_a_clear_failure_are_not_reproduced(tmp_path):
    exp, cfg = FactualRecall(), _decided()
    # the boundary rises with attention until attention alone stores at the largest H (gates pass)
    h_max_attn = cfg.tradeoff_d_model * cfg.tradeoff_d_head * max(cfg.tradeoff_heads)
    tr = _trade_rows(cfg, lambda a, k: 0 if a >= h_max_attn else 100 + 1.5 * a + 10 * k)
    vs = _by_id(exp.verdicts(cfg, pd.concat([_cap_rows(0.5), tr]), RunDir(tmp_path)))
    for cid in ("linear-attention-only", "linear-attention-mlp", "tradeoff-boundary"):
        assert [v.outcome for v in vs[cid]] == ["not reproduced"], (cid, vs[cid][0].reasons)
    assert abs(vs["linear-attention-only"][0].value - 0.5) < 0.1
    assert all(g.passed for g in vs["tradeoff-boundary"][0].gates)
    paper = resolve_config(FactualRecallConfig, "paper")
    v = _by_id(exp.verdicts(paper, _cap_rows(1.0, ratio=0.02), RunDir(tmp_path)))["facts-per-param"][0]
    assert v.outcome == "not reproduced" and v.value < 0.075


def test_verdicts_with_a_failed_gate_or_too_few_points_are_inconclusive(tmp_path):
    exp, cfg = FactualRecall(), _decided()
    # attention alone never stores at the largest H: the trade-off gate fails, the slope is still reported
    tr = _trade_rows(cfg, lambda a, k: 1400 - a / 2)
    v = _by_id(exp.verdicts(cfg, tr, RunDir(tmp_path)))["tradeoff-boundary"][0]
    assert v.outcome == "inconclusive" and v.value is not None
    assert [g.passed for g in v.gates] == [False, True]
    # two of six sizes censored: 4 uncensored points per seed (< 5): every family inconclusive
    vs = _by_id(exp.verdicts(cfg, _cap_rows(1.0, censored=(8, 45)), RunDir(tmp_path)))
    for cid in ("linear-attention-only", "linear-attention-mlp"):
        assert vs[cid][0].outcome == "inconclusive" and any("5 uncensored" in r for r in vs[cid][0].reasons)
    # one seed: a rule that holds cannot be reproduced (within-run CI labelled as such)
    v1 = _by_id(exp.verdicts(cfg, _cap_rows(1.0, n_seeds=1), RunDir(tmp_path)))["linear-attention-only"][0]
    assert v1.outcome == "inconclusive" and v1.rule_passed and v1.ci_kind.startswith("within-run")
    # a diverged point fails the run-level gate of every claim
    from lmsci.report import compute_verdicts

    res = pd.concat([_cap_rows(1.0), _trade_rows(cfg, lambda a, k: 500 - a / 2)])
    res.loc[res.index[0], "status"] = "diverged"
    out = compute_verdicts(exp, cfg, res.reset_index(drop=True), RunDir(tmp_path))
    assert {v.claim_id for v in out} == {c.id for c in exp.claims}
    assert all(v.outcome == "inconclusive" for v in out)


def test_quick_preset_seeds_and_grid():
    exp, cfg = FactualRecall(), _quick()
    assert cfg.n_seeds == 3
    base = exp.points(cfg)
    n_cap = len(cfg.d_models) * len(exp.families(cfg))
    n_trade = len(cfg.tradeoff_heads) * len(cfg.tradeoff_mlps)
    assert len(base) == 2 * n_cap + n_trade == 2 * 7 * 2 + 7 * 8  # capacity points on the real and the null arm
    pts = exp.seeded_points(cfg)
    assert len(pts) == 3 * len(base) and {p.seed_index for p in pts} == {0, 1, 2}
    real = [p for p in pts if p.arm == "real"]  # every seed its own derived seed; the null arm shares the real's
    assert len({exp.point_seed(cfg, p) for p in real}) == len(real) == len({exp.point_seed(cfg, p) for p in pts})
    groups = exp.groups(cfg, pts)
    assert sorted(p.id for g in groups for p in g) == sorted(p.id for p in pts)
    for g in groups:  # the seeds (and arms) of one shape train in one stack
        ids = {p.id.split("__s")[0] for p in g}
        assert {p.seed_index for p in g} == {0, 1, 2}
        assert len(g) == 3 * len(ids)
        if g[0].params["kind"] == "capacity":  # both arms of every capacity point, paired by seed
            assert {p.id.removeprefix("null-") for p in g if p.arm == "null"} == \
                {p.id.removeprefix("real-") for p in g if p.arm == "real"}
            assert len({exp.point_seed(cfg, p) for p in g}) == len(g) // 2
    # the trade-off map has its attention-only column and at least 4 head counts
    assert min(cfg.tradeoff_mlps) == 0 and len(cfg.tradeoff_heads) >= 4


def test_train_stack_raises_on_a_non_finite_loss():
    from lmsci.errors import DivergedError

    w = FactualRecallWorld(3, 2, 4, seq_len=8, seed=0)
    ms = [_Member(("a",), w, OneLayerSpec(2, 8, 16), 1e30, 7)]
    with pytest.raises(DivergedError):
        train_stack(ms, 16, steps=200, batch_size=32, eval_every=50, n_eval=32, threshold=0.99,
                    schedule="constant", seed=0)


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
    cap = res[(res["kind"] == "capacity") & (res["arm"] == "real")]
    null = res[(res["kind"] == "capacity") & (res["arm"] == "null")]
    assert len(cap) == len(null) == 4 and len(res[res["kind"] == "tradeoff"]) == 4
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
    # the null arms: the trained models store none of the unseen tables' facts (facts-per-param: scored at about
    # 1/D, recorded in every trial); the slope and trade-off nulls need 5
    # (4) fitted points per seed, which the 2-size smoke grid does not have, so they are not measured here (never
    # met; the smoke search may leave every point censored too); the verdict tests above measure them on full tables
    assert (null["unseen_acc_max"] < cfg.threshold).all() and (null["facts"] == 0).all()
    assert all("unseen_acc" in t for row in cap["trials"] for t in json.loads(row))
    assert sorted(null["usable"]) == sorted(cap["usable"])  # the real search's usability on both arms
    vs = {v.claim_id: v for v in run.verdicts()}
    if vs["facts-per-param"].value is not None:  # an uncensored point exists
        assert vs["facts-per-param"].null_value == 0 and vs["facts-per-param"].null_passed is False
    assert all(v.null_passed is not True for v in vs.values())


def test_hallucination_smoke_run(tmp_path):
    cfg = resolve_config(HallucinationConfig, "smoke", [])
    run = run_experiment(HallucinationStage(), cfg, tmp_path / "hs", progress=False)
    r = run.results().iloc[0]
    assert r["initial_loss"] == pytest.approx(math.log(32), abs=1e-3)
    assert r["final_loss"] < 0.5  # the subjects are learned by the end
    v = run.verdicts()[0]
    # smoke is below the claim's scale (and has one seed): inconclusive, but the window rule is evaluated
    assert v.claim_id == "plateau-structured" and v.outcome == "inconclusive" and v.rule_passed
    assert r["window_frac"] >= 0.1 and abs(r["window_level"] - math.log(8)) < 0.05 * math.log(8)
    assert abs(r["plateau_level"] - math.log(8)) < 0.3
    assert (tmp_path / "hs" / "figures" / "losses_linear-onehot.png").exists()


def test_gpu_preset_is_estimated_within_9_minutes_and_says_so():
    """Session 52: the gpu preset fits the 10 minutes of one H100 by the host-bound estimate, which the
    documented time repeats; a larger budget costs more."""
    import re

    from lmsci.experiments.knowledge._factual_recall_estimate import estimate_h100_seconds

    cfg = resolve_config(FactualRecallConfig, "gpu")
    est = estimate_h100_seconds(cfg)
    assert 60 < est["total"] <= 9 * 60 and est["host"] > est["steps"] > 0
    text = FactualRecall.time_estimate["gpu"]
    assert int(re.match(r"~(\d+) min", text).group(1)) == round(est["total"] / 60)
    assert f"({est['total'] / 60:.1f} min)" in text and "not measured" in text
    bigger = estimate_h100_seconds(cfg.model_copy(update={"steps": 2 * cfg.steps}))
    assert bigger["total"] > est["total"]
    assert max(cfg.d_models) / min(cfg.d_models) >= 8  # the 8x width range the attention-only slope needs
