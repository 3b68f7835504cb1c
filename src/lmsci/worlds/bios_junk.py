"""Junk data in the bioS stream, and the domain-token remedy (Physics of LMs Part 3.3, arXiv 2404.05405).

Part 3.3's data signal-to-noise results (as recorded in ``/work/notes/capacity_paper_numbers.md``): when most of the
training tokens are *junk* (the paper's example: useful : junk = 1 : 7 in tokens, useful data at 100 exposures) the
knowledge a model stores about the useful data falls sharply (about 20x); prepending a domain token (like
``wikipedia.org``) to every piece of useful data shrinks the loss to about 2x. The junk here is what the paper
can build from bioS itself: biographies of a **separate junk population** drawn from the same name space and the
same attribute pools, each junk person shown ``exposures`` times (1 = knowledge seen once, never repeated: noise the
model cannot profitably store; a larger value makes the junk repetitive, hence learnable).

How the stream is built (:class:`JunkBioStream`, a :class:`~lmsci.worlds.bios_stream.BioStream`):

* The useful people are the world's N people with their usual schedule (``exposures`` passes, a Feistel order per
  pass, fresh renderings when ``fresh``): their biographies, and so the facts of :mod:`lmsci.measure.knowledge`,
  are exactly those of the plain :class:`BioStream` with the same arguments (tested), apart from the domain token.
* The junk population is a second :class:`~lmsci.worlds.bios.BiosWorld` of ``n_junk`` people with a seed derived
  from the useful world's (``junk_world_seed``); a junk person whose full name is also a useful person's is
  dropped, so no name in the stream means two people. ``n_junk`` is chosen so that the junk biographies are
  ``share`` of the stream's non-pad tokens: ``n_junk * exposures_junk * L = share / (1 - share) * N * exposures *
  (L + domain)``, with ``L`` the expected biography length (the useful and junk biographies come from the same
  templates, so the realised share matches to within rounding; measured in the tests).
* Documents are mixed, not windows: every chunk of useful biographies carries its proportional slice of the junk
  biographies (junk pass ``q`` shows every junk person once, in a Feistel order keyed by ``(order_seed, q)``), and
  the chunk is shuffled by a counter-based permutation before packing. Windows still never hold one person twice.
  In :class:`~lmsci.worlds.bios_batches.StreamBatch` a junk document's person is ``N + j`` (``j`` indexes the junk
  population), its kind is ``"bio"``.
* With ``domain_token`` every useful biography is ``<bos> DOMAIN ...``: one new token id, ``len(world.vocab)``
  (:meth:`JunkBioStream.vocab_size` is one larger), right after ``<bos>``; junk biographies never carry it. The
  token is a training target like any other; :meth:`JunkBioStream.eval_prefix` is what the bit estimator puts
  after ``<bos>`` of every evaluation biography (``measure_bits(..., prefix=...)``), so the useful facts are
  scored in the context they were trained in.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from pydantic import Field

from lmsci.config import StrictModel
from lmsci.errors import ConfigError
from lmsci.worlds.bios import BiosWorld
from lmsci.worlds.bios_batches import StreamBatch
from lmsci.worlds.bios_pack import WindowBlock
from lmsci.worlds.bios_render import BiosRenderer, Docs
from lmsci.worlds.bios_stream import BioStream
from lmsci.worlds.counter_rng import feistel_permutation, hash_u64

TAG_JUNK_WORLD, TAG_JUNK_ORDER, TAG_JUNK_MIX = 43, 47, 53
MAX_JUNK_PEOPLE = 10_000_000


class JunkSpec(StrictModel):
    """Junk data in a bioS training stream (module docstring).

    Attributes:
        share: fraction of the stream's non-pad tokens that are junk biographies, in ``[0, 1)`` (Part 3.3's
            1 : 7 example is ``0.875``); 0 = no junk.
        exposures: biographies per junk person (1: every junk biography is a new person).
        domain_token: prepend the domain token to every useful biography (the remedy).
        seed: which junk population (with the useful world's seed it gives the junk world's seed).
    """

    share: float = Field(0.0, ge=0.0, lt=1.0)
    exposures: int = Field(1, ge=1)
    domain_token: bool = False
    seed: int = Field(0, ge=0)


def junk_world_seed(world: BiosWorld, spec: JunkSpec) -> int:
    """The seed of the junk population's :class:`BiosWorld`: a hash of the useful world's seed and ``spec.seed``
    (never the useful world's own draw)."""
    return int(hash_u64(world.seed, TAG_JUNK_WORLD, spec.seed)[()] >> np.uint64(2))


def name_index(world: BiosWorld) -> np.ndarray:
    """Each person's full name as one int64 in ``[0, N0)`` (the index in the product of the name pools)."""
    p = world.pools
    radices = [len(p.first1), len(p.first2), len(p.middle1), len(p.middle2), len(p.last1), len(p.last2)]
    flat = np.zeros(world.n, dtype=np.int64)
    for j, r in enumerate(radices):
        flat = flat * r + world.names[:, j]
    return flat


def add_prefix(docs: Docs, token: int) -> Docs:
    """``docs`` with ``token`` inserted right after each document's first token (``<bos>``); lengths grow by one,
    ``loss_start`` is kept (so the inserted token is a target predicted from ``<bos>``)."""
    ln = docs.length + 1
    off = np.cumsum(ln) - ln
    if docs.tok is None:
        return Docs(None, off, ln, docs.loss_start, docs.person, docs.kind, docs.copy)
    tok = np.empty(int(ln.sum()), dtype=docs.tok.dtype)
    tok[off] = docs.tok[docs.off]
    tok[off + 1] = token
    rest = docs.length - 1
    start = np.repeat(off + 2, rest)
    within = np.arange(int(rest.sum()), dtype=np.int64) - np.repeat(np.cumsum(rest) - rest, rest)
    tok[start + within] = docs.tok[np.repeat(docs.off + 1, rest) + within]
    return Docs(tok, off, ln, docs.loss_start, docs.person, docs.kind, docs.copy)


class JunkBioStream(BioStream):
    """A :class:`BioStream` of the world's people with junk biographies mixed in (module docstring).

    Args:
        world: the useful bioS world (its N people are the useful population).
        junk: the :class:`JunkSpec`.
        seq_len, batch_size, exposures, seed, permute, fullname, fresh, order_seed, shuffle, drop_last,
        count_exposures, as_torch, chunk: as :class:`BioStream` (one group: every person of ``world``; junk
            biographies use the same ``permute`` / ``fullname`` / ``fresh``).

    Attributes:
        n_junk: people in the junk population; junk_world: their :class:`BiosWorld`.
        junk_exposures: int64 ``[n_junk]`` junk biographies per junk person in the batches so far.
        junk_tokens_yielded: non-pad tokens of junk biographies in the batches so far.

    Raises:
        ConfigError: as :class:`BioStream`; a junk population over 10^7 people; ``seq_len`` below the longest
            biography plus the domain token.
    """

    def __init__(self, world: BiosWorld, *, junk: JunkSpec, seq_len: int, batch_size: int, exposures: int,
                 seed: int, permute: bool = False, fullname: bool = False, fresh: bool = False,
                 order_seed: int | None = None, shuffle: bool = True, drop_last: bool = False,
                 count_exposures: bool = True, as_torch: bool = True, chunk: int = 4096):
        if not isinstance(junk, JunkSpec):
            raise ConfigError("junk", type(junk).__name__, "a lmsci.worlds.bios_junk.JunkSpec")
        self.junk = junk
        self.n_junk = 0
        super().__init__(world, seq_len=seq_len, batch_size=batch_size, exposures=exposures, seed=seed,
                         permute=permute, fullname=fullname, fresh=fresh, order_seed=order_seed, shuffle=shuffle,
                         drop_last=drop_last, count_exposures=count_exposures, as_torch=as_torch, chunk=chunk)
        self.domain_id = len(world.vocab) if junk.domain_token else None
        longest = self.renderer.max_bio_len - int(self.renderer.seg_len[self.renderer.rev_seg].max())
        if longest + int(junk.domain_token) > seq_len:
            raise ConfigError("seq_len", seq_len, f">= the longest biography plus the domain token ({longest + 1})")
        per_person = self.tokens_per_pass() / world.n  # expected biography length, templates uniform
        want = junk.share / (1.0 - junk.share) * world.n * self.exposures_per_person
        want *= (per_person + int(junk.domain_token)) / per_person / junk.exposures
        n_junk = int(round(want))
        if n_junk > MAX_JUNK_PEOPLE:
            raise ConfigError("junk.share", junk.share, f"a share needing at most {MAX_JUNK_PEOPLE:,} junk people "
                              f"(this needs {n_junk:,}: raise junk.exposures or lower the share)")
        self.junk_world: BiosWorld | None = None
        self._junk_ids = np.zeros(0, dtype=np.int64)
        if n_junk > 0:
            extra = 16 + int(4 * world.n * n_junk / world.pools.n0)  # room for dropped name collisions
            jw = BiosWorld(n_junk + extra, seed=junk_world_seed(world, junk), unique_date_city=False)
            keep = np.flatnonzero(~np.isin(name_index(jw), name_index(world)))[:n_junk]
            if len(keep) < n_junk:
                raise RuntimeError("too many junk names collide with useful ones")  # pragma: no cover
            self.junk_world, self._junk_ids = jw, keep
            self._junk_renderer = BiosRenderer(jw)
        self.n_junk = n_junk
        self._reset_counts()

    # -- sizes -------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Token ids the model needs: the world's vocabulary, plus the domain token when there is one."""
        return len(self.world.vocab) + int(self.domain_id is not None)

    def eval_prefix(self) -> list[int]:
        """The tokens to put after ``<bos>`` of a useful evaluation biography: ``[domain token]`` or ``[]``."""
        return [] if self.domain_id is None else [self.domain_id]

    @property
    def junk_token_fraction(self) -> float:
        """Fraction of the non-pad tokens yielded so far that are junk biographies."""
        return self.junk_tokens_yielded / max(self.tokens_yielded, 1)

    # -- counters ----------------------------------------------------------------------------------
    def _reset_counts(self) -> None:
        super()._reset_counts()
        self.junk_exposures = np.zeros(self.n_junk if self.count_exposures else 0, dtype=np.int64)
        self.junk_tokens_yielded = 0

    def _count(self, w: WindowBlock) -> None:
        if self.count_exposures:
            useful = w.doc_person < self.world.n
            np.add.at(self.exposures, w.doc_person[useful], 1)
            np.add.at(self.junk_exposures, w.doc_person[~useful] - self.world.n, 1)

    def _batch(self, w: WindowBlock) -> StreamBatch:
        b = super()._batch(w)
        j = w.doc_person >= self.world.n
        if j.any():
            self.junk_tokens_yielded += int(self._render_junk(w.doc_person[j] - self.world.n, w.doc_copy[j],
                                                              True).length.sum())
        return b

    # -- rendering ---------------------------------------------------------------------------------
    def _render_useful(self, m: np.ndarray, p: int, lengths_only: bool) -> Docs:
        docs = self._render_members(m, p, lengths_only)
        return docs if self.domain_id is None else add_prefix(docs, self.domain_id)

    def _render_junk(self, members: np.ndarray, copies: np.ndarray, lengths_only: bool) -> Docs:
        d = self._junk_renderer.bios(self._junk_ids[members], copies, self.seed, permute=bool(self._perm[0]),
                                     fullname=bool(self._full[0]), lengths_only=lengths_only)
        return Docs(d.tok, d.off, d.length, d.loss_start, members + self.world.n, d.kind, d.copy)

    def _junk_slice(self, j0: int, j1: int, lengths_only: bool) -> Docs:
        t = np.arange(j0, j1, dtype=np.int64)
        q, pos = t // self.n_junk, t % self.n_junk
        members = np.empty_like(t)
        for qq in np.unique(q):
            key = int(hash_u64(self.order_seed, TAG_JUNK_ORDER, int(qq))[()] >> np.uint64(1))
            sel = q == qq
            members[sel] = feistel_permutation(pos[sel], self.n_junk, key)
        copies = q if self.fresh else np.zeros_like(q)
        return self._render_junk(members, copies, lengths_only)

    def _chunk_specs(self) -> Iterator[tuple]:
        total_u = self.n_members * self.exposures_per_person
        total_j = self.n_junk * self.junk.exposures
        for p, s, e, key, last in super()._chunk_specs():
            u0, u1 = p * self.n_members + s, p * self.n_members + e
            yield p, s, e, key, u0 * total_j // total_u, u1 * total_j // total_u, last

    def _render_chunk(self, spec: tuple, lengths_only: bool) -> Docs:
        p, s, e, key, j0, j1, _ = spec
        useful = self._render_useful(feistel_permutation(np.arange(s, e), self.n_members, key), p, lengths_only)
        if j1 <= j0:
            return useful
        docs = Docs.concat(useful, self._junk_slice(j0, j1, lengths_only))
        order = np.argsort(hash_u64(self.order_seed, TAG_JUNK_MIX, p, s, np.arange(len(docs))), kind="stable")
        return docs.take(order)

    def _rerender(self, person, kind, copy) -> Docs:
        person, copy = np.asarray(person, dtype=np.int64), np.asarray(copy, dtype=np.int64)
        j = person >= self.world.n
        parts, idx = [], []
        if (~j).any():
            u = super()._rerender(person[~j], kind, copy[~j])
            parts.append(u if self.domain_id is None else add_prefix(u, self.domain_id))
            idx.append(np.flatnonzero(~j))
        if j.any():
            parts.append(self._render_junk(person[j] - self.world.n, copy[j], False))
            idx.append(np.flatnonzero(j))
        docs = parts[0] if len(parts) == 1 else Docs.concat(parts[0], parts[1])
        inverse = np.empty(len(person), dtype=np.int64)
        inverse[np.concatenate(idx)] = np.arange(len(person))
        return docs.take(inverse)

    def training_bios(self, people, copy: int = 0) -> list[Any]:
        """As :meth:`BioStream.training_bios` (useful people only); the domain token, when there is one, is not in
        these documents: put :meth:`eval_prefix` after their ``<bos>``."""
        return super().training_bios(people, copy)


def junk_stream(world: BiosWorld, junk: JunkSpec | None, **kw: Any) -> BioStream:
    """The training stream of ``world`` with ``junk``: a plain :class:`BioStream` when ``junk`` is None or has no
    share and no domain token (identical to the stream without the option), else a :class:`JunkBioStream`.
    ``kw`` are :class:`BioStream`'s keyword arguments (``seq_len``, ``batch_size``, ``exposures``, ``seed``, ...)."""
    if junk is None or (junk.share == 0.0 and not junk.domain_token):
        return BioStream(world, **kw)
    return JunkBioStream(world, junk=junk, **kw)
