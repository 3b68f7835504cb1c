"""A griffe extension for the docs site (``mkdocs.yml``): lmsci's docstrings use Sphinx roles (``:class:`~a.B```,
``:func:`f```, ``:mod:`m```, ``:data:`X```, ``:meth:`C.m```), which Markdown shows raw; this rewrites each role as
inline code of its target (the last component where the target starts with ``~``, as Sphinx does). Plain code, not
cross-reference links: most targets are not on the site's pages, and ``mkdocs build --strict`` fails on links that
lead nowhere."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def _code(m: re.Match) -> str:
    target = m.group(2)
    return f"`{target.rsplit('.', 1)[-1] if m.group(1) else target}`"


class RstRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring griffe loads."""

    def on_object(self, *, obj: Any, **kwargs: Any) -> None:  # griffe >= 1.x: called for every loaded object
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_code, obj.docstring.value)
