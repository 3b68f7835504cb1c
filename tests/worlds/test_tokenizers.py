"""Tokenizers: round trip, save/load with a model directory, errors."""

from __future__ import annotations

import pytest

from lmsci.errors import ConfigError, DataError, UnknownNameError
from lmsci.worlds.tokenizers import BPETokenizer, CharTokenizer, load_tokenizer, train_tokenizer

TEXT = ("ROMEO.\nBut soft! What light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n"
        "Arise, fair sun, and kill the envious moon,\nWho is already sick and pale with grief.\n") * 20


def test_char_round_trip_and_save_load(tmp_path):
    tok = train_tokenizer("char", [TEXT])
    assert tok.vocab_size == len(set(TEXT))
    ids = tok.encode(TEXT)
    assert len(ids) == len(TEXT) and max(ids) < tok.vocab_size
    assert tok.decode(ids) == TEXT
    assert tok.encode("\n") == [0]  # sorted alphabet: newline is the smallest character here
    tok.save(tmp_path)
    tok2 = load_tokenizer(tmp_path)
    assert isinstance(tok2, CharTokenizer) and tok2.encode(TEXT) == ids
    assert tok2.fingerprint() == tok.fingerprint()
    with pytest.raises(DataError, match="'Z'"):
        tok.encode("Zounds")


def test_bpe_round_trip_and_save_load(tmp_path):
    tok = train_tokenizer("bpe", [TEXT], vocab_size=300)
    assert isinstance(tok, BPETokenizer) and 256 < tok.vocab_size <= 300
    ids = tok.encode(TEXT)
    assert len(ids) < 0.7 * len(TEXT)  # 44 merges already compress the text
    assert tok.decode(ids) == TEXT
    odd = "Ünïcode — 東京 \t tabs  and  spaces\n"
    assert tok.decode(tok.encode(odd)) == odd  # byte-level: nothing is unknown
    tok.save(tmp_path / "model")
    assert (tmp_path / "model" / "tokenizer.json").exists()
    tok2 = load_tokenizer(tmp_path / "model")
    assert tok2.encode(TEXT) == ids and tok2.fingerprint() == tok.fingerprint()
    assert train_tokenizer("bpe", [TEXT], vocab_size=300).fingerprint() == tok.fingerprint()  # deterministic


def test_errors(tmp_path):
    with pytest.raises(UnknownNameError):
        train_tokenizer("wordpiece", [TEXT])
    with pytest.raises(ConfigError, match="vocab_size"):
        train_tokenizer("bpe", [TEXT], vocab_size=100)
    with pytest.raises(DataError, match="no saved tokenizer"):
        load_tokenizer(tmp_path)
