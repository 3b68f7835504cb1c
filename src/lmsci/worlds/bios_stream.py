"""Streaming, vectorised bioS pipeline: biographies and QA rendered, tokenised and packed on the fly.

Source: Allen-Zhu & Li, Physics of Language Models Part 3.1 (arXiv 2309.14316, Section 2: bioS,
multiM / permute / fullname; App. C: mixed training with QA at QA_r = 0.8 of the tokens), Part 3.3
(arXiv 2404.05405, Section 2: bioS(N), exposures, a fresh biography per exposure). Same world,
templates, attribute values and vocabulary as :mod:`lmsci.worlds.bios` (whose ``bio_docs`` +
``pack`` materialise a whole epoch in RAM and cost ~75 us + ~250 us per biography in Python).

How it works
------------
* Every template is compiled once into a *segment*: an int array whose entries are either a token
  id (>= 0) or a reference ``-(col + 1)`` to column ``col`` of a per-document value vector of 27
  token ids (6 name tokens, He/She, his/her, the 5 + 4 + 2 + 2 + 2 + 4 tokens of the six attribute
  values). A biography is ``<bos>``, six sentence segments (and optionally a reversed sentence),
  ``<eos>``; the segment ids of a chunk of documents are chosen with vectorised numpy, and two small
  numba kernels fill the value vectors and expand the segments into tokens.
* Randomness is *counter-based*: the template of attribute ``a`` in copy ``c`` of person ``i``'s
  biography is ``splitmix64(seed, i, c, a)`` mapped to the template list (and likewise the sentence
  order, uniform over the 720 permutations, and the reversed template). A biography is therefore a
  pure function of ``(seed, person, copy)``: :meth:`BioStream.training_bios` re-renders exactly the
  biographies a model was trained on, and the stream does not depend on the chunk size.
* Exposures are *passes*: pass ``p`` (``p = 0 .. exposures-1``) shows every person once, in an
  order given by a keyed Feistel permutation of ``[0, N)`` (cycle walking, O(1) memory; key =
  ``(order_seed, p)``). Copy ``p mod M`` is shown in pass ``p`` (bioS single: M = 1, one fixed
  biography; multiM: M fixed biographies), or copy ``p`` with ``fresh=True`` (a new template choice
  and, with ``permute``, a new sentence order at every exposure, as bioS-multi+permute and Part 3.3).
  After the whole stream every person has seen exactly ``exposures`` biographies.
* Packing follows :func:`lmsci.worlds.bios.pack` step for step (greedy, ``<pad>`` after the last
  document that fits, deferral of a document whose person is already in the window, deferred
  documents tried first) on a running buffer carried across chunks (a numba loop), so no window
  holds two documents of one person. One deviation: when ``max_pending`` (64) documents are deferred
  the window is closed instead of deferring more (only matters when N is below the number of
  documents per window; the old path would defer without bound).

Memory is constant in N and in exposures: a chunk of ``chunk`` documents at a time (plus the
world's own ``[N, 6]`` + ``[N, 5]`` arrays, and the optional ``[N]`` exposure counters).

Relation to the old path (``bio_docs`` + ``pack``): *not* token-identical (the old path draws the
templates with a ``np.random.Generator`` per person, which alone costs more than the 10 us budget
per biography here) but the same distribution: same templates, each drawn uniformly per attribute;
the ATTRS order unless ``permute`` (then a uniform permutation); the full name in the first sentence
and He/She (by id parity) in the others unless ``fullname``; the same values and vocabulary; the same
packing rule. Given the same choices a document is token-identical to
``BiosWorld.bio(i, templates=..., order=..., fullname=...)`` (tested). One difference of schedule:
the old path shuffles each epoch of ``N x M`` documents globally and rounds the exposures up to a
multiple of M; here each pass shows every person once and the exposures are exact.

API (all streams are iterables of :class:`StreamBatch`; iterate again to restart from the beginning):

* ``BioStream(world, seq_len=, batch_size=, exposures=, seed=, people=None, multiplicity=1,
  permute=False, fullname=False, fresh=False, reverse=False, order_seed=None)``: biography windows.
  ``people`` may be a list of ``(ids, spec)`` groups, ``spec`` with ``multiplicity``, ``permute``,
  ``fullname`` (e.g. ``knowledge_common.DataSpec``) for celebrity/minority data.
* ``QAStream(world, people, seq_len=, batch_size=, epochs=None, order_seed=0, attrs=ATTRS,
  forward=True, inverse=False)``: QA windows (``epochs=None`` cycles for ever).
* ``DocStream(world, docs, seq_len=, batch_size=, epochs=, order_seed=0)``: a fixed list of
  :class:`~lmsci.worlds.bios.Doc` (e.g. reversed biographies) shuffled every pass and packed on the fly.
* ``MixedStream(bio, qa, qa_fraction=0.8, batch_size=None, seed=None)``: every window is all
  biographies or all QA, QA at ``qa_fraction`` of the (non-pad) tokens; ends with the bio stream.
* ``stream.exposures`` / ``stream.qa_exposures``: int64 ``[N]`` documents per person in the batches
  yielded so far; ``stream.qa_token_fraction``; ``stream.count_windows()`` (exact, without rendering);
  ``stream.iter_from(k)``: the batches from batch k on, identical to those of a full iteration (resume
  from a checkpoint; the skipped windows are packed from lengths only, ~3x faster than rendering);
  ``stream.get_batch_fn()`` for :func:`lmsci.train.trainer.train` (its first call at step s starts at
  batch s); ``stream.to_packed()`` for code that takes a :class:`lmsci.worlds.bios.Packed`;
  ``bio.training_bios(people, copy)``: the exact biographies trained on, with spans.

Benchmark: ``benchmarks/bench_bios_pipeline.py``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from lmsci.errors import ConfigError
from lmsci.worlds.bios import (ATTRS, BOS, EOS, INVERSE_QA_TEMPLATE, MONTHS, N_DAYS, N_YEARS, QA_TEMPLATES,
                               REVERSE_FRAGMENTS, REVERSE_NAME_CLAUSES, REVERSE_OPENERS, REVERSE_TEMPLATES, TEMPLATES,
                               YEAR0, BiosWorld, Doc, Packed)

IGNORE = -100
KIND_BIO, KIND_QA, KIND_INVERSE_QA, KIND_BIO_REVERSE = 0, 1, 2, 3
KIND_NAMES = {KIND_BIO: "bio", KIND_QA: "qa", KIND_INVERSE_QA: "inverse_qa", KIND_BIO_REVERSE: "bio_reverse"}
KIND_CODES = {v: k for k, v in KIND_NAMES.items()}
INVERSE = len(ATTRS)
"""QA item code of the inverse question (forward questions are 0..5, the index in :data:`ATTRS`)."""

# columns of the per-document value vector
NAME = list(range(0, 6))
SUBJ, POSS = 6, 7
VALUE_COLS = {"birth_date": list(range(8, 13)), "birth_city": list(range(13, 17)), "university": [17, 18],
              "major": [19, 20], "company": [21, 22], "company_city": list(range(23, 27))}
N_COLS = 27
_PERMS = np.array(list(itertools.permutations(range(len(ATTRS)))), dtype=np.int64)  # [720, 6]

_GOLD = np.uint64(0x9E3779B97F4A7C15)
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)
TAG_RENDER, TAG_ORDER, TAG_QA, TAG_MIX, TAG_DOCS, TAG_REVERSED = 17, 23, 29, 31, 37, 41


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (Steele et al. 2014), elementwise on uint64."""
    x = (x ^ (x >> _S30)) * _C1
    x = (x ^ (x >> _S27)) * _C2
    return x ^ (x >> _S31)


def hash_u64(*cols) -> np.ndarray:
    """A 64-bit hash of integer columns (broadcast), counter-based randomness: uint64 array."""
    with np.errstate(over="ignore"):
        h = np.full(np.broadcast(*[np.asarray(c) for c in cols]).shape, _GOLD, dtype=np.uint64)
        for c in cols:
            h = _mix(h + np.asarray(c).astype(np.int64).astype(np.uint64) * _GOLD + _GOLD)
    return h


def _below(h: np.ndarray, k) -> np.ndarray:
    """Map a uint64 hash to ``[0, k)`` (multiply-shift on the high 32 bits): int64."""
    return (((h >> _S32) * np.asarray(k, dtype=np.uint64)) >> _S32).astype(np.int64)


