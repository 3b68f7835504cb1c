"""Vectorised bioS rendering: biographies and QA as flat token arrays, every template pre-tokenised once.

Source: Allen-Zhu & Li, Physics of Language Models Part 3.1 (arXiv 2309.14316, Section 2: bioS, multiM /
permute / fullname), Part 3.2 (arXiv 2309.14402, Section 5: reversed biographies, the inverse question). Same
world, templates, attribute values and vocabulary as :mod:`lmsci.worlds.bios`; the streams of
:mod:`lmsci.worlds.bios_stream` render with it.

* Every template is compiled once into a *segment*: an int array whose entries are either a token
  id (>= 0) or a reference ``-(col + 1)`` to column ``col`` of a per-document value vector of 27
  token ids (6 name tokens, He/She, his/her, the 5 + 4 + 2 + 2 + 2 + 4 tokens of the six attribute
  values). A biography is ``<bos>``, six sentence segments (and optionally a reversed sentence),
  ``<eos>``; the segment ids of a chunk of documents are chosen with vectorised numpy, and two small
  numba kernels fill the value vectors and expand the segments into tokens.
* Randomness is *counter-based* (:mod:`lmsci.worlds.counter_rng`): the template of attribute ``a`` in copy
  ``c`` of person ``i``'s biography is ``splitmix64(seed, i, c, a)`` mapped to the template list (and likewise
  the sentence order, uniform over the 720 permutations, and the reversed template). A biography is therefore
  a pure function of ``(seed, person, copy)``.

Given the same choices a document is token-identical to ``BiosWorld.bio(i, templates=..., order=...,
fullname=...)`` (tested). Documents travel as :class:`Docs` (flat arrays); :func:`docs_of` flattens a list of
:class:`~lmsci.worlds.bios.Doc`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from lmsci.errors import ConfigError
from lmsci.worlds.bios import ATTRS, BiosWorld, Doc
from lmsci.worlds.bios_pools import BOS, EOS, MONTHS, N_DAYS, N_YEARS, YEAR0
from lmsci.worlds.bios_templates import (INVERSE_QA_TEMPLATE, QA_TEMPLATES, REVERSE_FRAGMENTS, REVERSE_NAME_CLAUSES,
                                         REVERSE_OPENERS, REVERSE_TEMPLATES, TEMPLATES)
from lmsci.worlds.counter_rng import GOLD, below, hash_u64, mix64

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

# keys of the pipeline's counter-based draws (lmsci.worlds.bios_junk uses 43, 47, 53)
TAG_RENDER, TAG_ORDER, TAG_QA, TAG_MIX, TAG_DOCS, TAG_REVERSED = 17, 23, 29, 31, 37, 41


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
            hs = mix64(base[:, None] + (np.arange(8, dtype=np.uint64)[None, :] + np.uint64(1)) * GOLD)
        tmpl = below(hs[:, :6], self.n_templates[None, :])
        perm = np.asarray(permute, dtype=bool)
        order = np.where(np.broadcast_to(perm, people.shape)[:, None], _PERMS[below(hs[:, 6], len(_PERMS))],
                         np.arange(len(ATTRS))[None, :])
        rev = below(hs[:, 7], len(REVERSE_TEMPLATES))
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
            hs = mix64(base[:, None] + (np.arange(19, dtype=np.uint64)[None, :] + np.uint64(1)) * GOLD)
        order = _PERMS[below(hs[:, 0], len(_PERMS))]
        frag = below(hs[:, 1:7], self.n_frag[None, :])
        opener = below(hs[:, 7:7 + groups], len(REVERSE_OPENERS))
        name = below(hs[:, 13:13 + groups], len(REVERSE_NAME_CLAUSES))
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
# Rendering kernels (numba)
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
