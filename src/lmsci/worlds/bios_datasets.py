"""bioS data sets in memory: augmented biographies (multiM / permute / fullname), QA documents, the QA
split and packing into training windows with exposure counting.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 3.1, Knowledge Storage and Extraction",
arXiv 2309.14316, Sections 2-3 (augmentations, P_train / P_test); Part 3.3, arXiv 2404.05405, Section 2
(exposures). These lists of :class:`~lmsci.worlds.bios.Doc` materialise a whole epoch in RAM; the streams of
:mod:`lmsci.worlds.bios_stream` render and pack the same distribution on the fly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lmsci.errors import ConfigError
from lmsci.worlds.bios import ATTRS, BiosWorld, Doc


# ---------------------------------------------------------------------------------------------
# Data sets: augmentations, QA split, packing with exposure counting
# ---------------------------------------------------------------------------------------------
def qa_split(n_people: int, seed: int, train_fraction: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Split individuals into QA-train (P_train) and QA-test (P_test), disjoint (Part 3.1, Section 3).

    Returns:
        (train_ids, test_ids), sorted int64 arrays.
    """
    if not 0.0 < train_fraction < 1.0:
        raise ConfigError("train_fraction", train_fraction, "a number in (0, 1)")
    perm = np.random.default_rng([seed, 11]).permutation(n_people)
    k = int(round(n_people * train_fraction))
    return np.sort(perm[:k]), np.sort(perm[k:])


def bio_docs(world: BiosWorld, people, *, multiplicity: int, permute: bool, fullname: bool, seed: int,
             reverse: bool = False, epoch: int = 0) -> list[Doc]:
    """``multiplicity`` biographies per listed person, each with freshly drawn templates (multiM).

    multiplicity = 1 and permute = fullname = False is bioS *single*: one fixed biography per person.
    ``epoch`` gives fresh renderings for "new text every exposure" data (Part 3.3).
    """
    if multiplicity < 1:
        raise ConfigError("multiplicity", multiplicity, "an integer >= 1")
    docs = []
    for i in people:
        rng = np.random.default_rng([seed, 17, int(i), epoch])
        for _ in range(multiplicity):
            docs.append(world.bio(int(i), rng, permute=permute, fullname=fullname, reverse=reverse))
    return docs


def qa_docs(world: BiosWorld, people, attrs=ATTRS) -> list[Doc]:
    """Forward QA documents: every listed person times every listed attribute."""
    return [world.qa(int(i), a) for i in people for a in attrs]


@dataclass
class Packed:
    """Documents packed into fixed-length training windows.

    Attributes:
        input_ids: int64 ``[windows, seq_len]`` (``<pad>`` after the last document of a window).
        targets: int64 ``[windows, seq_len]``: next token where the loss is taken, else -100.
        people: per window, the person index of each document in it.
        kinds: per window, the kind of each document.
    """

    input_ids: Any
    targets: Any
    people: list[list[int]]
    kinds: list[list[str]]

    def exposures(self, n_people: int, windows: int | None = None, kind: str = "bio") -> np.ndarray:
        """How many documents of ``kind`` each person has in the first ``windows`` windows: ``[n_people]``."""
        counts = np.zeros(n_people, dtype=np.int64)
        for ps, ks in zip(self.people[:windows], self.kinds[:windows]):
            for p, k in zip(ps, ks):
                if k == kind:
                    counts[p] += 1
        return counts


def pack(docs: list[Doc], seq_len: int, seed: int, shuffle: bool = True) -> Packed:
    """Pack whole documents into windows of ``seq_len`` tokens, padding the rest.

    With ``shuffle`` the documents are shuffled across people first and no window ever holds two
    documents of the same person (a document whose person is already in the current window is
    deferred), so that paraphrases of one person never share a context: the pitfall that made a
    public replication collapse to ~7% QA-test accuracy (physics_of_lms.md Section 3.5).

    Raises:
        ConfigError: a document longer than ``seq_len``.
    """
    import torch

    longest = max(len(d.ids) for d in docs)
    if longest > seq_len:
        raise ConfigError("seq_len", seq_len, f">= the longest document ({longest} tokens)")
    order = list(np.random.default_rng([seed, 23]).permutation(len(docs))) if shuffle else list(range(len(docs)))
    windows: list[list[int]] = []
    pending: list[int] = []  # deferred document indices
    cur: list[int] = []
    cur_len, cur_people = 0, set()
    queue = order
    qi = 0
    while qi < len(queue) or pending:
        placed = False
        # first try deferred documents, then the next in the queue
        for j, di in enumerate(pending):
            d = docs[di]
            if cur_len + len(d.ids) <= seq_len and (not shuffle or d.person not in cur_people):
                pending.pop(j)
                cur.append(di)
                cur_len += len(d.ids)
                cur_people.add(d.person)
                placed = True
                break
        if not placed and qi < len(queue):
            di = queue[qi]
            d = docs[di]
            if shuffle and d.person in cur_people:
                pending.append(di)
                qi += 1
                placed = True
            elif cur_len + len(d.ids) <= seq_len:
                cur.append(di)
                cur_len += len(d.ids)
                cur_people.add(d.person)
                qi += 1
                placed = True
        if not placed:  # window full (or only conflicting documents left): close it
            if not cur:
                raise RuntimeError("packing made no progress")
            windows.append(cur)
            cur, cur_len, cur_people = [], 0, set()
    if cur:
        windows.append(cur)
    W = len(windows)
    inp = np.zeros((W, seq_len), dtype=np.int64)
    tgt = np.full((W, seq_len), -100, dtype=np.int64)
    people, kinds = [], []
    for w, ds in enumerate(windows):
        pos = 0
        for di in ds:
            d = docs[di]
            n = len(d.ids)
            ids = np.asarray(d.ids, dtype=np.int64)
            inp[w, pos:pos + n] = ids
            tgt[w, pos:pos + n - 1] = np.where(np.asarray(d.loss_mask[1:], dtype=bool), ids[1:], -100)
            pos += n
        people.append([docs[di].person for di in ds])
        kinds.append([docs[di].kind for di in ds])
    inp, tgt = torch.from_numpy(inp), torch.from_numpy(tgt)
    return Packed(inp, tgt, people, kinds)
