"""Parity of lmsci's iGSM world with the official generator and checker (issue 30, item 2).

Fixtures (``fixtures/igsm/``, see ``tests/parity/README.md`` and ``fixtures/igsm/SOURCE.json``) are the
outputs of the official code (sbordt/iGSM at a1ed1d0, the official initial release of
facebookresearch/iGSM) at the README's ``med`` setting (max_op=15, max_edge=20, perm_level=5,
detail_level=0): 200 problems with their structure and solution, 2121 corrupted documents with the
official ``true_correct`` verdict, and histograms of 2000 official problems. No official code is used here.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from functools import lru_cache
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from scipy.stats import chi2_contingency

from lmsci.worlds.igsm import IGSMConfig, IGSMWorld
from lmsci.worlds.igsm.checker import check_solution
from lmsci.worlds.igsm.config import RAND
from lmsci.worlds.igsm.problem import Definition, Problem, _apply, _cost, param_expr

FIX = Path(__file__).parent / "fixtures" / "igsm"

#: alpha of each two-sample test of the generator distributions (one test per statistic)
ALPHA = 0.001
#: lmsci problems drawn for the distribution tests (the official side has 2000)
N_LMSCI = 2000

#: corruption kinds where lmsci's ``correct`` deliberately differs from the official ``true_correct``:
#: the official parser accepts a parameter defined a second time under a fresh symbol; lmsci counts it
#: as a dependency error. The test pins this difference (lmsci rejects every such item).
KNOWN_DIVERGENT_KINDS = {"redefined_param"}


def _tup(s: str) -> tuple:
    return tuple(int(x) for x in s.split(","))


def _jsonl(name: str) -> list:
    with gzip.open(FIX / name, "rt") as f:
        return [json.loads(line) for line in f]


@lru_cache(maxsize=None)
def _records() -> tuple:
    return tuple(_jsonl("problems.jsonl.gz"))


def _build(rec: dict) -> Problem:
    """lmsci's Problem for an official problem (structure, definitions, question, official solution)."""
    defs = {_tup(k): Definition(tuple(tuple(p) for p in v[0]), v[1], v[2], v[3]) for k, v in rec["defs"].items()}
    sents = rec["solution"].strip().rstrip(".").split(". ")
    return Problem(chain="official", layers=tuple(rec["layers"]), names=rec["names"], children=rec["children"],
                   defs=defs, problem_order=list(defs), question_param=tuple(rec["question_param"]),
                   necessary=[tuple(p) for p in rec["necessary"]],
                   values={_tup(k): v for k, v in rec["values"].items()}, symbols={}, sentences=[],
                   question=rec["question"], solution_sentences=sents, op=rec["n_op"], template_hash=0)


@lru_cache(maxsize=None)
def _problems() -> dict:
    return {r["seed"]: (_build(r), r) for r in _records()}


def _eval(e, vals):
    if e[0] == "num":
        return e[1] % 23
    if e[0] == "ref":
        return vals[e[1]]
    return _apply(e[1], _eval(e[2], vals), _eval(e[3], vals))


def test_fixtures_are_the_official_outputs():
    src = json.loads((FIX / "SOURCE.json").read_text())
    assert src["commit"] == "a1ed1d04600add811beb08b58d9912ed30999642"
    recs = _records()
    assert len(recs) == 200 and all(r["official_clean_tokens"] is True and r["official_clean_str"] for r in recs)
    # the official generator writes items without children (an abstract parameter of value 0)
    assert sum(any(not ch for row in r["children"] for ch in row) for r in recs) > 20


def test_official_structure_follows_lmsci_semantics():
    """lmsci's reading of each official problem: its values (mod-23 semantics of the definitions and
    abstract parameters), dependencies, op (sum of ``_cost`` over the solution) and question."""
    for p, r in _problems().values():
        vals = {}
        for q in nx.topological_sort(p.graph):
            if q != RAND:
                vals[q] = _eval(param_expr(p, q), vals)
                if q[0] == 0:
                    assert p.defs[q].evaluate(vals) == vals[q], (r["seed"], q)
        for k, v in r["values"].items():
            assert vals[_tup(k)] == v, (r["seed"], k)
        for q in p.all_params:
            want = sorted(tuple(u) for u in r["deps"][",".join(map(str, q))])
            assert sorted(u for u in p.preds(q) if u != RAND) == want, (r["seed"], q)
        # official parameters that lmsci does not have are the non-edges: no dependencies
        extra = set(r["deps"]) - {",".join(map(str, q)) for q in p.all_params}
        assert all(_tup(k)[0] == 0 and not r["deps"][k] for k in extra)
        assert sum(_cost(p, q) for q in p.necessary) == r["n_op"] == r["solution"].count(";")
        assert p.answer == r["answer"] == vals[p.question_param]


def test_official_solutions_are_accepted():
    for p, r in _problems().values():
        for text in (r["solution"] + f" <ans> {r['answer']}", r["solution"], p.prompt() + r["solution"]
                     + f"<ans> {r['answer']}"):
            c = check_solution(p, text)  # never raises (official items without children used to)
            assert c.correct and c.strict_correct and c.final_ok, (r["seed"], c.errors)
            assert not c.missing and not c.unneeded


def _corrupted_text(rec, item) -> str:
    orig = rec["solution"].strip().rstrip(".").split(". ")
    sents = [orig[s] if isinstance(s, int) else s for s in item["sentences"]]
    return " " + ". ".join(sents) + ". <ans> " + item["ans"]


