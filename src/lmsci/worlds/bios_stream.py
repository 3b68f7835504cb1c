"""Streaming bioS data: biographies and QA rendered, tokenised and packed on the fly, in passes over the people.

Source: Allen-Zhu & Li, Physics of Language Models Part 3.1 (arXiv 2309.14316, Section 2: bioS,
multiM / permute / fullname; App. C: mixed training with QA at QA_r = 0.8 of the tokens), Part 3.3
(arXiv 2404.05405, Section 2: bioS(N), exposures, a fresh biography per exposure). Same world,
templates, attribute values and vocabulary as :mod:`lmsci.worlds.bios` (whose ``bio_docs`` +
``pack`` materialise a whole epoch in RAM and cost ~75 us + ~250 us per biography in Python).

How it works
------------
* Rendering (:mod:`lmsci.worlds.bios_render`): pre-tokenised template segments and counter-based choices
  (:mod:`lmsci.worlds.counter_rng`), so a biography is a pure function of ``(seed, person, copy)``:
  :meth:`BioStream.training_bios` re-renders exactly the biographies a model was trained on, and the stream
  does not depend on the chunk size.
* Exposures are *passes*: pass ``p`` (``p = 0 .. exposures-1``) shows every person once, in an
  order given by a keyed Feistel permutation of ``[0, N)`` (cycle walking, O(1) memory; key =
  ``(order_seed, p)``). Copy ``p mod M`` is shown in pass ``p`` (bioS single: M = 1, one fixed
  biography; multiM: M fixed biographies), or copy ``p`` with ``fresh=True`` (a new template choice
  and, with ``permute``, a new sentence order at every exposure, as bioS-multi+permute and Part 3.3).
  After the whole stream every person has seen exactly ``exposures`` biographies.
* Packing (:mod:`lmsci.worlds.bios_pack`): the rule of :func:`lmsci.worlds.bios_datasets.pack` on a running buffer
  carried across chunks, so no window holds two documents of one person; batching, resuming and the
  counters are the streams' common base (:mod:`lmsci.worlds.bios_batches`).

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

API (all streams are iterables of :class:`~lmsci.worlds.bios_batches.StreamBatch`; iterate again to restart
from the beginning):

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
  batch s); ``stream.to_packed()`` for code that takes a :class:`lmsci.worlds.bios_datasets.Packed`;
  ``bio.training_bios(people, copy)``: the exact biographies trained on, with spans.

Benchmark: ``benchmarks/bench_bios_pipeline.py``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from lmsci.errors import ConfigError
from lmsci.worlds.bios import ATTRS, BiosWorld, Doc
from lmsci.worlds.bios_batches import Stream
from lmsci.worlds.bios_pack import WindowBlock
from lmsci.worlds.bios_render import INVERSE, TAG_DOCS, TAG_MIX, TAG_ORDER, TAG_QA, Docs, docs_of
from lmsci.worlds.counter_rng import below, feistel_permutation, hash_u64


class BioStream(Stream):
    """Biography windows: every listed person seen ``exposures`` times, packed on the fly.

    Args:
        world: the bioS world.
        seq_len: tokens per window; batch_size: windows per :class:`~lmsci.worlds.bios_batches.StreamBatch`.
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
        shuffle: no person twice in a window (as :func:`lmsci.worlds.bios_datasets.pack`); passes are always
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


class QAStream(Stream):
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


class DocStream(Stream):
    """Fixed documents (any rendering, e.g. the Python :meth:`BiosWorld.bio` / :meth:`BiosWorld.bio_reversed`
    ones) seen ``epochs`` times, each pass in a keyed pseudo-random order, packed on the fly by the packer
    of this module (no person twice in a window): the windows of :func:`lmsci.worlds.bios_datasets.pack` over ``epochs``
    shuffled copies, without materialising them (memory: the documents once, not ``epochs`` packings).

    Used by ``reversal-curse``'s gpu and paper presets, whose forward (multiM) and reversed biographies
    (Part 3.2, arXiv 2309.14402, Section 5) are rendered once in Python and then streamed.

    Args:
        world: the bioS world (vocabulary); docs: the documents (kinds ``"bio"``, ``"bio_reverse"``, ``"qa"``,
            ``"inverse_qa"``): a list of :class:`~lmsci.worlds.bios.Doc`, or :class:`Docs` rendered by
            :class:`~lmsci.worlds.bios_render.BiosRenderer` (e.g.
            ``Docs.concat(renderer.bios(...), renderer.bios_reversed(...))``);
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


class MixedStream(Stream):
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
            for blk in self.mix64(False, state, limit=start):
                if on_skip is not None:
                    on_skip(blk)
            if state[0] < start:
                return
        yield from self.mix64(tokens, state)

    def mix64(self, tokens: bool, state: list[int], limit: int | None = None,
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
                us = (below(hash_u64(self.seed, TAG_MIX, np.arange(base, base + 1024)), 1 << 30) / (1 << 30)).tolist()
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
    up); :meth:`~lmsci.worlds.bios_batches.Stream.count_windows` gives the exact number."""
    return math.ceil(stream.tokens_per_pass() * stream.exposures_per_person / stream.seq_len)
