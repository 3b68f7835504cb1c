"""Tokenizers for iGSM text, and packed training windows.

* ``IGSMTokenizer(kind="word")``: word level over the world's fixed vocabulary (every word of the
  category and item names, the sentence templates, the 52 symbols a-zA-Z, the numbers 0..22 as single
  tokens, punctuation, ``'s``), each with and without a leading space (as GPT-2's ``Ġ``), so
  ``decode(encode(t)) == t`` for every generated text. Specials: ``<pad>`` ``<bos>`` ``<eos>``
  ``<unk>`` and the markers ``<prob>`` ``<sol>`` ``<ans>`` ``[BACK]`` ``[START]`` ``[MID]`` ``[END]``
  (the last three for V-probing queries, Part 2.1 Section 4).
* ``IGSMTokenizer(kind="bpe", vocab_size=...)``: byte-level BPE (GPT-2 style, Hugging Face
  ``tokenizers``) trained on generated iGSM documents (nothing is downloaded), with the same specials.

Both give ``encode_with_offsets(text) -> (ids, [(start, end)])`` so a probe can find the token at a
character position (:meth:`IGSMTokenizer.token_index`) and a trainer can turn a character mask (the
mistakes of retry data) into a token mask (:meth:`IGSMTokenizer.token_mask`).

:func:`packed_windows` streams fresh problems, tokenised as ``<bos> doc <eos>`` and concatenated into
``seq_len + 1`` token windows (Part 2.1 App. F: "fresh problems concatenated into context windows"),
in constant memory.
"""

from __future__ import annotations

import itertools
import random
import re
import string
from collections.abc import Iterable, Iterator
from typing import Optional

import numpy as np

from lmsci.errors import ConfigError, DataError, UnknownNameError
from lmsci.worlds.igsm.names import NAME_WORDS

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
MARKERS = ("<prob>", "<sol>", "<ans>", "[BACK]", "[START]", "[MID]", "[END]")
TEMPLATE_WORDS = ("The", "number", "of", "each", "equals", "more", "than", "times", "as", "much", "the", "sum",
                  "and", "difference", "How", "many", "does", "have", "Define", "so")
PUNCT = (".", ",", "?", ";", "=", "+", "-", "*", "'s")
_PIECE = re.compile(r" ?(?:<prob>|<sol>|<ans>|<bos>|<eos>|<pad>|<unk>|\[BACK\]|\[START\]|\[MID\]|\[END\]|'s|"
                    r"[A-Za-z]+|\d+|\S)")


