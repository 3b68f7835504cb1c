"""Parity of lmsci's path aggregation and KG walks with the official LM_random_walk code (issue 33).

Source: WANGXinyiLinda/LM_random_walk at abc06a0e645260aabcf51726ff599b4a0033ad73 (Wang et al., ICML 2024, arXiv
2402.03268), ``kg_reasoning/``: ``data_generation/generator.py`` (``Grapher``: ``create_graph``,
``get_all_rule_probs``, ``get_path_ranking_data``, ``get_rule_weights``, ``path_ranking_predict``), ``analysis.py``
(``KL`` and the loop body that builds the PRA / sum distributions at ``pra_temp``), ``eval.py``
(``SupervisedDataset.get_data``: queries and seen answers) and ``train.py`` (``random_walk_iter``, ``random_iter``).

Fixtures (``data/lm_random_walk/``; made once by ``driver.py`` there, which says how):

* ``official.npz``: graph A (lmsci's ``kg_world(50, 3, 2, 0.9, 0.3, seed=0)``: 178 training triples, 22 held-out
  triples, 5 relations) and graph B (40 entities, hand-made in the driver: relations with a few two-tail heads, a
  goal relation 3 = b1 o b0 on 22 heads, another tail on 8, 10 held-out triples); per graph the official rule
  probability matrices up to length 3 ([n_rules, E, E], float32), the fixed LM distributions used as
  ``llm_dist`` (softmax of N(0, 2) logits, numpy seeds 0 / 1), and per ``max_rule_len`` L = 1..3 the official PRA
  and sum scores and their distributions at T = 100 over all entities; graph B's PRA training set (X, y); 20000
  official walks of 3 triples on graph A from ``random_walk_iter`` and from ``random_iter`` (Python ``random`` seed
  1234).
* ``official.json``: the official rule list (order as generated), per L and goal the selected rules (count > 10)
  with counts and weights, the queries with their answers and seen answers, per query the official KL of the
  uniform / groundtruth / PRA / sum distributions to ``llm_dist``, PRA / vanilla accuracy; graph B's LR fit.

No official code is used here. See tests/parity/README.md (LM_random_walk) for the differences and the findings.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from lmsci.measure import path_aggregation as pa
from lmsci.worlds.kg_walks import KGWorld

FIX = Path(__file__).parent / "data" / "lm_random_walk"
T_OFFICIAL = 100.0        # heatmap.sh --pra_temp
OFFICIAL_MIN_COUNT = 10   # get_path_ranking_data: rules with c > 10 (hard-coded)
N_BASE = {"A": 3, "B": 3}

# Tolerances. The official matrices are float32 torch sparse products, lmsci's float64: largest difference
# measured 9.9e-9 on the rule probabilities and 8.3e-9 on the scores (values <= 1). At T = 100 that moves logits
# by < 1e-6, so distributions and KL agree to ~1e-6. Given the same inputs, lmsci's KL and aggregation are the
# official formulas up to summation order (1e-12). LR weights from the same (X, y): lbfgs on the same sums in another
# order; measured agreement ~1e-9 relative.
PROB_ATOL = 1e-7
SCORE_ATOL = 1e-7
DIST_ATOL = 1e-5
KL_ATOL = 1e-5
EXACT = 1e-12
W_RTOL = 1e-6
ALPHA = 1e-3


@lru_cache(maxsize=None)
def _meta() -> dict:
    return json.loads((FIX / "official.json").read_text())


@lru_cache(maxsize=None)
def _arr() -> dict[str, np.ndarray]:
    with np.load(FIX / "official.npz") as z:
        return {k: z[k] for k in z.files}


def _graph(G: str):
    m = _meta()[G]
    return _arr()[f"{G}_train"], m["n_entities"], m["n_relations"]


def _official_probs(G: str, max_len: int = 3) -> dict[tuple, np.ndarray]:
    rules = [tuple(r) for r in _meta()[G]["rule_probs_rules"]]
    mats = _arr()[f"{G}_rule_probs"].astype(np.float64)
    return {r: mats[i] for i, r in enumerate(rules) if len(r) <= max_len}


def _queries(G: str) -> tuple[np.ndarray, list]:
    qs = _meta()[G]["analysis"]["queries"]
    return np.array([[q[0], q[1]] for q in qs], dtype=np.int64), qs


@lru_cache(maxsize=None)
def _lmsci(G: str, L: int, min_count: int) -> dict[str, np.ndarray]:
    train, E, R = _graph(G)
    q, _ = _queries(G)
    return pa.path_distributions(train, E, R, q, L, T_OFFICIAL, np.random.default_rng(0), min_count=min_count)


def _official_kl(G: str, L: int, h: str) -> np.ndarray:
    return np.asarray(_meta()[G]["analysis"]["by_len"][str(L)]["kl"][h])


GRAPHS_L = [(G, L) for G in "AB" for L in (1, 2, 3)]


# ---------------------------------------------------------------- graph, rule probabilities, queries

@pytest.mark.parametrize("G", ["A", "B"])
def test_rule_probabilities_match_official(G):
    train, E, R = _graph(G)
    mine = pa.rule_probabilities(pa.transition_matrices(train, E, R), 3)
    official = _official_probs(G)
    assert list(mine) == list(official)          # same rules, same (generation) order: ties break alike
    err = max(float(np.abs(mine[r] - official[r]).max()) for r in official)
    assert err < PROB_ATOL, err


@pytest.mark.parametrize("G", ["A", "B"])
def test_transition_matrices_rows_are_official_random_walk(G):
    """``create_graph``: 1 / out-degree over all relations; the length-1 rules are the per-relation matrices."""
    train, E, R = _graph(G)
    M = pa.transition_matrices(train, E, R)
    official = _official_probs(G, 1)
    for (r,), P in official.items():
        np.testing.assert_allclose(M[r], P, atol=PROB_ATOL)
    assert np.allclose(M.sum((0, 2))[np.bincount(train[:, 0], minlength=E) > 0], 1.0)


@pytest.mark.parametrize("G", ["A", "B"])
def test_queries_and_seen_tails_match_official(G):
    train, E, R = _graph(G)
    w = KGWorld(E, N_BASE[G], R - N_BASE[G], train, _arr()[f"{G}_test"], {})
    hr, tails = w.queries(w.test_triples)
    seen = w.seen_tails(hr)
    mine = {(int(h), int(r)): (sorted(t), sorted(s)) for (h, r), t, s in zip(hr, tails, seen)}
    official = {(q[0], q[1]): (sorted(q[2]), sorted(q[3])) for q in _queries(G)[1]}
    assert mine == official


# ---------------------------------------------------------------- aggregation and rule weights

@pytest.mark.parametrize("G,L", GRAPHS_L)
def test_aggregation_with_official_rules_and_weights(G, L):
    """``path_ranking_predict``: given the official rules and weights, lmsci's sums are the official scores."""
    by = _meta()[G]["analysis"]["by_len"][str(L)]
    q, _ = _queries(G)
    probs = _official_probs(G, L)
    pra, van = np.zeros((len(q), _graph(G)[1])), np.zeros((len(q), _graph(G)[1]))
    for r in np.unique(q[:, 1]):
        rows = np.flatnonzero(q[:, 1] == r)
        rules = [tuple(x[0]) for x in by["rules"][str(r)]]
        pra[rows], van[rows] = pa.aggregation_scores(probs, rules, np.asarray(by["weights"][str(r)]), q[rows, 0])
    np.testing.assert_allclose(pra, _arr()[f"{G}_L{L}_pra_scores"], atol=EXACT)
    np.testing.assert_allclose(van, _arr()[f"{G}_L{L}_sum_scores"], atol=EXACT)
    np.testing.assert_allclose(pa.softmax(pra, T_OFFICIAL), _arr()[f"{G}_L{L}_PRA"], atol=EXACT)
    np.testing.assert_allclose(pa.softmax(van, T_OFFICIAL), _arr()[f"{G}_L{L}_sum"], atol=EXACT)


