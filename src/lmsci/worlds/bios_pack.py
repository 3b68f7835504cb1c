"""Packing bioS documents into fixed-length windows, on a running buffer carried across chunks.

Packing follows :func:`lmsci.worlds.bios_datasets.pack` step for step (greedy, ``<pad>`` after the last document that
fits, deferral of a document whose person is already in the window, deferred documents tried first) on a
running buffer carried across chunks (a numba loop), so no window holds two documents of one person. One
deviation: when ``max_pending`` (64) documents are deferred the window is closed instead of deferring more
(only matters when N is below the number of documents per window; the old path would defer without bound).

Source: Allen-Zhu & Li, Physics of Language Models Part 3.1 (arXiv 2309.14316, Section 2). :class:`Packer`
takes :class:`~lmsci.worlds.bios_render.Docs` and gives :class:`WindowBlock`; the streams of
:mod:`lmsci.worlds.bios_batches` drive it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from lmsci.errors import ConfigError
from lmsci.worlds.bios_render import KIND_INVERSE_QA, KIND_QA, Docs

IGNORE = -100
"""Target of a position without loss (as :func:`torch.nn.functional.cross_entropy`'s ``ignore_index``)."""


@njit(cache=True)
def _in_window(cur_people, cur_np, person):  # pragma: no cover - compiled
    """Whether ``person`` is among the first ``cur_np`` entries of ``cur_people`` (a document of theirs is in the
    window being filled)."""
    for u in range(cur_np):
        if cur_people[u] == person:
            return True
    return False


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
                if not (check and _in_window(cur_people, cur_np, doc_person[d])):
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
                clash = check and _in_window(cur_people, cur_np, doc_person[d])
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


class Packer:
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
    def restore(cls, snap: tuple, seq_len: int, check: bool, rerender, max_pending: int = 64) -> Packer:
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
