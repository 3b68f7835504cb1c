"""MkDocs hooks of the lmsci site (``hooks:`` in ``mkdocs.yml``): pages generated from the code at build time.

Markers in a page's Markdown are replaced before it is rendered:

* ``<!-- lmsci:cli -->``: the help of the typer app and of every command (``lmsci --help``, ``lmsci CMD --help``),
  taken from :data:`lmsci.cli.app` in this process (the same text the shell prints), so it cannot go stale;
* ``<!-- lmsci:api -->``: one mkdocstrings block per name of the public API (the ``__all__`` of each package in
  :data:`API_PACKAGES`, resolved through its lazy re-export map to the module that defines it);
* ``<!-- lmsci:include PATH -->``: the file ``PATH`` (relative to the repository root) inlined, e.g. the
  published claims table ``results/quick/claims.md``;
* ``<!-- lmsci:tutorial NAME -->``: the tutorial script ``docs/tutorials/NAME.py`` and the output it printed
  (``docs/tutorials/NAME.out.txt``, written by ``bash scripts/docs.sh outputs``; ``tests/test_docs.py`` reruns every
  script and compares that output's lines, numbers aside);
* ``<!-- lmsci:figures -->``: the published quick-run figures under ``docs/figures/<experiment>/`` with their
  captions and the claims they decide (``manifest.json``, written by ``scripts/docs_figures.py``).

A missing file or an unknown marker raises, so ``mkdocs build --strict`` fails rather than publishing a hole.
Nothing here touches the network.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:  # document the checkout being built, not another installed lmsci
    sys.path.insert(0, str(ROOT / "src"))
MARKER = re.compile(r"<!-- lmsci:(\w+)(?: ([^>]*?))? -->")
ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj|const):`~?([^`]+)`")  # Sphinx roles -> inline code
API_PACKAGES = ("lmsci", "lmsci.models", "lmsci.worlds", "lmsci.train", "lmsci.measure", "lmsci.methods",
                "lmsci.laws")


def cli_reference() -> str:
    """Markdown: ``lmsci --help`` and ``lmsci CMD --help`` for every command of the typer app, in app order."""
    import typer
    from typer.testing import CliRunner

    from lmsci.cli import app

    os.environ.setdefault("COLUMNS", "110")
    runner = CliRunner()
    group = typer.main.get_command(app)
    parts = ["## `lmsci`", "", "```text", _help(runner, app, []), "```", ""]
    for name in group.list_commands(None):  # type: ignore[arg-type]
        parts += [f"## `lmsci {name}`", "", "```text", _help(runner, app, [name]), "```", ""]
    return "\n".join(parts)


def _help(runner, app, args: list[str]) -> str:
    res = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "110", "NO_COLOR": "1", "TERM": "dumb"},
                        prog_name="lmsci")
    if res.exit_code != 0:
        raise RuntimeError(f"lmsci {' '.join(args)} --help exited {res.exit_code}: {res.output}")
    return "\n".join(line.rstrip() for line in res.output.strip("\n").splitlines())


def api_reference() -> str:
    """Markdown: for each public package, its docstring's first paragraph and one ``::: module.name`` per exported
    name; the top-level ``lmsci`` names (the same objects again) are a table linking to their entries."""
    parts = []
    for pkg in API_PACKAGES:
        mod = importlib.import_module(pkg)
        lazy = getattr(mod, "_EXPORTS", {})
        names = [n for n in mod.__all__ if n != "__version__"]
        parts += [f"## `{pkg}`", "", ROLE.sub(r"`\1`", (mod.__doc__ or "").strip().split("\n\n")[0]), ""]
        if pkg == "lmsci":
            parts += ["| `from lmsci import ...` | documented at |", "|---|---|"]
            parts += [f"| `{n}` | [`{lazy[n]}.{n}`][{lazy[n]}.{n}] |" for n in names]
            parts.append("")
            # names no subpackage below documents (the errors) are documented here
            names = [n for n in names if not any(lazy[n].startswith(p + ".") for p in API_PACKAGES[1:])]
        for name in names:
            if name not in lazy:
                raise RuntimeError(f"{pkg}.__all__ names {name!r}, which is not in its lazy re-export map")
            parts += [f"::: {lazy[name]}.{name}", "    options:", "      heading_level: 3",
                      "      show_root_full_path: false", ""]
    return "\n".join(parts)


def include(rel: str) -> str:
    path = ROOT / rel.strip()
    if not path.is_file():
        raise FileNotFoundError(f"lmsci:include {rel!r}: no such file under {ROOT}")
    return path.read_text()


def tutorial(name: str) -> str:
    """Markdown: the script as a code block and the output it printed when last run."""
    name = name.strip()
    script = ROOT / "docs" / "tutorials" / f"{name}.py"
    out = ROOT / "docs" / "tutorials" / f"{name}.out.txt"
    for p in (script, out):
        if not p.is_file():
            raise FileNotFoundError(f"lmsci:tutorial {name!r}: {p} is missing (bash scripts/docs.sh outputs)")
    return "\n".join([f"```python title=\"docs/tutorials/{name}.py\"", script.read_text().rstrip(), "```", "",
                      "What it printed (`bash scripts/docs.sh outputs` reruns it; the tests rerun it, smaller where "
                      "`tests/test_docs.py` says so, and compare the lines, numbers aside):", "",
                      "```text", out.read_text().rstrip(), "```", ""])


def figures(page_path: str) -> str:
    """Markdown gallery of ``docs/figures/<experiment>/``: per experiment its run, claims and captioned figures."""
    base = ROOT / "docs" / "figures"
    manifests = sorted(base.glob("*/manifest.json"))
    if not manifests:
        raise FileNotFoundError(f"lmsci:figures: no {base}/*/manifest.json (python scripts/docs_figures.py RUN...)")
    depth = page_path.count("/")
    up = "../" * depth
    parts = []
    for m in manifests:
        info = json.loads(m.read_text())
        exp = info["experiment"]
        parts += [f"## {exp}", "", info["statement"], "",
                  f"Run: preset `{info['preset']}`, master seed {info['seed']}, commit `{info['commit']}`, "
                  f"{info['date']}, {info['device']}, {info['threads']} thread(s).", ""]
        if info.get("claims"):
            parts += ["| claim | kind | this run (seed " + str(info["seed"]) + ") | ours [95% CI] | null arm | "
                      "published (seeds 0, 1) |", "|---|---|---|---|---|---|"]
            parts += [f"| `{c['id']}` | {c['kind']} | **{c['outcome']}** | {c['value']} | {c['null']} | "
                      f"{c['published']} |" for c in info["claims"]]
            parts.append("")
        for fig in info["figures"]:
            decides = ", ".join(f"`{c}`" for c in fig.get("claims", [])) or "context (decides no claim)"
            parts += [f"![{fig['caption']}]({up}figures/{exp}/{fig['file']})", "",
                      f"*{fig['caption']}* Decides: {decides}.", ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (the MkDocs hook signature)
    def sub(m: re.Match) -> str:
        kind, arg = m.group(1), m.group(2) or ""
        if kind == "cli":
            return cli_reference()
        if kind == "api":
            return api_reference()
        if kind == "include":
            return include(arg)
        if kind == "tutorial":
            return tutorial(arg)
        if kind == "figures":
            return figures(page.file.src_uri)
        raise ValueError(f"{page.file.src_uri}: unknown marker lmsci:{kind}")

    return MARKER.sub(sub, markdown)
