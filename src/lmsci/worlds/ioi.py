"""Indirect-object identification (IOI) sentences in a word-level synthetic language, mixed with plain text.

Source: Wang, Variengien, Conmy, Shlegeris, Steinhardt, "Interpretability in the Wild: a Circuit for Indirect Object
Identification in GPT-2 small", arXiv 2211.00593, sec. 2 (the IOI distribution p_IOI and the ABC distribution
p_ABC) and App. (the 15 BABA templates of the official ``ioi_dataset.py`` of redwoodresearch/Easy-Transformer,
each with its ABBA twin). A prompt is a template filled with two names, a place and an object and cut before the
last name: "When Mary and John went to the store , John gave a drink to" -> "Mary". IO = the indirect object (the
name said once, the answer), S = the subject (said twice: S1 in the first clause, S2 in the second), END = the
last prompt token. Both orders of the first clause (ABBA: IO first, BABA: S first) occur equally often, so the
answer is never "the first name" or "the second name".

The ABC prompt of a clean prompt (p_ABC) keeps its template, place and object and replaces IO, S1 and S2 by
three names X, Y, Z, distinct from each other and from IO and S: "When X and Y went to the store , Z gave a drink
to". Clean and ABC prompts of one pair have the same length and the same positions.

The language is word-level (one token per word, name, comma or full stop), so every name is one token, as the
paper keeps only names that are one GPT-2 token. Plain text: short sentences of a fixed set of templates over the
same names, places and objects (going, having, seeing, meeting, saying), with no IOI structure; in half of them one
name recurs ("Mary had a drink , so Mary was happy ."), as co-reference makes names recur in natural text, so that
copying a name from the context is learned early (a sizing choice of the pilot, see CLAIMS.md). A training stream concatenates sentences,
each an IOI sentence (prompt + answer + ".") with probability ``ioi_fraction``; ``ioi_fraction = 0`` is the
control world "trained without the IOI task". Everything is deterministic in the passed ``numpy`` generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lmsci.errors import ConfigError

#: first names (each one token here; cf. the paper's 100 single-token GPT-2 names)
NAMES = ("Mary", "John", "Alice", "Bob", "Sarah", "James", "Emma", "David", "Laura", "Mark", "Anna", "Paul", "Kate",
         "Tom", "Lucy", "Peter", "Grace", "Sam", "Julia", "Henry", "Rose", "Adam", "Clara", "Eric", "Nina", "Jack",
         "Helen", "Ryan", "Amy", "Oliver", "Ella", "Daniel", "Lisa", "Brian", "Chloe", "Kevin", "Diane", "Frank",
         "Megan", "Steve", "Irene", "Victor", "Olga", "Hugo", "Wendy", "Max", "Ruth", "Leo")
PLACES = ("store", "garden", "school", "hospital", "office", "restaurant", "station", "house", "park", "market",
          "library", "church")
OBJECTS = ("drink", "ring", "kiss", "bone", "basketball", "computer", "necklace", "flower", "snack", "book", "letter",
           "apple")

#: the paper's 15 BABA templates (Easy-Transformer ``ioi_dataset.py``), ``{S}`` = subject, ``{IO}`` = indirect
#: object; the prompt ends before the final ``{IO}``. The ABBA twin swaps the first two names.
BABA_TEMPLATES = (
    "Then , {S} and {IO} went to the {PLACE} . {S} gave a {OBJECT} to {IO}",
    "Then , {S} and {IO} had a lot of fun at the {PLACE} . {S} gave a {OBJECT} to {IO}",
    "Then , {S} and {IO} were working at the {PLACE} . {S} decided to give a {OBJECT} to {IO}",
    "Then , {S} and {IO} were thinking about going to the {PLACE} . {S} wanted to give a {OBJECT} to {IO}",
    "Then , {S} and {IO} had a long argument , and afterwards {S} said to {IO}",
    "After {S} and {IO} went to the {PLACE} , {S} gave a {OBJECT} to {IO}",
    "When {S} and {IO} got a {OBJECT} at the {PLACE} , {S} decided to give it to {IO}",
    "When {S} and {IO} got a {OBJECT} at the {PLACE} , {S} decided to give the {OBJECT} to {IO}",
    "While {S} and {IO} were working at the {PLACE} , {S} gave a {OBJECT} to {IO}",
    "While {S} and {IO} were commuting to the {PLACE} , {S} gave a {OBJECT} to {IO}",
    "After the lunch , {S} and {IO} went to the {PLACE} . {S} gave a {OBJECT} to {IO}",
    "Afterwards , {S} and {IO} went to the {PLACE} . {S} gave a {OBJECT} to {IO}",
    "Then , {S} and {IO} had a long argument . Afterwards {S} said to {IO}",
    "The {PLACE} {S} and {IO} went to had a {OBJECT} . {S} gave it to {IO}",
    "Friends {S} and {IO} found a {OBJECT} at the {PLACE} . {S} gave it to {IO}",
)

#: plain-text templates (no IOI structure); ``{N}``/``{M}`` are two distinct names
PLAIN_TEMPLATES = (
    "{N} went to the {PLACE} .",
    "{N} had a {OBJECT} .",
    "The {OBJECT} was at the {PLACE} .",
    "{N} and {M} were friends .",
    "{N} saw {M} at the {PLACE} .",
    "{N} met {M} . {N} said hello .",
    "{N} found a {OBJECT} and {N} was happy .",
    "{N} liked the {PLACE} , and {M} liked the {OBJECT} .",
    "{N} was working at the {PLACE} .",
    "{N} and {M} had a long argument .",
    "After the lunch , {N} went to the {PLACE} .",
    "{N} wanted a {OBJECT} , but {N} had a {OBJECT} .",
    "When {N} got a {OBJECT} , {N} went to the {PLACE} .",
    "{M} said that {N} had a lot of fun at the {PLACE} .",
    "Then , {N} was thinking about going to the {PLACE} .",
    "{N} gave a {OBJECT} to the {PLACE} .",
    "{N} went to the {PLACE} , and then {N} went home .",
    "{N} had a {OBJECT} , so {N} was happy .",
    "{N} liked the {OBJECT} , and {N} kept it .",
    "At the {PLACE} , {N} found a {OBJECT} , and {N} smiled .",
    "{N} was working , and then {N} went to the {PLACE} .",
    "The {OBJECT} was for {N} , so {N} kept it .",
    "{N} said hello , and {N} went home .",
    "{N} had a lot of fun , and {N} smiled .",
)

BOS = "<bos>"
PAD = "<pad>"


def _words(t: str) -> list[str]:
    return t.split()


@dataclass
class IOIBatch:
    """Paired clean / ABC prompts (right-padded with ``<pad>``; positions agree within a pair).

    Attributes:
        clean, corrupt: ``[n, T]`` long token ids (``<bos>`` first).
        end: ``[n]`` index of the END token (the prompt's last token: "to").
        io_pos, s1_pos, s2_pos: ``[n]`` positions of IO, S1, S2 in the clean prompt.
        io, s: ``[n]`` token ids of the clean IO and S names (the answer and the distractor).
        template: ``[n]`` template index; ``abba``: ``[n]`` bool (IO named first).
    """

    clean: torch.Tensor
    corrupt: torch.Tensor
    end: torch.Tensor
    io_pos: torch.Tensor
    s1_pos: torch.Tensor
    s2_pos: torch.Tensor
    io: torch.Tensor
    s: torch.Tensor
    template: torch.Tensor
    abba: torch.Tensor

    def to(self, device: str | torch.device) -> IOIBatch:
        """The same batch on ``device``."""
        return IOIBatch(**{k: v.to(device) for k, v in self.__dict__.items()})


class IOIWorld:
    """Vocabulary, IOI prompt sampler (clean + ABC) and plain-text/IOI training stream.

    Args:
        n_names: how many of :data:`NAMES` are used (2 + 3 needed for an ABC prompt: at least 5).
        n_templates: how many of the 15 :data:`BABA_TEMPLATES` (with their ABBA twins) are used.

    Raises:
        ConfigError: ``n_names`` outside ``[5, len(NAMES)]`` or ``n_templates`` outside ``[1, 15]``.
    """

    def __init__(self, n_names: int = len(NAMES), n_templates: int = len(BABA_TEMPLATES)):
        if not 5 <= n_names <= len(NAMES):
            raise ConfigError("n_names", n_names, f"an integer in [5, {len(NAMES)}]")
        if not 1 <= n_templates <= len(BABA_TEMPLATES):
            raise ConfigError("n_templates", n_templates, f"an integer in [1, {len(BABA_TEMPLATES)}]")
        self.names = NAMES[:n_names]
        self.templates = BABA_TEMPLATES[:n_templates]
        words: set[str] = set(self.names) | set(PLACES) | set(OBJECTS)
        for t in BABA_TEMPLATES + PLAIN_TEMPLATES:
            words |= {w for w in _words(t) if not w.startswith("{")}
        self.vocab = [PAD, BOS, *sorted(words)]
        self.stoi = {w: i for i, w in enumerate(self.vocab)}
        self.name_ids = np.array([self.stoi[n] for n in self.names])

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, words: list[str]) -> list[int]:
        """Word list -> token ids (raises KeyError on an unknown word)."""
        return [self.stoi[w] for w in words]

    def decode(self, ids) -> str:
        """Token ids -> space-joined words."""
        return " ".join(self.vocab[int(i)] for i in ids)

    # -- sentences -------------------------------------------------------------------------------
    def _fill(self, template: str, slots: dict[str, str]) -> list[str]:
        return [slots.get(w[1:-1], w) if w.startswith("{") else w for w in _words(template)]

    def ioi_words(self, t: int, abba: bool, io: str, s: str, place: str, obj: str) -> list[str]:
        """Words of template ``t`` filled in, answer (IO) last; the ABBA twin (IO named first) when ``abba``."""
        tpl = self.templates[t]
        if abba:
            tpl = tpl.replace("{S} and {IO}", "{IO} and {S}", 1)
        return self._fill(tpl, {"PLACE": place, "OBJECT": obj, "IO": io, "S": s})

    def plain_words(self, rng: np.random.Generator) -> list[str]:
        """One plain-text sentence (a :data:`PLAIN_TEMPLATES` entry with random names, place, objects)."""
        tpl = PLAIN_TEMPLATES[rng.integers(len(PLAIN_TEMPLATES))]
        n, m = rng.choice(len(self.names), 2, replace=False)
        out = []
        for w in _words(tpl):
            if w == "{N}":
                out.append(self.names[n])
            elif w == "{M}":
                out.append(self.names[m])
            elif w == "{PLACE}":
                out.append(PLACES[rng.integers(len(PLACES))])
            elif w == "{OBJECT}":
                out.append(OBJECTS[rng.integers(len(OBJECTS))])
            else:
                out.append(w)
        return out

    def stream(self, n_tokens: int, ioi_fraction: float, rng: np.random.Generator) -> np.ndarray:
        """A training stream of at least ``n_tokens`` ids: documents of 4-12 sentences, each led by ``<bos>``; a
        sentence is an IOI sentence (random template, order, names, place, object; answer and "." included) with
        probability ``ioi_fraction``, else plain text. Returns ``[n]`` int64.

        Raises:
            ConfigError: ``ioi_fraction`` outside ``[0, 1]`` or ``n_tokens < 1``.
        """
        if not 0.0 <= ioi_fraction <= 1.0:
            raise ConfigError("ioi_fraction", ioi_fraction, "a number in [0, 1]")
        if n_tokens < 1:
            raise ConfigError("n_tokens", n_tokens, ">= 1")
        bos = self.stoi[BOS]
        out: list[int] = []
        while len(out) < n_tokens:
            out.append(bos)
            for _ in range(int(rng.integers(4, 13))):
                if rng.random() < ioi_fraction:
                    i, s = rng.choice(len(self.names), 2, replace=False)
                    w = self.ioi_words(int(rng.integers(len(self.templates))), bool(rng.random() < 0.5),
                                       self.names[i], self.names[s], PLACES[rng.integers(len(PLACES))],
                                       OBJECTS[rng.integers(len(OBJECTS))]) + ["."]
                else:
                    w = self.plain_words(rng)
                out.extend(self.encode(w))
        return np.asarray(out, dtype=np.int64)

    # -- prompts ---------------------------------------------------------------------------------
    def sample_prompts(self, n: int, rng: np.random.Generator) -> IOIBatch:
        """``n`` clean IOI prompts (half ABBA, half BABA, templates in turn) with their ABC prompts.

        Raises:
            ConfigError: ``n < 1``.
        """
        if n < 1:
            raise ConfigError("n_prompts", n, ">= 1")
        rows = []
        for k in range(n):
            t, abba = k % len(self.templates), bool((k // len(self.templates)) % 2 == 0)
            io, s, x, y, z = (self.names[j] for j in rng.choice(len(self.names), 5, replace=False))
            place, obj = PLACES[rng.integers(len(PLACES))], OBJECTS[rng.integers(len(OBJECTS))]
            clean = [BOS] + self.ioi_words(t, abba, io, s, place, obj)[:-1]
            # ABC: the first clause's two names become X, Y (in the clean order's slots), S2 becomes Z
            first = [i for i, w in enumerate(clean) if w in (io, s)]
            io_pos = first[0] if abba else first[1]
            s1_pos = first[1] if abba else first[0]
            s2_pos = first[2]
            corrupt = list(clean)
            corrupt[io_pos], corrupt[s1_pos], corrupt[s2_pos] = x, y, z
            rows.append((self.encode(clean), self.encode(corrupt), io_pos, s1_pos, s2_pos, self.stoi[io],
                         self.stoi[s], t, abba))
        T = max(len(r[0]) for r in rows)
        pad = self.stoi[PAD]
        clean_t = torch.full((n, T), pad, dtype=torch.long)
        corr_t = torch.full((n, T), pad, dtype=torch.long)
        for k, r in enumerate(rows):
            clean_t[k, :len(r[0])] = torch.tensor(r[0])
            corr_t[k, :len(r[1])] = torch.tensor(r[1])
        col = lambda j, dt=torch.long: torch.tensor([r[j] for r in rows], dtype=dt)  # noqa: E731
        return IOIBatch(clean=clean_t, corrupt=corr_t, end=torch.tensor([len(r[0]) - 1 for r in rows]),
                        io_pos=col(2), s1_pos=col(3), s2_pos=col(4), io=col(5), s=col(6), template=col(7),
                        abba=col(8, torch.bool))


def make_get_batch(ids: np.ndarray, batch_size: int, seq_len: int):
    """``get_batch(step, generator) -> (x, y)``: random windows of ``seq_len + 1`` tokens of ``ids``
    (``x, y`` = ``[batch_size, seq_len]`` long, ``y`` shifted by one).

    Raises:
        ConfigError: the stream is shorter than ``seq_len + 2`` tokens.
    """
    if len(ids) < seq_len + 2:
        raise ConfigError("stream_tokens", len(ids), f">= seq_len + 2 = {seq_len + 2}")
    data = torch.from_numpy(ids)

    def get_batch(step: int, g: torch.Generator):
        starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=g)
        w = torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()])
        return w[:, :-1], w[:, 1:]

    return get_batch
