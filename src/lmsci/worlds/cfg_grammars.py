"""The cfg3 grammars by name: the published tables, random draws with their hyper-parameters, and lmsci's small draws.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 1, Learning Hierarchical Language Structures",
arXiv 2305.13673 (sec. 2.1 and App. A); official generator and loader in ``facebookresearch/PhysicsLM4``,
``data-synthetic-pretrain/Lano-cfg/data_cfg.py`` (``CFG_Config``: ``build_graph``, ``read_graph``). Spec:
``shared/research/physics_of_lms.md`` sec. 1. The grammar object itself (sampling, exact DP) is
:class:`lmsci.worlds.cfg.CFG`.

Grammars and their names (:func:`get_grammar`):

* the published tables ``cfg3b``, ``cfg3e1``, ``cfg3e2``, ``cfg3f``, ``cfg3g``, ``cfg3h``, ``cfg3i``, ``cfg3j``,
  ``cfg3k`` (``PUBLISHED_CFG3``): the official ``configs/<name>.json`` of PhysicsLM4, shipped unchanged as package
  data (``lmsci/worlds/data/cfg3/``, Apache-2.0, source commit in its README) and read by :func:`load_cfg_json`;
* ``<name>-draw:SEED`` (e.g. ``cfg3f-draw:0``; ``<name>-draw`` takes the ``seed`` argument): a random grammar
  drawn by :func:`random_cfg` with the hyper-parameters of ``<name>`` (``CFG3_HPARAMS``), *not* the published
  table;
* ``cfg3b-small``, ``cfg3f-small``: lmsci's own smaller draws (5 levels, not in the paper), drawn with ``seed``;
* a path to a ``cfg3*.json`` table.

:func:`random_cfg` draws a grammar from the cfg3 hyper-parameters (``CFG3_HPARAMS``; rules per NT
``~ U[deg_min, deg_max]``, rule length ``~ U[len_min, len_max]``, symbols uniform over the next level,
``disallow_duplicate_seq`` / ``disallow_duplicate_sym``) with a numpy generator, so a draw is *not* the
published table of the same name (the name ``cfg3f`` is the published table, ``cfg3f-draw:SEED`` a draw).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from lmsci.errors import ConfigError
from lmsci.worlds.cfg import CFG, GrammarError

#: the cfg3 hyper-parameters of the official configs (physics_of_lms.md sec. 1.1, [code]): sizes root -> T,
#: rules per NT ``deg = (deg_min, deg_max)``, rule length ``(len_min, len_max)``, and the two *disallow* flags
#: (``seq``: rules of a level pairwise distinct; ``sym``: no repeated symbol inside a rule; cfg3b only)
CFG3_HPARAMS: dict[str, dict] = {
    "cfg3b": dict(sizes=(1, 3, 3, 3, 3, 3, 3), deg=(2, 2), length=(2, 3), seq=True, sym=True),
    "cfg3i": dict(sizes=(1, 3, 3, 3, 3, 3, 3), deg=(2, 2), length=(2, 3), seq=True, sym=False),
    "cfg3h": dict(sizes=(1, 3, 3, 3, 3, 3, 3), deg=(2, 3), length=(2, 3), seq=True, sym=False),
    "cfg3g": dict(sizes=(1, 3, 3, 3, 3, 3, 3), deg=(3, 3), length=(2, 3), seq=True, sym=False),
    "cfg3f": dict(sizes=(1, 3, 3, 3, 3, 3, 3), deg=(3, 4), length=(2, 3), seq=True, sym=False),
    "cfg3e1": dict(sizes=(1, 3, 9, 27, 81, 27, 9), deg=(3, 3), length=(2, 3), seq=True, sym=False),
    "cfg3e2": dict(sizes=(1, 3, 9, 27, 27, 9, 4), deg=(3, 3), length=(2, 3), seq=True, sym=False),
    "cfg3j": dict(sizes=(1, 3, 3, 3, 3, 3, 3, 3), deg=(3, 3), length=(2, 3), seq=True, sym=False),
    "cfg3k": dict(sizes=(1, 3, 3, 3, 3, 3, 3, 3), deg=(3, 4), length=(2, 3), seq=True, sym=False),
    # smaller grammars made by the same generator (not in the paper), for CPU presets: 5 levels (root, 3 NT
    # levels, T), strings of 16-81 tokens
    "cfg3f-small": dict(sizes=(1, 3, 3, 3, 3), deg=(3, 4), length=(2, 3), seq=True, sym=False),
    "cfg3b-small": dict(sizes=(1, 3, 3, 3, 3), deg=(2, 2), length=(2, 3), seq=True, sym=True),
}

#: the grammars published with the paper (PhysicsLM4 ``Lano-cfg/configs/<name>.json``), shipped as package data in
#: ``CFG3_DATA``; :func:`get_grammar` returns these tables for these names
PUBLISHED_CFG3: tuple[str, ...] = ("cfg3b", "cfg3e1", "cfg3e2", "cfg3f", "cfg3g", "cfg3h", "cfg3i", "cfg3j", "cfg3k")
#: lmsci's own small draws (not in the paper): ``get_grammar(name, seed)`` draws them with ``seed``
SMALL_DRAWS: tuple[str, ...] = ("cfg3b-small", "cfg3f-small")
#: folder of the published tables (unchanged official files; README.md there gives source, commit and licence)
CFG3_DATA = Path(__file__).resolve().parent / "data" / "cfg3"
_DRAW = re.compile(r"^(?P<family>.+)-draw(?::(?P<seed>\d+))?$")


def random_cfg(sizes: Sequence[int], deg: tuple[int, int], length: tuple[int, int], *,
               disallow_duplicate_seq: bool = True, disallow_duplicate_sym: bool = False, seed: int = 0,
               name: str = "cfg") -> CFG:
    """Draw a layered CFG with the cfg3 generator's hyper-parameters (``CFG_Config.build_graph``).

    Args:
        sizes: symbols per level, root first (1), terminals last.
        deg: ``(deg_min, deg_max)``: rules per NT ``~ U[deg_min, deg_max]``.
        length: ``(len_min, len_max)``: rule length ``~ U[len_min, len_max]``.
        disallow_duplicate_seq: all rules of one level are pairwise distinct.
        disallow_duplicate_sym: no symbol repeats inside a rule.
        seed: numpy generator seed (the official tables come from Python's ``random``; load them with
            :func:`load_cfg_json` to use the published grammars).

    Raises:
        ConfigError: impossible hyper-parameters (``deg_min < 1``, ``len_min < 1``, min > max,
            ``disallow_duplicate_sym`` with ``len_min`` above the next level's size, or more distinct rules
            required than exist).
    """
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < 2 or sizes[0] != 1 or min(sizes) < 1:
        raise ConfigError("sizes", sizes, "a root of size 1 followed by >= 1 level of >= 1 symbol")
    if not (1 <= deg[0] <= deg[1]):
        raise ConfigError("deg", deg, "(deg_min, deg_max) with 1 <= deg_min <= deg_max")
    if not (1 <= length[0] <= length[1]):
        raise ConfigError("length", length, "(len_min, len_max) with 1 <= len_min <= len_max")
    rng = np.random.default_rng(seed)
    rules = []
    for l in range(len(sizes) - 1):
        k = sizes[l + 1]
        if disallow_duplicate_sym and length[0] > k:
            raise ConfigError("length", length, f"len_min <= {k} (level {l + 1} size) with disallow_duplicate_sym")
        n_possible = sum(math.perm(k, L) if disallow_duplicate_sym else k ** L
                         for L in range(length[0], length[1] + 1) if not disallow_duplicate_sym or L <= k)
        if disallow_duplicate_seq and sizes[l] * deg[1] > n_possible:
            raise ConfigError("deg", deg, f"at most {n_possible // sizes[l]} distinct rules per symbol at level {l}")
        seen: set[tuple[int, ...]] = set()
        level = []
        for _a in range(sizes[l]):
            rs = []
            for _k in range(int(rng.integers(deg[0], deg[1] + 1))):
                while True:
                    L = int(rng.integers(length[0], length[1] + 1))
                    if disallow_duplicate_sym:
                        L = min(L, k)
                        r = tuple(int(x) for x in rng.permutation(k)[:L])
                    else:
                        r = tuple(int(x) for x in rng.integers(0, k, size=L))
                    if not disallow_duplicate_seq or r not in seen:
                        break
                seen.add(r)
                rs.append(r)
            level.append(rs)
        rules.append(level)
    return CFG(sizes, rules, name=name)


def named_cfg(name: str, seed: int = 0) -> CFG:
    """A grammar drawn by :func:`random_cfg` with the hyper-parameters of ``name`` (``CFG3_HPARAMS``), never the
    published table of that name (for that: :func:`published_cfg`). The label is ``"<name>-draw:<seed>"``
    (what :func:`get_grammar` calls it), and ``"<name>(gen seed <seed>)"`` for lmsci's own small draws
    (``SMALL_DRAWS``).

    Raises:
        ConfigError: unknown name.
    """
    if name not in CFG3_HPARAMS:
        raise ConfigError("grammar", name, ", ".join(sorted(CFG3_HPARAMS)))
    hp = CFG3_HPARAMS[name]
    return random_cfg(hp["sizes"], hp["deg"], hp["length"], disallow_duplicate_seq=hp["seq"],
                      disallow_duplicate_sym=hp["sym"], seed=seed,
                      name=f"{name}(gen seed {seed})" if name in SMALL_DRAWS else f"{name}-draw:{seed}")


def published_cfg(name: str) -> CFG:
    """The published table ``name`` (one of ``PUBLISHED_CFG3``), read from the shipped official JSON.

    Raises:
        ConfigError: not a published name.
    """
    if name not in PUBLISHED_CFG3:
        raise ConfigError("grammar", name, "a published cfg3 table: " + ", ".join(PUBLISHED_CFG3))
    return load_cfg_json(CFG3_DATA / f"{name}.json")


def load_cfg_json(path: str | Path) -> CFG:
    """Load an official rule table (``PhysicsLM4/.../Lano-cfg/configs/cfg3*.json``, written by
    ``CFG_Config.save_graph``): keys ``depth``, ``sizes``, ``all[l][a]["children"]`` (rules as local indices of
    level ``l + 1``; ``None`` at the terminal level) and optionally ``idx`` (symbol ids; terminals must be
    ``1..|T|``).

    Raises:
        GrammarError: not a JSON object with those keys, levels that do not chain, bad rules, or terminal
            ids other than ``1..|T|``.
    """
    p = Path(path)
    try:
        dd = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise GrammarError(f"{p}: not a readable JSON rule table ({e})") from None
    if not isinstance(dd, dict) or "all" not in dd or "sizes" not in dd:
        raise GrammarError(f"{p}: a cfg rule table needs the keys 'sizes' and 'all' (CFG_Config.save_graph)")
    sizes = dd["sizes"]
    depth = int(dd.get("depth", len(sizes) - 1))
    if not isinstance(sizes, list) or len(sizes) != depth + 1 or len(dd["all"]) != depth + 1:
        raise GrammarError(f"{p}: depth {depth}, sizes {sizes} and {len(dd['all'])} levels in 'all' do not agree")
    if "idx" in dd:
        term = list(dd["idx"][depth])
        if term != list(range(1, sizes[depth] + 1)):
            raise GrammarError(f"{p}: terminal ids {term} are not 1..{sizes[depth]}")
    rules = []
    for l in range(depth):
        level = []
        for a, node in enumerate(dd["all"][l]):
            ch = node.get("children") if isinstance(node, dict) else None
            if not isinstance(ch, list):
                raise GrammarError(f"{p}: level {l} symbol {a} has no 'children' rule list")
            level.append([tuple(r) if isinstance(r, list) else (r,) for r in ch])
        rules.append(level)
    return CFG(tuple(sizes), rules, name=p.stem)


def grammar_names() -> str:
    """The allowed grammar specs, in words (for error messages and help strings)."""
    return ("a published table (" + ", ".join(PUBLISHED_CFG3) + "), a random draw '<name>-draw:SEED' with <name> in "
            + ", ".join(sorted(CFG3_HPARAMS)) + " (e.g. cfg3f-draw:0), lmsci's small draws (" + ", ".join(SMALL_DRAWS)
            + ", drawn with the seed argument), or a path to an official cfg3*.json file")


def get_grammar(spec: str, seed: int = 0) -> CFG:
    """Resolve a grammar spec (see the module docstring):

    * a published name (``PUBLISHED_CFG3``, e.g. ``"cfg3f"``): the published table; ``seed`` is ignored;
    * ``"<name>-draw:SEED"``: a draw (:func:`named_cfg`) with the hyper-parameters of ``name`` and that seed;
      ``"<name>-draw"`` uses ``seed``;
    * ``"cfg3b-small"`` / ``"cfg3f-small"`` (``SMALL_DRAWS``): lmsci's small draws, drawn with ``seed``;
    * a path to an official ``cfg3*.json`` table.

    Raises:
        ConfigError: none of these (the message lists the allowed names), or a ``.json`` path that does not
            exist; GrammarError: a malformed table.
    """
    if spec in PUBLISHED_CFG3:
        return published_cfg(spec)
    if spec in SMALL_DRAWS:
        return named_cfg(spec, seed)
    m = _DRAW.match(spec)
    if m and m.group("family") in CFG3_HPARAMS:
        return named_cfg(m.group("family"), int(m.group("seed")) if m.group("seed") is not None else seed)
    if spec.endswith(".json") or Path(spec).is_file():
        if not Path(spec).is_file():
            raise ConfigError("grammar", spec, grammar_names(), hint="the file does not exist")
        return load_cfg_json(spec)
    raise ConfigError("grammar", spec, grammar_names())
