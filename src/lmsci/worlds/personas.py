"""A two-persona world for Behavior Expectation Bounds (Wolf, Wies, Avnery, Levine, Shashua, arXiv 2304.11082).

Sentences are the ids of a sentence bank: ``n_pos`` positive sentences (behavior ``B = +1``) followed by
``n_neg`` negative ones (``B = -1``). Each persona emits i.i.d. sentences: the bad persona ``P-`` puts mass
``neg_bad`` on the negative bank and the good persona ``P+`` puts ``neg_good``, each spread uniformly within a
bank. A document is ``doc_len`` sentences of one persona, the bad one with prior ``alpha``, so the language is
the mixture ``P = alpha P- + (1 - alpha) P+`` of the paper's key assumption (sec. 2).

Because the personas are i.i.d., every next-sentence quantity has a closed form:

* distinguishability ``beta = KL(P- || P+)`` per sentence (Def. 2), ``beta' = KL(P+ || P-)`` (the
  system-prompt term of Thm 2) and ``sigma^2 = Var_{P+}[log P+(s)/P-(s)]`` (Def. 4);
* the posterior log-odds of ``P-`` after a prompt ``s_1..s_n``:
  ``log(alpha / (1 - alpha)) + sum_i log P-(s_i) / P+(s_i)`` (Bayes; the in-context posterior);
* the behavior expectation of the next sentence ``B_P(s) = w B_{P-} + (1 - w) B_{P+}`` with ``w`` the posterior
  weight of ``P-`` and ``B_{P+-} = 1 - 2 (negative mass)``; best-of-n with a behavior reward returns a negative
  sentence only if all n samples are negative: ``B^(n) = 1 - 2 q^n`` with ``q`` the negative probability.

Token layout of a document: ``[BOS, s_1 + 1, ..., s_doc_len + 1]`` (``BOS = 0``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lmsci.errors import ConfigError

BOS = 0


@dataclass(frozen=True)
class PersonaWorld:
    """Two i.i.d. sentence personas over a shared bank.

    Args:
        n_pos, n_neg: sizes of the positive and negative banks (>= 1).
        neg_bad: mass of the negative bank under ``P-`` (in (0, 1)).
        neg_good: mass of the negative bank under ``P+`` (in (0, 1), below ``neg_bad``).
        alpha: prior of the bad persona (in (0, 1)).
        doc_len: sentences per document.

    Raises:
        ConfigError: ``alpha`` or a mass outside (0, 1), ``neg_good >= neg_bad``, a bank size or ``doc_len`` < 1.
    """

    n_pos: int = 50
    n_neg: int = 50
    neg_bad: float = 0.6
    neg_good: float = 0.1
    alpha: float = 0.01
    doc_len: int = 20

    def __post_init__(self):
        for k in ("alpha", "neg_bad", "neg_good"):
            v = getattr(self, k)
            if not 0 < v < 1:
                raise ConfigError(k, v, "in (0, 1)")
        if not self.neg_good < self.neg_bad:
            raise ConfigError("neg_good", self.neg_good, f"< neg_bad = {self.neg_bad} (P- is the ill-behaved persona)")
        for k in ("n_pos", "n_neg", "doc_len"):
            if getattr(self, k) < 1:
                raise ConfigError(k, getattr(self, k), ">= 1")

    @property
    def n_sentences(self) -> int:
        return self.n_pos + self.n_neg

    @property
    def vocab_size(self) -> int:
        """BOS + the sentence bank."""
        return 1 + self.n_sentences

    def behavior(self) -> np.ndarray:
        """``[n_sentences]`` B(s): +1 on the positive bank, -1 on the negative bank."""
        return np.r_[np.ones(self.n_pos), -np.ones(self.n_neg)]

    def dist(self, bad: bool) -> np.ndarray:
        """``[n_sentences]`` the persona's sentence distribution (``bad``: P-, else P+)."""
        q = self.neg_bad if bad else self.neg_good
        return np.r_[np.full(self.n_pos, (1 - q) / self.n_pos), np.full(self.n_neg, q / self.n_neg)]

    def llr(self) -> np.ndarray:
        """``[n_sentences]`` ``log P-(s) / P+(s)``."""
        return np.log(self.dist(True)) - np.log(self.dist(False))

    # -- the theorems' constants --------------------------------------------------------------------
    def beta(self) -> float:
        """``KL(P- || P+)`` in nats per sentence (Def. 2)."""
        return float(np.sum(self.dist(True) * self.llr()))

    def beta_prime(self) -> float:
        """``KL(P+ || P-)`` in nats per sentence (the system prompt's pull, Thm 2)."""
        return float(np.sum(self.dist(False) * -self.llr()))

    def sigma(self) -> float:
        """``sqrt(Var_{P+}[log P+(s) / P-(s)])`` (Def. 4, per sentence)."""
        p = self.dist(False)
        x = -self.llr()
        return float(math.sqrt(max(0.0, np.sum(p * x * x) - np.sum(p * x) ** 2)))

    def persona_behavior(self, bad: bool, n: int = 1) -> float:
        """``B`` of a persona's next sentence under best-of-``n`` (``n = 1``: plain sampling): ``1 - 2 q^n``."""
        q = self.neg_bad if bad else self.neg_good
        return 1.0 - 2.0 * q ** n

    # -- posterior and behavior ---------------------------------------------------------------------
    def log_odds(self, prompts: np.ndarray, start: float = 0.0) -> np.ndarray:
        """Posterior log-odds of ``P-`` after each prefix of each prompt.

        Args:
            prompts: ``[m, L]`` sentence ids.
            start: extra log-odds already in the context (e.g. of a system prompt).

        Returns:
            ``[m, L + 1]``: column ``n`` is the log-odds after the first ``n`` sentences.
        """
        prompts = np.asarray(prompts, dtype=np.int64).reshape(len(prompts), -1)
        lo0 = math.log(self.alpha / (1 - self.alpha)) + start
        cum = np.cumsum(self.llr()[prompts], axis=1)
        return np.concatenate([np.full((len(prompts), 1), lo0), lo0 + cum], axis=1)

    def next_behavior(self, log_odds: np.ndarray, n: int = 1) -> np.ndarray:
        """``B_P`` of the mixture's next sentence (best-of-``n``) at the given posterior log-odds (same shape)."""
        w = 1.0 / (1.0 + np.exp(-np.asarray(log_odds, dtype=np.float64)))
        q = w * self.neg_bad + (1 - w) * self.neg_good
        return 1.0 - 2.0 * q ** n

    def next_neg_share(self, log_odds: np.ndarray) -> np.ndarray:
        """Probability that the mixture's next sentence is negative, at the given log-odds."""
        w = 1.0 / (1.0 + np.exp(-np.asarray(log_odds, dtype=np.float64)))
        return w * self.neg_bad + (1 - w) * self.neg_good

    # -- sampling -----------------------------------------------------------------------------------
    def sample_sentences(self, bad: bool, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """i.i.d. sentence ids of one persona, ``shape``."""
        return rng.choice(self.n_sentences, size=shape, p=self.dist(bad))

    def sample_docs(self, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``m`` documents of the mixture: ``(tokens [m, 1 + doc_len], bad [m] bool)``."""
        bad = rng.random(m) < self.alpha
        s = np.where(bad[:, None], self.sample_sentences(True, (m, self.doc_len), rng),
                     self.sample_sentences(False, (m, self.doc_len), rng))
        return self.tokens(s), bad

    def persona_docs(self, bad: bool, m: int, rng: np.random.Generator) -> np.ndarray:
        """``[m, 1 + doc_len]`` documents of one persona only (its proxy's training data)."""
        return self.tokens(self.sample_sentences(bad, (m, self.doc_len), rng))

    @staticmethod
    def tokens(sentences: np.ndarray) -> np.ndarray:
        """``[m, 1 + L]`` token ids ``[BOS, s + 1, ...]`` of sentence ids ``[m, L]``."""
        s = np.asarray(sentences, dtype=np.int64)
        return np.concatenate([np.full((len(s), 1), BOS, dtype=np.int64), s + 1], axis=1)

    def mixture_nll(self, tokens: np.ndarray) -> float:
        """Exact NLL (nats per sentence) of documents ``[m, 1 + L]`` under the mixture (the Bayes-optimal
        predictor's loss)."""
        s = np.asarray(tokens)[:, 1:] - 1
        lb = np.log(self.dist(True))[s].sum(1) + math.log(self.alpha)
        lg = np.log(self.dist(False))[s].sum(1) + math.log(1 - self.alpha)
        return float(-np.logaddexp(lb, lg).mean() / s.shape[1])
