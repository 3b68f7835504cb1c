"""lmsci's fact set (issue 43): the packaged data load, prompts locate their subjects, bad files are refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lmsci.errors import ConfigError, DataError, UnknownNameError
from lmsci.worlds.facts import DATA_DIR, load_facts


def test_packaged_fact_set_loads_with_paraphrases_and_subject_spans():
    fs = load_facts()
    assert len(fs.facts) >= 300 and len(fs.relations) >= 10
    for rel in fs.relations.values():
        assert 1 <= len(rel.paraphrases) <= 3 and rel.template.count("{}") == 1
        assert len(fs.by_relation(rel.name)) >= 10
    for f in fs.facts:
        for k in (None, *range(len(fs.relations[f.relation].paraphrases))):
            text, (a, b) = fs.prompt(f, k)
            assert text[a:b] == f.subject and not text.endswith(" ")
    f = next(f for f in fs.facts if f.subject == "France" and f.relation == "capital")
    assert fs.statement(f) == "The capital of France is the city of Paris."
    assert {f.relation for f in load_facts(relations=("symbol",)).facts} == {"symbol"}


def test_pyproject_ships_the_data():
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert "data/facts/*.csv" in text and "data/facts/*.json" in text


def _copy(tmp_path: Path) -> Path:
    d = tmp_path / "facts"
    shutil.copytree(DATA_DIR, d)
    return d


@pytest.mark.parametrize("edit", [
    lambda d: (d / "facts.csv").write_text((d / "facts.csv").read_text() + "Atlantis,capital,Poseidonia\n" * 2),
    lambda d: (d / "facts.csv").write_text((d / "facts.csv").read_text() + "Atlantis,ruler,Poseidon\n"),
    lambda d: (d / "facts.csv").write_text("name,rel,obj\nFrance,capital,Paris\n"),
    lambda d: (d / "relations.json").write_text('{"capital": {"template": "The capital of is", "paraphrases": []}}'),
    lambda d: (d / "relations.json").write_text("{not json"),
    lambda d: (d / "facts.csv").unlink(),
])
def test_malformed_fact_files_are_refused(tmp_path, edit):
    d = _copy(tmp_path)
    edit(d)
    with pytest.raises(DataError):
        load_facts(d)


def test_unknown_relation_and_paraphrase_are_refused():
    with pytest.raises(UnknownNameError):
        load_facts(relations=("capitol",))
    fs = load_facts()
    with pytest.raises(ConfigError):
        fs.prompt(fs.facts[0], paraphrase=9)