def test_corruptions_are_judged_as_the_official_checker():
    probs = _problems()
    items = _jsonl("corruptions.jsonl.gz")
    assert len(items) == 2121
    per_kind: Counter = Counter()
    agree: Counter = Counter()
    mismatches = []
    for it in items:
        p, r = probs[it["seed"]]
        c = check_solution(p, _corrupted_text(r, it))
        off = it["official_correct"]
        assert isinstance(off, bool)
        per_kind[it["kind"]] += 1
        if it["kind"] in KNOWN_DIVERGENT_KINDS:
            assert off is True and not c.correct, (it["seed"], it["kind"])
            continue
        if c.correct == off:
            agree[it["kind"]] += 1
        else:
            mismatches.append((it["seed"], it["kind"], off, c.correct, c.errors[:2]))
    assert not mismatches, mismatches[:10]
    assert len(per_kind) == 12  # every kind present (incl. those that exercise the <ans>-tail fix)


def _hist_test(a: dict, b: dict) -> float:
    """p-value of the chi-square test of homogeneity of two histograms ({value: count}); values are
    pooled from the top down until every pooled bin expects >= 5 on both sides."""
    keys = sorted(set(a) | set(b))
    ta, tb = sum(a.values()), sum(b.values())
    bins, cur = [], [0, 0]
    for k in keys:
        cur = [cur[0] + a.get(k, 0), cur[1] + b.get(k, 0)]
        tot = cur[0] + cur[1]
        if tot * min(ta, tb) / (ta + tb) >= 5:
            bins.append(cur)
            cur = [0, 0]
    if cur != [0, 0]:
        bins[-1] = [bins[-1][0] + cur[0], bins[-1][1] + cur[1]]
    return float(chi2_contingency(np.array(bins).T)[1])


@lru_cache(maxsize=None)
def _lmsci_hists() -> dict:
    """Histograms of N_LMSCI lmsci problems at the official med hyper-parameters (all 23 template hashes,
    as the official run: the train split w.p. 16/23, the test split w.p. 7/23)."""
    w = IGSMWorld(IGSMConfig(name="parity-med", max_op=15, max_edge=20, max_eval_op=23))
    rnd = random.Random(30)
    h = {k: Counter() for k in ("op", "n_params", "n_steps", "answer")}
    for _ in range(N_LMSCI):
        p = w.sample(rnd, split="train" if rnd.random() < 16 / 23 else "test")
        h["op"][p.op] += 1
        h["n_params"][p.n_instance_params] += 1
        h["n_steps"][len(p.necessary)] += 1
        h["answer"][p.answer] += 1
    return h


def _official_hist(stat: str) -> dict:
    d = json.loads((FIX / "distributions.json").read_text())
    assert d["n"] == 2000 and d["op_ne_semicolons"] == 0
    return {int(k): v for k, v in d["hist"][stat].items()}


def _tv(a: dict, b: dict) -> float:
    ta, tb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a.get(k, 0) / ta - b.get(k, 0) / tb) for k in set(a) | set(b))


def test_generator_op_distribution_matches_official():
    off, ours = _official_hist("op"), _lmsci_hists()["op"]
    assert _hist_test(off, ours) > ALPHA, (_tv(off, ours), off, dict(ours))


def test_generator_nonzero_answers_match_official():
    """The answer's distribution over 1..22 (answer 0 has its own test, below)."""
    off, ours = _official_hist("answer"), _lmsci_hists()["answer"]
    off1, ours1 = {k: v for k, v in off.items() if k}, {k: v for k, v in ours.items() if k}
    assert _hist_test(off1, ours1) > ALPHA, (_tv(off1, ours1), off1, dict(ours1))


def _zero_answer_test(off: dict, ours: dict) -> float:
    """p-value of the two-sample test (chi-square, 2x2) of P(answer = 0)."""
    t = np.array([[off.get(0, 0), sum(off.values()) - off.get(0, 0)],
                  [ours.get(0, 0), sum(ours.values()) - ours.get(0, 0)]])
    return float(chi2_contingency(t)[1])


# Formerly known differences (tests/parity/README.md): lmsci's sampler gave every item a child and built
# the dependency design backwards with an exact op budget, so it wrote more instance parameters per
# problem (mean 10.27 vs 9.09, total variation 0.156), fewer long solutions (mean 4.35 vs 4.68 sentences,
# TV 0.108) and fewer answers 0 (6.5% vs 11.9%: the official generator's childless items make abstract
# parameters of value 0). The sampler now follows the official forward process (items without children,
# official choose / order walk / design); these were strict xfails until then.
@pytest.mark.parametrize("stat", ["n_params", "n_steps"])
def test_generator_distribution_matches_official(stat):
    off, ours = _official_hist(stat), _lmsci_hists()[stat]
    assert _hist_test(off, ours) > ALPHA, (stat, _tv(off, ours))


def test_generator_zero_answer_rate_matches_official():
    off, ours = _official_hist("answer"), _lmsci_hists()["answer"]
    assert _zero_answer_test(off, ours) > ALPHA, (off[0], ours[0])


@pytest.mark.parametrize("stat,bound", [("n_params", 0.20), ("n_steps", 0.15), ("answer", 0.10)])
def test_generator_known_differences_stay_bounded(stat, bound):
    """Total-variation distance of the formerly different statistics stays below a regression bound
    (measured 0.156, 0.108, 0.063 with the old sampler; 0.053, 0.041, 0.048 since it follows the official
    process)."""
    off, ours = _official_hist(stat), _lmsci_hists()[stat]
    assert _tv(off, ours) < bound, (stat, _tv(off, ours))
