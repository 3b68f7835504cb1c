"""path-aggregation: the KG world (rules, split, walks), the path-aggregation instrument (transition matrices, rule
probabilities, PRA weights, KL), verdicts from synthetic tables, bad input, a smoke run.

Source: Wang et al., arXiv 2402.03268 (sec. 3); official code WANGXinyiLinda/LM_random_walk (kg_reasoning).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.reasoning.path_aggregation import PathAggregation, PathAggregationConfig
from lmsci.measure.path_aggregation import (kl, min_kl_over_temperature, path_distributions, rule_probabilities,
                                            softmax, transition_matrices)
from lmsci.runs import RunDir
from lmsci.worlds.kg_walks import kg_world


def test_world_rules_hold_and_test_triples_are_held_out():
    w = kg_world(40, 3, 2, 0.8, 0.3, seed=1)
    train = {tuple(t) for t in w.train_triples.tolist()}
    base = {}
    for h, r, t in w.train_triples:
        if r < w.n_base:
            base[(int(h), int(r))] = int(t)
    for h, d, t in w.test_triples:
        i, j = w.rules[int(d)]
        assert (int(h), int(d), int(t)) not in train  # held out
        assert base[(base[(int(h), i)], j)] == t  # the rule derives it from training base triples
    assert (w.outdeg > 0).all()  # no dead ends


def test_walks_follow_edges_and_shuffled_walks_do_not_chain():
    w = kg_world(40, 3, 2, 0.8, 0.3, seed=2)
    edges = {tuple(t) for t in w.train_triples.tolist()}
    rng = np.random.default_rng(0)
    wk = w.walks(200, 4, rng)
    assert wk.shape == (200, 13) and (wk[:, -1] == w.eos).all()
    tri = wk[:, :-1].reshape(200, 4, 3)
    assert all((h, r - w.n_entities, t) in edges for h, r, t in tri.reshape(-1, 3).tolist())
    assert (tri[:, 1:, 0] == tri[:, :-1, 2]).all()  # consecutive triples chain
    sh = w.walks(200, 4, rng, shuffled=True)[:, :-1].reshape(200, 4, 3)
    assert all((h, r - w.n_entities, t) in edges for h, r, t in sh.reshape(-1, 3).tolist())
    assert (sh[:, 1:, 0] == sh[:, :-1, 2]).mean() < 0.2
    p = w.packed(8, 30, 4, rng)
    assert p.shape == (8, 31)


def test_bad_input_is_refused_with_the_field():
    with pytest.raises(ConfigError, match="n_entities"):
        kg_world(3, 2, 1, 0.5, 0.3, 0)
    with pytest.raises(ConfigError, match="heldout_frac"):
        kg_world(20, 2, 1, 0.5, 1.2, 0)
    with pytest.raises(ConfigError, match="walk_lens"):
        resolve_config(PathAggregationConfig, "smoke", {"walk_lens": [0, 2]})
    with pytest.raises(ConfigError, match="kl_walk_len"):
        PathAggregation().validate(resolve_config(PathAggregationConfig, "smoke", {"kl_walk_len": 5}))


def test_rule_probabilities_are_random_walk_products():
    # 0 -a-> 1, 0 -b-> 2, 1 -a-> 3, 2 -a-> 3
    tr = np.array([[0, 0, 1], [0, 1, 2], [1, 0, 3], [2, 0, 3]])
    M = transition_matrices(tr, 4, 2)
    assert M[0, 0, 1] == 0.5 and M[1, 0, 2] == 0.5 and M[0, 1, 3] == 1.0
    P = rule_probabilities(M, 2)
    assert P[(0, 0)][0, 3] == pytest.approx(0.5) and P[(1, 0)][0, 3] == pytest.approx(0.5)
    assert (1, 1) not in P  # zero mass dropped
    with pytest.raises(ValueError):
        rule_probabilities(M, 0)


def test_kl_and_temperature_minimum():
    p = np.array([[0.5, 0.5, 0.0]])
    assert kl(p, p)[0] == pytest.approx(-np.log(1 + 2e-4), abs=1e-3)
    assert kl(p, np.array([[0.1, 0.1, 0.8]]))[0] > 1.0
    flat = np.full((2, 3), 1 / 3)
    m, t = min_kl_over_temperature(np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]), flat)
    assert t == 0.0 and m < 1e-3  # a flat LM is matched by T = 0, whatever the scores
    assert softmax(np.array([[0.0, 1.0]]), 0.0) == pytest.approx(np.array([[0.5, 0.5]]))


def test_pra_recovers_the_rule_on_the_world():
    w = kg_world(60, 4, 2, 0.8, 0.3, seed=0)
    q, ans = w.queries(w.test_triples)
    d = path_distributions(w.train_triples, w.n_entities, w.n_rel, q, 2, 100.0, np.random.default_rng(0))
    top = d["weighted"].argmax(1)
    assert np.mean([t in a for t, a in zip(top, ans)]) >= 0.8


def table(kl_real=0.3, kl_shuf=0.0, acc=(0.2, 0.5, 0.45, 0.3), acc_shuf=(0.2, 0.2, 0.21, 0.2), learned=0.9, n=3):
    rows = []
    lens = [1, 3, 6, 12]
    kl_len = PathAggregationConfig().kl_walk_len  # the length weighted-closer reads (marked in each row)
    for k in range(n):
        e = 0.01 * k
        for arm, kd, ac in (("real", kl_real, acc), ("shuffled", kl_shuf, acc_shuf)):
            for L, a in zip(lens, ac):
                rows.append({"point": f"{arm}_L{L}" + (f"__s{k}" if k else ""), "arm": arm, "walk_len": L,
                             "seed_index": k, "status": "ok", "acc_test": a + e, "kl_diff": kd + e * (1 if k % 2 else -1),
                             "kl_diff_T": 0.1, "kl_weighted": 1.0, "kl_unweighted": 1.0 + kd, "acc_train_queries": learned,
                             "at_kl_walk_len": L == kl_len})
    return pd.DataFrame(rows)


def verdicts(df, tmp_path):
    cfg = resolve_config(PathAggregationConfig, "quick")
    return {v.claim_id: v for v in PathAggregation().verdicts(cfg, df, RunDir(tmp_path))}


def test_verdicts_reproduced_not_reproduced_gated_null(tmp_path):
    v = verdicts(table(), tmp_path)
    assert {k: x.outcome for k, x in v.items()} == {"weighted-closer": "reproduced", "optimal-walk-length": "reproduced"}
    assert v["optimal-walk-length"].details["best_walk_len"] == 3
    v = verdicts(table(kl_real=-0.2, acc=(0.1, 0.2, 0.3, 0.4)), tmp_path)  # longest is best: no interior optimum
    assert {x.outcome for x in v.values()} == {"not reproduced"}
    v = verdicts(table(learned=0.2), tmp_path)
    assert {x.outcome for x in v.values()} == {"inconclusive"}
    v = verdicts(table(kl_shuf=0.3, acc_shuf=(0.1, 0.5, 0.4, 0.2)), tmp_path)  # the null arm meets both rules
    assert all(x.outcome == "inconclusive" and x.null_passed for x in v.values())


def test_smoke_run_end_to_end(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(PathAggregationConfig, "smoke", {"threads": 1})
    run = run_experiment(PathAggregation(), cfg, tmp_path / "run", progress=False, log=lambda *a, **k: None)
    res = pd.read_csv(run.path / "results.csv")
    assert set(res["arm"]) == {"real", "shuffled"} and set(res["walk_len"]) == {1, 2}
    assert (res["status"] == "ok").all() and res["acc_test"].between(0, 1).all()
    assert (res["kl_weighted"] >= -1e-3).all() and (run.path / "figures" / "path_aggregation.png").exists()
    vs = {v.claim_id: v for v in run.verdicts()}
    assert set(vs) == {"weighted-closer", "optimal-walk-length"}
    assert vs["weighted-closer"].null_passed is False  # one seed: no CI, the rule cannot be met by the null arm
