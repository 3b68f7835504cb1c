"""Random-walk path aggregation over a knowledge graph (Path Ranking Algorithm style) and its KL to a LM.

Source: Wang, Amayuelas, Zhang, Pan, Chen, Wang, "Understanding the Reasoning Ability of Language Models From the
Perspective of Reasoning Paths Aggregation", ICML 2024, arXiv 2402.03268, sec. 3.2, eqs. (3)-(4): the weighted
aggregation ``P_w(t | h, r) = softmax_t(T * sum_rules w_rule P(h -> t | rule))`` (PRA: Lao & Cohen 2010; weights
from a logistic regression) and the unweighted one (every weight 1); the official code WANGXinyiLinda/LM_random_walk
(commit abc06a0), ``kg_reasoning/data_generation/generator.py`` (``create_graph``: per-relation transition matrices
with ``1 / out-degree(e1)`` over all relations; ``get_all_rule_probs``: products along every relation sequence up to
``max_rule_len``; ``get_path_ranking_data``: rules that hold on more than ``min_count`` training triples of the goal
relation (the official hard-codes 10), positives the training triples with a non-zero feature, as many negatives
sampled from other tails with a non-zero feature; ``LogisticRegression``; ``path_ranking_predict``: weighted and
plain sums) and ``kg_reasoning/analysis.py``
(``pra_temp`` T = 100; ``KL(P, Q)`` summed where ``p > 1e-4`` with ``log(p / (q + 1e-4))``). Facts carried over, not
code. One deviation, stated: the goal relation's own length-1 rule ``(r,)`` is left out of its features (it holds on
every positive and separates the training set perfectly, while it is zero on every held-out query).

Every function takes the graph as arrays (no world import). Shapes: ``E`` entities, ``R`` relations.
"""

from __future__ import annotations

from itertools import product

import numpy as np

KL_EPS = 1e-4


def transition_matrices(triples: np.ndarray, n_entities: int, n_relations: int) -> np.ndarray:
    """``[R, E, E]`` float64: ``M[r, h, t] = 1 / out-degree(h)`` for each training triple (h, r, t).

    Args:
        triples: ``[m, 3]`` int (head, relation, tail).
    """
    M = np.zeros((n_relations, n_entities, n_entities))
    deg = np.bincount(triples[:, 0], minlength=n_entities).astype(float)
    for h, r, t in triples:
        M[r, h, t] += 1.0 / deg[h]
    return M


def rule_probabilities(M: np.ndarray, max_rule_len: int, eps: float = KL_EPS) -> dict[tuple[int, ...], np.ndarray]:
    """Random-walk probabilities along every relation sequence of length 1..``max_rule_len``.

    Returns:
        ``{rule: [E, E]}``: ``P[h, t]`` the probability that a uniform random walk from ``h`` follows exactly the
        relations of ``rule`` and ends at ``t`` (rules whose matrix sums to at most ``eps`` are dropped).

    Raises:
        ValueError: ``max_rule_len < 1``.
    """
    if max_rule_len < 1:
        raise ValueError(f"max_rule_len must be >= 1, got {max_rule_len}")
    out: dict[tuple[int, ...], np.ndarray] = {}
    frontier = {(): np.eye(M.shape[1])}
    for _ in range(max_rule_len):
        nxt = {}
        for rule, P in frontier.items():
            for r in range(M.shape[0]):
                Q = P @ M[r]
                if Q.sum() > eps:
                    nxt[rule + (r,)] = Q
        out.update(nxt)
        frontier = nxt
    return out


def fit_rule_weights(probs: dict[tuple[int, ...], np.ndarray], triples: np.ndarray, goal: int,
                     rng: np.random.Generator, min_count: int = 1, max_rules: int = 100) -> tuple[list, np.ndarray]:
    """PRA weights of the rules for relation ``goal`` (logistic regression, the official recipe).

    Args:
        probs: :func:`rule_probabilities`.
        triples: training triples ``[m, 3]``; the positives are those with relation ``goal``.
        min_count: keep rules holding (non-zero probability) on more than this many positives (official: 10).
        max_rules: keep at most this many rules, the most frequent first.

    Returns:
        ``(rules, weights [n_rules])``; positives are the goal's training triples with a non-zero feature (the
        official ``sum(x) > 0``), negatives as many other tails of their heads with a non-zero feature; with no
        positive or no negative example every weight is 1.
    """
    from sklearn.linear_model import LogisticRegression

    pos = triples[triples[:, 1] == goal]
    counts = {rule: int((P[pos[:, 0], pos[:, 2]] > 0).sum()) for rule, P in probs.items() if rule != (goal,)}
    rules = [r for r, c in sorted(counts.items(), key=lambda kv: -kv[1]) if c > min_count][:max_rules]
    if not rules or len(pos) == 0:
        return rules, np.ones(len(rules))
    feats = np.stack([probs[r] for r in rules], -1)  # [E, E, n_rules]
    x_pos = feats[pos[:, 0], pos[:, 2]]
    x_pos = x_pos[x_pos.sum(-1) > 0]  # official: a positive with no path feature is not a training example
    if len(x_pos) == 0:
        return rules, np.ones(len(rules))
    true = np.zeros(feats.shape[:2], dtype=bool)
    true[triples[triples[:, 1] == goal][:, 0], triples[triples[:, 1] == goal][:, 2]] = True
    heads = np.unique(pos[:, 0])
    cand = [(h, t) for h in heads for t in range(feats.shape[1]) if not true[h, t] and feats[h, t].sum() > 0]
    if not cand:
        return rules, np.ones(len(rules))
    pick = rng.permutation(len(cand))[: len(x_pos)]
    x_neg = np.stack([feats[cand[i]] for i in pick])
    X = np.concatenate([x_pos, x_neg])
    y = np.concatenate([np.ones(len(x_pos)), np.zeros(len(x_neg))])
    lr = LogisticRegression(random_state=int(rng.integers(2**31 - 1)), max_iter=1000).fit(X, y)
    return rules, lr.coef_[0].astype(float)


