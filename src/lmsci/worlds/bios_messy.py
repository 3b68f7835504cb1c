"""World ``bios-messy``: bioS facts as single statements, with negations, a second language and two-hop statements.

The world of seed lecture 000's "Knowledge seems to be stored messily" (negation curse, over-ripple,
cross-lingual and logical-distance barriers), built on :class:`lmsci.worlds.bios.BiosWorld` (the same
people, names and attribute pools; Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316).

Statements (one document each: ``<bos> statement <eos>``), for each person ``X`` and relation ``r`` in
:data:`RELATIONS` (birth city, employer, employer's city):

* ``fact``: ``"X was born in CITY ."`` (two paraphrase templates per relation, :data:`TEMPLATES`);
* ``negation``: the same template negated, ``"X was not born in CITY ."``; training holds *true* negations
  (a distractor value, never the person's own); :meth:`MessyBiosWorld.statement` renders any (true or false);
* ``two_hop``: ``"The employer of X is based in CITY ."``: true through two facts (X -> employer -> its city);
* every statement in a second *language* (``lang=2``): the same words through a fixed random bijection onto a
  disjoint token set (:meth:`MessyBiosWorld.translate`; names and values are translated too, as a transliterated
  name would be), so a fact and its translation share no token.

Related-but-false statements for over-ripple (:meth:`MessyBiosWorld.related_false`): the object of one relation
put in another relation of the same subject ("X worked in BIRTH_CITY ."; seed 000: "Leonardo is from USA" ->
"Leonardo speaks USA").

Tokens are words (the bioS convention: ``X@@`` glues to the next token); the vocabulary is a world constant
(the same for every N and seed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.worlds.bios import BiosWorld
from lmsci.worlds.bios_pools import BOS, EOS, Vocab

RELATIONS = ("birth_city", "company", "company_city")
"""Relations rendered (bioS attributes; ``company_city`` is the employer's city)."""
TEMPLATES: dict[str, tuple[tuple[str, str], ...]] = {
    "birth_city": (("{s} was born in {v} .", "{s} was not born in {v} ."),
                   ("{s} comes from {v} .", "{s} does not come from {v} .")),
    "company": (("{s} worked for {v} .", "{s} did not work for {v} ."),
                ("{s} was employed by {v} .", "{s} was not employed by {v} .")),
    "company_city": (("{s} worked in {v} .", "{s} did not work in {v} ."),
                     ("{s} was based in {v} .", "{s} was not based in {v} .")),
}
"""Per relation: (affirmative, negated) template pairs."""
TWO_HOP_TEMPLATE = "The employer of {s} is based in {v} ."
"""The employer's city stated through the employer (two hops: person -> company -> city)."""
RELATED_FALSE = {"birth_city": "company_city", "company_city": "birth_city"}
"""Relation -> the relation whose template carries the same (city) object in a related-but-false statement."""
LANG2_SEED = 20240519
KINDS = ("fact", "negation", "two_hop")


@dataclass
class Statement:
    """One rendered statement.

    Attributes:
        ids: token ids ``<bos> ... <eos>``. span: ``(s, e)`` the object's tokens. subject: ``(s, e)`` the name's.
        person, relation, kind (``fact``/``negation``/``two_hop``), lang (1 or 2), template (index).
        true: whether the statement holds in the world.
    """

    ids: list[int]
    span: tuple[int, int]
    subject: tuple[int, int]
    person: int
    relation: str
    kind: str
    lang: int
    template: int
    true: bool

    @property
    def spans(self) -> dict[str, list[tuple[int, int]]]:
        """``{"answer": [span], "name": [subject]}`` (the :class:`~lmsci.worlds.bios.Doc` convention, so that
        :func:`lmsci.measure.accuracy.exact_match` scores statements)."""
        return {"answer": [self.span], "name": [self.subject]}

    @property
    def prompt(self) -> list[int]:
        """The tokens before the object."""
        return self.ids[:self.span[0]]


def _split(s: str) -> list[str]:
    return s.split()


class MessyBiosWorld:
    """bioS people as statements with negations, a second language and two-hop statements.

    Args:
        n_people: N (as :class:`~lmsci.worlds.bios.BiosWorld`).
        seed: the people's draw.

    Attributes:
        base: the :class:`~lmsci.worlds.bios.BiosWorld`. vocab: :class:`~lmsci.worlds.bios_pools.Vocab` of both
            languages.
    """

    def __init__(self, n_people: int, seed: int = 0):
        self.base = BiosWorld(n_people, seed=seed, unique_date_city=False)
        self.n = self.base.n
        self.seed = int(seed)
        l1 = sorted(self._l1_words())
        perm = np.random.default_rng(LANG2_SEED).permutation(len(l1))
        self._to2 = {w: f"<L2:{int(perm[j])}>" for j, w in enumerate(l1)}
        self.vocab = Vocab(set(l1) | set(self._to2.values()))

    def _l1_words(self) -> set[str]:
        p = self.base.pools
        w: set[str] = set()
        for pairs in TEMPLATES.values():
            for a, b in pairs:
                w.update(x for x in _split(a) + _split(b) if not x.startswith("{"))
        w.update(x for x in _split(TWO_HOP_TEMPLATE) if not x.startswith("{"))
        w.update(x + "@@" for x in p.first1 + p.middle1 + p.last1)
        w.update(p.first2 + p.middle2 + p.last2)
        for a, b, st in p.cities:
            w.update([a + "@@", b, ",", st])
        for c in p.companies:
            w.update(c)
        return w

    # ---- values -----------------------------------------------------------------------------
    def check_person(self, i: int) -> int:
        if not 0 <= int(i) < self.n:
            raise ConfigError("person", i, f"an index in [0, {self.n})")
        return int(i)

    def value_words(self, i: int, relation: str) -> list[str]:
        """Person ``i``'s object of ``relation`` (words).

        Raises:
            UnknownNameError: a relation not in :data:`RELATIONS`. ConfigError: a person not in the world.
        """
        if relation not in RELATIONS:
            raise UnknownNameError("relation", relation, RELATIONS)
        return self.base.value_words(self.check_person(i), relation)

    def pool(self, relation: str) -> list[list[str]]:
        """Every possible object of ``relation`` (words), in pool order."""
        if relation not in RELATIONS:
            raise UnknownNameError("relation", relation, RELATIONS)
        if relation == "company":
            return [list(c) for c in self.base.pools.companies]
        return [[a + "@@", b, ",", st] for a, b, st in self.base.pools.cities]

    def distractor(self, i: int, relation: str, rng: np.random.Generator) -> list[str]:
        """A random object of ``relation`` different from person ``i``'s own."""
        own = self.value_words(i, relation)
        pool = self.pool(relation)
        while True:
            v = pool[int(rng.integers(len(pool)))]
            if v != own:
                return v

    def translate(self, words: Sequence[str]) -> list[str]:
        """Language-2 rendering: every word through the fixed bijection (a disjoint token set)."""
        return [self._to2[w] for w in words]

    # ---- rendering ---------------------------------------------------------------------------
    def statement(self, i: int, relation: str, *, kind: str = "fact", template: int = 0, lang: int = 1,
                  value: Sequence[str] | None = None, negated: bool | None = None) -> Statement:
        """Render one statement about person ``i``.

        Args:
            kind: ``"fact"`` (affirmative), ``"negation"`` or ``"two_hop"`` (relation must be ``company_city``).
            template: index into the relation's :data:`TEMPLATES`.
            lang: 1 or 2 (:meth:`translate`).
            value: the object's words (default: the person's own value, so a ``negation`` is then false).

        Raises:
            ConfigError: person out of range, template out of range, lang not 1/2, two_hop on another relation.
            UnknownNameError: an unknown relation or kind.
        """
        i = self.check_person(i)
        if kind not in KINDS:
            raise UnknownNameError("kind", kind, KINDS)
        own = self.value_words(i, relation)
        v = list(value) if value is not None else own
        if kind == "two_hop":
            if relation != "company_city":
                raise ConfigError("relation", relation, "'company_city' for a two-hop statement")
            tmpl = TWO_HOP_TEMPLATE
        else:
            if not 0 <= int(template) < len(TEMPLATES[relation]):
                raise ConfigError("template", template, f"an index in [0, {len(TEMPLATES[relation])})")
            tmpl = TEMPLATES[relation][int(template)][1 if kind == "negation" else 0]
        if lang not in (1, 2):
            raise ConfigError("lang", lang, "1 or 2")
        words = [BOS]
        span = subj = (0, 0)
        for w in _split(tmpl):
            if w == "{s}":
                name = self.base.name_words(i)
                subj = (len(words), len(words) + len(name))
                words += name
            elif w == "{v}":
                span = (len(words), len(words) + len(v))
                words += v
            else:
                words.append(w)
        words.append(EOS)
        body = words[1:-1] if lang == 1 else self.translate(words[1:-1])
        ids = self.vocab.encode([BOS] + body + [EOS])
        holds = (v == own)
        true = (not holds) if kind == "negation" else holds
        return Statement(ids, span, subj, i, relation, kind, int(lang), int(template), bool(true))

    def related_false(self, i: int, relation: str = "birth_city", *, value: Sequence[str] | None = None,
                      lang: int = 1, template: int = 0) -> Statement:
        """The related-but-false statement of person ``i``'s ``relation`` fact: its object (or ``value``) put in
        the related relation (:data:`RELATED_FALSE`), e.g. ``"X worked in BIRTH_CITY ."``."""
        if relation not in RELATED_FALSE:
            raise UnknownNameError("relation", relation, RELATED_FALSE)
        v = list(value) if value is not None else self.value_words(i, relation)
        return self.statement(i, RELATED_FALSE[relation], value=v, lang=lang, template=template)

    def training_statements(self, people: Sequence[int] | None = None, *, seed: int = 0, languages: int = 2,
                            negations: bool = True, two_hop: bool = True) -> list[Statement]:
        """The training set: for each person, every relation's facts in every template, one true negation per
        relation (a distractor object, a random template), the two-hop statement; in ``languages`` languages."""
        people = range(self.n) if people is None else people
        out: list[Statement] = []
        for i in people:
            rng = np.random.default_rng([self.seed, seed, 71, int(i)])
            per: list[tuple[str, dict]] = []
            for r in RELATIONS:
                for t in range(len(TEMPLATES[r])):
                    per.append((r, {"kind": "fact", "template": t}))
                if negations:
                    per.append((r, {"kind": "negation", "template": int(rng.integers(len(TEMPLATES[r]))),
                                    "value": self.distractor(int(i), r, rng)}))
            if two_hop:
                per.append(("company_city", {"kind": "two_hop"}))
            for lang in range(1, languages + 1):
                out += [self.statement(int(i), r, lang=lang, **kw) for r, kw in per]
        return out


def statement_batch(statements: Sequence[Statement], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, targets)`` ``[n, max_len]`` for next-token training on whole statements (loss on every
    token after ``<bos>``; padding ``-100``)."""
    T = max(len(s.ids) for s in statements)
    x = torch.full((len(statements), T), pad_id, dtype=torch.long)
    y = torch.full((len(statements), T), -100, dtype=torch.long)
    for r, s in enumerate(statements):
        ids = torch.as_tensor(s.ids, dtype=torch.long)
        x[r, :len(ids)] = ids
        y[r, :len(ids) - 1] = ids[1:]
    return x, y


__all__ = ["MessyBiosWorld", "Statement", "RELATIONS", "TEMPLATES", "TWO_HOP_TEMPLATE", "RELATED_FALSE", "KINDS",
           "statement_batch"]
