"""A fact set of well-known facts for probing pretrained language models (causal tracing, ROME, knowledge
neurons on a real model; issue 43).

The data are written for this project (``lmsci/worlds/data/facts/``): ``relations.json`` gives each relation a
prompt template (``{}`` marks the subject; the object is the text that follows the prompt after a space) and 1-3
paraphrase templates with the same answer; ``facts.csv`` lists ``subject,relation,object`` triples (capitals,
languages, currencies, continents, cities' countries, landmarks' cities, company founders and headquarters,
authors, chemical symbols, athletes' sports, painters, composers). Only well-known facts; objects whose first
word is common were preferred, as in CounterFact (Meng et al. 2022, arXiv 2202.05262, Section 3.1), whose
prompts ("The Eiffel Tower is located in the city of") these follow. No model is assumed to know them: an
experiment keeps the facts a model answers (for example its greedy next token is the object's first token).

Usage::

    fs = load_facts()
    f = fs.facts[0]                      # Fact(subject="France", relation="capital", object="Paris")
    text, (a, b) = fs.prompt(f)          # "The capital of France is the city of", text[a:b] == "France"
    fs.prompt(f, paraphrase=1)           # the relation's second paraphrase
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from lmsci.errors import ConfigError, DataError, UnknownNameError

DATA_DIR = Path(__file__).parent / "data" / "facts"


@dataclass(frozen=True)
class Relation:
    """A relation: ``template`` (the prompt, ``{}`` = the subject) and ``paraphrases`` (other prompts, same answer)."""

    name: str
    template: str
    paraphrases: tuple[str, ...]


@dataclass(frozen=True)
class Fact:
    """One ``(subject, relation, object)`` triple; ``object`` follows the prompt after a space."""

    subject: str
    relation: str
    object: str


@dataclass(frozen=True)
class FactSet:
    """The relations and the facts (in file order)."""

    relations: dict[str, Relation]
    facts: tuple[Fact, ...]

    def prompt(self, fact: Fact, paraphrase: int | None = None) -> tuple[str, tuple[int, int]]:
        """The prompt text of ``fact`` (its relation's template, or paraphrase number ``paraphrase``) and the
        subject's character span ``(start, end)`` in it.

        Raises:
            UnknownNameError: the fact's relation is not in the set. ConfigError: ``paraphrase`` out of range.
        """
        if fact.relation not in self.relations:
            raise UnknownNameError("relation", fact.relation, sorted(self.relations))
        rel = self.relations[fact.relation]
        if paraphrase is None:
            tpl = rel.template
        elif 0 <= int(paraphrase) < len(rel.paraphrases):
            tpl = rel.paraphrases[int(paraphrase)]
        else:
            raise ConfigError("paraphrase", paraphrase, f"an index in [0, {len(rel.paraphrases)}) for {rel.name!r}")
        a = tpl.index("{}")
        return tpl.replace("{}", fact.subject), (a, a + len(fact.subject))

    def statement(self, fact: Fact) -> str:
        """The fact as a sentence: ``prompt + " " + object + "."``."""
        return f"{self.prompt(fact)[0]} {fact.object}."

    def by_relation(self, relation: str) -> list[Fact]:
        """The facts of one relation (file order).

        Raises:
            UnknownNameError: no such relation.
        """
        if relation not in self.relations:
            raise UnknownNameError("relation", relation, sorted(self.relations))
        return [f for f in self.facts if f.relation == relation]


def _template_ok(t: object) -> bool:
    return isinstance(t, str) and t.count("{}") == 1 and bool(t.replace("{}", "").strip()) and not t.endswith(" ")


def load_facts(directory: str | Path | None = None, relations: tuple[str, ...] | list[str] | None = None) -> FactSet:
    """Read ``relations.json`` and ``facts.csv`` from ``directory`` (default: the packaged fact set).

    Args:
        directory: a folder holding the two files.
        relations: keep only these relations (None: all).

    Raises:
        DataError: a missing or malformed file: a template without exactly one ``{}``, a fact naming an unknown
            relation, an empty field, a duplicated ``(subject, relation)``.
        UnknownNameError: a requested relation that is not in the set.
    """
    d = Path(directory) if directory is not None else DATA_DIR
    rp, fp = d / "relations.json", d / "facts.csv"
    for p in (rp, fp):
        if not p.is_file():
            raise DataError(f"fact set: {p} is missing")
    try:
        raw = json.loads(rp.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"fact set: {rp} is not valid JSON ({err})") from err
    rels: dict[str, Relation] = {}
    for name, spec in raw.items():
        if name.startswith("_"):
            continue
        tpl, paras = (spec or {}).get("template"), tuple((spec or {}).get("paraphrases", ()))
        if not _template_ok(tpl) or not all(_template_ok(p) for p in paras):
            raise DataError(f"fact set: relation {name!r} needs a template and paraphrases with exactly one '{{}}' "
                            f"and no trailing space (got {tpl!r}, {list(paras)!r})")
        rels[name] = Relation(name, tpl, paras)
    facts: list[Fact] = []
    seen: set[tuple[str, str]] = set()
    with fp.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames != ["subject", "relation", "object"]:
            raise DataError(f"fact set: {fp} must have the header subject,relation,object (got {reader.fieldnames})")
        for i, row in enumerate(reader, start=2):
            s, r, o = ((row.get(k) or "").strip() for k in ("subject", "relation", "object"))
            if not s or not o:
                raise DataError(f"fact set: {fp} line {i}: empty subject or object")
            if r not in rels:
                raise DataError(f"fact set: {fp} line {i}: unknown relation {r!r} (relations: {sorted(rels)})")
            if (s, r) in seen:
                raise DataError(f"fact set: {fp} line {i}: ({s!r}, {r!r}) appears twice")
            seen.add((s, r))
            facts.append(Fact(s, r, o))
    if relations is not None:
        bad = [r for r in relations if r not in rels]
        if bad:
            raise UnknownNameError("relations", bad[0], sorted(rels))
        keep = set(relations)
        rels = {k: v for k, v in rels.items() if k in keep}
        facts = [f for f in facts if f.relation in keep]
    return FactSet(rels, tuple(facts))


__all__ = ["DATA_DIR", "Fact", "FactSet", "Relation", "load_facts"]