def aggregation_scores(probs: dict[tuple[int, ...], np.ndarray], rules: list, weights: np.ndarray,
                       heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted and unweighted path-aggregation scores over every tail.

    Args:
        heads: ``[q]`` head entities.

    Returns:
        ``(weighted [q, E], unweighted [q, E])``: ``sum_rules w_rule P_rule[h, :]`` and ``sum_rules P_rule[h, :]``.
    """
    if not rules:
        z = np.zeros((len(heads), next(iter(probs.values())).shape[1]))
        return z, z.copy()
    F = np.stack([probs[r][heads] for r in rules], -1)  # [q, E, n_rules]
    return F @ weights, F.sum(-1)


def softmax(x: np.ndarray, temp: float = 1.0) -> np.ndarray:
    """Row softmax of ``temp * x``."""
    z = temp * np.asarray(x, dtype=float)
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def kl(p: np.ndarray, q: np.ndarray, eps: float = KL_EPS) -> np.ndarray:
    """The official KL in nats, row-wise: ``sum_{p > eps} p log(p / (q + eps))``; ``[..., E] -> [...]``."""
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    m = p > eps
    return np.where(m, p * np.log(np.where(m, p, 1.0) / (q + eps)), 0.0).sum(-1)


def path_distributions(triples: np.ndarray, n_entities: int, n_relations: int, queries: np.ndarray,
                       max_rule_len: int, temp: float, rng: np.random.Generator,
                       min_count: int = 1) -> dict[str, np.ndarray]:
    """Both aggregation distributions for each query (head, relation), from the training graph.

    Args:
        triples: training triples ``[m, 3]``; queries: ``[q, 2]`` (head, relation).
        temp: the temperature T (official ``pra_temp`` = 100).

    Returns:
        ``{"weighted": [q, E], "unweighted": [q, E]}`` probability rows at ``temp``, and their raw scores
        ``{"weighted_score", "unweighted_score"}`` (``[q, E]``, for :func:`min_kl_over_temperature`).
    """
    M = transition_matrices(triples, n_entities, n_relations)
    probs = rule_probabilities(M, max_rule_len)
    w = np.zeros((len(queries), n_entities))
    u = np.zeros_like(w)
    for r in np.unique(queries[:, 1]):
        rows = np.flatnonzero(queries[:, 1] == r)
        rules, weights = fit_rule_weights(probs, triples, int(r), rng, min_count=min_count)
        sw, su = aggregation_scores(probs, rules, weights, queries[rows, 0])
        w[rows], u[rows] = sw, su
    return {"weighted": softmax(w, temp), "unweighted": softmax(u, temp), "weighted_score": w, "unweighted_score": u}


#: the temperature grid of :func:`min_kl_over_temperature`: 0 (uniform) and 10^-1 .. 10^4
TEMPS = np.concatenate([[0.0], np.logspace(-1, 4, 51)])


def min_kl_over_temperature(scores: np.ndarray, p_lm: np.ndarray, temps: np.ndarray = TEMPS) -> tuple[float, float]:
    """The smallest mean KL(softmax(T * scores) || p_lm) over a temperature grid, and its T.

    The official comparison fixes T = 100 for both aggregations; their entropies then differ, and a KL to a flat LM
    (an untrained or path-blind model) favours the flatter one. Minimising over T for each aggregation separately
    compares their shapes, not their sharpness (our addition; the fixed-T values are reported beside it).

    Args:
        scores: ``[q, E]`` aggregation scores; p_lm: ``[q, E]`` the LM's distributions.

    Returns:
        ``(mean KL in nats, T)``.
    """
    vals = [float(kl(softmax(scores, float(t)), p_lm).mean()) for t in temps]
    i = int(np.argmin(vals))
    return vals[i], float(temps[i])


def all_rules(n_relations: int, max_len: int) -> list[tuple[int, ...]]:
    """Every relation sequence of length 1..``max_len`` (for reports)."""
    return [r for k in range(1, max_len + 1) for r in product(range(n_relations), repeat=k)]
