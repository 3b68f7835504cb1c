"""reversal-curse and knowledge-capacity under issue 11's protocols: reversed biographies put the name after
the attributes and the evaluation prompt holds no name; Berglund et al.'s completion test scores the correct
vs a random name; the He/She bit is counted; fresh renders differ across exposures; and the verdicts of every
claim on synthetic results tables (reproduced / not reproduced / inconclusive)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from lmsci.config import resolve_config
from lmsci.experiments import registry
from lmsci.experiments.knowledge.knowledge_capacity import ResumableStream, gpt2, plan_batch
from lmsci.experiments.knowledge.reversal_curse import random_name_docs
from lmsci.measure.knowledge import completion_gap_bits, measure_bits
from lmsci.report import compute_verdicts
from lmsci.runs import RunDir
from lmsci.worlds.bios import ATTRS, BiosWorld
from lmsci.worlds.bios_stream import BioStream

SEEDS = (0, 1, 2)
JITTER = {0: -0.01, 1: 0.0, 2: 0.01}


class Oracle(torch.nn.Module):
    """All probability on the true next token (it peeks at the input)."""

    def __init__(self, v: int):
        super().__init__()
        self.v = v

    def forward(self, ids):
        return 100.0 * torch.nn.functional.one_hot(torch.roll(ids, -1, dims=1), self.v).float()


class Uniform(torch.nn.Module):
    def __init__(self, v: int):
        super().__init__()
        self.v = v

    def forward(self, ids):
        return torch.zeros(*ids.shape, self.v)


class Knows(torch.nn.Module):
    """Puts all probability on the *right* document's next token, whatever follows the prompt: a model that
    stored attributes -> name (documents are recognised by their first 12 tokens)."""

    def __init__(self, docs, v: int):
        super().__init__()
        self.table = {tuple(d.ids[:12]): d.ids for d in docs}
        self.v = v

    def forward(self, ids):
        out = torch.zeros(*ids.shape, self.v)
        for b in range(ids.shape[0]):
            right = self.table[tuple(ids[b, :12].tolist())]
            nxt = torch.tensor(right[1:] + [0] * (ids.shape[1] - len(right) + 1))
            out[b] = 100.0 * torch.nn.functional.one_hot(nxt, self.v).float()
        return out


def _contains(seq: list[int], sub: list[int]) -> bool:
    return any(seq[k:k + len(sub)] == sub for k in range(len(seq) - len(sub) + 1))


# -- data ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("groups", [1, 2, 6])
def test_reversed_biography_puts_the_name_after_the_attributes(groups):
    w = BiosWorld(30, seed=0)
    for i in range(30):
        d = w.bio_reversed(i, np.random.default_rng(i), groups=groups)
        name = w.vocab.encode(w.name_words(i))
        names = d.spans["name"]
        assert len(names) == groups and d.kind == "bio_reverse"
        first = names[0][0]
        assert d.ids[first:first + len(name)] == name
        assert not _contains(d.ids[:first], name)  # no copy source before the first name
        # every attribute value sits before the name of its own sentence
        bounds = [0] + [e for _, e in names]
        for a in ATTRS:
            (s, e), = d.spans[a]
            k = next(j for j in range(groups) if bounds[j] <= s < bounds[j + 1])
            assert e <= names[k][0]
    assert len(w.vocab) == len(BiosWorld(5, seed=1).vocab) == 600  # the vocabulary is unchanged


def test_evaluation_prompt_holds_no_name_and_uses_a_held_out_template():
    w = BiosWorld(20, seed=0)
    trained = {tuple(w.bio_reversed(i, np.random.default_rng([k, i]), groups=1).ids[:-9])
               for i in range(20) for k in range(30)}
    for i in range(20):
        d = w.reverse_prompt(i)
        (s, e), = d.spans["answer"]
        name = w.vocab.encode(w.name_words(i))
        assert d.ids[s:e] == name and not _contains(d.ids[:s], name)
        assert "entered life" in w.vocab.decode(d.ids[:s])  # the held-out clause, never in training
        assert tuple(d.ids[:-9]) not in trained


def _stream(w, E, batch=2, seq_len=128):
    return BioStream(w, seq_len=seq_len, batch_size=batch, exposures=E, seed=0, permute=True, fresh=True, order_seed=1)


def test_fresh_renders_differ_across_exposures():
    w = BiosWorld(12, seed=0)
    st = _stream(w, 3)
    d = [st.training_bios([3], copy=e)[0] for e in (0, 1, 2)]  # exposure e of person 3, as trained on
    assert len({tuple(x.ids) for x in d}) == 3  # new templates every exposure
    orders = {tuple(sorted(ATTRS, key=lambda a: x.spans[a][0][0])) for x in d}
    assert len(orders) > 1  # and a new sentence order
    assert all(w.vocab.decode(x.ids).count(" He ") + w.vocab.decode(x.ids).count(" She ") == 5 for x in d)


def test_capacity_stream_exposures_min_steps_and_resume():
    w = BiosWorld(20, seed=0)
    n_win = _stream(w, 3, batch=1).count_windows()
    assert plan_batch(n_win, 8, 0) == (8, -(-n_win // 8))
    b, steps = plan_batch(n_win, 8, 10_000)
    assert b == 1 and steps == n_win  # the batch shrinks to reach the steps the paper trains
    full = ResumableStream(_stream(w, 3))
    xs = [full.get_batch(s)[0] for s in range(-(-n_win // 2))]
    assert (full.stream.exposures == 3).all()  # every person exactly 3 fresh biographies
    resumed = ResumableStream(_stream(w, 3))
    assert torch.equal(resumed.get_batch(4)[0], xs[4])  # a resumed run skips to its step
    with pytest.raises(ValueError):
        resumed.get_batch(2)


# -- instruments ----------------------------------------------------------------------------------------
def test_completion_test_scores_correct_vs_random_names():
    w = BiosWorld(40, seed=0)
    right = [w.reverse_prompt(i) for i in range(40)]
    wrong = random_name_docs(w, right, seed=0)
    assert all(r.ids[:r.spans["answer"][0][0]] == x.ids[:x.spans["answer"][0][0]] for r, x in zip(right, wrong))
    assert all(r.ids != x.ids for r, x in zip(right, wrong))  # another person's name
    v = len(w.vocab)
    gap = completion_gap_bits(Knows(right, v), right, wrong)
    assert (gap > 100).all()  # a model that stored attributes -> name prefers the right name
    assert np.allclose(completion_gap_bits(Oracle(v), right, wrong), 0.0)  # copying what it reads is no knowledge
    assert np.allclose(completion_gap_bits(Uniform(v), right, wrong), 0.0)  # the curse: no preference
    with pytest.raises(ValueError):
        completion_gap_bits(Uniform(v), right, wrong[:-1])


def test_pronoun_bit_is_counted():
    w = BiosWorld(50, seed=0)
    v = len(w.vocab)
    with_p = measure_bits(Oracle(v), w, seed=0, attrs=ATTRS, pronoun=True)
    without = measure_bits(Oracle(v), w, seed=0, attrs=ATTRS)
    assert with_p["bits"]["pronoun"] == pytest.approx(50.0)  # one bit per person
    assert with_p["bits"]["total"] == pytest.approx(without["bits"]["total"] + 50.0)
    assert with_p["ideal_bits"] == pytest.approx(without["ideal_bits"] + 50.0)
    chance = measure_bits(Uniform(v), w, seed=0, attrs=ATTRS, pronoun=True)
    assert chance["bits"]["pronoun"] == 0.0 and chance["ce_bits"]["pronoun"] == pytest.approx(math.log2(v), rel=1e-5)


# -- verdicts ------------------------------------------------------------------------------------------
def _verdicts(name: str, rows: list[dict], tmp_path, sets=None, preset: str = "gpu"):  # claims: gpu/paper
    exp = registry.get(name)()
    cfg = resolve_config(exp.Config, preset, sets or [])
    df = pd.DataFrame(rows)
    full = compute_verdicts(exp, cfg, df, RunDir(tmp_path))
    assert [v.claim_id for v in full] == [c.id for c in exp.claims]
    return {v.claim_id: v for v in full}


def _rev_rows(inv=(0.0, 0.9), comp=(0.0, 0.9), gap=(0.1, 8.0), recall=0.99, rev_recall=0.99, fwd_qa=0.95,
             null=None):
    """``null``: the null arm's (inverse_test, reverse_completion_test, name_gap_bits_test) in its own rows (a second
    forward-only model at another seed; default: the forward-only values)."""
    null = (inv[0], comp[0], gap[0]) if null is None else null
    rows = []
    for k, rev in enumerate((False, True)):
        for s in SEEDS:
            rows.append({"arm": "real", "point": ("with_reverse" if rev else "forward_only") + (f"__s{s}" if s else ""),
                         "reverse_in_training": rev, "condition": "with_reverse" if rev else "forward_only",
                         "inverse_test": min(1, max(0, inv[k] + JITTER[s])),
                         "inverse_train": 1.0, "qa_test": fwd_qa, "qa_train": 1.0, "bio_recall_test": recall,
                         "reverse_recall_test": rev_recall if rev else float("nan"),
                         "reverse_completion_test": min(1, max(0, comp[k] + JITTER[s])),
                         "reverse_completion_train": comp[k], "name_gap_bits_test": gap[k] + 10 * JITTER[s],
                         "name_gap_bits_train": gap[k], "n_test": 80, "seed_index": s, "status": "ok"})
    for s in SEEDS:  # the null arm's point: a second forward-only model at another seed
        rows.append({"arm": "null", "point": "null-forward_only" + (f"__s{s}" if s else ""), "reverse_in_training": False,
                     "condition": "forward_only_second", "inverse_test": min(1, max(0, null[0] - JITTER[s])),
                     "inverse_train": 1.0, "qa_test": fwd_qa, "qa_train": 1.0, "bio_recall_test": recall,
                     "reverse_completion_test": min(1, max(0, null[1] - JITTER[s])),
                     "name_gap_bits_test": null[2] - 10 * JITTER[s], "n_test": 80, "seed_index": s, "status": "ok"})
    return rows


@pytest.mark.parametrize("kw, outcomes", [
    ({}, {"reversal": REPRODUCED, "reverse-completion": REPRODUCED, "name-logprob": REPRODUCED}),   # the papers
    (dict(inv=(0.3, 0.9), comp=(0.4, 0.9), gap=(4.0, 8.0)),                                          # no curse
     {"reversal": NOT_REPRODUCED, "reverse-completion": NOT_REPRODUCED, "name-logprob": NOT_REPRODUCED}),
    (dict(inv=(0.0, 0.1), comp=(0.0, 0.1), gap=(0.0, 0.5)),                                          # no lift
     {"reversal": NOT_REPRODUCED, "reverse-completion": NOT_REPRODUCED, "name-logprob": NOT_REPRODUCED}),
    (dict(recall=0.5), {"reversal": INCONCLUSIVE, "reverse-completion": INCONCLUSIVE, "name-logprob": INCONCLUSIVE}),
    (dict(rev_recall=0.4, inv=(0.0, 0.0), comp=(0.0, 0.0), gap=(0.0, 0.0)),  # reversed text not memorised
     {"reversal": INCONCLUSIVE, "reverse-completion": INCONCLUSIVE, "name-logprob": INCONCLUSIVE}),
    (dict(fwd_qa=0.05), {"reversal": INCONCLUSIVE, "reverse-completion": REPRODUCED, "name-logprob": REPRODUCED}),
])
def test_reversal_verdicts(kw, outcomes, tmp_path):
    vs = _verdicts("reversal-curse", _rev_rows(**kw), tmp_path)
    for cid, outcome in outcomes.items():
        assert vs[cid].outcome == outcome, (cid, vs[cid].reasons)
        assert vs[cid].n_seeds == 3
    if kw.get("rev_recall"):
        assert any("reverse-memorised" in r for r in vs["reverse-completion"].reasons)
    if kw.get("fwd_qa"):
        assert any("forward-qa" in r for r in vs["reversal"].reasons)
    assert all(vs[cid].null_passed is False for cid in outcomes)


def test_reversal_null_arm_meeting_the_rule_is_inconclusive(tmp_path):
    # a second forward-only model that searches inversely as well as the with-reverse model (a seed spread or a
    # leak): the rules cannot tell
    vs = _verdicts("reversal-curse", _rev_rows(null=(0.9, 0.9, 8.0)), tmp_path)
    for cid in ("reversal", "reverse-completion", "name-logprob"):
        assert vs[cid].outcome == INCONCLUSIVE and vs[cid].rule_passed and vs[cid].null_passed is True, cid
    vs = _verdicts("reversal-curse", _rev_rows(), tmp_path, preset="quick")  # below the claims' scale
    assert all(v.outcome == INCONCLUSIVE and any("below the scale" in r for r in v.reasons) for v in vs.values())


def _cap_rows(peak: dict[int, float], n_layers=2, steps=60_000, d_per_head=64, big_n=True, null=0.0):
    rows = []
    models = (("GPT2-2-2", 2, 4.7e5), ("GPT2-2-4", 4, 1.7e6))
    for E, p in peak.items():
        grid = (10_000, 20_000, 50_000, 100_000) if big_n else (100, 200)
        for model, h, params in models:
            for k, n in enumerate(grid):
                ideal = 60.0 * n
                bpp = p * (0.5, 1.0, 0.9, 0.85)[k]
                for s in SEEDS:
                    b = (bpp + JITTER[s]) * params
                    shape = {"model": model, "n_layers": n_layers, "n_heads": h, "d_model": d_per_head * h,
                             "n_people": n, "exposures_nominal": E, "ideal_bits": ideal, "params": params,
                             "params_non_embedding": 0.8 * params, "seed_index": s, "status": "ok"}
                    pid = f"{model}_E{E}_N{n}" + (f"__s{s}" if s else "")
                    rows.append({"arm": "real", "point": f"real-{pid}", **shape, "exposures": float(E),
                                 "steps": steps, "batch_size": 8, "tokens_seen": steps * 8 * 512, "bits": b,
                                 "fraction_of_ideal": b / ideal, "bits_per_param": b / params,
                                 "bits_per_param_non_embedding": b / (0.8 * params)})
                    b0 = null * (0.5, 1.0, 0.9, 0.85)[k] * params  # the null arm: the model on held-out people
                    rows.append({"arm": "null", "point": f"null-{pid}", **shape, "steps": steps, "bits": b0,
                                 "fraction_of_ideal": b0 / ideal, "bits_per_param": b0 / params,
                                 "bits_per_param_non_embedding": b0 / (0.8 * params)})
    return rows


@pytest.mark.parametrize("peak, kw, outcomes, reason", [
    ({100: 1.0, 1000: 2.2}, {}, {100: REPRODUCED, 1000: REPRODUCED}, None),          # the paper's numbers
    ({100: 0.3, 1000: 1.0}, {}, {100: NOT_REPRODUCED, 1000: NOT_REPRODUCED}, None),
    ({100: 2.0}, {}, {100: NOT_REPRODUCED, 1000: INCONCLUSIVE}, None),                 # 1000 not measured
    ({100: 1.0, 1000: 2.2}, dict(n_layers=1), {100: INCONCLUSIVE, 1000: INCONCLUSIVE}, "gpt2-family"),
    ({100: 1.0, 1000: 2.2}, dict(d_per_head=32), {100: INCONCLUSIVE, 1000: INCONCLUSIVE}, "gpt2-family"),
    ({100: 0.3, 1000: 1.0}, dict(steps=5_000), {100: INCONCLUSIVE, 1000: INCONCLUSIVE}, "training-steps"),
    ({100: 0.3, 1000: 1.0}, dict(big_n=False), {100: INCONCLUSIVE, 1000: INCONCLUSIVE}, "data-sufficient"),
])
def test_capacity_verdicts(peak, kw, outcomes, reason, tmp_path):
    vs = _verdicts("knowledge-capacity", _cap_rows(peak, **kw), tmp_path, preset="paper")  # paper only (session 52)
    for E, outcome in outcomes.items():
        v = vs[f"capacity-{E}-exposures"]
        assert v.outcome == outcome, (E, v.reasons)
        if E in peak and kw.get("big_n", True):
            assert v.value == pytest.approx(peak[E], abs=1e-6) and v.n_seeds == 3
            assert v.ci[0] <= v.value <= v.ci[1]
        if reason and E in peak:
            assert any(reason in r for r in v.reasons)
        if E in peak:
            assert v.null_value == 0 and v.null_passed is False


def test_capacity_null_arm_meeting_the_rule_is_inconclusive(tmp_path):
    # an estimator that credits 1 bit/param about people the model never saw cannot tell storage from its absence
    vs = _verdicts("knowledge-capacity", _cap_rows({100: 1.0}, null=1.0), tmp_path, preset="paper")
    v = vs["capacity-100-exposures"]
    assert v.outcome == INCONCLUSIVE and v.rule_passed and v.null_passed is True
    for preset in ("quick", "gpu"):  # values only: the claims are decided at paper (session 52)
        v = _verdicts("knowledge-capacity", _cap_rows({100: 1.0}), tmp_path, preset=preset)["capacity-100-exposures"]
        assert v.outcome == INCONCLUSIVE and any("below the scale" in r for r in v.reasons)


def test_capacity_presets_follow_the_issue():
    from lmsci.experiments.knowledge.knowledge_capacity import KnowledgeCapacityConfig as C
    gpu = resolve_config(C, "gpu")
    assert [(m.n_layers, m.n_heads, m.d_model) for m in gpu.models] == [(2, 2, 128), (2, 4, 256)]
    # session 52: a values-only run within 10 minutes of one H100 (issue 11's grid, N up to 100k, >= 50k steps, is paper's
    # scale of decision now)
    assert [(r.exposures, r.n_people) for r in gpu.regimes] == [(100, [10_000, 20_000]), (1000, [5_000])]
    assert gpu.min_steps == 10_000 and gpu.checkpoint_every > 0
    quick = resolve_config(C, "quick")
    assert all(m.n_layers >= 2 and m.d_model == 64 * m.n_heads for m in quick.models)
    assert {r.exposures for r in quick.regimes} == {100, 1000}
    assert gpt2(2, 2) == {"n_layers": 2, "n_heads": 2, "d_model": 128, "pos": "rope", "tie_embeddings": True}


def test_reversal_stream_matches_bio_stream_and_caps_distinct_epochs():
    from lmsci.experiments.knowledge._bios_streams import bio_stream
    from lmsci.experiments.knowledge.reversal_curse import ReversalCurseConfig, pretraining_stream, reversed_docs
    w = BiosWorld(12, seed=0)
    cfg = resolve_config(ReversalCurseConfig, "quick", ["n_people=12", "exposures=15"])
    r = reversed_docs(w, range(12), seed=0, groups=1, multiplicity=2)
    a = pretraining_stream(w, cfg, r, order_seed=3)
    b = bio_stream(w, exposures=15, seed=0, seq_len=cfg.seq_len, specs=[(range(12), cfg.data)], extra_docs=r,
                   order_seed=3)
    assert torch.equal(a.input_ids, b.input_ids) and a.people == b.people
    assert (a.exposures(12, kind="bio_reverse") == 3 * 2).all() and (a.exposures(12) == 15).all()
    cfg2 = resolve_config(ReversalCurseConfig, "quick", ["n_people=12", "exposures=15", "max_distinct_epochs=1"])
    c = pretraining_stream(w, cfg2, r, order_seed=3)
    n = c.input_ids.shape[0] // 3
    assert torch.equal(c.input_ids[:n], c.input_ids[n:2 * n]) and (c.exposures(12) == 15).all()


def test_capacity_null_is_the_trained_model_on_held_out_people(tmp_path):
    """Issue 44 item 4: one training per point and seed; the null arm scores that model on N held-out people of the
    same distribution (same vocabulary and pools, other individuals), who carry no stored bits."""
    from lmsci.experiments.knowledge.knowledge_capacity import KnowledgeCapacity
    from lmsci.sweep import run_experiment

    exp = KnowledgeCapacity()
    cfg = resolve_config(exp.Config, "smoke", ['regimes=[{"exposures": 100, "n_people": [8]}]'])
    pts = exp.seeded_points(cfg)
    assert [[p.arm for p in g] for g in exp.groups(cfg, pts)] == [["real", "null"]] * (len(pts) // 2)
    held, train = exp.held_out_world(cfg, 8), BiosWorld(8, seed=cfg.seed)
    assert held.vocab.itos == train.vocab.itos and held.pools.sizes == train.pools.sizes
    assert not {train.full_name(i) for i in range(8)} & {held.full_name(i) for i in range(8)}
    run = run_experiment(exp, cfg, tmp_path / "kc", progress=False, log=lambda *a: None)
    res = run.results().set_index("arm")
    real, null = res.loc["real"], res.loc["null"]
    assert real["steps"] == null["steps"] > 0 and real["final_loss"] == null["final_loss"]  # one trained model
    assert (real["scored_on"], null["scored_on"]) == ("training", "held_out")
    assert real["ideal_bits"] == null["ideal_bits"]  # the same N, the same estimator
    assert null["bits"] < real["bits"]  # the trained people's facts are stored, the held-out people's are not