class IGSMTokenizer:
    """Tokenizer of iGSM documents (see the module docstring).

    Args:
        world: an :class:`~lmsci.worlds.igsm.world.IGSMWorld`: its ``cfg.tokenizer`` is the default
            ``kind`` and BPE is trained on its problems (the word vocabulary is the same for all worlds).
        kind: ``"word"`` or ``"bpe"``; None: the world's ``cfg.tokenizer`` (``"word"`` without a world).
        vocab_size: BPE vocabulary size (>= 300).
        n_train: problems generated to train the BPE merges; ``seed`` their seed.

    Raises:
        UnknownNameError: unknown kind. ConfigError: BPE vocab_size below 300.
        DataError (``encode``, word level, ``strict=True``): a piece outside the vocabulary.
    """

    def __init__(self, world=None, kind: Optional[str] = None, vocab_size: int = 2048, n_train: int = 2000,
                 seed: int = 0):
        if kind is None:
            kind = getattr(getattr(world, "cfg", None), "tokenizer", "word")
        self.kind = kind
        if kind == "word":
            base = list(MARKERS) + list(TEMPLATE_WORDS) + list(PUNCT) + [str(i) for i in range(23)] + \
                list(string.ascii_letters) + list(NAME_WORDS)
            seen, vocab = set(), list(SPECIALS)
            for t in base:
                for v in (t, " " + t):
                    if v not in seen:
                        seen.add(v)
                        vocab.append(v)
            self.itos = vocab
            self.stoi = {t: i for i, t in enumerate(vocab)}
            self.hf = None
        elif kind == "bpe":
            if not isinstance(vocab_size, int) or vocab_size < 300:
                raise ConfigError("vocab_size", vocab_size, "an integer >= 300 for byte-level BPE")
            self.hf = _train_bpe(world, vocab_size, n_train, seed)
            self.stoi = {t: self.hf.token_to_id(t) for t in SPECIALS + MARKERS}
            self.itos = None
        else:
            raise UnknownNameError("kind", kind, ["word", "bpe"])
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (self.stoi[t] for t in SPECIALS)
        self.back_id = self.stoi["[BACK]"]
        self.sol_id, self.ans_id, self.prob_id = self.stoi["<sol>"], self.stoi["<ans>"], self.stoi["<prob>"]

    @property
    def vocab_size(self) -> int:
        """Number of ids (word vocabulary: its entries; BPE: the trained vocabulary)."""
        return len(self.itos) if self.hf is None else self.hf.get_vocab_size()

    def token_id(self, token: str) -> int:
        """Id of one vocabulary entry (e.g. ``"<sol>"``, ``" 7"``)."""
        if self.hf is None:
            return self.stoi[token]
        return self.hf.token_to_id(token)

    def encode_with_offsets(self, text: str, strict: bool = True) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids and the ``(start, end)`` character span of each token."""
        if self.hf is not None:
            enc = self.hf.encode(text)
            return list(enc.ids), [tuple(o) for o in enc.offsets]
        pieces = _PIECE.findall(text)
        lens = [len(t) for t in pieces]
        if sum(lens) == len(text):  # fast path: the pieces tile the text
            get, unk = self.stoi.get, self.unk_id
            ids = [get(t, -1) for t in pieces]
            if -1 not in ids or not strict:
                ends = list(itertools.accumulate(lens))
                return [unk if i < 0 else i for i in ids], list(zip([0] + ends[:-1], ends))
        ids, offs = [], []
        pos = 0
        for m in _PIECE.finditer(text):
            if m.start() != pos and strict:
                raise DataError(f"character(s) {text[pos:m.start()]!r} at {pos} cannot be tokenised")
            t = m.group(0)
            i = self.stoi.get(t)
            if i is None:
                if strict:
                    raise DataError(f"{t!r} (at {m.start()}) is not in the iGSM word vocabulary")
                i = self.unk_id
            ids.append(i)
            offs.append((m.start(), m.end()))
            pos = m.end()
        if pos != len(text) and strict:
            raise DataError(f"trailing {text[pos:]!r} cannot be tokenised")
        return ids, offs

    def encode(self, text: str, strict: bool = True) -> list[int]:
        """Token ids of ``text`` (no ``<bos>``/``<eos>`` added)."""
        if self.hf is not None:
            return list(self.hf.encode(text).ids)
        pieces = _PIECE.findall(text)
        stoi = self.stoi
        if all(t in stoi for t in pieces) and sum(map(len, pieces)) == len(text):
            return [stoi[t] for t in pieces]
        return self.encode_with_offsets(text, strict)[0]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``; in the word vocabulary an id outside it decodes as ``<unk>``, special tokens are kept."""
        if self.hf is not None:
            return self.hf.decode([int(i) for i in ids], skip_special_tokens=False)
        n = len(self.itos)
        return "".join(self.itos[int(i)] if 0 <= int(i) < n else "<unk>" for i in ids)

    @staticmethod
    def token_index(offsets: list[tuple[int, int]], position_char: int) -> int:
        """Index of the last token that ends at or before ``position_char`` (the token whose hidden state
        has read the prefix ``text[:position_char]``); -1 if none."""
        lo, hi = 0, len(offsets)
        while lo < hi:
            mid = (lo + hi) // 2
            if offsets[mid][1] <= position_char:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    @staticmethod
    def token_mask(offsets: list[tuple[int, int]], char_mask: np.ndarray) -> np.ndarray:
        """bool ``[n_tokens]``: True where any character of the token is masked."""
        if not len(offsets):
            return np.zeros(0, dtype=bool)
        cs = np.concatenate([[0], np.cumsum(char_mask.astype(np.int64))])
        st = np.fromiter((o[0] for o in offsets), dtype=np.int64, count=len(offsets))
        en = np.fromiter((o[1] for o in offsets), dtype=np.int64, count=len(offsets))
        return (cs[en] - cs[st]) > 0