def feistel_permutation(idx: np.ndarray, n: int, key: int) -> np.ndarray:
    """A keyed pseudo-random permutation of ``[0, n)`` applied to ``idx`` (int array of positions).

    A 4-round balanced Feistel network on the smallest even number of bits covering ``n``, with
    cycle walking (re-encrypt while the value is >= n), so it is a bijection of ``[0, n)`` needing no
    table: O(len(idx)) time and memory whatever ``n``. Returns int64 of ``idx``'s shape.
    """
    bits = max(2, int(n - 1).bit_length())
    bits += bits % 2
    keys = np.array([hash_u64(key, r, 977)[()] for r in range(4)], dtype=np.uint64)
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    out = np.empty(idx.shape, dtype=np.int64)
    _feistel_kernel(idx.ravel(), np.uint64(n), np.uint64(bits // 2), np.uint64((1 << (bits // 2)) - 1), keys,
                    out.ravel())
    return out


@njit(cache=True)
def _mix1(x):  # pragma: no cover - compiled; the splitmix64 finaliser of _mix on one uint64
    x = (x ^ (x >> _S30)) * _C1
    x = (x ^ (x >> _S27)) * _C2
    return x ^ (x >> _S31)


@njit(cache=True)
def _feistel_kernel(idx, n, half, mask, keys, out):  # pragma: no cover - compiled
    for t in range(idx.shape[0]):
        x = np.uint64(idx[t])
        while True:
            left = x >> half
            right = x & mask
            for r in range(4):
                f = _mix1(right ^ keys[r]) & mask
                left, right = right, left ^ f
            x = (left << half) | right
            if x < n:
                break
        out[t] = np.int64(x)


# ---------------------------------------------------------------------------------------------
# Documents in flat form
# ---------------------------------------------------------------------------------------------
@dataclass
class Docs:
    """A chunk of documents as flat arrays.

    Attributes:
        tok: int32 ``[total tokens]`` (None for length-only rendering).
        off, length: int64 ``[D]`` start and length of each document in ``tok``.
        loss_start: int64 ``[D]``: targets are taken where the *next* token's index is >= this
            (1 for biographies: every token after ``<bos>``; the answer's start for QA).
        person, kind, copy: int64 ``[D]`` person, kind (:data:`KIND_BIO` ...), and the copy index of a
            biography (the QA item code for QA).
        segs: int64 ``[D, K]`` the segments the documents were built from (None after take/concat).
    """

    tok: np.ndarray | None
    off: np.ndarray
    length: np.ndarray
    loss_start: np.ndarray
    person: np.ndarray
    kind: np.ndarray
    copy: np.ndarray
    segs: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.length)

    @staticmethod
    def empty() -> Docs:
        z = np.zeros(0, dtype=np.int64)
        return Docs(np.zeros(0, dtype=np.int32), z, z, z, z, z, z)

    def take(self, idx: np.ndarray) -> Docs:
        """The documents ``idx`` (in that order), re-flattened."""
        idx = np.asarray(idx, dtype=np.int64)
        ln = self.length[idx]
        off = np.zeros(len(idx), dtype=np.int64)
        np.cumsum(ln[:-1], out=off[1:])
        tok = None
        if self.tok is not None:
            src = np.repeat(self.off[idx] - off, ln) + np.arange(int(ln.sum()), dtype=np.int64)
            tok = self.tok[src]
        return Docs(tok, off, ln, self.loss_start[idx], self.person[idx], self.kind[idx], self.copy[idx])

    @staticmethod
    def concat(a: Docs, b: Docs) -> Docs:
        if not len(a):
            return b
        if not len(b):
            return a
        tok = None if a.tok is None or b.tok is None else np.concatenate([a.tok, b.tok])
        base = a.off[-1] + a.length[-1] if a.tok is None else len(a.tok)
        return Docs(tok, np.concatenate([a.off, b.off + base]), np.concatenate([a.length, b.length]),
                    np.concatenate([a.loss_start, b.loss_start]), np.concatenate([a.person, b.person]),
                    np.concatenate([a.kind, b.kind]), np.concatenate([a.copy, b.copy]))