@pytest.mark.parametrize("G,L", GRAPHS_L)
def test_unweighted_distribution_matches_official(G, L):
    """End to end from the training triples at the official threshold: the goal's own rule (r,) that lmsci leaves
    out is zero on every held-out query (no seen tails here), so the unweighted scores are the official sum."""
    d = _lmsci(G, L, OFFICIAL_MIN_COUNT)
    np.testing.assert_allclose(d["unweighted_score"], _arr()[f"{G}_L{L}_sum_scores"], atol=SCORE_ATOL)
    np.testing.assert_allclose(d["unweighted"], _arr()[f"{G}_L{L}_sum"], atol=DIST_ATOL)
    np.testing.assert_allclose(pa.kl(d["unweighted"], _arr()[f"{G}_llm"]), _official_kl(G, L, "sum"), atol=KL_ATOL)


@pytest.mark.parametrize("G,L", [("A", 1), ("A", 2), ("A", 3), ("B", 1)])
def test_weighted_distribution_matches_official(G, L):
    """Where the official fit does not hinge on the goal's own rule: graph A (no negative has a non-zero feature,
    every official weight is 1, as lmsci's) and graph B at L = 1 (only the goal rule: all scores 0)."""
    d = _lmsci(G, L, OFFICIAL_MIN_COUNT)
    np.testing.assert_allclose(d["weighted_score"], _arr()[f"{G}_L{L}_pra_scores"], atol=SCORE_ATOL)
    np.testing.assert_allclose(d["weighted"], _arr()[f"{G}_L{L}_PRA"], atol=DIST_ATOL)
    np.testing.assert_allclose(pa.kl(d["weighted"], _arr()[f"{G}_llm"]), _official_kl(G, L, "PRA"), atol=KL_ATOL)


