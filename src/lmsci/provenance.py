"""Provenance a machine can check: a digest of what determines a run's outcome (issue 46, item 1).

A run's digest has three parts, each 8 hex digits of a SHA-256, written ``config.source.libraries``
(for example ``3f2a9c01.77b0e412.0c9d5e6a``):

- **config**: the resolved configuration's science fields, every field but :data:`lmsci.config.NON_SCIENCE_FIELDS`
  (device, threads, progress, out, preset, compile, stack_seeds) and the master ``seed`` (a published row names its master
  seeds in its own column, so the seeds of one row share one digest).
- **source**: the bytes of every lmsci module in the run's *import closure*: the experiment's module, the
  executor (:data:`EXECUTOR_ROOTS`) and, transitively, every ``lmsci`` module they name in an ``import`` or
  ``from ... import`` statement anywhere in the file (inside functions too: a lazy import runs when its
  function does), with the ``__init__.py`` of every package on the way (importing ``lmsci.a.b`` runs
  ``lmsci/__init__.py`` and ``lmsci/a/__init__.py``), less :data:`BOOKKEEPING` (the post hoc marks, read at
  publishing time, not by a run). The closure is read statically with :mod:`ast` from the
  files under ``src/lmsci`` (nothing is imported), so it is the same on every machine and at every commit.
- **libraries**: the installed versions (``importlib.metadata``) of the numerical libraries the closure imports
  (:data:`COMPUTE_LIBRARIES`: torch, numpy, scipy, scikit-learn, transformers, pandas, ...), plus Python's
  major.minor.

What it detects: any edit to a file the experiment can execute (a comment or a docstring included: the digest is
of bytes, so it over-reports; :mod:`lmsci.table_check` lets a smoke golden vouch for such a change), a changed
preset or default of a science field, a new version of a compute library.

What it cannot detect:

- data files read at run time (a grammar table, a tokenizer file, a model shipped by a package): only ``.py``
  files under ``src/lmsci`` are hashed;
- code reached without an ``import`` statement naming it: ``importlib.import_module`` with a computed name,
  ``getattr`` on a module, plugins or entry points (the registry finds families this way, but an experiment's
  own module is the closure's root, so its science is covered);
- installed packages beyond the versions listed: a library rebuilt at the same version, a different BLAS
  (OpenBLAS vs MKL) or CPU kernel (AVX2 vs AVX-512), a library outside :data:`COMPUTE_LIBRARIES`, CUDA/cuDNN
  versions, environment variables (``OPENBLAS_CORETYPE``, ``ATEN_CPU_CAPABILITY``) and thread counts;
- nondeterminism: two runs with the same digest may still differ in the last bits (reduction order across
  threads and kernels), and a claim near its rule's threshold can flip on them;
- whether a changed file can change the result at all: the source part is conservative (a changed line
  anywhere in the closure changes it).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from lmsci.config import NON_SCIENCE_FIELDS

#: the lmsci source tree whose modules are hashed
SRC_ROOT = Path(__file__).resolve().parent
#: modules every run executes besides its experiment's: the executor (points, seeds, results) and the verdict
EXECUTOR_ROOTS = ("lmsci.sweep", "lmsci.runs", "lmsci.claims", "lmsci.contract")
#: import name -> distribution name of the libraries an outcome is computed with
COMPUTE_LIBRARIES = {
    "torch": "torch", "numpy": "numpy", "scipy": "scipy", "sklearn": "scikit-learn", "transformers": "transformers",
    "pandas": "pandas", "tokenizers": "tokenizers", "safetensors": "safetensors", "statsmodels": "statsmodels",
    "vaderSentiment": "vaderSentiment", "nltk": "nltk",
}
#: modules in every closure that record the project's bookkeeping about claims, not how a run computes: which
#: master seeds were seen before a rule changed (the published table reads it at HEAD when it marks post hoc).
#: Their bytes are left out of the source digest, so marking a verdict post hoc does not make every row stale.
BOOKKEEPING = ("lmsci/claims/seen.py",)
#: the file a run directory records its provenance in
PROVENANCE_FILE = "provenance.json"
#: a run whose segments or master seeds have different digests (always stale)
MIXED = "mixed"


def _sha8(obj: Any) -> str:
    data = obj if isinstance(obj, bytes) else json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:8]


def config_digest(config: Any) -> str:
    """8 hex digits over a resolved configuration's science fields (a pydantic config or its ``model_dump``):
    every field but :data:`NON_SCIENCE_FIELDS` and ``seed``."""
    dumped = config.model_dump(mode="json") if hasattr(config, "model_dump") else dict(config)
    return _sha8({k: v for k, v in dumped.items() if k not in NON_SCIENCE_FIELDS and k != "seed"})


def _module_file(name: str, read: Callable[[str], bytes | None]) -> str | None:
    """The path (relative to ``src/``, e.g. ``lmsci/a/b.py``) of module ``name``, or None when it is not a module."""
    rel = name.replace(".", "/")
    for cand in (f"{rel}.py", f"{rel}/__init__.py"):
        if read(cand) is not None:
            return cand
    return None


@functools.lru_cache(maxsize=4096)
def _imports(rel: str, text: bytes) -> tuple[frozenset[str], frozenset[str]]:
    """(lmsci names, top-level third-party names) that the file ``rel`` imports anywhere (absolute or relative)."""
    tree = ast.parse(text, filename=rel)
    pkg = rel.removesuffix(".py").split("/")
    pkg = pkg[:-1]  # the package a relative import starts from (the module's own for __init__.py)
    lm, other = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            (lm if n == "lmsci" or n.startswith("lmsci.") else other).add(n)
    return frozenset(lm), frozenset(n.split(".")[0] for n in other if n)


def _with_packages(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def import_closure(roots: Iterable[str], read: Callable[[str], bytes | None] | None = None) -> tuple[list[str], set[str]]:
    """The files of the lmsci modules ``roots`` import, transitively, and the third-party top-level names they import.

    Args:
        roots: module names (``lmsci.experiments.knowledge.factual_recall``).
        read: ``rel path -> bytes or None`` (default: the files under :data:`SRC_ROOT`); a test or a git reader
            can pass another tree.

    Returns:
        (sorted paths relative to ``src/``, like ``lmsci/claims.py``; top-level third-party import names).

    Raises:
        ValueError: a root is not an lmsci module of that tree.
    """
    raw = read or _read_src
    memo: dict[str, bytes | None] = {}

    def read(rel: str) -> bytes | None:
        if rel not in memo:
            memo[rel] = raw(rel)
        return memo[rel]

    seen: set[str] = set()
    third: set[str] = set()
    stack = []
    for r in roots:
        if _module_file(r, read) is None:
            raise ValueError(f"{r!r} is not a module under {SRC_ROOT}")
        stack.append(r)
    visited: set[str] = set()
    while stack:
        name = stack.pop()
        if name in visited:
            continue
        visited.add(name)
        for mod in _with_packages(name):
            rel = _module_file(mod, read)
            if rel is None or rel in seen:
                continue  # a name imported from a module, not a module itself
            seen.add(rel)
            lm, other = _imports(rel, read(rel) or b"")
            third |= other
            stack.extend(sorted(lm))
    return sorted(seen), third


def _read_src(rel: str) -> bytes | None:
    p = SRC_ROOT.parent / rel
    return p.read_bytes() if p.is_file() else None


def file_hashes(paths: Iterable[str], read: Callable[[str], bytes | None] | None = None) -> dict[str, str]:
    """``{path: 12 hex digits of its bytes' SHA-256}``."""
    read = read or _read_src
    return {p: hashlib.sha256(read(p) or b"").hexdigest()[:12] for p in paths}


def library_versions(imported: Iterable[str]) -> dict[str, str]:
    """``{distribution: installed version}`` of the :data:`COMPUTE_LIBRARIES` among ``imported`` (top-level
    import names), plus ``python`` (major.minor); a library that is not installed is ``"absent"``."""
    out = {"python": ".".join(platform.python_version_tuple()[:2])}
    for mod in sorted(set(imported) & set(COMPUTE_LIBRARIES)):
        out[COMPUTE_LIBRARIES[mod]] = _version(COMPUTE_LIBRARIES[mod])
    return out


@functools.lru_cache(maxsize=64)
def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "absent"


@dataclass
class Provenance:
    """What determines one run's outcome, and its digest.

    Attributes:
        experiment: the registered name; module: the experiment's module.
        config: :func:`config_digest`; files: ``{path: hash}`` of the import closure; libraries: versions.
    """

    experiment: str
    module: str
    config: str
    files: dict[str, str] = field(default_factory=dict)
    libraries: dict[str, str] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """8 hex digits over the closure's files and their hashes."""
        return _sha8(self.files)

    @property
    def libs(self) -> str:
        """8 hex digits over the library versions."""
        return _sha8(self.libraries)

    @property
    def digest(self) -> str:
        """``config.source.libraries``."""
        return f"{self.config}.{self.source}.{self.libs}"

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "experiment": self.experiment, "module": self.module, "config": self.config,
                "source": self.source, "libraries_digest": self.libs, "libraries": self.libraries, "files": self.files}


