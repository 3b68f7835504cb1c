"""The README keeps its two commands and links the documentation site; the library example (moved from the README to
``docs/library.md``) runs as written (with tiny inputs); the CLI commands the README and the docs pages show exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from lmsci.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LIBRARY = ROOT / "docs" / "library.md"


def test_readme_python_example_runs(tmp_path):
    block = re.findall(r"```python\n(.*?)```", LIBRARY.read_text(), re.S)[0]
    block = block.replace('"out/"', repr(str(tmp_path))).replace('"path/or/hub-id"', repr(str(tmp_path)))
    block = block.replace("steps=1000, batch_size=32", "steps=3, batch_size=4")
    g = torch.Generator().manual_seed(0)

    def get_batch(step, gen):
        x = torch.randint(0, 65, (4, 17), generator=gen)
        return x[:, :-1], x[:, 1:]

    ns = {"ids": torch.randint(0, 65, (2, 16), generator=g), "targets": torch.randint(0, 65, (2, 16), generator=g),
          "long_ids": torch.randint(0, 65, (1, 300), generator=g),
          "get_batch": get_batch}
    exec(block, ns)
    assert ns["long_logits"].shape == (1, 300, 65)
    assert not torch.equal(ns["patched"], ns["logits"])
    ref = torch.nn.functional.cross_entropy(ns["model"](ns["ids"]).flatten(0, 1), ns["targets"].flatten(), reduction="sum")
    assert ns["nll_sum"].item() == pytest.approx(ref.item(), rel=1e-5)


def test_readme_keeps_the_two_commands_and_links_the_docs():
    text = README.read_text()
    assert "bash scripts/setup.sh && .venv/bin/lmsci run factual-recall" in text
    assert "bash scripts/setup.sh && .venv/bin/python -m pytest tests -q" in text
    assert "scripts/docs.sh serve" in text and "## Results" in text
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).exists(), link


def test_readme_commands_exist():
    text = "\n".join(p.read_text() for p in [README, *sorted((ROOT / "docs").rglob("*.md"))])
    used = set(re.findall(r"^lmsci ([\w-]+)", text, re.M))
    assert {"run", "show", "report", "train", "generate", "fit"} <= used
    for cmd in used:
        assert CliRunner().invoke(app, [cmd, "--help"]).exit_code == 0, cmd
