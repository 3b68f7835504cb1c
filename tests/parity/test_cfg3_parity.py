"""Parity of lmsci's cfg3 world with the official Lano-cfg code (issue 30, item 2: cfg3).

Fixtures (``fixtures/cfg3/``, see ``tests/parity/README.md`` and ``fixtures/cfg3/SOURCE.json``) are outputs of
facebookresearch/PhysicsLM4 at 7580696 (``data-synthetic-pretrain/Lano-cfg/data_cfg.py``): the nine published
tables as the official loader reads them (``tables.json``), and 64 strings of cfg3b / cfg3f (official samples,
lmsci samples, one-token edits of both) with the official DP's membership verdict (``labels.jsonl``). No official
code is used here.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from lmsci.worlds.cfg_grammars import CFG3_DATA, PUBLISHED_CFG3, get_grammar, load_cfg_json

FIX = Path(__file__).parent / "fixtures" / "cfg3"

#: fresh lmsci samples per published grammar checked for membership (besides the fixture's own lmsci samples)
N_FRESH = 100


@lru_cache(maxsize=None)
def _labels() -> tuple:
    with open(FIX / "labels.jsonl") as f:
        return tuple(json.loads(line) for line in f)


def _tokens(rec: dict) -> list[int]:
    return [int(c) for c in rec["tokens"]]


def test_fixtures_are_the_official_outputs():
    src = json.loads((FIX / "SOURCE.json").read_text())
    assert src["repository"] == "facebookresearch/PhysicsLM4"
    assert src["commit"] == "75806965208c55e9f7f2e2363d3793d2da75d2e4"
    recs = _labels()
    assert len(recs) == 64 and [r["id"] for r in recs] == list(range(64))
    for g in ("cfg3b", "cfg3f"):
        mine = [r for r in recs if r["grammar"] == g]
        # both verdicts on both grammars, and edits on both sides of the language
        assert sum(r["official_member"] for r in mine) >= 16 and sum(1 - r["official_member"] for r in mine) >= 14
        assert any(r["origin"] == "edit_of" and r["official_member"] for r in mine)
        assert {r["origin"] for r in mine} == {"official_sample", "lmsci_sample", "edit_of"}
    assert all(r["official_dp"] in (0, 10000) and r["official_member"] == int(r["official_dp"] == 0) for r in recs)
    # an edit differs from its base by exactly one token
    for r in recs:
        if r["origin"] == "edit_of":
            b, w, e = recs[r["base"]]["tokens"], r["tokens"], r["edit"]
            if e[0] == "sub":
                want = b[:e[1]] + str(e[2]) + b[e[1] + 1:]
            elif e[0] == "del":
                want = b[:e[1]] + b[e[1] + 1:]
            else:
                assert e[0] == "ins"
                want = b[:e[1]] + str(e[2]) + b[e[1]:]
            assert w == want and w != b, r["id"]


def _rules_sha(g) -> str:
    rules = [[[list(r) for r in rs] for rs in level] for level in g.rules]
    return hashlib.sha256(json.dumps(rules, separators=(",", ":")).encode()).hexdigest()


def test_published_tables_load_exactly():
    tables = json.loads((FIX / "tables.json").read_text())
    assert sorted(tables) == sorted(PUBLISHED_CFG3)
    for name, t in tables.items():
        # the shipped file is the official file, byte for byte
        assert hashlib.sha256((CFG3_DATA / f"{name}.json").read_bytes()).hexdigest() == t["file_sha256"], name
        g = get_grammar(name)
        assert list(g.sizes) == t["sizes"] and g.depth == t["depth"], name
        assert list(range(1, g.n_terminals + 1)) == t["terminal_ids"] and g.eos == t["eos_token"]
        assert [sum(len(rs) for rs in level) for level in g.rules] == t["rules_per_level"], name
        lens = {str(L): sum(1 for level in g.rules for rs in level for r in rs if len(r) == L) for L in (1, 2, 3, 4)}
        assert lens == t["rule_lengths"], name
        assert _rules_sha(g) == t["rules_sha256"], name


def test_member_agrees_with_the_official_dp():
    recs = _labels()
    grammars = {n: get_grammar(n) for n in ("cfg3b", "cfg3f")}
    wrong = [(r["id"], r["grammar"], r["origin"], r.get("edit"), r["official_member"])
             for r in recs if grammars[r["grammar"]].member(_tokens(r)) != bool(r["official_member"])]
    assert not wrong, f"lmsci's member differs from the official DP on {len(wrong)} of {len(recs)} strings: {wrong}"
    # the same verdict with the EOS token at the end
    for r in recs[::7]:
        g = grammars[r["grammar"]]
        assert g.member(_tokens(r) + [g.eos]) == bool(r["official_member"])


def test_string_probability_is_positive_exactly_on_official_members():
    # lmsci's inside DP (string_logprob) is a second membership test: P(w) > 0 iff the official DP accepts w
    recs = sorted(_labels(), key=lambda r: len(r["tokens"]))
    pick = [r for r in recs if r["official_member"]][:4] + [r for r in recs if not r["official_member"]][:4]
    for r in pick:
        lp = get_grammar(r["grammar"]).string_logprob(_tokens(r))
        assert (lp > -math.inf) == bool(r["official_member"]) and not math.isnan(lp), r["id"]


def test_lmsci_samples_of_the_published_grammars_are_accepted():
    recs = _labels()
    # the official DP accepted every lmsci sample of the fixture, and lmsci's sampler still draws those strings
    lm = [r for r in recs if r["origin"] == "lmsci_sample"]
    assert len(lm) == 8 and all(r["official_member"] for r in lm)
    for r in lm:
        s = get_grammar(r["grammar"]).sample(np.random.default_rng(r["seed"]))
        assert s.tokens.tolist() == _tokens(r), (r["grammar"], r["seed"])
    # fresh samples (a seed of their own) are accepted by the membership DP checked above
    for name in ("cfg3b", "cfg3f"):
        g = get_grammar(name)
        stream = g.sample_stream(N_FRESH, np.random.default_rng(30))
        ends = np.flatnonzero(stream == g.eos)
        strings = np.split(stream, ends + 1)[:-1]
        assert len(strings) == N_FRESH and g.member_many(strings).all(), name
        lo, hi = g.length_range()
        assert all(lo <= len(s) - 1 <= hi for s in strings)


@pytest.mark.parametrize("name", ["cfg3b", "cfg3f"])
def test_official_samples_are_accepted(name):
    g = get_grammar(name)
    off = [r for r in _labels() if r["grammar"] == name and r["origin"] == "official_sample"]
    assert len(off) == 4 and all(r["official_member"] and g.member(_tokens(r)) for r in off)
    # the loader reads the shipped file like any other official path
    assert load_cfg_json(CFG3_DATA / f"{name}.json").rules == g.rules