def _train_bpe(world, vocab_size: int, n_train: int, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from lmsci.worlds.igsm.world import IGSMWorld

    w = world if world is not None else IGSMWorld("igsm-med")
    rnd = random.Random(seed)
    docs = []
    for _ in range(n_train):
        p = w.sample(rnd, split="train")
        docs.append(p.text(fmt="pq")[0])
        docs.append(p.problem_text("qp"))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=list(SPECIALS + MARKERS))
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


def packed_windows(world, tokenizer: IGSMTokenizer, seq_len: int, batch_size: int, seed: int,
                   split: str = "train", op: Optional[int] = None, fmt: Optional[str] = None,
                   retry_rate: Optional[float] = None, retry_weak: Optional[bool] = None,
                   mask_mistakes: bool = False) -> Iterator[tuple]:
    """Training batches of packed fresh problems, for ever, deterministic per ``seed``.

    Each document is ``<bos> text <eos>`` (``Problem.text``, with retry data at ``retry_rate``,
    default the world's); documents are concatenated and cut into consecutive ``seq_len + 1`` token
    windows. Memory is constant (one partial window of carry-over).

    Yields:
        ``(input_ids, targets)``, LongTensors ``[batch_size, seq_len]``; ``targets`` is the input
        shifted by one, ``-100`` where the target token belongs to a mistake and ``mask_mistakes``.

    Raises:
        ConfigError: seq_len or batch_size < 1, retry rate outside [0, 1).
    """
    import torch

    from lmsci.worlds.igsm.config import check_retry_rate

    if seq_len < 1:
        raise ConfigError("seq_len", seq_len, "an integer >= 1")
    if batch_size < 1:
        raise ConfigError("batch_size", batch_size, "an integer >= 1")
    q = check_retry_rate(world.cfg.retry_rate if retry_rate is None else retry_rate)
    weak = world.cfg.retry_weak if retry_weak is None else retry_weak
    rnd = random.Random(seed)
    probs = world.stream(rnd.getrandbits(63), split=split, op=op)
    W = seq_len + 1
    buf_ids = np.empty(0, dtype=np.int64)
    buf_m = np.empty(0, dtype=bool)
    while True:
        ids_out = np.empty((batch_size, W), dtype=np.int64)
        m_out = np.empty((batch_size, W), dtype=bool)
        for b in range(batch_size):
            while len(buf_ids) < W:
                p = next(probs)
                text, cmask = p.text(fmt=fmt, retry_rate=q, rng=rnd, retry_weak=weak)
                if q > 0:
                    ids, offs = tokenizer.encode_with_offsets(text)
                    tm = tokenizer.token_mask(offs, cmask)
                else:
                    ids = tokenizer.encode(text)
                    tm = np.zeros(len(ids), dtype=bool)
                buf_ids = np.concatenate([buf_ids, [tokenizer.bos_id], ids, [tokenizer.eos_id]])
                buf_m = np.concatenate([buf_m, [False], tm, [False]])
            ids_out[b], m_out[b] = buf_ids[:W], buf_m[:W]
            buf_ids, buf_m = buf_ids[W:], buf_m[W:]
        x = torch.from_numpy(ids_out[:, :-1].copy())
        y = torch.from_numpy(ids_out[:, 1:].copy())
        if mask_mistakes:
            y[torch.from_numpy(m_out[:, 1:].copy())] = -100
        yield x, y


def get_batch_fn(world, tokenizer: IGSMTokenizer, seq_len: int, batch_size: int, **kw):
    """A ``get_batch(step, generator)`` for :func:`lmsci.train.trainer.train`: each call packs fresh
    problems seeded from ``generator`` (so the trainer's seed decides the data)."""
    import torch

    def get_batch(step, generator):
        s = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
        return next(packed_windows(world, tokenizer, seq_len, batch_size, seed=s, **kw))

    return get_batch