def provenance(experiment: str, module: str, config: Any,
               read: Callable[[str], bytes | None] | None = None) -> Provenance:
    """The :class:`Provenance` of a run of ``experiment`` (defined in ``module``) at the resolved ``config``.

    An experiment defined outside lmsci (a test's toy) contributes its own file's hash only.
    """
    inside = module == "lmsci" or module.startswith("lmsci.")
    paths, third = import_closure([module, *EXECUTOR_ROOTS] if inside else list(EXECUTOR_ROOTS), read)
    files = file_hashes([p for p in paths if p not in BOOKKEEPING], read)
    if not inside:  # an experiment defined outside lmsci (a test's toy): its own file, as far as it can be read
        import sys

        f = getattr(sys.modules.get(module), "__file__", None)
        files[f"<{module}>"] = hashlib.sha256(Path(f).read_bytes()).hexdigest()[:12] if f and Path(f).is_file() \
            else "unknown"
    return Provenance(experiment, module, config_digest(config), files, library_versions(third))


def split_digest(digest: str) -> dict[str, str] | None:
    """``"a.b.c"`` -> ``{"config": a, "source": b, "libraries": c}``; None for anything else (no digest, ``mixed``)."""
    parts = str(digest).split(".") if isinstance(digest, str) else []
    if len(parts) != 3 or not all(len(p) == 8 for p in parts):
        return None
    return dict(zip(("config", "source", "libraries"), parts))
