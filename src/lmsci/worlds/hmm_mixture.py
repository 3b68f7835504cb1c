"""A mixture of hidden Markov models (GINC-style) for in-context learning, with the exact Bayes posterior.

Sources: Xie, Raghunathan, Liang, Ma, "An Explanation of In-context Learning as Implicit Bayesian Inference",
arXiv 2111.02080 (ICLR 2022), Sec. 2-3 and the GINC data set (pretraining documents from a mixture of HMMs, one
concept theta per document; prompts of independent examples separated by a delimiter); Han, Wang, Zhao, Ji,
"Explaining Emergent In-Context Learning as Kernel Regression", arXiv 2305.12766 (TMLR 2025), Sec. 3 (one HMM per
task with its own start distribution; the prompt ``[x_1, y_1, o_delim, ..., x_n, y_n, o_delim, x_test]``; Table 3
compares with the Bayes posterior ``P(y | prompt)``).

The world (all probabilities drawn once from ``seed``):

* ``n_obs`` observation tokens ``0 .. n_obs - 1`` and one delimiter token ``n_obs`` (``vocab_size = n_obs + 1``);
* a shared emission matrix ``B [n_states, n_obs]`` (rows ~ Dirichlet(``emit_alpha``));
* per task theta a start distribution ``pi_theta [n_states]`` (Dirichlet(``start_alpha``)) and a transition matrix
  ``A_theta [n_states, n_states]`` (rows ~ Dirichlet(``trans_alpha``)); tasks are equally likely a priori;
* an example of task theta: a hidden path of ``x_len + 1`` steps from ``pi_theta`` through ``A_theta``, emitting
  ``x`` (the first ``x_len`` observations) and the label ``y`` (the last);
* a pretraining document: one task, then examples of random lengths ``x_len + 1 + U{-1, 0, 1, 2}`` (at least 2),
  each restarting from ``pi_theta``, each followed by the delimiter, cut to ``seq_len + 1`` tokens;
* an ICL prompt: one task, ``n`` examples of length ``x_len + 1`` each followed by the delimiter, then ``x_test``.

The Bayes posterior of the prompt distribution is exact: examples are independent given the task, so
``P(theta | prompt) ∝ prod_i P(x_i, y_i | theta) * P(x_test | theta)`` and
``P(y | prompt) = sum_theta P(theta | prompt) P(y | x_test, theta)``, each factor by the forward algorithm
(Rabiner 1989, eq. 19-20) in log space.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmsci.errors import ConfigError


@dataclass
class ICLPrompts:
    """A batch of ICL prompts of one demonstration count.

    Attributes:
        tokens: ``[batch, n (x_len + 2) + x_len]`` int64 token ids (x_1, y_1, delim, ..., x_n, y_n, delim, x_test).
        tasks: ``[batch]`` the task of each prompt.
        xs: ``[batch, n, x_len]`` demonstration inputs; ys: ``[batch, n]`` their labels.
        x_test: ``[batch, x_len]``; y_test: ``[batch]`` the sampled gold label.
        spans: ``[n, 3]`` per demonstration ``(start, label_pos, delim_pos)``: x_i occupies ``start .. label_pos - 1``,
            y_i sits at ``label_pos``, the delimiter at ``delim_pos`` (the same for every prompt of the batch).
    """

    tokens: np.ndarray
    tasks: np.ndarray
    xs: np.ndarray
    ys: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    spans: np.ndarray

    @property
    def n_demos(self) -> int:
        return int(self.xs.shape[1])


def demo_spans(n: int, x_len: int) -> np.ndarray:
    """``[n, 3]`` ``(start, label_pos, delim_pos)`` of each demonstration in a prompt of ``n`` demonstrations."""
    start = np.arange(n) * (x_len + 2)
    return np.stack([start, start + x_len, start + x_len + 1], axis=1)


class HMMMixture:
    """The mixture of HMMs (see the module docstring).

    Args:
        n_tasks, n_states, n_obs: sizes (Han et al. Table 3: 8 tasks, 80 states, 100 observations).
        x_len: observations per demonstration input.
        seed: draws every probability table.
        emit_alpha, trans_alpha, start_alpha: Dirichlet concentrations (small = near-deterministic).

    Raises:
        ConfigError: a size below 1 (2 for ``n_obs``), ``x_len < 1`` or a non-positive concentration.
    """

    def __init__(self, n_tasks: int, n_states: int, n_obs: int, x_len: int = 3, seed: int = 0,
                 emit_alpha: float = 0.1, trans_alpha: float = 0.1, start_alpha: float = 0.1):
        for name, v, lo in (("n_tasks", n_tasks, 1), ("n_states", n_states, 1), ("n_obs", n_obs, 2), ("x_len", x_len, 1)):
            if v < lo:
                raise ConfigError(name, v, f">= {lo}")
        for name, v in (("emit_alpha", emit_alpha), ("trans_alpha", trans_alpha), ("start_alpha", start_alpha)):
            if v <= 0:
                raise ConfigError(name, v, "> 0")
        rng = np.random.default_rng(seed)
        self.n_tasks, self.n_states, self.n_obs, self.x_len = n_tasks, n_states, n_obs, x_len
        self.delim = n_obs
        self.vocab_size = n_obs + 1
        self.B = rng.dirichlet(np.full(n_obs, emit_alpha), size=n_states)  # [S, O]
        self.A = rng.dirichlet(np.full(n_states, trans_alpha), size=(n_tasks, n_states))  # [K, S, S]
        self.pi = rng.dirichlet(np.full(n_states, start_alpha), size=n_tasks)  # [K, S]
        self.prior = np.full(n_tasks, 1.0 / n_tasks)

    # -- sampling -----------------------------------------------------------------------------------------
    def sample_examples(self, tasks: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
        """Observation sequences ``[len(tasks), length]``, each a fresh path of its task's HMM from ``pi``."""
        m = len(tasks)
        obs = np.empty((m, length), dtype=np.int64)
        h = _sample_rows(self.pi[tasks], rng)
        for t in range(length):
            obs[:, t] = _sample_rows(self.B[h], rng)
            if t + 1 < length:
                h = _sample_rows(self.A[tasks, h], rng)
        return obs

    def sample_documents(self, batch: int, seq_len: int, rng: np.random.Generator) -> np.ndarray:
        """Pretraining documents ``[batch, seq_len + 1]`` int64 (inputs are ``[:, :-1]``, targets ``[:, 1:]``)."""
        tasks = rng.integers(self.n_tasks, size=batch)
        lo, hi = max(2, self.x_len), self.x_len + 3
        J = (seq_len + 1) // (lo + 1) + 1  # enough examples to fill every document
        lens = np.maximum(2, self.x_len + 1 + rng.integers(-1, 3, size=(batch, J)))
        ex = self.sample_examples(np.repeat(tasks, J), hi, rng).reshape(batch, J, hi)
        seg = np.concatenate([ex, np.full((batch, J, 1), self.delim)], axis=2)  # [b, J, hi + 1]
        pos = np.arange(hi + 1)
        seg = np.where(pos == lens[..., None], self.delim, seg)  # the delimiter right after each example
        keep = (pos <= lens[..., None]).reshape(batch, -1)
        flat = seg.reshape(batch, -1)
        return np.stack([flat[b][keep[b]][: seq_len + 1] for b in range(batch)])

    def prompt_len(self, n: int) -> int:
        """Tokens in a prompt of ``n`` demonstrations: ``n (x_len + 2) + x_len``."""
        return n * (self.x_len + 2) + self.x_len

    def sample_prompts(self, batch: int, n: int, rng: np.random.Generator, tasks: np.ndarray | None = None) -> ICLPrompts:
        """ICL prompts of ``n`` demonstrations (tasks uniform unless given).

        Raises:
            ConfigError: ``n < 0``.
        """
        if n < 0:
            raise ConfigError("n_demos", n, ">= 0")
        tasks = rng.integers(self.n_tasks, size=batch) if tasks is None else np.asarray(tasks)
        ex = self.sample_examples(np.repeat(tasks, n + 1), self.x_len + 1, rng).reshape(batch, n + 1, self.x_len + 1)
        xs, ys = ex[:, :n, : self.x_len], ex[:, :n, self.x_len]
        x_test, y_test = ex[:, n, : self.x_len], ex[:, n, self.x_len]
        demo = np.concatenate([ex[:, :n], np.full((batch, n, 1), self.delim)], axis=2).reshape(batch, -1)
        tokens = np.concatenate([demo, x_test], axis=1)
        return ICLPrompts(tokens, tasks, xs, ys, x_test, y_test, demo_spans(n, self.x_len))

    # -- exact inference ----------------------------------------------------------------------------------
    def log_forward(self, obs: np.ndarray) -> np.ndarray:
        """Forward algorithm for every task: ``log alpha_T [batch, n_tasks, n_states]`` after observing ``obs
        [batch, T]`` from the start distribution (``alpha_t(s) = P(o_1..o_t, h_t = s | theta)``; Rabiner 1989)."""
        obs = np.asarray(obs)
        logB = np.log(self.B + 1e-300)
        la = np.log(self.pi + 1e-300)[None] + logB[:, obs[:, 0]].T[:, None, :]  # [b, K, S]
        for t in range(1, obs.shape[1]):
            m = la.max(-1, keepdims=True)
            la = np.log(np.einsum("bks,kst->bkt", np.exp(la - m), self.A) + 1e-300) + m
            la = la + logB[:, obs[:, t]].T[:, None, :]
        return la

    def log_likelihood(self, obs: np.ndarray) -> np.ndarray:
        """``log P(obs | theta)`` ``[batch, n_tasks]`` for sequences ``obs [batch, T]`` started from ``pi``."""
        la = self.log_forward(obs)
        m = la.max(-1, keepdims=True)
        return (np.log(np.exp(la - m).sum(-1, keepdims=True)) + m)[..., 0]

    def next_obs_given_task(self, x: np.ndarray) -> np.ndarray:
        """``P(o_{T+1} | x, theta)`` ``[batch, n_tasks, n_obs]`` for ``x [batch, T]``."""
        la = self.log_forward(x)
        post = np.exp(la - la.max(-1, keepdims=True))
        post /= post.sum(-1, keepdims=True)
        return np.einsum("bks,kst,to->bko", post, self.A, self.B)

    def task_posterior(self, prompts: ICLPrompts) -> np.ndarray:
        """``P(theta | demonstrations, x_test)`` ``[batch, n_tasks]``."""
        b, n = prompts.xs.shape[:2]
        logp = np.log(self.prior)[None].repeat(b, 0)
        if n:
            ex = np.concatenate([prompts.xs, prompts.ys[..., None]], axis=2).reshape(b * n, -1)
            logp = logp + self.log_likelihood(ex).reshape(b, n, -1).sum(1)
        logp = logp + self.log_likelihood(prompts.x_test)
        p = np.exp(logp - logp.max(-1, keepdims=True))
        return p / p.sum(-1, keepdims=True)

    def bayes_posterior(self, prompts: ICLPrompts) -> np.ndarray:
        """The exact ``P(y | prompt)`` ``[batch, n_obs]`` (Bayes-optimal prediction of the label)."""
        return np.einsum("bk,bko->bo", self.task_posterior(prompts), self.next_obs_given_task(prompts.x_test))


def _sample_rows(P: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One categorical draw per row of ``P [m, k]`` (rows sum to 1)."""
    c = P.cumsum(-1)
    u = rng.random((P.shape[0], 1)) * c[:, -1:]
    return np.minimum((u > c).sum(-1), P.shape[1] - 1)
