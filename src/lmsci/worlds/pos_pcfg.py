"""A small probabilistic context-free grammar whose words carry known parts of speech.

Source: the seed lecture's claim "in a synthetic language, word embeddings are grouped by syntactic roles"
(issue 34, part 4); the grammar is a textbook English-like PCFG (Jurafsky & Martin, *Speech and Language
Processing*, 3rd ed. draft, ch. 17, the L1 grammar with probabilities), with each preterminal expanded to a word
drawn uniformly from its class.

Grammar (probabilities of each left-hand side sum to 1)::

    S   -> NP VP (0.8) | NP VP CONJ NP VP (0.2)
    NP  -> DET N (0.45) | DET ADJ N (0.3) | DET N PP (0.15) | PRON (0.1)
    VP  -> V NP (0.5) | V (0.2) | V NP PP (0.2) | ADV V NP (0.1)
    PP  -> P NP (1.0)

Parts of speech (``ROLES``): DET, N, ADJ, V, P, ADV, PRON, CONJ; the class sizes (``class_sizes``) set how many
distinct words each has. Tokens: ``BOS = 0`` starts every sentence, ``EOS = 1`` ends it, words are ``2 ..``;
``role_of[token]`` gives a word's class index (-1 for BOS/EOS). A corpus is a stream of sentences; recursion
(PP -> P NP -> DET N PP) is cut at ``max_depth`` by taking the first, non-recursive expansion.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lmsci.errors import ConfigError

ROLES = ("DET", "N", "ADJ", "V", "P", "ADV", "PRON", "CONJ")
BOS, EOS = 0, 1

RULES: dict[str, list[tuple[float, tuple[str, ...]]]] = {
    "S": [(0.8, ("NP", "VP")), (0.2, ("NP", "VP", "CONJ", "NP", "VP"))],
    "NP": [(0.45, ("DET", "N")), (0.3, ("DET", "ADJ", "N")), (0.15, ("DET", "N", "PP")), (0.1, ("PRON",))],
    "VP": [(0.5, ("V", "NP")), (0.2, ("V",)), (0.2, ("V", "NP", "PP")), (0.1, ("ADV", "V", "NP"))],
    "PP": [(1.0, ("P", "NP"))],
}
DEFAULT_SIZES = {"DET": 12, "N": 120, "ADJ": 50, "V": 80, "P": 16, "ADV": 20, "PRON": 10, "CONJ": 6}


@dataclass(frozen=True)
class PosPCFG:
    """The grammar with ``class_sizes`` words per part of speech (default 314 words).

    Raises:
        ConfigError: on construction, a class size < 2 or an unknown class name.
    """

    class_sizes: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SIZES))
    max_depth: int = 4

    def __post_init__(self):
        unknown = set(self.class_sizes) ^ set(ROLES)
        if unknown:
            raise ConfigError("class_sizes", sorted(unknown), f"exactly the classes {list(ROLES)}")
        for r, n in self.class_sizes.items():
            if int(n) < 2:
                raise ConfigError(f"class_sizes.{r}", n, "an integer >= 2")

    @property
    def offsets(self) -> dict[str, int]:
        off, o = {}, 2
        for r in ROLES:
            off[r] = o
            o += int(self.class_sizes[r])
        return off

    @property
    def vocab_size(self) -> int:
        return 2 + sum(int(self.class_sizes[r]) for r in ROLES)

    @property
    def role_of(self) -> np.ndarray:
        """``[vocab_size]`` int64: class index (into ``ROLES``) of each token, -1 for BOS and EOS."""
        out = np.full(self.vocab_size, -1, dtype=np.int64)
        for i, r in enumerate(ROLES):
            o = self.offsets[r]
            out[o:o + int(self.class_sizes[r])] = i
        return out

    def _expand(self, sym: str, rng: np.random.Generator, depth: int, out: list[int]) -> None:
        if sym in self.class_sizes:
            out.append(self.offsets[sym] + int(rng.integers(self.class_sizes[sym])))
            return
        rules = RULES[sym]
        if depth >= self.max_depth:
            rhs = rules[0][1]
        else:
            p = np.array([w for w, _ in rules])
            rhs = rules[int(rng.choice(len(rules), p=p / p.sum()))][1]
        for s in rhs:
            self._expand(s, rng, depth + 1, out)

    def sentence(self, rng: np.random.Generator) -> list[int]:
        """One sentence as tokens ``[BOS, w_1, ..., w_m, EOS]``."""
        out = [BOS]
        self._expand("S", rng, 0, out)
        out.append(EOS)
        return out

    def stream(self, n_tokens: int, rng: np.random.Generator) -> np.ndarray:
        """Sentences concatenated until at least ``n_tokens`` tokens; ``[n_tokens]`` int64."""
        toks: list[int] = []
        while len(toks) < n_tokens:
            toks.extend(self.sentence(rng))
        return np.asarray(toks[:n_tokens], dtype=np.int64)