# ---------------------------------------------------------------------------------------------
# The renderer: every template and value pre-tokenised once
# ---------------------------------------------------------------------------------------------
class BiosRenderer:
    """Vectorised renderer of a :class:`~lmsci.worlds.bios.BiosWorld`'s biographies and QA.

    Args:
        world: the world (its vocabulary, pools, people).

    Token-identical to :meth:`BiosWorld.bio` / :meth:`BiosWorld.qa` / :meth:`BiosWorld.inverse_qa`
    for the same template, order and subject choices.
    """

    def __init__(self, world: BiosWorld):
        self.world = world
        v, p = world.vocab, world.pools
        s = v.stoi
        self.bos, self.eos, self.pad = v.bos_id, v.eos_id, v.pad_id
        ids = lambda words: np.array([s[w] for w in words], dtype=np.int64)  # noqa: E731
        self.name_tok = [ids([x + "@@" for x in p.first1]), ids(p.first2), ids([x + "@@" for x in p.middle1]),
                         ids(p.middle2), ids([x + "@@" for x in p.last1]), ids(p.last2)]
        self.subj_tok = ids(["He", "She"])
        self.poss_tok = ids(["his", "her"])
        years = range(YEAR0, YEAR0 + N_YEARS)
        self.month_tok = ids(MONTHS)
        self.day_tok = ids([str(d) for d in range(1, N_DAYS + 1)])
        self.cent_tok = ids([f"{y // 100}@@" for y in years])
        self.yy_tok = ids([f"{y % 100:02d}" for y in years])
        self.comma = s[","]
        self.city_tok = np.array([[s[a + "@@"], s[b], s[","], s[st]] for a, b, st in p.cities], dtype=np.int64)
        self.univ_tok = np.array([[s[w] for w in u] for u in p.universities], dtype=np.int64)
        self.major_tok = np.array([[s[w] for w in m] for m in p.majors], dtype=np.int64)
        self.comp_tok = np.array([[s[w] for w in c] for c in p.companies], dtype=np.int64)
        self.comp_city = np.array(p.company_city, dtype=np.int64)
        self.name_tab = np.zeros((6, max(len(t) for t in self.name_tok)), dtype=np.int64)
        for j, t in enumerate(self.name_tok):
            self.name_tab[j, :len(t)] = t

        refs: list[int] = []
        starts, lens, voff, noff = [], [], [], []

        def add(template: str, slots: dict[str, list[int]], vslot: str | None, nslot: str | None) -> int:
            out: list[int] = []
            first: dict[str, int] = {}
            for w in template.split():
                if w in slots:
                    first.setdefault(w, len(out))
                    out += [-(c + 1) for c in slots[w]]
                else:
                    out.append(s[w])
            starts.append(len(refs))
            lens.append(len(out))
            voff.append(first.get(vslot, -1))
            noff.append(first.get(nslot, -1))
            refs.extend(out)
            return len(starts) - 1

        self.seg_bos = add(BOS, {}, None, None)
        self.seg_eos = add(EOS, {}, None, None)
        self.n_templates = np.array([len(TEMPLATES[a]) for a in ATTRS], dtype=np.int64)
        self.bio_seg = np.full((len(ATTRS), int(self.n_templates.max()), 2), -1, dtype=np.int64)
        for ai, a in enumerate(ATTRS):
            for t, tmpl in enumerate(TEMPLATES[a]):
                for subj in (0, 1):  # 0: full name, 1: He/She
                    sl = {"{s}": NAME if subj == 0 else [SUBJ], "{p}": [POSS], "{v}": VALUE_COLS[a]}
                    self.bio_seg[ai, t, subj] = add(tmpl, sl, "{v}", "{s}" if subj == 0 else None)
        # the reversed-direction sentence (value before name)
        rsl = {"{d}": VALUE_COLS["birth_date"], "{c}": VALUE_COLS["birth_city"], "{n}": NAME}
        self.rev_seg = np.array([add(t, rsl, None, "{n}") for t in REVERSE_TEMPLATES], dtype=np.int64)
        # reversed biographies (BiosWorld.bio_reversed): openers, one clause per attribute, comma, name clauses
        self.rbio_frag = np.full((len(ATTRS), max(len(REVERSE_FRAGMENTS[a]) for a in ATTRS)), -1, dtype=np.int64)
        for ai, a in enumerate(ATTRS):
            for f, tmpl in enumerate(REVERSE_FRAGMENTS[a]):
                self.rbio_frag[ai, f] = add(tmpl, {"{v}": VALUE_COLS[a]}, "{v}", None)
        self.n_frag = np.array([len(REVERSE_FRAGMENTS[a]) for a in ATTRS], dtype=np.int64)
        self.rbio_open = np.array([add(t, {}, None, None) for t in REVERSE_OPENERS], dtype=np.int64)
        self.rbio_name = np.array([add(t, {"{n}": NAME}, None, "{n}") for t in REVERSE_NAME_CLAUSES], dtype=np.int64)
        self.seg_comma = add(",", {}, None, None)
        # QA documents, one segment each: <bos> question Answer : value . <eos>
        self.qa_seg = np.zeros(len(ATTRS) + 1, dtype=np.int64)
        for ai, a in enumerate(ATTRS):
            q = f"{BOS} {QA_TEMPLATES[a]} Answer : {{v}} . {EOS}"
            self.qa_seg[ai] = add(q, {"{n}": NAME, "{v}": VALUE_COLS[a]}, "{v}", "{n}")
        q = f"{BOS} {INVERSE_QA_TEMPLATE} Answer : {{a}} . {EOS}"
        self.qa_seg[INVERSE] = add(q, {"{d}": VALUE_COLS["birth_date"], "{c}": VALUE_COLS["birth_city"],
                                       "{a}": NAME}, "{a}", "{a}")
        self.refs = np.array(refs, dtype=np.int64)
        self.seg_start = np.array(starts, dtype=np.int64)
        self.seg_len = np.array(lens, dtype=np.int64)
        self.seg_voff = np.array(voff, dtype=np.int64)
        self.seg_noff = np.array(noff, dtype=np.int64)
        self.max_bio_len = int(2 + sum(self.seg_len[self.bio_seg[ai, :n, 0]].max()
                                       for ai, n in enumerate(self.n_templates)) + self.seg_len[self.rev_seg].max())

    # ---- values ----------------------------------------------------------------------------
    def values(self, people: np.ndarray) -> np.ndarray:
        """The value vector of each person: int64 ``[len(people), 27]`` token ids (see module doc)."""
        w = self.world
        people = np.asarray(people, dtype=np.int64)
        V = np.empty((len(people), N_COLS), dtype=np.int64)
        _values_kernel(people, w.names, w.attrs, self.name_tab, self.subj_tok, self.poss_tok, self.month_tok,
                       self.day_tok, self.comma, self.cent_tok, self.yy_tok, self.city_tok, self.univ_tok,
                       self.major_tok, self.comp_tok, self.comp_city, V)
        return V

    # ---- choices ---------------------------------------------------------------------------
    def choices(self, people, copies, seed: int, permute=False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The counter-based random choices of biographies ``(person, copy)`` under ``seed``.

        Returns:
            templates int64 ``[D, 6]`` (per attribute, in :data:`ATTRS` order), order int64 ``[D, 6]``
            (sentence order; ATTRS order where not ``permute``), reverse template int64 ``[D]``.
        """
        people = np.asarray(people, dtype=np.int64)
        copies = np.asarray(copies, dtype=np.int64)
        base = hash_u64(seed, TAG_RENDER, people, copies)
        with np.errstate(over="ignore"):
            hs = _mix(base[:, None] + (np.arange(8, dtype=np.uint64)[None, :] + np.uint64(1)) * _GOLD)
        tmpl = _below(hs[:, :6], self.n_templates[None, :])
        perm = np.asarray(permute, dtype=bool)
        order = np.where(np.broadcast_to(perm, people.shape)[:, None], _PERMS[_below(hs[:, 6], len(_PERMS))],
                         np.arange(len(ATTRS))[None, :])
        rev = _below(hs[:, 7], len(REVERSE_TEMPLATES))
        return tmpl, order, rev

    # ---- rendering -------------------------------------------------------------------------
    def _gather(self, segs: np.ndarray, people: np.ndarray, lengths_only: bool) -> tuple[np.ndarray | None, np.ndarray]:
        lens = self.seg_len[segs]
        doc_len = lens.sum(1)
        if lengths_only:
            return None, doc_len
        off = np.cumsum(doc_len) - doc_len
        out = np.empty(int(doc_len.sum()), dtype=np.int32)
        _expand(segs, self.seg_start, self.seg_len, self.refs, self.values(people), off, out)
        return out, doc_len

    def bios(self, people, copies, seed: int, *, permute=False, fullname=False, reverse: bool = False,
             lengths_only: bool = False) -> Docs:
        """Render biography ``copies[k]`` of person ``people[k]`` for every k.

        Args:
            people, copies: int arrays ``[D]``.
            seed: the rendering seed (the same seed and (person, copy) give the same biography).
            permute, fullname: bool or bool ``[D]`` (Part 3.1 augmentations, as :meth:`BiosWorld.bio`).
            reverse: append the reversed-direction sentence (:data:`REVERSE_TEMPLATES`).
            lengths_only: compute only the document lengths (``tok`` is None).
        """
        people = np.asarray(people, dtype=np.int64)
        copies = np.broadcast_to(np.asarray(copies, dtype=np.int64), people.shape)
        D = len(people)
        tmpl, order, rev = self.choices(people, copies, seed, permute)
        full = np.broadcast_to(np.asarray(fullname, dtype=bool), (D,))
        K = 8 + int(reverse)
        segs = np.empty((D, K), dtype=np.int64)
        segs[:, 0], segs[:, -1] = self.seg_bos, self.seg_eos
        t_in_order = np.take_along_axis(tmpl, order, axis=1)
        subj = np.ones((D, 6), dtype=np.int64)
        subj[:, 0] = 0
        subj[full] = 0
        segs[:, 1:7] = self.bio_seg[order, t_in_order, subj]
        if reverse:
            segs[:, 7] = self.rev_seg[rev]
        tok, doc_len = self._gather(segs, people, lengths_only)
        off = np.cumsum(doc_len) - doc_len
        return Docs(tok, off, doc_len, np.ones(D, dtype=np.int64), people, np.full(D, KIND_BIO, dtype=np.int64),
                    copies.copy(), segs)

    def reversed_choices(self, people, copies, seed: int, groups: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Counter-based choices of reversed biographies ``(person, copy)``: attribute order int64 ``[D, 6]``
        (uniform over the 720 permutations), clause per attribute ``[D, 6]`` (ATTRS order), opener and name
        clause per sentence ``[D, groups]`` (the arguments of :meth:`BiosWorld.bio_reversed`)."""
        people = np.asarray(people, dtype=np.int64)
        copies = np.broadcast_to(np.asarray(copies, dtype=np.int64), people.shape)
        base = hash_u64(seed, TAG_REVERSED, people, copies)
        with np.errstate(over="ignore"):
            hs = _mix(base[:, None] + (np.arange(19, dtype=np.uint64)[None, :] + np.uint64(1)) * _GOLD)
        order = _PERMS[_below(hs[:, 0], len(_PERMS))]
        frag = _below(hs[:, 1:7], self.n_frag[None, :])
        opener = _below(hs[:, 7:7 + groups], len(REVERSE_OPENERS))
        name = _below(hs[:, 13:13 + groups], len(REVERSE_NAME_CLAUSES))
        return order, frag, opener, name

    def bios_reversed(self, people, copies, seed: int, *, groups: int = 1, lengths_only: bool = False) -> Docs:
        """Render reversed biography ``copies[k]`` of person ``people[k]`` (Part 3.2, arXiv 2309.14402, Section
        5; :meth:`BiosWorld.bio_reversed`): the six attributes in a random order split into ``groups`` sentences
        ``"The person that ... , that ... is NAME ."``, the full name only after the attributes of its sentence.
        Token-identical to :meth:`BiosWorld.bio_reversed` given the same choices (:meth:`reversed_choices`).
        Kind ``"bio_reverse"``; loss on every token after ``<bos>``.

        Raises:
            ConfigError: ``groups`` not a divisor of 6 (1, 2, 3 or 6: equal sentences, as ``np.array_split``).
        """
        if groups not in (1, 2, 3, 6):
            raise ConfigError("groups", groups, "1, 2, 3 or 6")
        people = np.asarray(people, dtype=np.int64)
        copies = np.broadcast_to(np.asarray(copies, dtype=np.int64), people.shape)
        D, A = len(people), len(ATTRS)
        order, frag, opener, name = self.reversed_choices(people, copies, seed, groups)
        per = A // groups
        cols = []
        for g in range(groups):
            cols.append(self.rbio_open[opener[:, g]])
            for k in range(per):
                if k:
                    cols.append(np.full(D, self.seg_comma, dtype=np.int64))
                a = order[:, g * per + k]
                cols.append(self.rbio_frag[a, np.take_along_axis(frag, a[:, None], 1)[:, 0]])
            cols.append(self.rbio_name[name[:, g]])
        segs = np.stack([np.full(D, self.seg_bos, dtype=np.int64), *cols, np.full(D, self.seg_eos, dtype=np.int64)],
                        axis=1)
        tok, doc_len = self._gather(segs, people, lengths_only)
        off = np.cumsum(doc_len) - doc_len
        return Docs(tok, off, doc_len, np.ones(D, dtype=np.int64), people,
                    np.full(D, KIND_BIO_REVERSE, dtype=np.int64), copies.copy(), segs)

    def qa(self, people, items, lengths_only: bool = False) -> Docs:
        """QA documents: ``items[k]`` in 0..5 asks attribute ``ATTRS[items[k]]`` of ``people[k]``
        (``<bos> QUESTION Answer : VALUE . <eos>``, :meth:`BiosWorld.qa`); :data:`INVERSE` asks the
        inverse question (:meth:`BiosWorld.inverse_qa`). Loss on the answer, ``.`` and ``<eos>``."""
        people = np.asarray(people, dtype=np.int64)
        items = np.broadcast_to(np.asarray(items, dtype=np.int64), people.shape)
        segs = self.qa_seg[items][:, None]
        tok, doc_len = self._gather(segs, people, lengths_only)
        off = np.cumsum(doc_len) - doc_len
        kind = np.where(items == INVERSE, KIND_INVERSE_QA, KIND_QA).astype(np.int64)
        return Docs(tok, off, doc_len, self.seg_voff[segs[:, 0]], people, kind, items.copy(), segs)

    def to_doc_list(self, docs: Docs) -> list[Doc]:
        """:class:`~lmsci.worlds.bios.Doc` objects with spans (``"name"``, each attribute, ``"answer"``,
        ``"reverse_name"``), as :meth:`BiosWorld.bio` / :meth:`BiosWorld.qa` make them (for evaluation)."""
        if docs.segs is None or docs.tok is None:
            raise ValueError("to_doc_list needs freshly rendered docs (with tokens and segments)")
        out = []
        seg_attr = {}
        for ai in range(len(ATTRS)):
            for sg in self.bio_seg[ai].ravel():
                if sg >= 0:
                    seg_attr[int(sg)] = ATTRS[ai]
        rev = set(int(x) for x in self.rev_seg)
        for ai in range(len(ATTRS)):
            for sg in self.rbio_frag[ai]:
                if sg >= 0:
                    seg_attr[int(sg)] = ATTRS[ai]
        rname = set(int(x) for x in self.rbio_name)
        for k in range(len(docs)):
            o, n = int(docs.off[k]), int(docs.length[k])
            ids = [int(x) for x in docs.tok[o:o + n]]
            spans: dict[str, list[tuple[int, int]]] = {}
            pos = 0
            kind = KIND_NAMES[int(docs.kind[k])]
            for sg in docs.segs[k]:
                sg = int(sg)
                L = int(self.seg_len[sg])
                if kind == "bio_reverse":
                    if sg in seg_attr:
                        a = pos + int(self.seg_voff[sg])
                        spans.setdefault(seg_attr[sg], []).append((a, a + len(VALUE_COLS[seg_attr[sg]])))
                    elif sg in rname:
                        a = pos + int(self.seg_noff[sg])
                        spans.setdefault("name", []).append((a, a + 6))
                elif kind == "bio":
                    if sg in seg_attr:
                        vlen = len(VALUE_COLS[seg_attr[sg]])
                        if self.seg_noff[sg] >= 0:
                            a = pos + int(self.seg_noff[sg])
                            spans.setdefault("name", []).append((a, a + 6))
                        a = pos + int(self.seg_voff[sg])
                        spans.setdefault(seg_attr[sg], []).append((a, a + vlen))
                    elif sg in rev:
                        a = pos + int(self.seg_noff[sg])
                        spans.setdefault("reverse_name", []).append((a, a + 6))
                else:
                    a = int(docs.loss_start[k])
                    vlen = 6 if kind == "inverse_qa" else len(VALUE_COLS[ATTRS[int(docs.copy[k])]])
                    spans["answer"] = [(a, a + vlen)]
                pos += L
            ls = int(docs.loss_start[k])
            mask = [0] * ls + [1] * (n - ls) if kind not in ("bio", "bio_reverse") else [0] + [1] * (n - 1)
            out.append(Doc(ids, mask, int(docs.person[k]), spans, kind))
        return out


# ---------------------------------------------------------------------------------------------
# Packing (numba): the rule of lmsci.worlds.bios.pack on a running buffer
# ---------------------------------------------------------------------------------------------
@njit(cache=True)
def _values_kernel(people, names, attrs, name_tab, subj_tok, poss_tok, month_tok, day_tok, comma, cent_tok, yy_tok,
                   city_tok, univ_tok, major_tok, comp_tok, comp_city, V):  # pragma: no cover - compiled
    """The value vector (module doc) of each person; see BiosRenderer.values."""
    for d in range(people.shape[0]):
        i = people[d]
        for j in range(6):
            V[d, j] = name_tab[j, names[i, j]]
        V[d, 6] = subj_tok[i & 1]
        V[d, 7] = poss_tok[i & 1]
        date = attrs[i, 0]
        month = date // (N_DAYS * N_YEARS)
        rest = date % (N_DAYS * N_YEARS)
        day = rest // N_YEARS
        year = rest % N_YEARS
        V[d, 8] = month_tok[month]
        V[d, 9] = day_tok[day]
        V[d, 10] = comma
        V[d, 11] = cent_tok[year]
        V[d, 12] = yy_tok[year]
        for j in range(4):
            V[d, 13 + j] = city_tok[attrs[i, 1], j]
            V[d, 23 + j] = city_tok[comp_city[attrs[i, 4]], j]
        for j in range(2):
            V[d, 17 + j] = univ_tok[attrs[i, 2], j]
            V[d, 19 + j] = major_tok[attrs[i, 3], j]
            V[d, 21 + j] = comp_tok[attrs[i, 4], j]


@njit(cache=True)
def _expand(segs, seg_start, seg_len, refs, V, doc_off, out):  # pragma: no cover - compiled
    """Write each document's segments into ``out``: a ref >= 0 is a token id, -(c+1) is column c of V."""
    D, K = segs.shape
    for d in range(D):
        o = doc_off[d]
        for k in range(K):
            sg = segs[d, k]
            st = seg_start[sg]
            for j in range(seg_len[sg]):
                r = refs[st + j]
                out[o] = r if r >= 0 else V[d, -r - 1]
                o += 1


@njit(cache=True)
def _place(doc_len, doc_person, n_pending0, L, check, final, max_pending, cur_len, cur_people, cur_np,
           win, pos, pend_out):  # pragma: no cover - compiled
    n = doc_len.shape[0]
    pending = np.empty(n, np.int64)
    for j in range(n_pending0):
        pending[j] = j
    npend = n_pending0
    qi = n_pending0
    w = 0
    while True:
        placed = False
        for j in range(npend):
            d = pending[j]
            if cur_len + doc_len[d] <= L:
                clash = False
                if check:
                    for u in range(cur_np):
                        if cur_people[u] == doc_person[d]:
                            clash = True
                            break
                if not clash:
                    win[d] = w
                    pos[d] = cur_len
                    cur_len += doc_len[d]
                    cur_people[cur_np] = doc_person[d]
                    cur_np += 1
                    for u in range(j, npend - 1):
                        pending[u] = pending[u + 1]
                    npend -= 1
                    placed = True
                    break
        if not placed:
            if qi < n:
                d = qi
                clash = False
                if check:
                    for u in range(cur_np):
                        if cur_people[u] == doc_person[d]:
                            clash = True
                            break
                if clash:
                    if npend < max_pending:
                        pending[npend] = d
                        npend += 1
                        qi += 1
                        placed = True
                elif cur_len + doc_len[d] <= L:
                    win[d] = w
                    pos[d] = cur_len
                    cur_len += doc_len[d]
                    cur_people[cur_np] = doc_person[d]
                    cur_np += 1
                    qi += 1
                    placed = True
            else:
                if not final or npend == 0:
                    break
        if not placed:
            if cur_np == 0:
                return -1, cur_len, cur_np, npend
            w += 1
            cur_len = 0
            cur_np = 0
    if final and cur_np > 0:
        w += 1
        cur_len = 0
        cur_np = 0
    for j in range(npend):
        pend_out[j] = pending[j]
    return w, cur_len, cur_np, npend


@njit(cache=True)
def _fill(tok, off, length, loss_start, win, pos, L, out_inp, out_tgt):  # pragma: no cover - compiled
    for d in range(length.shape[0]):
        w = win[d]
        if w < 0:
            continue
        base = pos[d]
        o = off[d]
        n = length[d]
        ls = loss_start[d]
        for j in range(n):
            out_inp[w, base + j] = tok[o + j]
        for j in range(n - 1):
            if j + 1 >= ls:
                out_tgt[w, base + j] = tok[o + j + 1]


@dataclass
class WindowBlock:
    """Packed windows and what is in them.

    Attributes:
        input_ids, targets: int64 ``[W, seq_len]`` (targets -100 where no loss; None when counting only).
        ntok: int64 ``[W]`` non-pad tokens per window.
        doc_window, doc_person, doc_kind, doc_copy: int64 ``[n_docs]`` per document, in window order.
        is_qa: bool ``[W]`` (windows of QA documents).
    """

    input_ids: np.ndarray | None
    targets: np.ndarray | None
    ntok: np.ndarray
    doc_window: np.ndarray
    doc_person: np.ndarray
    doc_kind: np.ndarray
    doc_copy: np.ndarray

    @property
    def n(self) -> int:
        return len(self.ntok)

    @property
    def is_qa(self) -> np.ndarray:
        q = np.zeros(self.n, dtype=bool)
        q[self.doc_window[(self.doc_kind == KIND_QA) | (self.doc_kind == KIND_INVERSE_QA)]] = True
        return q

    def rows(self, idx: np.ndarray) -> WindowBlock:
        """The windows ``idx`` (sorted or not), renumbered 0.. in that order."""
        idx = np.asarray(idx, dtype=np.int64)
        remap = np.full(self.n, -1, dtype=np.int64)
        remap[idx] = np.arange(len(idx))
        keep = remap[self.doc_window] >= 0
        nw = remap[self.doc_window[keep]]
        o = np.argsort(nw, kind="stable")
        return WindowBlock(None if self.input_ids is None else self.input_ids[idx],
                           None if self.targets is None else self.targets[idx], self.ntok[idx], nw[o],
                           self.doc_person[keep][o], self.doc_kind[keep][o], self.doc_copy[keep][o])

    def slice(self, a: int, b: int) -> WindowBlock:
        """Windows ``a..b-1`` (contiguous; documents are in window order)."""
        lo, hi = np.searchsorted(self.doc_window, [a, b])
        return WindowBlock(None if self.input_ids is None else self.input_ids[a:b],
                           None if self.targets is None else self.targets[a:b], self.ntok[a:b],
                           self.doc_window[lo:hi] - a, self.doc_person[lo:hi], self.doc_kind[lo:hi],
                           self.doc_copy[lo:hi])

    @staticmethod
    def concat(blocks: Sequence[WindowBlock]) -> WindowBlock:
        shift = np.cumsum([0] + [b.n for b in blocks[:-1]])
        cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64)  # noqa: E731
        has = blocks and blocks[0].input_ids is not None
        return WindowBlock(np.concatenate([b.input_ids for b in blocks]) if has else None,
                           np.concatenate([b.targets for b in blocks]) if has else None,
                           cat([b.ntok for b in blocks]), cat([b.doc_window + s for b, s in zip(blocks, shift)]),
                           cat([b.doc_person for b in blocks]), cat([b.doc_kind for b in blocks]),
                           cat([b.doc_copy for b in blocks]))