def _renamed_goal_probs() -> dict:
    """Graph B's official length <= 2 rule matrices, the goal's own rule (3,) under another key (same position)."""
    return {(("goal", 3) if r == (3,) else r): P for r, P in _official_probs("B", 2).items()}


def test_rule_weights_match_official_when_the_goal_rule_is_kept():
    """``get_path_ranking_data`` + ``LogisticRegression``: with the goal's own rule kept (renamed so that lmsci does
    not drop it), lmsci's rule selection (count > 10, most frequent first) and fitted weights are the official ones.
    Graph B is built so that the official negatives are all used (18 <= 30 positives, one positive per head): no
    sampling, so the fit does not depend on either side's RNG."""
    fit = _meta()["B"]["weights"]
    assert fit["num_neg"] < fit["num_pos"]       # no random.sample of negatives on the official side
    train, _, _ = _graph("B")
    rules, w = pa.fit_rule_weights(_renamed_goal_probs(), train, 3, np.random.default_rng(5),
                                   min_count=OFFICIAL_MIN_COUNT)
    assert [("goal", 3) if r == ("goal", 3) else list(r) for r in rules] == \
        [("goal", 3) if x[0] == [3] else x[0] for x in fit["rules"]]
    np.testing.assert_allclose(w, fit["weights"], rtol=W_RTOL)


def test_rule_weights_training_set_matches_official():
    """The official (X, y) of graph B: positives are the goal's training triples, negatives every other tail of a
    positive head with a non-zero feature; lmsci's fit on that (X, y) gives the official weights."""
    from sklearn.linear_model import LogisticRegression

    X, y = _arr()["B_X"], _arr()["B_y"]
    probs = _renamed_goal_probs()
    feats = np.stack([probs[("goal", 3)], probs[(0, 1)]], -1)
    train, E, _ = _graph("B")
    pos = train[train[:, 1] == 3]
    true = np.zeros((E, E), bool)
    true[pos[:, 0], pos[:, 2]] = True
    neg = [(h, t) for h in np.unique(pos[:, 0]) for t in range(E) if not true[h, t] and feats[h, t].sum() > 0]
    mine = np.concatenate([feats[pos[:, 0], pos[:, 2]], np.stack([feats[c] for c in neg])])
    lab = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    key = lambda a, b: sorted(map(tuple, np.c_[a, b].round(12)))  # noqa: E731
    assert key(mine, lab) == key(X, y)
    np.testing.assert_allclose(LogisticRegression(max_iter=1000).fit(mine, lab).coef_[0],
                               _meta()["B"]["weights"]["weights"], rtol=W_RTOL)


