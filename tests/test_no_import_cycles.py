"""No import cycles among lmsci's modules (issue 31): imports run one way.

The same AST reading as ``tests/test_layering.py``: every ``import`` and ``from ... import`` of a module counts,
at the top, inside functions and under ``TYPE_CHECKING`` alike (a lazy import only hides a cycle until the
function runs). A ``from lmsci.a import b`` is an edge to ``lmsci.a`` and, when ``b`` is a module, to
``lmsci.a.b``. The strongly connected components of that graph must all be single modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lmsci"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every ``lmsci...`` name that ``path`` imports (absolute, or relative resolved), modules and their members."""
    tree = ast.parse(path.read_text(), filename=str(path))
    pkg = _module_name(path).split(".")
    if path.name != "__init__.py":
        pkg = pkg[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return {m for m in out if m == "lmsci" or m.startswith("lmsci.")}


def import_graph() -> dict[str, set[str]]:
    """``{module: the lmsci modules it imports}`` over every module of ``src/lmsci`` (self-imports dropped)."""
    raw = {_module_name(p): _imports(p) for p in sorted(SRC.rglob("*.py"))}
    return {m: {i for i in imps if i in raw and i != m} for m, imps in raw.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_check_finds_cycles_lazy_or_not():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    g = import_graph()
    assert len(g) > 30 and "lmsci.models.attention_core" in g["lmsci.models.hf_attention"]
    # a function-level import counts: the harness imports the HF backend only inside AttentionPatch
    assert "lmsci.models.hf_attention" in g["lmsci.models.attention_harness"]


#: cycles allowed to remain (none: ``lmsci.claims`` -> ``lmsci.config`` was the last, cut by moving
#: NON_SCIENCE_FIELDS into config). No cycle may appear.
KNOWN: list[list[str]] = []


def test_lmsci_has_no_import_cycles():
    assert [c for c in cycles(import_graph()) if c not in KNOWN] == []


def test_the_two_former_circles_run_one_way():
    g = import_graph()
    assert "lmsci.claims" not in g["lmsci.config"] and "lmsci.config" in g["lmsci.claims.registry"]
    assert "lmsci.models.attention_harness" not in g["lmsci.models.hf_attention"]
    assert "lmsci.experiments.steering.lm_steer" not in g["lmsci.experiments.steering.lm_steer_detox"]
    assert "lmsci.experiments.steering.lm_steer_detox" in g["lmsci.experiments.steering.lm_steer"]
