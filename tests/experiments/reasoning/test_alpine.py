"""alpine-planning: the DAG world (reachability, observed reachability, pair types), the graph-reading instruments,
verdicts from synthetic tables (reproduced / not reproduced / gated / null meets the rule), bad input, a smoke run.

Source: Wang et al., ALPINE, arXiv 2405.09220 (secs. 3-5).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.reasoning.alpine import AlpineConfig, AlpinePlanning, rule_holds
from lmsci.measure.graph_reading import accuracy_by_type, auc, greedy_paths, mlp_logit_table, table_vs_graph
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.runs import RunDir
from lmsci.worlds.alpine import alpine_world, reachability, shuffled_edges


def test_reachability_matches_networkx_and_observed_is_inside_it():
    w = alpine_world(30, 0.15, 0.5, 2, seed=3)
    g = nx.DiGraph(list(zip(*np.nonzero(w.A))))
    g.add_nodes_from(range(30))
    for k in range(30):
        for t in range(30):
            assert w.R[t, k] == (k == t or nx.has_path(g, k, t))
    assert not (w.R_obs & ~w.R).any() and w.R_obs.sum() > 0
    assert np.array_equal(reachability(w.A), w.R)
    for p in w.train_paths:  # every training path is a valid path of the DAG
        assert w.is_valid(p[0], p[-1], p)
    types = w.pair_types(w.test_pairs)
    assert set(types) <= {"observed", "transitive"} and (types == "observed").any()
    # a transitive pair: no child of s is observed-reachable to t
    for (s, t), ty in zip(w.test_pairs, types):
        assert (ty == "transitive") == (not w.R_obs[t, np.flatnonzero(w.A[s])].any())
    assert set(w.pair_types(w.unreachable_pairs()[:20])) == {"unreachable"}


def test_sequences_are_paths_with_the_prompt_and_shuffled_edges_keep_the_count():
    w = alpine_world(20, 0.2, 0.5, 1, seed=0)
    x, y = w.sequences()
    p = w.train_paths[0]
    assert x[0, :3].tolist() == [p[0], p[-1], p[0]] and y[0, 0] == -100
    assert y[0, len(p) + 1] == w.newline and (y[0, len(p) + 2:] == -100).all()
    s = shuffled_edges(w.A, np.random.default_rng(0))
    assert s.sum() == w.A.sum() and not np.tril(s).any() and not np.array_equal(s, w.A)


def test_bad_world_input_is_refused_with_the_field():
    with pytest.raises(ConfigError, match="n_nodes"):
        alpine_world(2, 0.5, 0.5, 1, 0)
    with pytest.raises(ConfigError, match="n_nodes"):  # too small for the split
        alpine_world(3, 0.01, 0.5, 1, 0, min_test_pairs=2)
    with pytest.raises(ConfigError, match="train_frac"):
        alpine_world(10, 0.5, 1.0, 1, 0)
    with pytest.raises(ConfigError, match="n_nodes"):  # validate refuses before any training
        AlpinePlanning().validate(resolve_config(AlpineConfig, "smoke", {"n_nodes": 4, "edge_prob": 0.01}))
    with pytest.raises(ConfigError, match="d_model"):
        AlpinePlanning().validate(resolve_config(AlpineConfig, "smoke", {"model.d_model": 18, "model.n_heads": 4}))


def test_table_agreement_and_path_scoring():
    rng = np.random.default_rng(0)
    A = np.triu(rng.random((12, 12)) < 0.3, 1)
    m = np.triu(np.ones_like(A), 1)
    assert table_vs_graph(A * 2.0 + rng.normal(0, 0.01, A.shape), A, m)["auc"] == pytest.approx(1.0)
    assert abs(table_vs_graph(rng.normal(size=A.shape), A, m)["auc"] - 0.5) < 0.25
    assert np.isnan(auc(np.ones(3), np.ones(3)))
    valid = lambda s, t, p: p == [s, t]  # noqa: E731
    acc = accuracy_by_type([[0, 1], [0, 2], [1, 2]], np.array([[0, 1], [0, 1], [1, 2]]),
                           np.array(["a", "a", "b"]), valid)
    assert acc == {"a": (0.5, 2), "b": (1.0, 1)}


def test_readout_and_greedy_decoding_run_on_a_gpt():
    g = GPT(GPTConfig(vocab_size=12, seq_len=16, n_layers=1, n_heads=1, d_model=8), seed=0)
    wm = mlp_logit_table(g, range(10), positions=range(2, 6))
    assert wm.shape == (10, 12)
    paths = greedy_paths(g, np.array([[0, 3], [1, 4]]), newline=10, max_new=5)
    assert len(paths) == 2 and all(p[0] == s for p, s in zip(paths, (0, 1))) and all(len(p) <= 6 for p in paths)


def table(acc_obs=0.95, acc_tr=0.3, wm=0.97, train=0.98, rand=(0.0, 0.0, 0.5), shuf=(0.05, 0.02, 0.52), n_tr=50,
          n=3) -> pd.DataFrame:
    rows = []
    for k in range(n):
        e, sfx = 0.01 * k, (f"__s{k}" if k else "")
        rows.append({"point": "real" + sfx, "arm": "real", "seed_index": k, "status": "ok",
                     "acc_train": train, "acc_observed": acc_obs - e, "acc_transitive": acc_tr + e, "wm_auc": wm - e,
                     "n_transitive": n_tr})
        rows.append({"point": "shuffled" + sfx, "arm": "shuffled", "seed_index": k,
                     "status": "ok", "acc_train": 0.1, "acc_observed": shuf[0] + e, "acc_transitive": shuf[1],
                     "wm_auc": shuf[2] - e, "n_transitive": n_tr})
        rows.append({"point": "init" + sfx, "arm": "init", "seed_index": k, "status": "ok", "acc_train": 0.0,
                     "acc_observed": rand[0], "acc_transitive": rand[1] + e, "wm_auc": rand[2] + e,
                     "n_transitive": n_tr})
    return pd.DataFrame(rows)


def verdicts(df, tmp_path):
    cfg = resolve_config(AlpineConfig, "quick")
    return {v.claim_id: v for v in AlpinePlanning().verdicts(cfg, df, RunDir(tmp_path))}


def test_rules_are_the_registered_ones():
    assert rule_holds("observed-accuracy", [0.9, 0.95]) and not rule_holds("observed-accuracy", [0.89, 0.9])
    assert rule_holds("wm-adjacency", [0.9]) and not rule_holds("wm-adjacency", [0.5, 0.6])
    assert rule_holds("transitive-gap", [0.3, 0.35, 0.4])
    assert not rule_holds("transitive-gap", [0.3])  # one seed: no interval
    assert not rule_holds("transitive-gap", [0.15, 0.18, 0.2])  # mean below 0.2
    assert not rule_holds("transitive-gap", [-0.5, 0.4, 1.0])  # mean >= 0.2 but the CI reaches below 0
    assert AlpinePlanning.escape_hatches() == ["observed-accuracy", "wm-adjacency", "transitive-gap"]


def test_verdicts_reproduced_and_not(tmp_path):
    v = verdicts(table(), tmp_path)
    assert all(x.outcome == "reproduced" for x in v.values()), {k: x.reasons for k, x in v.items()}
    assert v["transitive-gap"].value == pytest.approx(0.95 - 0.3 - 0.02)
    v = verdicts(table(acc_obs=0.8, acc_tr=0.75, wm=0.7), tmp_path)
    assert {k: x.outcome for k, x in v.items()} == {k: "not reproduced" for k in v}


def test_verdicts_gated_and_null_meeting_the_rule(tmp_path):
    v = verdicts(table(train=0.5), tmp_path)
    assert all(x.outcome == "inconclusive" for x in v.values())
    v = verdicts(table(n_tr=5), tmp_path)
    assert v["transitive-gap"].outcome == "inconclusive" and v["wm-adjacency"].outcome == "reproduced"
    # the shuffled-edges arm also recovers "adjacency" and random init solves observed pairs: null meets the rule
    v = verdicts(table(shuf=(0.95, 0.1, 0.95)), tmp_path)
    assert all(x.outcome == "inconclusive" and x.null_passed for x in v.values())
    # either null arm meeting the rule is enough; its value is the larger arm mean
    v = verdicts(table(rand=(0.92, 0.0, 0.5)), tmp_path)
    assert v["observed-accuracy"].outcome == "inconclusive" and v["observed-accuracy"].null_value == pytest.approx(0.92)
    assert v["wm-adjacency"].outcome == "reproduced" and not v["wm-adjacency"].null_passed
    # a missing null arm: not measured, inconclusive
    v = verdicts(table()[lambda d: d["arm"] != "init"], tmp_path)
    assert all(x.outcome == "inconclusive" and x.null_passed is None for x in v.values())
    v = verdicts(table(n=1), tmp_path)
    assert all(x.outcome == "inconclusive" for x in v.values())


def test_smoke_run_end_to_end(tmp_path):
    from lmsci.sweep import run_experiment

    torch.manual_seed(0)
    cfg = resolve_config(AlpineConfig, "smoke", {"threads": 1})
    run = run_experiment(AlpinePlanning(), cfg, tmp_path / "run", progress=False, log=lambda *a, **k: None)
    res = pd.read_csv(run.path / "results.csv")
    assert set(res["arm"]) == {"real", "shuffled", "init"} and (res["status"] == "ok").all()
    assert res[res["arm"] == "init"]["train_loss"].isna().all()  # the init arm is not trained
    assert res["wm_auc"].between(0, 1).all() and res["acc_observed"].between(0, 1).all()
    assert (run.path / "figures" / "alpine_tables.png").exists() and (run.path / "figures" / "alpine_accuracy.png").exists()
    vs = {v.claim_id: v for v in run.verdicts()}
    assert set(vs) == {"observed-accuracy", "wm-adjacency", "transitive-gap"}
    # untrained / path-blind null arms do not meet the registered rules
    assert vs["observed-accuracy"].null_passed is False and vs["wm-adjacency"].null_passed is False