def test_positive_without_path_feature_is_not_a_training_example():
    """Regression (found by reading ``get_path_ranking_data``: ``if sum(x) > 0``): with the goal's own rule left
    out, graph B's heads 22..29 have no (0, 1) path to their tail; those 8 positives are dropped, not fitted as
    all-zero rows (which gave (0, 1) the weight -0.254 instead of +0.019), and as many negatives as the 22 kept
    positives are drawn (all 18 here)."""
    from sklearn.linear_model import LogisticRegression

    train, E, R = _graph("B")
    probs = pa.rule_probabilities(pa.transition_matrices(train, E, R), 2)
    rules, w = pa.fit_rule_weights(probs, train, 3, np.random.default_rng(5), min_count=OFFICIAL_MIN_COUNT)
    assert rules == [(0, 1)]
    pos = train[train[:, 1] == 3]
    f = probs[(0, 1)]
    x_pos = f[pos[:, 0], pos[:, 2]]
    assert (x_pos == 0).sum() == 8
    true = np.zeros((E, E), bool)
    true[pos[:, 0], pos[:, 2]] = True
    x_neg = [f[h, t] for h in np.unique(pos[:, 0]) for t in range(E) if not true[h, t] and f[h, t] > 0]
    X = np.r_[x_pos[x_pos > 0], x_neg][:, None]
    y = np.r_[np.ones((x_pos > 0).sum()), np.zeros(len(x_neg))]
    np.testing.assert_allclose(w, LogisticRegression(max_iter=1000).fit(X, y).coef_[0], rtol=W_RTOL)
    assert w[0] > 0


# ---------------------------------------------------------------- KL and temperature

@pytest.mark.parametrize("G,L", GRAPHS_L)
def test_kl_matches_official(G, L):
    """``analysis.KL``: sum over p > 1e-4 of p log(p / (q + 1e-4)), on the official distributions."""
    llm = _arr()[f"{G}_llm"]
    E = llm.shape[1]
    qs = _queries(G)[1]
    gt = np.zeros_like(llm)
    for i, q in enumerate(qs):
        gt[i, q[2]] = 1.0 / len(q[2])
    dists = {"uniform": np.full_like(llm, 1.0 / E), "groundtruth": gt, "PRA": _arr()[f"{G}_L{L}_PRA"],
             "sum": _arr()[f"{G}_L{L}_sum"]}
    for h, p in dists.items():
        np.testing.assert_allclose(pa.kl(p, llm), _official_kl(G, L, h), rtol=EXACT, atol=EXACT)


def test_kl_ignores_small_p_and_floors_q():
    p = np.array([0.5, 0.5 - 5e-5, 5e-5, 0.0])
    q = np.array([0.0, 0.25, 0.25, 0.5])
    want = 0.5 * np.log(0.5 / 1e-4) + (0.5 - 5e-5) * np.log((0.5 - 5e-5) / (0.25 + 1e-4))
    assert abs(pa.kl(p, q) - want) < EXACT


@pytest.mark.parametrize("G,L", [("A", 2), ("A", 3), ("B", 2)])
def test_tuned_temperature_kl_is_at_most_the_official_fixed_temperature_kl(G, L):
    """The official T = 100 is on lmsci's grid, so the registered (minimised) KL never exceeds the official one."""
    assert np.isclose(pa.TEMPS, T_OFFICIAL).any()
    d = _lmsci(G, L, OFFICIAL_MIN_COUNT)
    val, _ = pa.min_kl_over_temperature(d["unweighted_score"], _arr()[f"{G}_llm"])
    assert val <= _official_kl(G, L, "sum").mean() + KL_ATOL


@pytest.mark.xfail(strict=True, reason="deliberate: the registered KL minimises over T for each aggregation "
                   "(min_kl_over_temperature); the official analysis.py fixes T = pra_temp = 100. Graph A, L = 2: "
                   "official PRA KL 4.472 nats at T = 100, lmsci's minimum 1.605 at T = 0 (uniform; the fixed LM "
                   "here is path-blind)")
def test_registered_kl_is_the_official_fixed_temperature_kl():
    d = _lmsci("A", 2, OFFICIAL_MIN_COUNT)
    val, _ = pa.min_kl_over_temperature(d["weighted_score"], _arr()["A_llm"])
    assert abs(val - _official_kl("A", 2, "PRA").mean()) < KL_ATOL


@pytest.mark.xfail(strict=True, reason="deliberate: lmsci leaves the goal's own length-1 rule (r,) out of the PRA "
                   "features; the official keeps it. On graph B it separates the training set, takes weight 2.73 and "
                   "pushes the compositional rule (0, 1) to -0.20, so the official PRA puts the held-out answer last "
                   "(PRA accuracy 0.0 at L = 2, 3; sum 1.0); lmsci's only feature (0, 1) gets +0.019 (accuracy 1.0); "
                   "scores differ by up to 0.024")