class _Packer:
    """Running buffer: the open window and the deferred documents carry from one chunk to the next."""

    def __init__(self, seq_len: int, check: bool, max_pending: int = 64, tokens: bool = True):
        self.L, self.check, self.max_pending, self.tokens = seq_len, check, max_pending, tokens
        self.open_inp = np.zeros(seq_len, dtype=np.int64)
        self.open_tgt = np.full(seq_len, IGNORE, dtype=np.int64)
        self.open_len = 0
        self.open_meta = (np.zeros(0, np.int64),) * 3  # person, kind, copy
        self.pending = Docs.empty() if tokens else Docs(None, *(np.zeros(0, np.int64),) * 6)

    def snapshot(self) -> tuple:
        """The state that decides placement (lengths and people of the open and deferred documents)."""
        pd = self.pending
        return (self.open_len, tuple(a.copy() for a in self.open_meta),
                (pd.length.copy(), pd.loss_start.copy(), pd.person.copy(), pd.kind.copy(), pd.copy.copy()))

    @classmethod
    def restore(cls, snap: tuple, seq_len: int, check: bool, rerender, max_pending: int = 64) -> _Packer:
        """A token packer in the state ``snap`` of a length-only one: the open window's and the deferred
        documents are rendered again by ``rerender(person, kind, copy) -> Docs`` (renders are pure
        functions of (person, copy))."""
        pk = cls(seq_len, check, max_pending, tokens=True)
        open_len, (op, ok, oc), (_, _, pp, pkind, pc) = snap
        pk.open_len, pk.open_meta = int(open_len), (op, ok, oc)
        if len(op):
            d = rerender(op, ok, oc)
            if int(d.length.sum()) != open_len:
                raise RuntimeError("re-rendered open window does not match its recorded length")
            pos = np.cumsum(d.length) - d.length
            inp = np.zeros((1, seq_len), dtype=np.int64)
            tgt = np.full((1, seq_len), IGNORE, dtype=np.int64)
            _fill(d.tok, d.off, d.length, d.loss_start, np.zeros(len(d), np.int64), pos, seq_len, inp, tgt)
            pk.open_inp, pk.open_tgt = inp[0], tgt[0]
        if len(pp):
            pk.pending = rerender(pp, pkind, pc)
        return pk

    def feed(self, docs: Docs, final: bool = False) -> WindowBlock:
        L = self.L
        if len(docs) and int(docs.length.max()) > L:
            raise ConfigError("seq_len", L, f">= the longest document ({int(docs.length.max())} tokens)")
        alld = Docs.concat(self.pending, docs)
        n = len(alld)
        n_open = len(self.open_meta[0])
        cur_people = np.empty(L + 1, dtype=np.int64)
        cur_people[:n_open] = self.open_meta[0]
        win = np.full(n, -1, dtype=np.int64)
        pos = np.zeros(n, dtype=np.int64)
        pend_out = np.empty(n, dtype=np.int64)
        nw, cur_len, _cur_np, npend = _place(alld.length, alld.person, len(self.pending), L, self.check, final,
                                             self.max_pending, self.open_len, cur_people, n_open, win, pos, pend_out)
        if nw < 0:
            raise RuntimeError("packing made no progress")
        rows = nw + (0 if final else 1)
        inp = tgt = None
        if self.tokens:
            inp = np.zeros((max(rows, 1), L), dtype=np.int64)
            tgt = np.full((max(rows, 1), L), IGNORE, dtype=np.int64)
            inp[0], tgt[0] = self.open_inp, self.open_tgt
            _fill(alld.tok, alld.off, alld.length, alld.loss_start, win, pos, L, inp, tgt)
        placed = np.flatnonzero(win >= 0)
        placed = placed[np.argsort(win[placed] * (L + 1) + pos[placed], kind="stable")]
        dw = np.concatenate([np.zeros(n_open, np.int64), win[placed]])
        dp = np.concatenate([self.open_meta[0], alld.person[placed]])
        dk = np.concatenate([self.open_meta[1], alld.kind[placed]])
        dc = np.concatenate([self.open_meta[2], alld.copy[placed]])
        lens = np.concatenate([np.zeros(n_open, np.int64), alld.length[placed]])
        open_len0 = self.open_len
        ntok = np.bincount(dw, weights=lens, minlength=max(rows, 1)).astype(np.int64)
        ntok[0] += open_len0
        closed = dw < nw
        if not final:
            self.open_len = int(cur_len)
            self.open_meta = (dp[~closed], dk[~closed], dc[~closed])
            if self.tokens:
                self.open_inp, self.open_tgt = inp[nw].copy(), tgt[nw].copy()
        else:
            self.open_len = 0
            self.open_meta = (np.zeros(0, np.int64),) * 3
        self.pending = alld.take(pend_out[:npend])
        return WindowBlock(None if inp is None else inp[:nw], None if tgt is None else tgt[:nw], ntok[:nw],
                           dw[closed], dp[closed], dk[closed], dc[closed])


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------
@dataclass
class StreamBatch:
    """One batch of windows.

    Attributes:
        input_ids, targets: LongTensor ``[batch, seq_len]`` (targets: next token, -100 where no loss);
            numpy int64 when the stream has ``as_torch=False``.
        doc_window, doc_person, doc_kind, doc_copy: int64 ``[n_docs]``: for each document in the
            batch, its window (row), person, kind (0 bio, 1 QA, 2 inverse QA) and copy (biography
            rendering index; QA item code).
        is_qa: bool ``[batch]``; ntok: int64 ``[batch]`` non-pad tokens.
    """

    input_ids: Any
    targets: Any
    doc_window: np.ndarray
    doc_person: np.ndarray
    doc_kind: np.ndarray
    doc_copy: np.ndarray
    is_qa: np.ndarray
    ntok: np.ndarray


