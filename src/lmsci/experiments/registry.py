"""The experiment registry: ``@register("name")`` and lookup with did-you-mean errors."""

from __future__ import annotations

import importlib
import pkgutil

from lmsci.errors import UnknownNameError
from lmsci.experiments.base import Experiment

_REGISTRY: dict[str, type[Experiment]] = {}

PACKAGE = "lmsci.experiments"


def experiment_modules() -> list[str]:
    """Every module of the experiment families, found by walking :mod:`lmsci.experiments`.

    A family is a sub-package (``knowledge/``, ``reasoning/``, ...); each of its modules is imported on the
    first lookup, so ``import lmsci`` stays light. Modules whose name starts with an underscore are skipped (a
    work in progress stays out of the catalog until it is renamed).
    """
    pkg = importlib.import_module(PACKAGE)
    out = []
    for info in pkgutil.walk_packages(pkg.__path__, prefix=PACKAGE + "."):
        leaf = info.name.rsplit(".", 1)[-1]
        if leaf.startswith("_") or info.name.count(".") < 3:
            continue  # private modules, and the package's own base/registry
        out.append(info.name)
    return sorted(out)


_loaded = False


def register(name: str):
    """Class decorator adding an :class:`Experiment` subclass to the catalog under ``name``."""

    def deco(cls: type[Experiment]) -> type[Experiment]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"experiment {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def _load_all() -> None:
    global _loaded
    if not _loaded:
        for mod in experiment_modules():
            importlib.import_module(mod)
        _loaded = True


def get(name: str) -> type[Experiment]:
    """The experiment class registered as ``name``.

    Raises:
        UnknownNameError: no such experiment (the message suggests close names).
    """
    _load_all()
    if name not in _REGISTRY:
        raise UnknownNameError("experiment", name, _REGISTRY.keys())
    return _REGISTRY[name]


def catalog() -> dict[str, type[Experiment]]:
    """All registered experiments, by name."""
    _load_all()
    return dict(sorted(_REGISTRY.items()))


def shipped() -> dict[str, type[Experiment]]:
    """The experiments lmsci ships (defined in the family packages of ``lmsci.experiments``), by name; experiments that a test or
    a user registers elsewhere are left out (the claims snapshot, ``lmsci claims`` and the suite use this)."""
    return {n: cls for n, cls in catalog().items() if cls.__module__.startswith(PACKAGE + ".")}
