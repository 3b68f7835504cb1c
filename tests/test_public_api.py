"""The public Python API (issue 41, item 3): the names a researcher imports are re-exported from a few documented
packages, listed in ``__all__``, each imports and has a docstring; ``import lmsci`` stays cheap (the re-exports are
lazy, PEP 562) and a re-export is never shadowed by a submodule of the same name."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
import types
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGES = ["lmsci", "lmsci.models", "lmsci.worlds", "lmsci.train", "lmsci.measure", "lmsci.methods", "lmsci.laws"]


def _names(pkg: str) -> list[tuple[str, str]]:
    mod = importlib.import_module(pkg)
    return [(pkg, n) for n in mod.__all__ if n != "__version__"]


ALL = [pn for pkg in PACKAGES for pn in _names(pkg)]


def _attribute_docstring(module: str, name: str) -> str | None:
    """The string literal right after ``name = ...`` / ``name: T = ...`` at the top of ``module`` (PEP 257)."""
    path = Path(importlib.import_module(module).__file__)
    body = ast.parse(path.read_text()).body
    for node, nxt in zip(body, body[1:]):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                return nxt.value.value
    return None


def test_every_package_is_documented_and_lists_its_names():
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        assert mod.__doc__ and len(mod.__doc__.strip()) > 40, pkg
        assert len(mod.__all__) == len(set(mod.__all__)) >= 5, pkg
        assert set(mod.__all__) - {"__version__"} == set(mod._EXPORTS), pkg
        assert set(mod.__all__) <= set(dir(mod)), f"{pkg}: dir() misses re-exported names"


@pytest.mark.parametrize("pkg,name", ALL, ids=[f"{p}.{n}" for p, n in ALL])
def test_every_public_name_imports_and_has_a_docstring(pkg, name):
    mod = importlib.import_module(pkg)
    obj = getattr(mod, name)
    source = mod._EXPORTS[name]
    assert not isinstance(obj, types.ModuleType), f"{pkg}.{name} is a module, not the re-exported object"
    assert obj is getattr(importlib.import_module(source), name)
    if inspect.isclass(obj) or inspect.isroutine(obj) or callable(obj) and hasattr(obj, "__wrapped__"):
        doc = inspect.getdoc(obj)
        # a class's docstring, not one inherited from a base class (pydantic, Exception, ...)
        own = obj.__dict__.get("__doc__") if inspect.isclass(obj) else doc
        assert own and len(own.strip()) >= 20, f"{pkg}.{name} ({source}) has no docstring of its own"
    else:
        doc = _attribute_docstring(source, name)
        assert doc and len(doc.strip()) >= 20, f"{pkg}.{name} ({source}) has no attribute docstring"


def test_re_exports_are_pinned_to_their_layer():
    """A package re-exports only its own modules (the top level: anything but experiments, CLI, suite), so the
    lazy maps cannot carry an import the layering test does not see."""
    for pkg in PACKAGES:
        for name, source in importlib.import_module(pkg)._EXPORTS.items():
            if pkg == "lmsci":
                assert not source.startswith(("lmsci.experiments", "lmsci.cli", "lmsci.suite")), (name, source)
            else:
                assert source.startswith(pkg + "."), (pkg, name, source)


def test_import_lmsci_is_cheap_and_names_survive_submodule_imports():
    """In a fresh interpreter: ``import lmsci`` loads neither torch nor a subpackage; no public name shadows a
    submodule but ``lmsci.laws.fit`` (bound eagerly to the function, as before the lazy re-exports), which stays the
    function when its module is imported first, as experiments do."""
    code = (
        "import sys, importlib, importlib.util, types\n"
        "import lmsci\n"
        "assert 'torch' not in sys.modules, 'import lmsci imported torch'\n"
        "assert not [m for m in sys.modules if m.startswith('lmsci.') and m != 'lmsci._api'], sorted(sys.modules)\n"
        f"pkgs = {PACKAGES!r}\n"
        "clash = [f'{p}.{n}' for p in pkgs[1:] for n in importlib.import_module(p).__all__\n"
        "         if importlib.util.find_spec(f'{p}.{n}') is not None]\n"
        "for m in clash:\n"
        "    importlib.import_module(m)\n"
        "bad = [m for m in clash if isinstance(getattr(importlib.import_module(m.rsplit('.', 1)[0]),\n"
        "                                              m.rsplit('.', 1)[1]), types.ModuleType)]\n"
        "assert not bad, bad\n"
        "print(len(clash))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["1"]  # lmsci.laws.fit only


def test_unknown_name_raises_attribute_error():
    import lmsci.models

    with pytest.raises(AttributeError, match="lmsci.models.*no_such_name"):
        lmsci.models.no_such_name  # noqa: B018