class _Stream:
    """Base: packs the documents of the chunks of :meth:`_chunk_specs` into windows and batches them."""

    def __init__(self, world: BiosWorld, seq_len: int, batch_size: int, shuffle: bool, drop_last: bool,
                 count_exposures: bool, as_torch: bool, chunk: int):
        if seq_len < 1:
            raise ConfigError("seq_len", seq_len, "an integer >= 1")
        if batch_size < 1:
            raise ConfigError("batch_size", batch_size, "an integer >= 1")
        if chunk < 1:
            raise ConfigError("chunk", chunk, "an integer >= 1")
        self.world, self.seq_len, self.batch_size = world, int(seq_len), int(batch_size)
        self.shuffle, self.drop_last, self.count_exposures, self.as_torch = shuffle, drop_last, count_exposures, as_torch
        self.chunk = int(chunk)
        self.renderer = BiosRenderer(world)
        self._reset_counts()

    def _reset_counts(self) -> None:
        n = self.world.n if self.count_exposures else 0
        self.exposures = np.zeros(n, dtype=np.int64)
        """Biographies per person in the batches yielded so far (int64 ``[N]``; empty if not counted)."""
        self.qa_exposures = np.zeros(n, dtype=np.int64)
        """QA documents per person in the batches yielded so far."""
        self.reverse_exposures = np.zeros(n, dtype=np.int64)
        """Reversed biographies (kind ``"bio_reverse"``, :class:`DocStream`) per person in the batches so far."""
        self.windows_yielded = 0
        self.tokens_yielded = 0
        self.qa_tokens_yielded = 0

    @property
    def qa_token_fraction(self) -> float:
        """Fraction of the non-pad tokens yielded so far that are in QA windows (QA_r)."""
        return self.qa_tokens_yielded / max(self.tokens_yielded, 1)

    def _chunk_specs(self) -> Iterator[tuple]:
        """The chunks of the stream, in order: tuples whose last item says whether it is the last."""
        raise NotImplementedError

    def _render_chunk(self, spec: tuple, lengths_only: bool) -> Docs:
        raise NotImplementedError

    def _rerender(self, person, kind, copy) -> Docs:
        """Documents (person, kind, copy) rendered again, in the given order."""
        raise NotImplementedError

    def windows(self, tokens: bool = True, start: int = 0, on_skip=None) -> Iterator[WindowBlock]:
        """Blocks of packed windows, in stream order, from window ``start`` on (``tokens=False``: only
        lengths and metadata). Windows before ``start`` are packed from lengths only (no token is
        rendered; the open window and deferred documents are rendered again where ``start`` falls);
        ``on_skip(block)`` sees their metadata."""
        specs = self._chunk_specs()
        packer = _Packer(self.seq_len, self.shuffle, tokens=tokens)
        if start > 0:
            lp = _Packer(self.seq_len, self.shuffle, tokens=False)
            closed = 0
            for sp in specs:
                snap = lp.snapshot()
                blk = lp.feed(self._render_chunk(sp, True), final=sp[-1])
                if closed + blk.n <= start:
                    closed += blk.n
                    if on_skip is not None and blk.n:
                        on_skip(blk)
                    continue
                if tokens:
                    packer = _Packer.restore(snap, self.seq_len, self.shuffle, self._rerender)
                    blk = packer.feed(self._render_chunk(sp, False), final=sp[-1])
                else:
                    packer = lp
                drop = start - closed
                if on_skip is not None and drop:
                    on_skip(blk.slice(0, drop))
                yield blk.slice(drop, blk.n)
                break
            else:
                return
        for sp in specs:
            blk = packer.feed(self._render_chunk(sp, not tokens), final=sp[-1])
            if blk.n:
                yield blk

    def count_windows(self) -> int:
        """The exact number of windows of the whole stream (packs lengths only; renders no token)."""
        return sum(b.n for b in self.windows(tokens=False))

    def __iter__(self) -> Iterator[StreamBatch]:
        return self.iter_from(0)

    def _count(self, w: WindowBlock) -> None:
        if self.count_exposures:
            bio, rev = w.doc_kind == KIND_BIO, w.doc_kind == KIND_BIO_REVERSE
            np.add.at(self.exposures, w.doc_person[bio], 1)
            np.add.at(self.qa_exposures, w.doc_person[~(bio | rev)], 1)
            if rev.any():
                np.add.at(self.reverse_exposures, w.doc_person[rev], 1)

    def iter_from(self, start_batch: int = 0) -> Iterator[StreamBatch]:
        """The batches from batch ``start_batch`` on (0-based), as the same batches of a full iteration
        (to resume training from a checkpoint): the windows before it are packed from lengths only,
        about 3x faster than rendering them, and counted in :attr:`exposures` / :attr:`qa_exposures`
        (not in ``windows_yielded``, ``tokens_yielded``, ``qa_token_fraction``)."""
        self._reset_counts()
        B = self.batch_size
        start = int(start_batch) * B
        self.windows_skipped = 0

        def skipped(w: WindowBlock) -> None:
            self.windows_skipped += w.n
            self._count(w)

        return self._batches(self.windows(start=start, on_skip=skipped))

    def _batches(self, blocks: Iterator[WindowBlock]) -> Iterator[StreamBatch]:
        B = self.batch_size
        buf: list[WindowBlock] = []
        have = 0
        for blk in blocks:
            buf.append(blk)
            have += blk.n
            if have < B:
                continue
            allw = WindowBlock.concat(buf) if len(buf) > 1 else buf[0]
            nb = have // B
            for k in range(nb):
                yield self._batch(allw.slice(k * B, (k + 1) * B))
            rest = have - nb * B
            buf = [allw.slice(nb * B, have)] if rest else []
            have = rest
        if have and not self.drop_last:
            yield self._batch(WindowBlock.concat(buf))

    def _batch(self, w: WindowBlock) -> StreamBatch:
        isqa = w.is_qa
        self._count(w)
        self.windows_yielded += w.n
        self.tokens_yielded += int(w.ntok.sum())
        self.qa_tokens_yielded += int(w.ntok[isqa].sum())
        x, y = w.input_ids, w.targets
        if self.as_torch:
            import torch

            x, y = torch.from_numpy(x), torch.from_numpy(y)
        return StreamBatch(x, y, w.doc_window, w.doc_person, w.doc_kind, w.doc_copy, isqa, w.ntok)

    def get_batch_fn(self, cycle: bool = False):
        """A ``get_batch(step, generator)`` for :func:`lmsci.train.trainer.train` returning the next batch
        of this stream (one call per micro-batch, in order). The first call starts at batch ``step``
        (:meth:`iter_from`: a run resumed from a checkpoint at step s gets batch s); after that ``step``
        is ignored. Past the end of the stream it restarts it when ``cycle`` (counters restart too),
        else raises RuntimeError."""
        state: dict[str, Any] = {"it": None}

        def get_batch(step: int, g=None):
            if state["it"] is None:
                state["it"] = self.iter_from(int(step))
            try:
                b = next(state["it"])
            except StopIteration:
                if not cycle:
                    raise RuntimeError(f"the stream ended at step {step}: fewer batches than steps "
                                       f"(count_windows() // batch_size = {self.count_windows() // self.batch_size})"
                                       ) from None
                state["it"] = iter(self)
                b = next(state["it"])
            return b.input_ids, b.targets

        return get_batch

    def to_packed(self, max_windows: int | None = None) -> Packed:
        """Materialise (the first ``max_windows`` windows of) the stream as a :class:`Packed`
        (for code written for :func:`lmsci.worlds.bios.pack`; memory grows with the windows)."""
        import torch

        blocks, n = [], 0
        for blk in self.windows():
            blocks.append(blk)
            n += blk.n
            if max_windows is not None and n >= max_windows:
                break
        w = WindowBlock.concat(blocks)
        if max_windows is not None:
            w = w.rows(np.arange(min(max_windows, w.n)))
        bounds = np.searchsorted(w.doc_window, np.arange(w.n + 1))
        people = [w.doc_person[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])]
        kinds = [[KIND_NAMES[int(k)] for k in w.doc_kind[a:b]] for a, b in zip(bounds[:-1], bounds[1:])]
        return Packed(torch.from_numpy(w.input_ids), torch.from_numpy(w.targets), people, kinds)


