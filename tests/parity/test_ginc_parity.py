"""Parity of lmsci's HMM-mixture world with the official GINC generator of Xie et al. (issue 30, item 2: GINC).

Fixtures (``fixtures/ginc/``, see ``fixtures/ginc/SOURCE.json`` and ``scripts/parity/ginc.md``), written by the
official ``generate_data.py`` of ``p-lambda/incontext-learning`` (84fab21, hmmlearn 0.2.5) at small settings
(5 entities ("values") x 5 properties ("slots") = 25 hidden states, 20 symbols with '/' = token 0, 6 HMMs of which
the first 3 are the pretraining (ID) concepts, transition temperature 0.1, start temperature 10, value identity
coefficient 0.9; seeds 1111 / 1114 as in its ``__main__``):

* ``official.npz``: every HMM's ``startprob``, ``transmat``, the shared ``emissionprob``, their factors
  (``slot_transmat``, ``value_transmat``, ``all_values``); 300 pretraining documents of 512 tokens
  (``generate_samples``: tokens, hidden states, the concept of each); 16 sequences with hmmlearn's exact
  log-likelihood under each HMM (``MultinomialHMM.score``) and the official next-token scorer's distribution
  (``generate_data.score``).
* ``prompts.jsonl.gz``: 2000 official in-context prompts (``generate_prompts``, ``ID_sample`` and ``OOD_sample``,
  prompt lengths 3 and 5, 0/1/2/4/8 examples): text, tokens, test input, label, slot pattern, concept, and the
  official scorer's next-token distribution at the test input (from which the label is its argmax).

lmsci's :class:`~lmsci.worlds.hmm_mixture.HMMMixture` can hold the same parameters (``pi`` = startprob, ``A`` =
transmat, ``B`` = emissionprob; ``n_obs`` = the 20 official symbols, '/' included, so lmsci's own delimiter is an
extra id 20). Where the parameters are shared, the exact quantities agree to float rounding and lmsci's HMM sampler
draws the official process. lmsci's own construction (Dirichlet tables), its documents and its prompts are not
GINC's: those differences are pinned as strict xfails with the measured numbers. No official code is used here.
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from lmsci.worlds.hmm_mixture import HMMMixture, demo_spans

FIX = Path(__file__).parent / "fixtures" / "ginc"

N_VALUES, N_SLOTS, N_SYMBOLS, N_HMMS, N_ID = 5, 5, 20, 6, 3
N_STATES = N_VALUES * N_SLOTS
DELIM = 0  # the official '/' (vocab[0]), emitted by every slot-0 state

# Exact quantities (float64 on both sides; hmmlearn's forward pass in log space, lmsci's scaled in log space with a
# 1e-300 floor). Largest differences measured: log-likelihood 2.8e-13 (values down to -157), next-token
# probabilities 5.1e-15 (document prefixes) and 1.3e-15 (prompts).
LL_RTOL, LL_ATOL = 1e-10, 1e-10
PROB_ATOL = 1e-12
# lmsci has no -inf: an impossible sequence gets log(1e-300) ~ -690.8 per impossible step.
IMPOSSIBLE_LL = -600.0
# Two-sample tests (chi-square on pooled bins, Kolmogorov-Smirnov): reject at ALPHA.
ALPHA = 1e-3
N_LMSCI_DOCS = 3000  # lmsci documents per two-sample test (the official side has 300)


@lru_cache(maxsize=None)
def _off() -> dict[str, np.ndarray]:
    with np.load(FIX / "official.npz") as z:
        return {k: z[k] for k in z.files}


@lru_cache(maxsize=None)
def _prompts() -> list[dict]:
    with gzip.open(FIX / "prompts.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def _world(x_len: int = 2, pi: np.ndarray | None = None) -> HMMMixture:
    """An HMMMixture holding the official parameters (its own random tables overwritten)."""
    o = _off()
    w = HMMMixture(n_tasks=N_HMMS, n_states=N_STATES, n_obs=N_SYMBOLS, x_len=x_len, seed=0)
    w.A = o["transmat"].copy()
    w.B = o["emissionprob"].copy()
    w.pi = o["startprob"].copy() if pi is None else np.broadcast_to(pi, (N_HMMS, N_STATES)).copy()
    return w


def _chi2_two_sample(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Two-sample chi-square on integer labels (bins with < 5 expected in either sample pooled); returns (p, TV)."""
    cats = np.union1d(a, b)
    ca = np.array([(a == c).sum() for c in cats], float)
    cb = np.array([(b == c).sum() for c in cats], float)
    tv = 0.5 * np.abs(ca / ca.sum() - cb / cb.sum()).sum()
    tot = ca + cb
    exp_a, exp_b = tot * ca.sum() / tot.sum(), tot * cb.sum() / tot.sum()
    small = (exp_a < 5) | (exp_b < 5)
    if small.any():
        ca = np.append(ca[~small], ca[small].sum())
        cb = np.append(cb[~small], cb[small].sum())
        if ca[-1] + cb[-1] == 0:
            ca, cb = ca[:-1], cb[:-1]
    if len(ca) < 2:
        return 1.0, tv
    _, p, _, _ = stats.chi2_contingency(np.stack([ca, cb]))
    return float(p), float(tv)