@pytest.mark.parametrize("L", [2, 3])
def test_weighted_scores_match_official_with_the_goal_rule(L):
    d = _lmsci("B", L, OFFICIAL_MIN_COUNT)
    np.testing.assert_allclose(d["weighted_score"], _arr()[f"B_L{L}_pra_scores"], atol=SCORE_ATOL)


@pytest.mark.xfail(strict=True, reason="lmsci's path_distributions (and the experiment) keep rules holding on more "
                   "than min_count = 1 positives; the official get_path_ranking_data hard-codes c > 10. On graph A "
                   "at L = 2 lmsci keeps more rules and its scores differ by up to 0.29 (weighted) / 0.40 "
                   "(unweighted). At 10, lmsci's functional worlds keep only the defining rule, weight 1: weighted = "
                   "unweighted")
def test_default_rule_threshold_is_official():
    d = _lmsci("A", 2, 1)
    np.testing.assert_allclose(d["weighted_score"], _arr()["A_L2_pra_scores"], atol=SCORE_ATOL)


# ---------------------------------------------------------------- random walks

def _chi2_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample chi-square on two count vectors over the same bins, bins with < 10 in all pooled."""
    keep = (a + b) >= 10
    a = np.r_[a[keep], a[~keep].sum()]
    b = np.r_[b[keep], b[~keep].sum()]
    nz = (a + b) > 0
    return float(chi2_contingency(np.stack([a[nz], b[nz]]))[1])


def _edge_ids(trip: np.ndarray, train: np.ndarray) -> np.ndarray:
    key = {tuple(map(int, e)): i for i, e in enumerate(train)}
    return np.array([key[tuple(map(int, t))] for t in trip.reshape(-1, 3)]).reshape(trip.shape[:-1])


def _lmsci_walks(shuffled: bool) -> np.ndarray:
    train, E, R = _graph("A")
    w = KGWorld(E, 3, R - 3, train, _arr()["A_test"], {})
    n, L = _arr()["walks_random_walk"].shape[:2]
    toks = w.walks(n, L, np.random.default_rng(33), shuffled=shuffled)
    trip = toks[:, :-1].reshape(n, L, 3).copy()
    trip[:, :, 1] -= E
    assert (toks[:, -1] == w.eos).all()
    return trip


@pytest.mark.parametrize("mode,shuffled", [("random_walk", False), ("random", True)])
def test_walks_match_official_distribution(mode, shuffled):
    """``random_walk_iter`` (uniform start over entities with out-edges, uniform out-edge at each step) and
    ``random_iter`` (independent edges): per-step edge frequencies, 20000 walks a side, chi-square at ALPHA."""
    train = _graph("A")[0]
    official, mine = _arr()[f"walks_{mode}"], _lmsci_walks(shuffled)
    oe, me = _edge_ids(official, train), _edge_ids(mine, train)   # raises KeyError on a non-training triple
    if not shuffled:   # each triple starts where the last one ended
        for t in (official, mine):
            assert (t[:, 1:, 0] == t[:, :-1, 2]).all()
    for i in range(official.shape[1]):
        p = _chi2_p(np.bincount(oe[:, i], minlength=len(train)), np.bincount(me[:, i], minlength=len(train)))
        assert p > ALPHA, (mode, i, p)
    E = _graph("A")[1]
    p = _chi2_p(np.bincount(official[:, 0, 0], minlength=E), np.bincount(mine[:, 0, 0], minlength=E))
    assert p > ALPHA, p


def test_walks_refuse_a_graph_with_a_dead_end():
    """The official walk ends at an entity without out-edges; lmsci's fixed-length walks refuse such a graph (before,
    they silently took another head's edge, or raised IndexError at the last entity). Shuffled walks are fine."""
    tr = np.array([[0, 0, 1], [1, 0, 3], [3, 0, 0], [0, 1, 2]])   # entity 2: no out-edge
    w = KGWorld(4, 1, 1, tr, tr[:1], {})
    with pytest.raises(ValueError, match="dead end"):
        w.walks(8, 3, np.random.default_rng(0))
    assert w.walks(8, 3, np.random.default_rng(0), shuffled=True).shape == (8, 10)
