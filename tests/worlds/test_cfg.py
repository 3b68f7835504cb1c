"""worlds/cfg.py: sampling labels, membership and exact next-token distributions against brute-force enumeration
of a tiny grammar, the official JSON loader, and named errors.

Source: Allen-Zhu & Li, arXiv 2305.13673 (Physics of LMs Part 1), sec. 2 and App. A; PhysicsLM4 ``data_cfg.py``.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict

import numpy as np
import pytest

from lmsci.errors import ConfigError
from lmsci.worlds.cfg import CFG, GrammarError, UnknownSymbolError, kl_true_model
from lmsci.worlds.cfg_grammars import get_grammar, load_cfg_json, named_cfg, random_cfg


def tiny() -> CFG:
    # ambiguous on purpose: rules of length 1-3, two terminals, level-2 symbols sharing strings
    rules = [
        [[(0, 1), (1,), (1, 0, 1)]],                      # root
        [[(0, 1), (1, 1, 0)], [(1,), (0, 0)]],            # level 1
        [[(0,), (0, 1)], [(1,), (1, 0, 0)]],              # level 2 -> terminals
    ]
    return CFG((1, 2, 2, 2), rules, name="tiny")


def enumerate_strings(g: CFG) -> dict[tuple[int, ...], float]:
    """Every string with its probability under uniform rule choice, by expanding all derivations."""
    dist = [{(t + 1,): 1.0} for t in range(g.n_terminals)]
    for l in range(g.depth - 1, -1, -1):
        new = []
        for rs in g.rules[l]:
            d: dict[tuple[int, ...], float] = defaultdict(float)
            for r in rs:
                for parts in itertools.product(*[dist[s].items() for s in r]):
                    d[sum((p[0] for p in parts), ())] += math.prod(p[1] for p in parts) / len(rs)
            new.append(dict(d))
        dist = new
    return dist[0]


def test_membership_matches_enumeration():
    g = tiny()
    lang = enumerate_strings(g)
    assert abs(sum(lang.values()) - 1) < 1e-12
    lo, hi = g.length_range()
    assert lo == min(map(len, lang)) and hi == max(map(len, lang))
    n_in = 0
    for n in range(1, 8):
        for w in itertools.product([1, 2], repeat=n):
            assert g.member(w) == (w in lang), w
            n_in += w in lang
    assert n_in >= 5
    for w, p in lang.items():
        assert g.member(list(w) + [g.eos])
        assert abs(g.string_logprob(w) - math.log(p)) < 1e-9


def test_next_token_distributions_match_enumeration():
    g = tiny()
    lang = enumerate_strings(g)
    for w in list(lang)[:25]:
        d = g.next_token_dists(w)
        assert d.shape == (len(w) + 1, g.n_terminals + 1)
        for k in range(len(w) + 1):
            pre = w[:k]
            z = sum(p for s, p in lang.items() if s[:k] == pre)
            want = [lang.get(pre, 0.0) / z] + [sum(p for s, p in lang.items() if s[:k + 1] == pre + (t,)) / z
                                               for t in range(1, g.n_terminals + 1)]
            np.testing.assert_allclose(d[k], want, atol=1e-12)


def test_prefix_outside_the_language_is_nan():
    g = tiny()
    lang = enumerate_strings(g)
    w = next(w for w in itertools.product([1, 2], repeat=4) if not any(s[:4] == w for s in lang))
    d = g.next_token_dists(w)
    assert np.isnan(d[-1]).all() and not np.isnan(d[0]).any()


def test_random_cfg3f_samples_are_members_and_labels_chain():
    g = named_cfg("cfg3f", seed=3)
    assert g.sizes == (1, 3, 3, 3, 3, 3, 3) and g.vocab_size == 5 and g.eos == 4
    assert all(2 <= len(r) <= 3 for lv in g.rules for rs in lv for r in rs)
    assert all(3 <= len(rs) <= 4 for lv in g.rules for rs in lv)
    assert len({r for rs in g.rules[2] for r in rs}) == sum(len(rs) for rs in g.rules[2])  # dup-seq disallowed
    rng = np.random.default_rng(0)
    for s in g.sample_many(20, rng):
        n = len(s.tokens)
        assert s.ancestor.shape == s.boundary.shape == (g.depth, n)
        assert g.member(s.tokens) and s.boundary[:, -1].all() and (s.ancestor[0] == 0).all()
        # the subtree of every level-l node: its children's labels (read at the child boundaries) form one of its rules
        for l in range(g.depth - 1):
            start = 0
            for end in np.flatnonzero(s.boundary[l]):
                seg = slice(start, end + 1)
                kids = tuple(int(a) for a, b in zip(s.ancestor[l + 1, seg], s.boundary[l + 1, seg]) if b)
                assert kids in g.rules[l][int(s.ancestor[l, start])]
                start = end + 1
        # the level-(depth-1) subtree holds exactly the terminals of one rule
        start = 0
        for end in np.flatnonzero(s.boundary[g.depth - 1]):
            assert tuple(int(t) - 1 for t in s.tokens[start:end + 1]) in g.rules[g.depth - 1][int(s.ancestor[-1, start])]
            start = end + 1


def test_probabilities_of_long_strings_do_not_underflow():
    g = named_cfg("cfg3b", seed=1)
    s = g.sample(np.random.default_rng(5))
    d = g.next_token_dists(s.tokens)
    assert np.isfinite(d).all() and np.allclose(d.sum(1), 1)
    # the observed next token always has positive probability, and EOS at the end
    assert (d[np.arange(len(s.tokens)), s.tokens] > 0).all() and d[-1, 0] > 0
    assert np.isfinite(g.string_logprob(s.tokens))
    assert kl_true_model(d, d).max() < 1e-12


def test_loader_reads_the_official_format(tmp_path):
    g = tiny()
    # the shape CFG_Config.save_graph writes: vars of the config, 'all' holding vars of each node
    all_ = [[{"depth": l, "id": 10 + a, "name": "X", "children": [list(r) for r in g.rules[l][a]]}
             for a in range(g.sizes[l])] for l in range(g.depth)]
    all_.append([{"depth": g.depth, "id": t + 1, "name": "T", "children": None} for t in range(g.sizes[-1])])
    path = tmp_path / "cfgtiny.json"
    path.write_text(json.dumps({"depth": 3, "num_sym": 2, "sizes": [1, 2, 2, 2], "deg_min": 1, "deg_max": 3,
                                "idx": [[16], [14, 15], [12, 13], [1, 2]], "all": all_}))
    h = load_cfg_json(path)
    assert h.rules == g.rules and h.sizes == g.sizes
    assert get_grammar(str(path)).rules == g.rules


def test_named_errors():
    with pytest.raises(GrammarError, match="do not chain"):
        CFG((1, 2, 2), [[[(0, 1)]]])
    with pytest.raises(GrammarError, match="level 1 symbol 0"):
        CFG((1, 2, 2), [[[(0, 1)]], [[(0, 5)], [(1,)]]])
    with pytest.raises(UnknownSymbolError):
        tiny().member([1, 7, 2])
    with pytest.raises(UnknownSymbolError):
        tiny().member([1, tiny().eos, 2])
    with pytest.raises(ConfigError):
        get_grammar("cfg3z")
    with pytest.raises(ConfigError):
        random_cfg((1, 2, 2), deg=(9, 9), length=(1, 1))


def test_bad_json_is_a_grammar_error(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{\"sizes\": [1, 2]}")
    with pytest.raises(GrammarError):
        load_cfg_json(p)
    p.write_text("not json")
    with pytest.raises(GrammarError):
        load_cfg_json(p)


def test_benchmark_script_runs_at_small_settings():
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cfg_dp.py"
    out = subprocess.run([sys.executable, str(bench), "--grammar", "cfg3f-small", "--n", "10", "--naive", "4"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "strings/s on one core" in out and "agree on 4 strings" in out and "ratio" in out


# -- grammar names (issue 30): published names are the published tables, draws have names of their own ----------
def _rules_of_json(path) -> list:
    """The rule table of an official JSON, read directly (independent of load_cfg_json)."""
    dd = json.loads(path.read_text())
    return [[[tuple(r) for r in node["children"]] for node in dd["all"][l]] for l in range(dd["depth"])]


def test_published_names_are_the_published_tables():
    from lmsci.worlds.cfg_grammars import CFG3_DATA, PUBLISHED_CFG3

    assert PUBLISHED_CFG3 == ("cfg3b", "cfg3e1", "cfg3e2", "cfg3f", "cfg3g", "cfg3h", "cfg3i", "cfg3j", "cfg3k")
    for name in PUBLISHED_CFG3:
        g = get_grammar(name)
        assert g.name == name
        assert g.rules == _rules_of_json(CFG3_DATA / f"{name}.json"), name
        assert get_grammar(name, seed=7).rules == g.rules  # the seed does not change a published table
        assert g.rules != named_cfg(name, 0).rules  # and it is not the generator's draw
    # spot check against the official cfg3f.json (PhysicsLM4 7580696): the root's four rules, rules per level
    g = get_grammar("cfg3f")
    assert g.rules[0] == [[(1, 2), (1, 0, 2), (2, 0, 0), (1, 1)]]
    assert [sum(map(len, lv)) for lv in g.rules] == [4, 10, 10, 11, 9, 10] and g.vocab_size == 5
    assert [sum(map(len, lv)) for lv in get_grammar("cfg3b").rules] == [2, 6, 6, 6, 6, 6]
    readme = (CFG3_DATA / "README.md").read_text()
    assert "75806965208c55e9f7f2e2363d3793d2da75d2e4" in readme and "Apache" in readme
    assert (CFG3_DATA / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_draw_names_are_draws():
    d = get_grammar("cfg3f-draw:3")
    assert d.name == "cfg3f-draw:3" and d.rules == named_cfg("cfg3f", 3).rules
    assert d.rules != get_grammar("cfg3f").rules and d.rules != get_grammar("cfg3f-draw:4").rules
    assert get_grammar("cfg3f-draw", seed=3).rules == d.rules  # without ':SEED' the seed argument is used
    assert get_grammar("cfg3f-draw:3", seed=9).rules == d.rules  # an explicit seed wins
    assert all(3 <= len(rs) <= 4 for lv in d.rules for rs in lv)  # cfg3f's hyper-parameters
    k = get_grammar("cfg3k-draw:0")
    assert k.sizes == (1, 3, 3, 3, 3, 3, 3, 3) and k.name == "cfg3k-draw:0"


def test_small_draws_are_unchanged():
    # lmsci's own small draws keep their grammars and labels (runs and presets name them)
    import hashlib

    want = {("cfg3b-small", 0): "6279f1264888eb44", ("cfg3b-small", 1): "41fb7dc4d9fd1059",
            ("cfg3f-small", 0): "152e42bd85369fe5", ("cfg3f-small", 1): "2a99b5250223d630"}
    for (name, seed), h in want.items():
        g = get_grammar(name, seed)
        assert g.name == f"{name}(gen seed {seed})" and g.sizes == (1, 3, 3, 3, 3)
        assert hashlib.sha256(json.dumps(g.rules).encode()).hexdigest()[:16] == h, (name, seed)
        assert get_grammar(f"{name}-draw:{seed}").rules == g.rules


@pytest.mark.parametrize("bad", ["cfg3z", "cfg3z-draw:1", "cfg3f-draw:x", "cfg3f-draw:-1", "CFG3F", "missing.json"])
def test_bad_grammar_names_list_the_allowed_ones(bad):
    with pytest.raises(ConfigError) as e:
        get_grammar(bad)
    msg = str(e.value)
    assert repr(bad) in msg
    for allowed in ("cfg3b", "cfg3e1", "cfg3k", "-draw:SEED", "cfg3f-draw:0", "cfg3b-small", "cfg3f-small", ".json"):
        assert allowed in msg, (bad, allowed)