def _gaps(docs: np.ndarray, delim: int) -> np.ndarray:
    """Distances between consecutive delimiters, pooled over documents."""
    return np.concatenate([np.diff(np.flatnonzero(r == delim)) for r in docs])


def _after_delim(docs: np.ndarray, delim: int) -> np.ndarray:
    """The token right after each delimiter (the first after-delimiter token of each document: one per document)."""
    out = []
    for r in docs:
        p = np.flatnonzero(r[:-1] == delim)
        if len(p):
            out.append(r[p[0] + 1])
    return np.array(out)


@lru_cache(maxsize=None)
def _lmsci_examples(length: int) -> np.ndarray:
    """lmsci's HMM sampler on the official parameters: N_LMSCI_DOCS paths, concepts in the official proportions."""
    o = _off()
    rng = np.random.default_rng(2111)
    tasks = rng.choice(o["doc_hmm"].astype(int), size=N_LMSCI_DOCS)
    return _world().sample_examples(tasks, length, rng), tasks


# --------------------------------------------------------------------------------------------------------------
# The official construction (what lmsci would have to build to be GINC): checked on the fixture itself.


def test_official_construction():
    o = _off()
    for i in range(N_HMMS):
        # transitions: Kronecker product (state = value * n_slots + slot), value matrix shared by every concept
        assert np.array_equal(o["transmat"][i], np.kron(o["value_transmat"][i], o["slot_transmat"][i]))
        assert np.array_equal(o["value_transmat"][i], o["value_transmat"][0])
        assert np.allclose(o["transmat"][i].sum(1), 1, atol=1e-12)
        assert np.allclose(o["startprob"][i].sum(), 1, atol=1e-12)
    # deterministic emissions, shared: state (v, s) emits all_values[v, s]; slot 0 emits the delimiter
    onehot = np.zeros((N_STATES, N_SYMBOLS))
    onehot[np.arange(N_STATES), o["all_values"][np.arange(N_STATES) // N_SLOTS, np.arange(N_STATES) % N_SLOTS]] = 1
    assert np.array_equal(o["emissionprob"], onehot)
    assert (o["all_values"][:, 0] == DELIM).all() and (o["all_values"][:, 1:] != DELIM).all()
    # documents are hidden paths of their concept's HMM, emitted deterministically
    assert np.array_equal(o["doc_tokens"], o["all_values"][o["doc_hiddens"] // N_SLOTS, o["doc_hiddens"] % N_SLOTS])


# --------------------------------------------------------------------------------------------------------------
# Shared parameters: exact quantities.


def test_log_likelihood_matches_hmmlearn():
    o = _off()
    w = _world()
    n_finite = 0
    for s, L, ll in zip(o["seq_tokens"], o["seq_len"], o["seq_loglik"]):
        got = w.log_likelihood(s[None, :L].astype(np.int64))[0]
        fin = np.isfinite(ll)
        n_finite += fin.sum()
        np.testing.assert_allclose(got[fin], ll[fin], rtol=LL_RTOL, atol=LL_ATOL)
        assert (got[~fin] < IMPOSSIBLE_LL).all()  # official -inf
    assert n_finite == 39  # of 96 (sequence, HMM) pairs: most sequences are impossible under the other concepts


def test_next_token_matches_official_scorer():
    o = _off()
    w = _world()
    n = 0
    for s, L, ref in zip(o["seq_tokens"], o["seq_len"], o["seq_next"]):
        got = w.next_obs_given_task(s[None, :L].astype(np.int64))[0]
        fin = np.isfinite(ref).all(-1)  # the official scorer gives NaN after an impossible sequence
        np.testing.assert_allclose(got[fin], ref[fin], atol=PROB_ATOL, rtol=0)
        n += fin.sum()
    assert n == 39


@pytest.mark.parametrize("kind", ["ID_sample", "OOD_sample"])
def test_prompt_labels_match_official_scorer(kind):
    """The official label is argmax P(next | x_test, concept), started uniformly over the states of the test
    example's start slot (ID) or over all states (OOD); lmsci's ``next_obs_given_task`` with that start
    distribution gives the official distribution and label."""
    recs = [r for r in _prompts() if r["hmm_type"] == kind]
    assert len(recs) == 1000
    n_nan = 0
    for r in recs:
        if kind == "ID_sample":
            sd = np.zeros(N_STATES)
            sd[np.arange(N_VALUES) * N_SLOTS + r["slot_pattern"][0]] = 1 / N_VALUES
            task = r["hmm_id"]
        else:
            sd = np.full(N_STATES, 1 / N_STATES)
            task = N_ID + r["hmm_id"]
        w = _world(x_len=r["prompt_length"] - 1, pi=sd)
        got = w.next_obs_given_task(np.array([r["x"]]))[0, task]
        ref = np.array(r["official_next_probs"], dtype=float)
        if np.isnan(ref).any():  # x_test impossible under the concept: the official scorer gives NaN, label argmax = 0
            assert kind == "OOD_sample" and r["label"] == DELIM and np.isnan(ref).all()
            assert w.log_likelihood(np.array([r["x"]]))[0, task] < IMPOSSIBLE_LL
            n_nan += 1
            continue
        np.testing.assert_allclose(got, ref, atol=PROB_ATOL, rtol=0)
        assert int(np.argmax(got)) == r["label"]
    assert n_nan == {"ID_sample": 0, "OOD_sample": 268}[kind]


def test_prompt_layout_matches():
    """Same layout: ``x_1 y_1 d ... x_n y_n d x_test`` with x of ``prompt_length - 1`` tokens, n (x_len + 2) + x_len
    tokens, delimiters at lmsci's ``demo_spans`` (the official delimiter is the symbol '/' = 0, lmsci's is its own
    id ``n_obs``)."""
    rng = np.random.default_rng(0)
    for r in _prompts():
        x_len, n = r["prompt_length"] - 1, r["n_examples"]
        w = _world(x_len=x_len)
        tok = np.array(r["tokens"])
        assert len(r["text"].split(" ")) == len(tok) == w.prompt_len(n)
        spans = demo_spans(n, x_len)
        assert (tok[spans[:, 2]] == DELIM).all()
        assert list(tok[-x_len:]) == r["x"]
        mine = w.sample_prompts(1, n, rng)
        assert mine.tokens.shape[1] == len(tok) and (mine.tokens[0, spans[:, 2]] == w.delim).all()


# --------------------------------------------------------------------------------------------------------------
# Shared parameters: lmsci's HMM sampler draws the official process (hmmlearn's MultinomialHMM.sample).


@pytest.mark.parametrize("stat", ["token@0", "token@1", "token@255", "token@511", "pair@0,1", "delim_gap",
                                  "delim_rate", "distinct_bigrams", "concept_token_freq"])
def test_sampler_matches_official_documents(stat):
    o = _off()
    off, off_t = o["doc_tokens"].astype(int), o["doc_hmm"].astype(int)
    mine, mine_t = _lmsci_examples(off.shape[1])
    if stat.startswith("token@"):
        t = int(stat[6:])
        p, _ = _chi2_two_sample(off[:, t], mine[:, t])
    elif stat == "pair@0,1":
        p, _ = _chi2_two_sample(off[:, 0] * N_SYMBOLS + off[:, 1], mine[:, 0] * N_SYMBOLS + mine[:, 1])
    elif stat == "delim_gap":  # the first gap of each document (independent across documents)
        first = lambda d: np.array([np.diff(np.flatnonzero(r == DELIM))[0] for r in d])  # noqa: E731
        p, _ = _chi2_two_sample(first(off), first(mine))
    elif stat == "distinct_bigrams":  # per document: how many distinct (token, next token) pairs occur
        nb = lambda d: np.array([len(np.unique(r[:-1] * N_SYMBOLS + r[1:])) for r in d])  # noqa: E731
        p = stats.ks_2samp(nb(off), nb(mine)).pvalue
    elif stat == "delim_rate":
        p = stats.ks_2samp((off == DELIM).mean(1), (mine == DELIM).mean(1)).pvalue
    else:  # per concept: each document's most frequent token (Bonferroni over the 3 concepts)
        mode = lambda d: np.array([np.bincount(r, minlength=N_SYMBOLS).argmax() for r in d])  # noqa: E731
        p = N_ID * min(_chi2_two_sample(mode(off[off_t == k]), mode(mine[mine_t == k]))[0] for k in range(N_ID))
    assert p > ALPHA, f"{stat}: p = {p:.3g}"


# --------------------------------------------------------------------------------------------------------------
# lmsci's own world is not GINC's (strict xfails, measured on the fixture; see tests/parity/README.md).


def _entropy(p: np.ndarray) -> np.ndarray:
    q = np.where(p > 0, p, 1.0)
    return -(p * np.log(q)).sum(-1)


@pytest.mark.xfail(strict=True, reason=(
    "lmsci draws every table from a Dirichlet (rows of B ~ Dir(0.1), A_theta ~ Dir(0.1), pi_theta ~ Dir(0.1)); GINC "
    "builds A_theta = kron(V, S_theta) with one value (entity) matrix V shared by all concepts (0.9 I + 0.1 x a "
    "softmax(temp 0.1) mixture of permutations), S_theta a softmax(temp 0.1)-weighted mixture of n_slots random "
    "permutation matrices, deterministic shared emissions (state (v, s) emits all_values[v, s], slot 0 = '/') and a "
    "near-uniform start (softmax(temp 10)). At the same sizes (6 concepts, 25 states, 20 symbols, lmsci seeds 0..9) "
    "mean row entropies, official vs lmsci: emission 0.000 vs 1.347 nats (KS p = 1e-35), start 3.218 vs 1.564 "
    "(p = 2e-8), transition 0.775 vs 1.542 (p = 1e-98)"))
@pytest.mark.parametrize("table", ["emission", "start", "transition"])
def test_construction_matches_ginc(table):
    o = _off()
    ws = [HMMMixture(n_tasks=N_HMMS, n_states=N_STATES, n_obs=N_SYMBOLS, x_len=2, seed=s) for s in range(10)]
    off = {"emission": o["emissionprob"], "start": o["startprob"], "transition": o["transmat"].reshape(-1, N_STATES)}
    mine = {"emission": np.concatenate([w.B for w in ws]), "start": np.concatenate([w.pi for w in ws]),
            "transition": np.concatenate([w.A.reshape(-1, N_STATES) for w in ws])}
    h_off, h_mine = _entropy(off[table]), _entropy(mine[table])
    p = stats.ks_2samp(h_off, h_mine).pvalue
    assert p > ALPHA, f"{table}: mean row entropy {h_off.mean():.3f} vs {h_mine.mean():.3f} nats, p = {p:.3g}"


@pytest.mark.xfail(strict=True, reason=(
    "GINC's pretraining document is ONE hidden path of its concept's HMM (10240 tokens in the paper); the delimiter "
    "'/' is an emission of the slot-0 states, and the entity persists across it (V = 0.9 I + ...). lmsci's "
    "sample_documents cuts the document into examples of x_len + 1 + U{-1, 0, 1, 2} tokens, restarts the hidden "
    "path from pi after each and puts its own delimiter (id n_obs) between them. With the official parameters "
    "loaded (x_len = 2): gap between delimiters TV 0.698 (official mean 4.83, lmsci 4.49), p < 1e-300; the first "
    "token after a delimiter TV 0.387, p = 1e-35"))
@pytest.mark.parametrize("stat", ["delim_gap", "after_delim"])
def test_documents_match_ginc(stat):
    o = _off()
    off = o["doc_tokens"].astype(int)
    w = _world(x_len=2)
    mine = w.sample_documents(N_LMSCI_DOCS // 3, off.shape[1] - 1, np.random.default_rng(3))
    if stat == "delim_gap":
        p, tv = _chi2_two_sample(_gaps(off, DELIM), _gaps(mine, w.delim))
    else:
        p, tv = _chi2_two_sample(_after_delim(off, DELIM), _after_delim(mine, w.delim))
    assert p > ALPHA, f"{stat}: TV {tv:.3f}, p = {p:.3g}"


@pytest.mark.xfail(strict=True, reason=(
    "GINC's in-distribution prompt (ID_sample) starts every example of a prompt in the same slot (start_slot ~ "
    "U{1..n_slots-1}) with an entity drawn uniformly, and its label is the argmax of the true concept's next-token "
    "distribution given x_test (not a sample). lmsci's sample_prompts starts each example from pi (so an example may "
    "begin with the delimiter symbol) and samples y_test. With the official parameters loaded (x_len = 2): first "
    "token of an example TV 0.200, p = 6e-92; label = argmax in 100% of official prompts vs 78.4% of lmsci's"))
@pytest.mark.parametrize("stat", ["first_token", "label_is_argmax"])
def test_prompts_match_ginc(stat):
    recs = [r for r in _prompts() if r["hmm_type"] == "ID_sample" and r["prompt_length"] == 3]
    w = _world(x_len=2)
    rng = np.random.default_rng(4)
    tasks = rng.integers(N_ID, size=2000)
    mine = w.sample_prompts(len(tasks), 1, rng, tasks=tasks)
    if stat == "first_token":
        off_first = np.array([t for r in recs for t in r["tokens"][:: 4]])
        p, tv = _chi2_two_sample(off_first, np.concatenate([mine.xs[:, 0, 0], mine.x_test[:, 0]]))
        assert p > ALPHA, f"first token: TV {tv:.3f}, p = {p:.3g}"
    else:
        pred = w.next_obs_given_task(mine.x_test)[np.arange(len(tasks)), tasks].argmax(-1)
        frac = float((pred == mine.y_test).mean())
        assert frac == 1.0, f"lmsci's y_test is the argmax in {frac:.1%} of prompts (official: 100%)"
