"""The base of the bioS streams: chunks of documents packed into windows, batched, resumable from any batch.

A :class:`Stream` subclass says which documents come in which order (``_chunk_specs``, ``_render_chunk``,
``_rerender``: :mod:`lmsci.worlds.bios_stream`); this base packs them (:class:`~lmsci.worlds.bios_pack.Packer`),
cuts the windows into :class:`StreamBatch` es, counts exposures, resumes from batch k without rendering the
skipped windows, and adapts the stream to :func:`lmsci.train.trainer.train` (:meth:`Stream.get_batch_fn`) and to
code that takes a :class:`lmsci.worlds.bios_datasets.Packed` (:meth:`Stream.to_packed`).

Source: Allen-Zhu & Li, Physics of Language Models Part 3.1 (arXiv 2309.14316, Section 2), Part 3.3
(arXiv 2404.05405, Section 2: exposures).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from lmsci.errors import ConfigError
from lmsci.worlds.bios import BiosWorld
from lmsci.worlds.bios_datasets import Packed
from lmsci.worlds.bios_pack import Packer, WindowBlock
from lmsci.worlds.bios_render import KIND_BIO, KIND_BIO_REVERSE, KIND_NAMES, BiosRenderer, Docs


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


class Stream:
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
        """Reversed biographies (kind ``"bio_reverse"``, :class:`~lmsci.worlds.bios_stream.DocStream`) per person in
        the batches so far."""
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
        packer = Packer(self.seq_len, self.shuffle, tokens=tokens)
        if start > 0:
            lp = Packer(self.seq_len, self.shuffle, tokens=False)
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
                    packer = Packer.restore(snap, self.seq_len, self.shuffle, self._rerender)
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
        (for code written for :func:`lmsci.worlds.bios_datasets.pack`; memory grows with the windows)."""
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
