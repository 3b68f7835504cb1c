"""Tokenizers for real text: character-level and byte-level BPE (Hugging Face ``tokenizers``).

Both share one interface::

    tok.encode(text) -> list[int]        tok.decode(ids) -> str
    tok.vocab_size -> int                tok.kind -> "char" | "bpe"
    tok.save(dir)                        load_tokenizer(dir) -> CharTokenizer | BPETokenizer
    tok.fingerprint() -> str             (hash of the vocabulary; used in cache keys)

``save(dir)`` writes ``lmsci_tokenizer.json`` (kind, and the characters for ``char``) and, for
BPE, the Hugging Face ``tokenizer.json`` next to it, so a model directory that holds the weights
also holds its tokenizer and ``load_tokenizer(model_dir)`` restores it.

Sources: byte-level BPE as in GPT-2 (Radford et al. 2019, "Language Models are Unsupervised
Multitask Learners", section 2.2); BPE for subwords: Sennrich, Haddow, Birch 2016, arXiv 1508.07909.
Character-level modelling of Shakespeare as in Karpathy's char-rnn / nanoGPT ``shakespeare_char``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, Union

from lmsci.errors import ConfigError, DataError

META_FILE = "lmsci_tokenizer.json"
HF_FILE = "tokenizer.json"
TokenizerKind = Literal["char", "bpe"]


class CharTokenizer:
    """One id per character; ids follow the sorted character set.

    Args:
        chars: the alphabet (duplicates are removed, order is sorted).

    Raises (in ``encode``):
        DataError: the text contains a character outside the alphabet (the message names it).
    """

    kind = "char"

    def __init__(self, chars: Iterable[str]):
        self.chars = sorted(set(chars))
        if not self.chars or any(len(c) != 1 for c in self.chars):
            raise ConfigError("chars", chars, "a non-empty set of single characters")
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def train(cls, texts: Iterable[str]) -> CharTokenizer:
        """The alphabet of all characters in ``texts``."""
        alphabet: set[str] = set()
        for t in texts:
            alphabet.update(t)
        return cls(alphabet)

    @property
    def vocab_size(self) -> int:
        """Number of ids: the size of the alphabet."""
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """One id per character of ``text`` (length ``len(text)``).

        Raises:
            DataError: a character outside the alphabet (named in the message).
        """
        try:
            return [self.stoi[c] for c in text]
        except KeyError as e:
            raise DataError(f"character {e.args[0]!r} is not in the character tokenizer's alphabet "
                            f"({self.vocab_size} characters: {''.join(self.chars)!r})") from None

    def decode(self, ids: Iterable[int]) -> str:
        """The characters of ``ids`` joined (IndexError for an id >= ``vocab_size``)."""
        return "".join(self.chars[int(i)] for i in ids)

    def save(self, directory: str | Path) -> None:
        """Write ``lmsci_tokenizer.json`` (kind and alphabet) into ``directory`` (created if missing)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / META_FILE).write_text(json.dumps({"kind": "char", "chars": "".join(self.chars)}))

    def fingerprint(self) -> str:
        """16 hex characters of the SHA-256 of the alphabet (cache keys change with the vocabulary)."""
        return hashlib.sha256(("char:" + "".join(self.chars)).encode()).hexdigest()[:16]


class BPETokenizer:
    """Byte-level BPE (GPT-2 style) backed by a Hugging Face ``tokenizers.Tokenizer``.

    Every byte is in the base alphabet, so any text encodes and ``decode(encode(t)) == t``.
    """

    kind = "bpe"

    def __init__(self, hf_tokenizer):
        self.hf = hf_tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 1024, min_frequency: int = 2) -> BPETokenizer:
        """Train byte-level BPE merges on ``texts``.

        Args:
            vocab_size: target vocabulary size including the 256 byte tokens (>= 257).

        Raises:
            ConfigError: ``vocab_size`` below 257.
        """
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        if vocab_size < 257:
            raise ConfigError("vocab_size", vocab_size, "an integer >= 257 for byte-level BPE (256 bytes + merges)")
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
        tok.train_from_iterator(list(texts), trainer=trainer)
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        """Number of ids: the 256 byte tokens plus the merges."""
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added); ``decode(encode(t)) == t``."""
        return self.hf.encode(text).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """:meth:`encode` of each text (Hugging Face ``encode_batch``, parallel in Rust)."""
        return [e.ids for e in self.hf.encode_batch(texts)]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids`` (byte-level decoding)."""
        return self.hf.decode([int(i) for i in ids])

    def save(self, directory: str | Path) -> None:
        """Write the Hugging Face ``tokenizer.json`` and ``lmsci_tokenizer.json`` into ``directory`` (created if missing)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.hf.save(str(d / HF_FILE))
        (d / META_FILE).write_text(json.dumps({"kind": "bpe", "file": HF_FILE}))

    def fingerprint(self) -> str:
        """16 hex characters of the SHA-256 of the serialised tokenizer (cache keys change with the merges)."""
        return hashlib.sha256(("bpe:" + self.hf.to_str()).encode()).hexdigest()[:16]


Tokenizer = Union[CharTokenizer, BPETokenizer]


def train_tokenizer(kind: str, texts: Iterable[str], vocab_size: int = 1024) -> Tokenizer:
    """Train a tokenizer of ``kind`` (``char`` or ``bpe``) on ``texts``.

    Raises:
        UnknownNameError: unknown ``kind``.
    """
    from lmsci.errors import UnknownNameError

    if kind == "char":
        return CharTokenizer.train(texts)
    if kind == "bpe":
        return BPETokenizer.train(texts, vocab_size=vocab_size)
    raise UnknownNameError("tokenizer", kind, ["char", "bpe"])


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """Load the tokenizer saved in ``directory`` (a model or cache directory).

    Raises:
        DataError: no ``lmsci_tokenizer.json`` there, or it names an unknown kind.
    """
    d = Path(directory)
    p = d / META_FILE
    if not p.exists():
        raise DataError(f"{d} holds no saved tokenizer ({META_FILE} missing)")
    meta = json.loads(p.read_text())
    if meta.get("kind") == "char":
        return CharTokenizer(meta["chars"])
    if meta.get("kind") == "bpe":
        from tokenizers import Tokenizer as HFTokenizer

        return BPETokenizer(HFTokenizer.from_file(str(d / meta.get("file", HF_FILE))))
    raise DataError(f"{p}: unknown tokenizer kind {meta.get('kind')!r}; allowed: 'char', 'bpe'")