class BioStream(_Stream):
    """Biography windows: every listed person seen ``exposures`` times, packed on the fly.

    Args:
        world: the bioS world.
        seq_len: tokens per window; batch_size: windows per :class:`StreamBatch`.
        exposures: biographies per person in the whole stream (passes over the people).
        seed: rendering seed (which templates / order each (person, copy) gets).
        people: None (all ``world.n``), an int array, or a list of ``(ids, spec)`` groups where
            ``spec`` has ``multiplicity``, ``permute``, ``fullname`` (overriding the arguments below).
        multiplicity: M distinct biographies per person, shown in turn (bioS multiM); 1 = bioS single.
        permute: shuffled sentence order; fullname: the full name in every sentence.
        fresh: every exposure renders a new biography (copy = exposure index; M is ignored).
        reverse: append the reversed-direction sentence to every biography.
        order_seed: seed of the order of the people in each pass (default ``seed``); a training
            seed passes its own so that separately trained models see the same biographies in their
            own order.
        shuffle: no person twice in a window (as :func:`lmsci.worlds.bios.pack`); passes are always
            in a keyed pseudo-random order.
        drop_last: drop a final batch of fewer than ``batch_size`` windows.
        count_exposures: keep :attr:`exposures` (int64 ``[N]``).
        as_torch: yield torch LongTensors (else numpy int64).
        chunk: documents rendered at a time (memory; the stream does not depend on it).

    Raises:
        ConfigError: bad sizes, or ``seq_len`` below the longest biography.
    """

    def __init__(self, world: BiosWorld, *, seq_len: int, batch_size: int, exposures: int, seed: int,
                 people=None, multiplicity: int = 1, permute: bool = False, fullname: bool = False,
                 fresh: bool = False, reverse: bool = False, order_seed: int | None = None, shuffle: bool = True,
                 drop_last: bool = False, count_exposures: bool = True, as_torch: bool = True, chunk: int = 4096):
        super().__init__(world, seq_len, batch_size, shuffle, drop_last, count_exposures, as_torch, chunk)
        if exposures < 1:
            raise ConfigError("exposures", exposures, "an integer >= 1")
        self.exposures_per_person = int(exposures)
        self.seed = int(seed)
        self.order_seed = self.seed if order_seed is None else int(order_seed)
        self.fresh, self.reverse = bool(fresh), bool(reverse)
        is_groups = people is not None and len(people) > 0 and all(
            isinstance(x, (tuple, list)) and len(x) == 2 and hasattr(x[1], "multiplicity") for x in people)
        groups = list(people) if is_groups else [(people, _Spec(multiplicity, permute, fullname))]
        specs = [_Spec(int(s.multiplicity), bool(s.permute), bool(s.fullname)) for _, s in groups]
        for s in specs:
            if s.multiplicity < 1:
                raise ConfigError("multiplicity", s.multiplicity, "an integer >= 1")
        if len(groups) == 1 and groups[0][0] is None:
            self._people = None
            sizes = [world.n]
        else:
            arrs = [np.arange(world.n) if g is None else np.asarray(g, dtype=np.int64) for g, _ in groups]
            self._people = np.concatenate(arrs)
            sizes = [len(a) for a in arrs]
            if len(self._people) and (self._people.min() < 0 or self._people.max() >= world.n):
                raise ConfigError("people", "out of range", f"indices in [0, {world.n})")
        self.n_members = int(sum(sizes))
        if self.n_members < 1:
            raise ConfigError("people", 0, "at least one person")
        self._bounds = np.cumsum([0] + sizes)
        self._mult = np.array([s.multiplicity for s in specs], dtype=np.int64)
        self._perm = np.array([s.permute for s in specs], dtype=bool)
        self._full = np.array([s.fullname for s in specs], dtype=bool)
        longest = self.renderer.max_bio_len if reverse else self.renderer.max_bio_len - int(
            self.renderer.seg_len[self.renderer.rev_seg].max())
        if longest > seq_len:
            raise ConfigError("seq_len", seq_len, f">= the longest biography ({longest} tokens)")

    def members(self, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(person, group) of member indices ``m`` (positions in the concatenated groups)."""
        g = np.searchsorted(self._bounds, m, side="right") - 1
        person = m if self._people is None else self._people[m]
        return person, g

    def _render_members(self, m: np.ndarray, p: int, lengths_only: bool) -> Docs:
        person, g = self.members(m)
        copies = np.full(len(m), p, dtype=np.int64) if self.fresh else p % self._mult[g]
        return self.renderer.bios(person, copies, self.seed, permute=self._perm[g], fullname=self._full[g],
                                  reverse=self.reverse, lengths_only=lengths_only)

    def _chunk_specs(self) -> Iterator[tuple]:
        n, C, E = self.n_members, self.chunk, self.exposures_per_person
        for p in range(E):
            key = int(hash_u64(self.order_seed, TAG_ORDER, p)[()] >> np.uint64(1))
            for s in range(0, n, C):
                e = min(n, s + C)
                yield p, s, e, key, (p == E - 1 and e == n)

    def _render_chunk(self, spec: tuple, lengths_only: bool) -> Docs:
        p, s, e, key, _ = spec
        m = feistel_permutation(np.arange(s, e), self.n_members, key)
        return self._render_members(m, p, lengths_only)

    def _groups_of(self, people: np.ndarray) -> np.ndarray:
        """The group of each person (the first group listing them)."""
        people = np.asarray(people, dtype=np.int64)
        if self._people is None:
            return np.zeros(len(people), dtype=np.int64)
        if getattr(self, "_sorter", None) is None:
            self._sorter = np.argsort(self._people, kind="stable")
        sp = self._people[self._sorter]
        k = np.searchsorted(sp, people)
        if (k >= len(sp)).any() or (sp[np.minimum(k, len(sp) - 1)] != people).any():
            raise ConfigError("people", "not in the stream", "people listed in the stream's groups")
        return np.searchsorted(self._bounds, self._sorter[k], side="right") - 1

    def _rerender(self, person, kind, copy) -> Docs:
        g = self._groups_of(person)
        return self.renderer.bios(person, copy, self.seed, permute=self._perm[g], fullname=self._full[g],
                                  reverse=self.reverse)

    def training_bios(self, people, copy: int = 0) -> list[Doc]:
        """The biographies ``copy`` (exposure ``copy`` when ``fresh``; copy ``copy mod M`` is what pass
        ``copy`` shows otherwise) of ``people``, as :class:`Doc` with spans: exactly what the stream
        trains on (e.g. for the memorisation check). People must be in the stream."""
        people = np.asarray(people, dtype=np.int64)
        g = self._groups_of(people)
        copies = np.full(len(people), copy) if self.fresh else copy % self._mult[g]
        docs = self.renderer.bios(people, copies, self.seed, permute=self._perm[g], fullname=self._full[g],
                                  reverse=self.reverse)
        return self.renderer.to_doc_list(docs)

    def tokens_per_pass(self) -> float:
        """Expected biography tokens per pass (templates uniform): a planning figure."""
        r = self.renderer
        # mean sentence length per attribute with the name / with He/She as subject, summed over attributes
        name6 = sum(r.seg_len[r.bio_seg[a, :n, 0]].mean() for a, n in enumerate(r.n_templates))
        pron6 = sum(r.seg_len[r.bio_seg[a, :n, 1]].mean() for a, n in enumerate(r.n_templates))
        per = 2 + np.where(self._full, name6, name6 / 6 + pron6 * 5 / 6)
        if self.reverse:
            per = per + r.seg_len[r.rev_seg].mean()
        return float((per * np.diff(self._bounds)).sum())


@dataclass(frozen=True)
class _Spec:
    multiplicity: int = 1
    permute: bool = False
    fullname: bool = False


class QAStream(_Stream):
    """QA windows for ``people``: each pass asks every listed question of every person once.

    Args:
        world: the bioS world; people: int array of the people asked (e.g. P_train).
        seq_len, batch_size: window length, windows per batch.
        epochs: passes over the questions; None = for ever (for :class:`MixedStream`).
        order_seed: seed of the order of the questions in each pass.
        attrs: the forward questions asked (Part 3.1, Section 2.2); forward: ask them;
            inverse: also ask the inverse question (Part 3.2, Section 5).
        shuffle, drop_last, count_exposures, as_torch, chunk: as :class:`BioStream`.
    """

    def __init__(self, world: BiosWorld, people, *, seq_len: int, batch_size: int, epochs: int | None = None,
                 order_seed: int = 0, attrs: Sequence[str] = ATTRS, forward: bool = True, inverse: bool = False,
                 shuffle: bool = True, drop_last: bool = False, count_exposures: bool = True, as_torch: bool = True,
                 chunk: int = 4096):
        super().__init__(world, seq_len, batch_size, shuffle, drop_last, count_exposures, as_torch, chunk)
        self.people = np.asarray(people, dtype=np.int64)
        if not len(self.people):
            raise ConfigError("people", 0, "at least one person")
        if epochs is not None and epochs < 1:
            raise ConfigError("epochs", epochs, "None or an integer >= 1")
        self.epochs, self.order_seed = epochs, int(order_seed)
        items = ([ATTRS.index(a) for a in attrs] if forward else []) + ([INVERSE] if inverse else [])
        if not items:
            raise ConfigError("attrs", attrs, "at least one question (forward attrs or inverse)")
        self.items = np.array(items, dtype=np.int64)
        longest = int(self.renderer.seg_len[self.renderer.qa_seg[self.items]].max())
        if longest > seq_len:
            raise ConfigError("seq_len", seq_len, f">= the longest QA document ({longest} tokens)")

    def _chunk_specs(self) -> Iterator[tuple]:
        n, C = len(self.people) * len(self.items), self.chunk
        passes = itertools.count() if self.epochs is None else range(self.epochs)
        for p in passes:
            key = int(hash_u64(self.order_seed, TAG_QA, p)[()] >> np.uint64(1))
            for s in range(0, n, C):
                e = min(n, s + C)
                yield p, s, e, key, (self.epochs is not None and p == self.epochs - 1 and e == n)

    def _render_chunk(self, spec: tuple, lengths_only: bool) -> Docs:
        _, s, e, key, _ = spec
        K = len(self.items)
        m = feistel_permutation(np.arange(s, e), len(self.people) * K, key)
        return self.renderer.qa(self.people[m // K], self.items[m % K], lengths_only)

    def _rerender(self, person, kind, copy) -> Docs:
        return self.renderer.qa(person, copy)


def docs_of(docs: Sequence[Doc]) -> Docs:
    """The flat :class:`Docs` of a list of :class:`~lmsci.worlds.bios.Doc` (as :meth:`BiosWorld.bio`,
    :meth:`BiosWorld.bio_reversed`, :meth:`BiosWorld.qa` make them); ``copy`` is each document's index in the list.

    Raises:
        ValueError: a loss mask that is not zeros followed by ones (the packer takes the loss from one index on).
    """
    n = len(docs)
    length = np.array([len(d.ids) for d in docs], dtype=np.int64)
    off = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(length[:-1], out=off[1:])
    tok = np.fromiter((t for d in docs for t in d.ids), dtype=np.int32, count=int(length.sum()))
    loss_start = np.empty(n, dtype=np.int64)
    for k, d in enumerate(docs):
        m = np.asarray(d.loss_mask, dtype=bool)
        first = int(m.argmax()) if m.any() else len(m)
        if not m[first:].all():
            raise ValueError(f"document {k}: the loss mask must be zeros then ones")
        loss_start[k] = first
    person = np.array([d.person for d in docs], dtype=np.int64)
    try:
        kind = np.array([KIND_CODES[d.kind] for d in docs], dtype=np.int64)
    except KeyError as e:
        raise ConfigError("kind", e.args[0], sorted(KIND_CODES)) from None
    return Docs(tok, off, length, loss_start, person, kind, np.arange(n, dtype=np.int64))


class DocStream(_Stream):
    """Fixed documents (any rendering, e.g. the Python :meth:`BiosWorld.bio` / :meth:`BiosWorld.bio_reversed`
    ones) seen ``epochs`` times, each pass in a keyed pseudo-random order, packed on the fly by the packer
    of this module (no person twice in a window): the windows of :func:`lmsci.worlds.bios.pack` over ``epochs``
    shuffled copies, without materialising them (memory: the documents once, not ``epochs`` packings).

    Used by ``reversal-curse``'s gpu and paper presets, whose forward (multiM) and reversed biographies
    (Part 3.2, arXiv 2309.14402, Section 5) are rendered once in Python and then streamed.

    Args:
        world: the bioS world (vocabulary); docs: the documents (kinds ``"bio"``, ``"bio_reverse"``, ``"qa"``,
            ``"inverse_qa"``): a list of :class:`~lmsci.worlds.bios.Doc`, or :class:`Docs` rendered by
            :class:`BiosRenderer` (e.g. ``Docs.concat(renderer.bios(...), renderer.bios_reversed(...))``);
            epochs: passes over them; order_seed: seed of the order of each pass.
        seq_len, batch_size, shuffle, drop_last, count_exposures, as_torch, chunk: as :class:`BioStream`.

    Counters: :attr:`exposures` (``"bio"`` documents per person), :attr:`reverse_exposures` (``"bio_reverse"``),
    :attr:`qa_exposures` (QA). ``doc_copy`` of a batch is the document's index in ``docs``.

    Raises:
        ConfigError: no documents, ``epochs < 1``, or a document longer than ``seq_len``.
    """

    def __init__(self, world: BiosWorld, docs: Sequence[Doc] | Docs, *, seq_len: int, batch_size: int, epochs: int,
                 order_seed: int = 0, shuffle: bool = True, drop_last: bool = False, count_exposures: bool = True,
                 as_torch: bool = True, chunk: int = 4096):
        super().__init__(world, seq_len, batch_size, shuffle, drop_last, count_exposures, as_torch, chunk)
        if not len(docs):
            raise ConfigError("docs", 0, "at least one document")
        if epochs < 1:
            raise ConfigError("epochs", epochs, "an integer >= 1")
        if isinstance(docs, Docs):  # rendered by BiosRenderer (vectorised); copy becomes the index, as docs_of
            if docs.tok is None:
                raise ConfigError("docs", "lengths only", "rendered documents (with tokens)")
            docs = Docs(docs.tok, docs.off, docs.length, docs.loss_start, docs.person, docs.kind,
                        np.arange(len(docs), dtype=np.int64))
        else:
            docs = docs_of(docs)
        self.docs = docs
        self.epochs, self.order_seed = int(epochs), int(order_seed)
        longest = int(self.docs.length.max())
        if longest > seq_len:
            raise ConfigError("seq_len", seq_len, f">= the longest document ({longest} tokens)")

    def _chunk_specs(self) -> Iterator[tuple]:
        n, C = len(self.docs), self.chunk
        for p in range(self.epochs):
            key = int(hash_u64(self.order_seed, TAG_DOCS, p)[()] >> np.uint64(1))
            for s in range(0, n, C):
                e = min(n, s + C)
                yield p, s, e, key, (p == self.epochs - 1 and e == n)

    def _render_chunk(self, spec: tuple, lengths_only: bool) -> Docs:
        _, s, e, key, _ = spec
        m = feistel_permutation(np.arange(s, e), len(self.docs), key)
        if lengths_only:
            d, ln = self.docs, self.docs.length[m]
            return Docs(None, np.cumsum(ln) - ln, ln, d.loss_start[m], d.person[m], d.kind[m], m)
        return self.docs.take(m)

    def _rerender(self, person, kind, copy) -> Docs:
        return self.docs.take(np.asarray(copy, dtype=np.int64))


class MixedStream(_Stream):
    """Mixed training (Part 3.1, App. C): each window is all biographies or all QA, QA at
    ``qa_fraction`` (QA_r) of the non-pad tokens.

    Windows are taken in order from ``bio`` and ``qa``; before each window, with ``q`` the QA tokens
    still owed (``qa_fraction * (tokens so far + seq_len) - QA tokens so far``), a QA window is taken
    with probability ``clip(q / seq_len, 0, 1)`` (a counter-based draw keyed by ``seed`` and the window
    index), so the running fraction stays within about one window of the target and the pattern is
    random. The stream ends when ``bio`` ends (every person has had ``bio``'s exposures); if ``qa``
    ends first (finite ``epochs``), the rest is biographies. The sub-streams' own batch sizes are not
    used; counters (``exposures``, ``qa_exposures``, ``qa_token_fraction``) are on this object.

    Args:
        bio: a :class:`BioStream`; qa: a :class:`QAStream` with the same ``seq_len``
            (``epochs=None`` to cycle the questions for as long as the biographies last).
        qa_fraction: QA_r in [0, 1) (Part 3.1 App. C: 0.8).
        batch_size: windows per batch (default ``bio.batch_size``); seed: default ``bio.order_seed``.
    """

    def __init__(self, bio: BioStream, qa: QAStream, *, qa_fraction: float = 0.8, batch_size: int | None = None,
                 seed: int | None = None, drop_last: bool = False, count_exposures: bool = True,
                 as_torch: bool = True):
        if not 0.0 <= qa_fraction < 1.0:
            raise ConfigError("qa_fraction", qa_fraction, "a number in [0, 1)")
        if qa.seq_len != bio.seq_len:
            raise ConfigError("qa.seq_len", qa.seq_len, f"the bio stream's seq_len {bio.seq_len}")
        if qa.world is not bio.world:
            raise ConfigError("qa.world", "another world", "the bio stream's world")
        super().__init__(bio.world, bio.seq_len, batch_size or bio.batch_size, bio.shuffle, drop_last,
                         count_exposures, as_torch, bio.chunk)
        self.bio, self.qa, self.qa_fraction = bio, qa, float(qa_fraction)
        self.seed = bio.order_seed if seed is None else int(seed)

    def windows(self, tokens: bool = True, start: int = 0, on_skip=None) -> Iterator[WindowBlock]:
        state = [0, 0, 0, 0, 0]
        if start > 0:  # find where the sub-streams are after `start` windows, from lengths only
            for blk in self._mix(False, state, limit=start):
                if on_skip is not None:
                    on_skip(blk)
            if state[0] < start:
                return
        yield from self._mix(tokens, state)

    def _mix(self, tokens: bool, state: list[int], limit: int | None = None,
             out: int = 256) -> Iterator[WindowBlock]:
        """Mixed windows from ``state = [window index, total tokens, QA tokens, bio windows taken, QA
        windows taken]`` on (updated in place), at most ``limit`` windows in all."""
        L, r = self.seq_len, self.qa_fraction
        widx, total, qa_tok = state[0], state[1], state[2]
        srcs = [self.bio.windows(tokens, start=state[3]), self.qa.windows(tokens, start=state[4])]
        cur: list[WindowBlock | None] = [None, None]
        at = [0, 0]
        done = [False, False]

        def ensure(k: int) -> bool:
            while not done[k] and (cur[k] is None or at[k] >= cur[k].n):
                try:
                    cur[k], at[k] = next(srcs[k]), 0
                except StopIteration:
                    done[k] = True
            return not done[k]

        picks: list[tuple[int, WindowBlock, int]] = []
        us: list[float] = []
        base = -1
        while limit is None or widx < limit:
            owed = r * (total + L) - qa_tok
            if widx - widx % 1024 != base:  # the uniform draws of windows base .. base + 1023
                base = widx - widx % 1024
                us = (_below(hash_u64(self.seed, TAG_MIX, np.arange(base, base + 1024)), 1 << 30) / (1 << 30)).tolist()
            u = us[widx - base]
            k = 1 if (r > 0 and u < min(max(owed / L, 0.0), 1.0)) else 0
            if k == 1 and not ensure(1):
                k = 0
            if k == 0 and not ensure(0):
                break
            blk = cur[k]
            nt = int(blk.ntok[at[k]])
            picks.append((k, blk, at[k]))
            at[k] += 1
            total += nt
            qa_tok += nt if k == 1 else 0
            widx += 1
            state[0], state[1], state[2] = widx, total, qa_tok
            state[3 + k] += 1
            if len(picks) >= out:
                yield _assemble(picks)
                picks = []
        if picks:
            yield _assemble(picks)

    def count_windows(self) -> int:
        return sum(b.n for b in self.windows(tokens=False))


def _assemble(picks: list[tuple[int, WindowBlock, int]]) -> WindowBlock:
    """A block of the picked windows (block, row), in pick order."""
    parts = []
    run_blk, run_rows = None, []
    for _, blk, row in picks:
        if blk is not run_blk and run_blk is not None:
            parts.append(run_blk.rows(np.array(run_rows)))
            run_rows = []
        run_blk = blk
        run_rows.append(row)
    parts.append(run_blk.rows(np.array(run_rows)))
    return WindowBlock.concat(parts)


def expected_windows(stream: BioStream) -> int:
    """A quick estimate of the number of windows of a :class:`BioStream` (tokens / seq_len, rounded
    up); :meth:`_Stream.count_windows` gives the exact number."""
    return math.ceil(stream.tokens_per_pass() * stream.exposures_per_person / stream.seq_len)
