"""Lazy re-exports for lmsci's public packages (PEP 562 module ``__getattr__`` / ``__dir__``).

A package ``__init__`` declares ``_EXPORTS = {public name: defining module}`` and installs
``__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())``: ``from lmsci.models import GPT`` then
imports :mod:`lmsci.models.gpt` on first use only, so ``import lmsci`` (and ``import lmsci.models``) stays
cheap, and a package imports none of its modules until asked, so the re-exports add no import edge (no cycle,
no layering exception: ``tests/test_no_import_cycles.py``, ``tests/test_layering.py``). ``__all__`` is the
map's keys; ``tests/test_public_api.py`` checks that every name imports and has a docstring.

A name that is also a submodule's (``lmsci.methods.lm_infinite``, a function in the module of that name) is not
re-exported: Python binds a submodule to its package's attribute when it is first imported, so a lazy name would
come back as the module or the function depending on import order, and binding the function eagerly would break
``import lmsci.methods.lm_infinite as m`` and string targets of ``monkeypatch``. The one exception is
``lmsci.laws.fit``, bound eagerly to the function as the package always did.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, names: dict[str, str], namespace: dict[str, Any]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` re-exporting ``names`` (public name -> defining module).

    ``__getattr__(name)`` imports the defining module, caches the object in the package's ``namespace`` (so the
    next lookup is a plain attribute) and returns it; an unknown name raises ``AttributeError`` naming the
    package, as Python does. ``__dir__()`` lists the module's own names and every re-exported one.
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
