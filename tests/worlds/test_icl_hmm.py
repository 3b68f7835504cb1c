"""The HMM-mixture world: sampling shapes, spans, and the exact Bayes posterior (forward algorithm) against
brute-force enumeration of every task and hidden path on a tiny HMM.

Sources: Xie et al., arXiv 2111.02080 (GINC); Han et al., arXiv 2305.12766, Sec. 3 and Table 3.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lmsci.errors import ConfigError
from lmsci.worlds.hmm_mixture import HMMMixture, ICLPrompts, demo_spans


def _brute_posterior(w: HMMMixture, prompts: ICLPrompts, b: int) -> np.ndarray:
    """P(y | prompt b) by enumerating the task and every hidden path of every example."""
    def seq_prob(k, obs):
        tot = 0.0
        for path in itertools.product(range(w.n_states), repeat=len(obs)):
            p = w.pi[k, path[0]] * w.B[path[0], obs[0]]
            for t in range(1, len(obs)):
                p *= w.A[k, path[t - 1], path[t]] * w.B[path[t], obs[t]]
            tot += p
        return tot

    out = np.zeros(w.n_obs)
    for k in range(w.n_tasks):
        pk = w.prior[k]
        for i in range(prompts.n_demos):
            pk *= seq_prob(k, list(prompts.xs[b, i]) + [prompts.ys[b, i]])
        for y in range(w.n_obs):
            out[y] += pk * seq_prob(k, list(prompts.x_test[b]) + [y])
    return out / out.sum()


def test_bayes_posterior_matches_brute_force():
    w = HMMMixture(n_tasks=3, n_states=3, n_obs=4, x_len=2, seed=3, emit_alpha=0.5, trans_alpha=0.5, start_alpha=0.5)
    rng = np.random.default_rng(0)
    for n in (0, 1, 2):
        pr = w.sample_prompts(4, n, rng)
        post = w.bayes_posterior(pr)
        assert post.shape == (4, w.n_obs) and np.allclose(post.sum(1), 1)
        for b in range(4):
            assert np.allclose(post[b], _brute_posterior(w, pr, b), rtol=1e-9, atol=1e-12)


def test_prompts_documents_and_spans():
    w = HMMMixture(n_tasks=2, n_states=5, n_obs=6, x_len=3, seed=0)
    pr = w.sample_prompts(7, 4, np.random.default_rng(1))
    assert pr.tokens.shape == (7, w.prompt_len(4)) == (7, 4 * 5 + 3)
    sp = demo_spans(4, 3)
    assert np.array_equal(pr.spans, sp)
    for i, (s, lab, dl) in enumerate(sp):
        assert np.array_equal(pr.tokens[:, s:lab], pr.xs[:, i]) and np.array_equal(pr.tokens[:, lab], pr.ys[:, i])
        assert np.all(pr.tokens[:, dl] == w.delim)
    assert np.array_equal(pr.tokens[:, -3:], pr.x_test)
    docs = w.sample_documents(3, 40, np.random.default_rng(2))
    assert docs.shape == (3, 41) and docs.max() <= w.delim and (docs == w.delim).any()
    # more demonstrations concentrate the task posterior on the true task
    big = w.sample_prompts(300, 16, np.random.default_rng(3))
    assert (w.task_posterior(big).argmax(1) == big.tasks).mean() > 0.9
    with pytest.raises(ConfigError):
        HMMMixture(n_tasks=0, n_states=2, n_obs=3)
