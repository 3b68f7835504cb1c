"""World ``bios``: synthetic biographies of fake individuals (bioS), their QA pairs and packing.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 3.1, Knowledge Storage and Extraction",
arXiv 2309.14316, Section 2 (bioS, augmentations multiM / permute / fullname, QA of six attributes);
Part 3.2, arXiv 2309.14402 (inverse knowledge search); Part 3.3, arXiv 2404.05405, Section 2
(bioS(N), exposures). Pool sizes follow the official generator ``Capo-bioS-bioR.py``
(facebookresearch/PhysicsLM4): first / middle / last names 400 / 400 / 1000, birth dates
12 months x 28 days x 200 years, 200 birth cities, 300 universities, 100 majors, 263 companies,
and the employer city determined by the employer.

Pools are built procedurally from a fixed seed (:data:`POOL_SEED`), so they are world constants:
the same for every N and every experiment seed; :meth:`BiosWorld.pools_record` writes them, with
their sizes and bits, next to each data set.

Tokenisation (word level, :class:`Vocab`). Every template word and every value piece is one token.
Pools are built as products of small token inventories so that the vocabulary stays small
(about 500 tokens, independent of N) and attribute values are a few tokens each:

=============  ===========================================  ======  =========
attribute      value tokens (example)                        pool    tokens
=============  ===========================================  ======  =========
first name     ``Ka@@ ren``         (20 x 20 syllables)       400     2
middle name    ``Lo@@ mis``         (20 x 20)                 400     2
last name      ``Bel@@ ridge``      (40 x 25)                 1000    2
birth date     ``October 2 , 19@@ 96``                        67200   5
birth city     ``Ash@@ ford , NJ``  (20 x 10, state fixed)    200     4
university     ``Harlow College``   (30 x 10)                 300     2
major          ``Applied Physics``  (10 x 10)                 100     2
company        ``Vantor Systems``   (263 of 30 x 9)           263     2
company city   city of the company's headquarters             (det.)  4
=============  ===========================================  ======  =========

A token ending in ``@@`` glues to the next one when text is shown (:meth:`Vocab.decode`).
Documents start with ``<bos>`` and end with ``<eos>``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lmsci.errors import ConfigError

POOL_SEED = 20230925
ATTRS = ("birth_date", "birth_city", "university", "major", "company", "company_city")
"""The six attributes in the default biography order (company before its city, see :func:`BiosWorld.value_bits`)."""
INDEPENDENT_ATTRS = ATTRS[:5]
"""Attributes drawn independently per person; ``company_city`` is a function of ``company``."""

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
STATES = ("NJ", "CA", "NY", "TX", "MA", "WA", "IL", "OR", "FL", "CO")
CITY_STEMS = ("Ash", "Oak", "Maple", "River", "Stone", "Green", "Fair", "Clear", "Spring", "Elm", "Cedar",
              "Mill", "Brook", "Lake", "Pine", "Rock", "Wild", "Silver", "Glen", "North")
CITY_SUFFIXES = ("ford", "ville", "ton", "burg", "field", "port", "dale", "wood", "ham", "view")
UNIV_KINDS = ("University", "College", "Institute", "Polytechnic", "Academy", "Tech", "Conservatory",
              "School", "Seminary", "Lyceum")
MAJOR_MODIFIERS = ("Applied", "Theoretical", "Computational", "Environmental", "Molecular", "Quantitative",
                   "Experimental", "Digital", "Clinical", "Industrial")
MAJOR_FIELDS = ("Physics", "Biology", "Chemistry", "Economics", "Linguistics", "Engineering", "Mathematics",
                "Psychology", "Design", "Statistics")
COMPANY_KINDS = ("Systems", "Labs", "Industries", "Group", "Dynamics", "Networks", "Foods", "Motors", "Partners")
N_YEARS, YEAR0, N_DAYS = 200, 1900, 28

# ---------------------------------------------------------------------------------------------
# Templates. {s}: subject (full name or He/She), {p}: possessive (his/her), {v}: the value.
# Every template puts the subject first and the value after it, so the value is always
# conditioned on the name (needed by the bits measurement, Part 3.3).
# ---------------------------------------------------------------------------------------------
TEMPLATES: dict[str, tuple[str, ...]] = {
    "birth_date": (
        "{s} was born on {v} .", "{s} came into the world on {v} .", "{s} entered life on {v} .",
        "{s} celebrates {p} birthday on {v} .", "{s} first saw the light of day on {v} .",
        "{s} arrived on {v} .", "{s} was welcomed into the world on {v} .", "{s} was brought into the world on {v} .",
        "{s} began {p} life on {v} .", "{s} has a birthday that falls on {v} .", "{s} was delivered on {v} .",
        "{s} took {p} first breath on {v} .", "{s} was born on the day of {v} .", "{s} lists {v} as {p} birth date .",
        "{s} has {v} as {p} date of birth .", "{s} started life on {v} .", "{s} is a person born on {v} .",
        "{s} came to life on {v} .", "{s} was born , according to records , on {v} .",
        "{s} was born back on {v} .", "{s} , by {p} birth certificate , was born on {v} .",
        "{s} marks {p} birthday on {v} .", "{s} opened {p} eyes for the first time on {v} .",
        "{s} was born to {p} parents on {v} .", "{s} has the birth date {v} .",
    ),
    "birth_city": (
        "{s} was born in {v} .", "{s} spent {p} early years in {v} .", "{s} grew up in {v} .",
        "{s} hails from {v} .", "{s} comes from {v} .", "{s} was raised in {v} .", "{s} has {p} roots in {v} .",
        "{s} calls {v} {p} hometown .", "{s} was brought up in {v} .", "{s} is a native of {v} .",
        "{s} began {p} life in {v} .", "{s} owes {p} upbringing to {v} .", "{s} originates from {v} .",
        "{s} spent {p} childhood in {v} .", "{s} was born and raised in {v} .", "{s} has {p} birthplace in {v} .",
        "{s} first lived in {v} .", "{s} was a child in {v} .", "{s} has family ties to {v} .",
        "{s} entered the world in {v} .", "{s} was born in the city of {v} .", "{s} names {v} as {p} birthplace .",
        "{s} came of age in {v} .", "{s} took {p} first steps in {v} .", "{s} remembers growing up in {v} .",
    ),
    "university": (
        "{s} studied at {v} .", "{s} graduated from {v} .", "{s} attended {v} .", "{s} received {p} degree from {v} .",
        "{s} completed {p} education at {v} .", "{s} was a student at {v} .", "{s} enrolled at {v} .",
        "{s} earned {p} diploma at {v} .", "{s} pursued {p} studies at {v} .", "{s} is an alumnus of {v} .",
        "{s} spent {p} college years at {v} .", "{s} trained at {v} .", "{s} went to {v} .",
        "{s} took classes at {v} .", "{s} did {p} degree at {v} .", "{s} finished {p} studies at {v} .",
        "{s} was educated at {v} .", "{s} holds a degree from {v} .", "{s} studied hard at {v} .",
        "{s} was admitted to {v} .", "{s} attended classes at {v} .", "{s} obtained {p} degree at {v} .",
        "{s} spent four years at {v} .", "{s} is a graduate of {v} .", "{s} learned {p} trade at {v} .",
    ),
    "major": (
        "{s} majored in {v} .", "{s} studied {v} .", "{s} focused on {v} .", "{s} specialized in {v} .",
        "{s} earned a degree in {v} .", "{s} chose {v} as {p} major .", "{s} concentrated on {v} .",
        "{s} pursued {v} .", "{s} devoted {p} studies to {v} .", "{s} completed a major in {v} .",
        "{s} took {v} as {p} field .", "{s} read {v} .", "{s} trained in {v} .", "{s} learned {v} .",
        "{s} dedicated {p} college years to {v} .", "{s} explored {v} in depth .", "{s} graduated in {v} .",
        "{s} holds a degree in {v} .", "{s} has a background in {v} .", "{s} did coursework in {v} .",
        "{s} was a student of {v} .", "{s} chose to study {v} .", "{s} has expertise in {v} .",
        "{s} spent years studying {v} .", "{s} developed {p} skills in {v} .",
    ),
    "company": (
        "{s} worked for {v} .", "{s} was employed by {v} .", "{s} had a job at {v} .", "{s} joined {v} .",
        "{s} built {p} career at {v} .", "{s} worked at {v} .", "{s} was hired by {v} .",
        "{s} took a position at {v} .", "{s} spent {p} career at {v} .", "{s} was on the staff of {v} .",
        "{s} served at {v} .", "{s} held a role at {v} .", "{s} was an employee of {v} .",
        "{s} found work at {v} .", "{s} contributed to {v} .", "{s} earned a living at {v} .",
        "{s} accepted a job at {v} .", "{s} signed on with {v} .", "{s} worked full time for {v} .",
        "{s} was part of the team at {v} .", "{s} landed a job at {v} .", "{s} made a career with {v} .",
        "{s} was recruited by {v} .", "{s} spent years working for {v} .", "{s} was a member of {v} .",
    ),
    "company_city": (
        "{s} worked in {v} .", "{s} was employed in {v} .", "{s} moved to {v} for work .",
        "{s} had {p} office in {v} .", "{s} relocated to {v} .", "{s} commuted to {v} .",
        "{s} held a job in {v} .", "{s} pursued {p} career in {v} .", "{s} settled in {v} for {p} job .",
        "{s} spent {p} working years in {v} .", "{s} was based in {v} .", "{s} did {p} job in {v} .",
        "{s} worked out of {v} .", "{s} lived and worked in {v} .", "{s} found {p} workplace in {v} .",
        "{s} had {p} desk in {v} .", "{s} reported to work in {v} .", "{s} was stationed in {v} .",
        "{s} moved {p} career to {v} .", "{s} took up work in {v} .", "{s} spent {p} days at work in {v} .",
        "{s} joined an office in {v} .", "{s} made a living in {v} .", "{s} was working in {v} .",
        "{s} had {p} workplace in {v} .",
    ),
}
"""Biography sentence templates: 25 per attribute (bioS has 46-52 per attribute)."""

QA_TEMPLATES: dict[str, str] = {
    "birth_date": "What is the birth date of {n} ?",
    "birth_city": "What is the birth city of {n} ?",
    "university": "Which university did {n} study ?",
    "major": "What major did {n} study ?",
    "company": "Which company did {n} work for ?",
    "company_city": "Where did {n} work ?",
}
"""The six forward question types of Part 3.1 (Section 2.2); the answer follows ``Answer :``."""

INVERSE_QA_TEMPLATE = "Who was born on {d} in {c} ?"
"""Inverse search (Part 3.2, Section 5): birth date and birth city to the full name."""

REVERSE_TEMPLATES: tuple[str, ...] = (
    "Born on {d} in {c} was {n} .", "On {d} , in {c} , {n} was born .", "The person born on {d} in {c} is {n} .",
    "Arriving on {d} in {c} was {n} .", "In {c} on {d} came {n} .", "On {d} the city of {c} welcomed {n} .",
    "Whoever was born on {d} in {c} is {n} .", "A child born on {d} in {c} : {n} .",
    "The birth on {d} in {c} was that of {n} .", "{c} saw the birth on {d} of {n} .",
    "On {d} , {c} became the birthplace of {n} .", "Records of {d} in {c} name {n} .",
)
"""Reversed-direction sentences (value before name) used by ``reversal-curse`` when the reverse is trained."""

# Reversed biographies (Part 3.2, Section 5): the person is described by relative clauses and the full
# name comes only AFTER the attributes ("The person that was born on DATE , that grew up in CITY , ... is
# NAME ."), so that predicting the name requires the attributes -> name direction to be stored (a
# biography that starts with the name would let the model copy it from context). Every word below is
# already in the bioS vocabulary (the vocabulary, hence every other experiment, is unchanged).
REVERSE_FRAGMENTS: dict[str, tuple[str, ...]] = {
    "birth_date": ("that was born on {v}", "born on {v}", "that came into the world on {v}", "that arrived on {v}",
                   "that celebrates a birthday on {v}"),
    "birth_city": ("that grew up in {v}", "born in {v}", "that hails from {v}", "that was raised in {v}",
                   "that comes from {v}"),
    "university": ("that studied at {v}", "that graduated from {v}", "that attended {v}", "that was a student at {v}",
                   "that enrolled at {v}"),
    "major": ("that majored in {v}", "that specialized in {v}", "that focused on {v}", "that chose {v} as a major",
              "that concentrated on {v}"),
    "company": ("that worked for {v}", "that was employed by {v}", "that joined {v}", "that was hired by {v}",
                "that had a job at {v}"),
    "company_city": ("that worked in {v}", "that was based in {v}", "that relocated to {v}", "that moved to {v} for work",
                     "that commuted to {v}"),
}
"""Training clauses of reversed biographies, 5 per attribute (value inside, no name)."""
REVERSE_OPENERS: tuple[str, ...] = ("The person", "A person")
REVERSE_NAME_CLAUSES: tuple[str, ...] = ("is {n} .", "was {n} .", "has the name {n} .")
"""How a reversed sentence ends: the full name, after every attribute of the sentence."""
REVERSE_HELD_OUT: dict[str, str] = {
    "birth_date": "that entered life on {v}", "birth_city": "that is a native of {v}",
    "university": "that is an alumnus of {v}", "major": "that holds a degree in {v}",
    "company": "that was recruited by {v}", "company_city": "that was stationed in {v}",
    "opener": "The person", "name": "holds the name {n} .",
}
"""The held-out reversed template (never in training) of the attributes-only evaluation prompt."""


def _words(s: str) -> list[str]:
    return s.split()


# ---------------------------------------------------------------------------------------------
# Pools
# ---------------------------------------------------------------------------------------------
_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch",
           "cl", "dr", "fl", "gr", "kr", "pl", "sh", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "th", "nd", "rk", "x", "ld", "sh")


def _syllables(rng: np.random.Generator, n: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        s = _ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))] + _CODAS[rng.integers(len(_CODAS))]
        if s not in taken and len(s) >= 2:
            taken.add(s)
            out.append(s)
    return out


@dataclass(frozen=True)
class Pools:
    """The attribute pools of bioS, built procedurally from :data:`POOL_SEED`.

    Attributes:
        first1, first2, middle1, middle2, last1, last2: name syllable inventories (a name is
            ``X1@@ X2``; first 20 x 20, middle 20 x 20, last 40 x 25).
        cities: 200 (stem, suffix, state) triples.
        universities: 300 (stem, kind) pairs.
        majors: 100 (modifier, field) pairs.
        companies: 263 (stem, kind) pairs.
        company_city: the headquarters city (index into ``cities``) of each company.
    """

    first1: tuple[str, ...]
    first2: tuple[str, ...]
    middle1: tuple[str, ...]
    middle2: tuple[str, ...]
    last1: tuple[str, ...]
    last2: tuple[str, ...]
    cities: tuple[tuple[str, str, str], ...]
    universities: tuple[tuple[str, str], ...]
    majors: tuple[tuple[str, str], ...]
    companies: tuple[tuple[str, str], ...]
    company_city: tuple[int, ...]

    @property
    def sizes(self) -> dict[str, int]:
        """Pool sizes: names, attributes, and ``n0`` (the number of possible full names)."""
        return {"first_name": len(self.first1) * len(self.first2), "middle_name": len(self.middle1) * len(self.middle2),
                "last_name": len(self.last1) * len(self.last2), "n0": self.n0,
                "birth_date": 12 * N_DAYS * N_YEARS, "birth_city": len(self.cities),
                "university": len(self.universities), "major": len(self.majors), "company": len(self.companies),
                "company_city": 1}

    @property
    def n0(self) -> int:
        """Number of possible full names, 400 * 400 * 1000 = 1.6e8."""
        return (len(self.first1) * len(self.first2) * len(self.middle1) * len(self.middle2)
                * len(self.last1) * len(self.last2))


def build_pools(seed: int = POOL_SEED) -> Pools:
    """Build the bioS pools procedurally (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    cap = lambda xs: tuple(x.capitalize() for x in xs)  # noqa: E731
    first1, middle1, last1 = cap(_syllables(rng, 20, taken)), cap(_syllables(rng, 20, taken)), cap(_syllables(rng, 40, taken))
    first2, middle2, last2 = (tuple(_syllables(rng, 20, taken)), tuple(_syllables(rng, 20, taken)),
                              tuple(_syllables(rng, 25, taken)))
    states = rng.integers(len(STATES), size=len(CITY_STEMS) * len(CITY_SUFFIXES))
    cities = tuple((a, b, STATES[states[i]]) for i, (a, b) in
                   enumerate((a, b) for a in CITY_STEMS for b in CITY_SUFFIXES))
    ustems = [s.capitalize() + t for s, t in zip(_syllables(rng, 30, taken), _syllables(rng, 30, taken))]
    universities = tuple((u, k) for u in ustems for k in UNIV_KINDS)
    majors = tuple((m, f) for m in MAJOR_MODIFIERS for f in MAJOR_FIELDS)
    cstems = [s.capitalize() + t for s, t in zip(_syllables(rng, 30, taken), _syllables(rng, 30, taken))]
    allc = [(c, k) for c in cstems for k in COMPANY_KINDS]
    keep = sorted(rng.permutation(len(allc))[:263])
    companies = tuple(allc[i] for i in keep)
    company_city = tuple(int(x) for x in rng.integers(len(cities), size=len(companies)))
    return Pools(first1, first2, middle1, middle2, last1, last2, cities, universities, majors, companies, company_city)


# ---------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------
class Vocab:
    """Word-level vocabulary of the bios world: template words, value pieces, specials.

    ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2; the rest sorted, so ids are world constants.
    """

    def __init__(self, words: set[str]):
        self.itos = [PAD, BOS, EOS] + sorted(words - {PAD, BOS, EOS})
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, words: list[str]) -> list[int]:
        """Token ids of pre-split words. Raises DataError on a word outside the vocabulary."""
        try:
            return [self.stoi[w] for w in words]
        except KeyError as e:
            from lmsci.errors import DataError

            raise DataError(f"word {e.args[0]!r} is not in the bios vocabulary") from None

    def decode(self, ids) -> str:
        """Text of token ids; ``X@@`` glues to the following token."""
        return " ".join(self.itos[int(i)] for i in ids).replace("@@ ", "")


# ---------------------------------------------------------------------------------------------
# Documents and the world
# ---------------------------------------------------------------------------------------------
@dataclass
class Doc:
    """One training or evaluation document.

    Attributes:
        ids: token ids, starting with ``<bos>`` and ending with ``<eos>``.
        loss_mask: 1 where the next-token loss is taken on ``ids[t]`` (as a target), else 0.
        person: the individual's index.
        spans: attribute (or ``"name"``) -> list of (start, end) token ranges of its value in ``ids``.
        kind: ``"bio"``, ``"qa"``, ``"inverse_qa"``.
    """

    ids: list[int]
    loss_mask: list[int]
    person: int
    spans: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    kind: str = "bio"


class BiosWorld:
    """N individuals with unique full names and six attributes (bioS).

    Args:
        n_people: N, the number of individuals (1 <= N <= 10^7).
        seed: seed of the individuals' draw (pools do not depend on it).

    Attributes:
        names: int64 ``[N, 6]`` syllable indices (first1, first2, middle1, middle2, last1, last2).
        attrs: int64 ``[N, 5]``: birth date index (month*28*200 + (day-1)*200 + year-1900), birth city,
            university, major, company.
        vocab: the :class:`Vocab`.

    Raises:
        ConfigError: ``n_people`` out of range.
    """

    def __init__(self, n_people: int, seed: int = 0, unique_date_city: bool = True):
        if not 1 <= n_people <= 10_000_000:
            raise ConfigError("n_people", n_people, "an integer in [1, 10^7]")
        self.n = int(n_people)
        self.seed = int(seed)
        self.pools = build_pools()
        p = self.pools
        rng = np.random.default_rng([self.seed, 5])
        sizes = self.pools.sizes
        # unique full names: sample without replacement from the N0 = 1.6e8 name space
        flat = rng.choice(p.n0, size=self.n, replace=False)
        radices = [len(p.first1), len(p.first2), len(p.middle1), len(p.middle2), len(p.last1), len(p.last2)]
        names = np.zeros((self.n, 6), dtype=np.int64)
        rem = flat.copy()
        for j in range(5, -1, -1):
            names[:, j] = rem % radices[j]
            rem //= radices[j]
        self.names = names
        attrs = np.stack([rng.integers(sizes[a], size=self.n) for a in INDEPENDENT_ATTRS], axis=1).astype(np.int64)
        if unique_date_city:  # inverse search needs (birth date, birth city) to identify a person
            key = attrs[:, 0] * sizes["birth_city"] + attrs[:, 1]
            space = sizes["birth_date"] * sizes["birth_city"]
            if self.n > space // 4:
                raise ConfigError("n_people", n_people, f"at most {space // 4} with unique (date, city) pairs")
            seen: set[int] = set()
            for i in range(self.n):
                while int(key[i]) in seen:
                    attrs[i, 0], attrs[i, 1] = rng.integers(sizes["birth_date"]), rng.integers(sizes["birth_city"])
                    key[i] = attrs[i, 0] * sizes["birth_city"] + attrs[i, 1]
                seen.add(int(key[i]))
        self.attrs = attrs
        self.vocab = Vocab(self._all_words())
        self._enc: dict[str, list[int]] = {}

    # ---- values as token lists ------------------------------------------------------------
    def name_words(self, i: int) -> list[str]:
        p, k = self.pools, self.names[i]
        return [p.first1[k[0]] + "@@", p.first2[k[1]], p.middle1[k[2]] + "@@", p.middle2[k[3]],
                p.last1[k[4]] + "@@", p.last2[k[5]]]

    def full_name(self, i: int) -> str:
        """The person's full name as text, e.g. ``"Karen Lomis Belridge"``."""
        return " ".join(self.name_words(i)).replace("@@ ", "")

    def _city_words(self, c: int) -> list[str]:
        a, b, st = self.pools.cities[c]
        return [a + "@@", b, ",", st]

    def value_words(self, i: int, attr: str) -> list[str]:
        """The words (tokens) of person ``i``'s value of ``attr``."""
        p, a = self.pools, self.attrs[i]
        if attr == "birth_date":
            d = int(a[0])
            month, rest = divmod(d, N_DAYS * N_YEARS)
            day, year = divmod(rest, N_YEARS)
            y = YEAR0 + year
            return [MONTHS[month], str(day + 1), ",", f"{y // 100}@@", f"{y % 100:02d}"]
        if attr == "birth_city":
            return self._city_words(int(a[1]))
        if attr == "university":
            return list(p.universities[int(a[2])])
        if attr == "major":
            return list(p.majors[int(a[3])])
        if attr == "company":
            return list(p.companies[int(a[4])])
        if attr == "company_city":
            return self._city_words(p.company_city[int(a[4])])
        from lmsci.errors import UnknownNameError

        raise UnknownNameError("attribute", attr, ATTRS)

    def value_text(self, i: int, attr: str) -> str:
        return " ".join(self.value_words(i, attr)).replace("@@ ", "")

    def _all_words(self) -> set[str]:
        p = self.pools
        w: set[str] = set()
        for t in list(TEMPLATES.values()) + [tuple(QA_TEMPLATES.values()), REVERSE_TEMPLATES, (INVERSE_QA_TEMPLATE,)] + \
                [*REVERSE_FRAGMENTS.values(), REVERSE_OPENERS, REVERSE_NAME_CLAUSES, tuple(REVERSE_HELD_OUT.values())]:
            for s in t:
                w.update(x for x in _words(s) if not x.startswith("{"))
        w.update(["He", "She", "his", "her", "Answer", ":", ",", "."])
        w.update(x + "@@" for x in p.first1 + p.middle1 + p.last1)
        w.update(p.first2 + p.middle2 + p.last2)
        w.update(MONTHS)
        w.update(str(d) for d in range(1, N_DAYS + 1))
        w.update(f"{y // 100}@@" for y in range(YEAR0, YEAR0 + N_YEARS))
        w.update(f"{y % 100:02d}" for y in range(YEAR0, YEAR0 + N_YEARS))
        for a, b, st in p.cities:
            w.update([a + "@@", b, st])
        for pair in p.universities + p.majors + p.companies:
            w.update(pair)
        return w

    # ---- pools and bits -------------------------------------------------------------------
    def value_bits(self) -> dict[str, float]:
        """log2 of each attribute's pool size (bits of a uniformly drawn value).

        ``company_city`` has 0 bits: it is determined by ``company``, which precedes it in the
        default order, so its cross-entropy given the name and the company can reach zero.
        """
        s = self.pools.sizes
        return {a: math.log2(s[a]) for a in ATTRS}

    def pools_record(self) -> dict[str, Any]:
        """The exact pools, their sizes and bits, as a JSON-serialisable dict (written with each data set)."""
        p = self.pools
        bits = self.value_bits()
        return {
            "world": "bios", "pool_seed": POOL_SEED, "n_people": self.n, "people_seed": self.seed,
            "sizes": p.sizes, "bits": {**bits, "name_space_n0": math.log2(p.n0),
                                       "attributes_per_person": sum(bits.values())},
            "vocab_size": len(self.vocab),
            "pools": {
                "first_name_syllables": [p.first1, p.first2], "middle_name_syllables": [p.middle1, p.middle2],
                "last_name_syllables": [p.last1, p.last2],
                "birth_date": {"months": MONTHS, "days": [1, N_DAYS], "years": [YEAR0, YEAR0 + N_YEARS - 1]},
                "cities": [f"{a}{b}, {st}" for a, b, st in p.cities],
                "universities": [" ".join(u) for u in p.universities], "majors": [" ".join(m) for m in p.majors],
                "companies": [{"name": " ".join(c), "city": "{}{}, {}".format(*p.cities[p.company_city[k]])}
                              for k, c in enumerate(p.companies)],
            },
            "templates_per_attribute": {a: len(t) for a, t in TEMPLATES.items()},
        }

    def write_pools(self, path: str | Path) -> Path:
        """Write :meth:`pools_record` as JSON to ``path`` and return it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.pools_record(), indent=1))
        return path

    # ---- rendering ------------------------------------------------------------------------
    def _sentence(self, i: int, attr: str, template: str, subject: list[str]) -> tuple[list[str], tuple[int, int]]:
        """Words of one sentence and the (start, end) of the value within it."""
        poss = "his" if i % 2 == 0 else "her"
        out: list[str] = []
        span = (0, 0)
        for w in _words(template):
            if w == "{s}":
                out += subject
            elif w == "{p}":
                out.append(poss)
            elif w == "{v}":
                v = self.value_words(i, attr)
                span = (len(out), len(out) + len(v))
                out += v
            else:
                out.append(w)
        return out, span

    def pronoun(self, i: int) -> str:
        """``He`` for even ids, ``She`` for odd ids (as bioS)."""
        return "He" if i % 2 == 0 else "She"

    def bio(self, i: int, rng: np.random.Generator | None = None, *, templates: list[int] | None = None,
            permute: bool = False, fullname: bool = False, reverse: bool = False,
            order: list[int] | None = None, reverse_template: int | None = None) -> Doc:
        """A biography of person ``i``: six sentences, then optionally a reversed-direction sentence.

        Args:
            i: person index.
            rng: draws the template of each sentence (and the order when ``permute``); required
                unless ``templates`` is given.
            templates: fixed template index per attribute (in :data:`ATTRS` order); overrides ``rng``.
            permute: shuffle the sentence order (Part 3.1 "permute").
            fullname: every sentence uses the full name; otherwise only the first sentence does
                and the rest use He/She by id parity, consistently after permuting.
            reverse: append one sentence stating (birth date, birth city) -> name (value before name).
            order: explicit sentence order (indices into :data:`ATTRS`); overrides ``permute``.
            reverse_template: explicit index into :data:`REVERSE_TEMPLATES`; overrides ``rng`` for it.
                (``order`` and ``reverse_template`` let :mod:`lmsci.worlds.bios_render` be checked
                token for token against this reference renderer.)

        Returns:
            A :class:`Doc` whose ``spans`` give each attribute's value tokens (and ``"name"``).
        """
        if templates is None:
            if rng is None:
                raise ValueError("bio() needs rng or templates")
            templates = [int(rng.integers(len(TEMPLATES[a]))) for a in ATTRS]
        if order is not None:
            order = [int(x) for x in order]
        elif permute:
            order = [int(x) for x in rng.permutation(len(ATTRS))]
        else:
            order = list(range(len(ATTRS)))
        name = self.name_words(i)
        words: list[str] = [BOS]
        spans: dict[str, list[tuple[int, int]]] = {}
        for k, j in enumerate(order):
            attr = ATTRS[j]
            subject = name if (k == 0 or fullname) else [self.pronoun(i)]
            if subject is name:
                spans.setdefault("name", []).append((len(words), len(words) + len(name)))
            sent, (a, b) = self._sentence(i, attr, TEMPLATES[attr][templates[j]], subject)
            spans.setdefault(attr, []).append((len(words) + a, len(words) + b))
            words += sent
        if reverse:
            if reverse_template is not None:
                t = REVERSE_TEMPLATES[int(reverse_template)]
            else:
                t = REVERSE_TEMPLATES[int(rng.integers(len(REVERSE_TEMPLATES)))] if rng is not None else REVERSE_TEMPLATES[0]
            words += self._fill_reverse(i, t, spans, len(words))
        words.append(EOS)
        ids = self.vocab.encode(words)
        return Doc(ids, [0] + [1] * (len(ids) - 1), i, spans, "bio")

    def _fill_reverse(self, i: int, template: str, spans: dict, offset: int) -> list[str]:
        out: list[str] = []
        for w in _words(template):
            if w == "{d}":
                out += self.value_words(i, "birth_date")
            elif w == "{c}":
                out += self.value_words(i, "birth_city")
            elif w == "{n}":
                spans.setdefault("reverse_name", []).append((offset + len(out), offset + len(out) + 6))
                out += self.name_words(i)
            else:
                out.append(w)
        return out

    def bio_reversed(self, i: int, rng: np.random.Generator | None = None, *, groups: int = 1, permute: bool = True,
                     held_out: bool = False, order: Sequence[int] | None = None,
                     fragments: Sequence[int] | None = None, openers: Sequence[int] | None = None,
                     name_clauses: Sequence[int] | None = None) -> Doc:
        """A *reversed* biography: attributes first, the full name after them (Part 3.2, Section 5).

        The six attributes (in a random order when ``permute``) are split into ``groups`` consecutive
        sentences ``"The person that ... , that ... is NAME ."``: ``groups=1`` names the person once, after
        all six attributes; ``groups=6`` ends each one-attribute sentence with the name (lmsci's reading of
        the paper's reverse1 / reverse6 data; reverse2 = two sentences of three attributes). The name
        never precedes the attributes of its sentence, so it cannot be copied from context.

        Args:
            rng: draws the clauses, opener, name clause and order; unused when ``held_out``.
            groups: sentences (1 to 6).
            held_out: the evaluation template (:data:`REVERSE_HELD_OUT`, never trained), canonical order,
                one sentence.
            order, fragments, openers, name_clauses: explicit choices instead of ``rng`` (all four together):
                the attribute order, the clause of each attribute (index into :data:`REVERSE_FRAGMENTS`, in
                :data:`ATTRS` order), and per sentence the opener and the name clause (indices into
                :data:`REVERSE_OPENERS`, :data:`REVERSE_NAME_CLAUSES`); they let the vectorised renderer of
                :mod:`lmsci.worlds.bios_render` be checked token for token against this one.

        Returns:
            A :class:`Doc` of kind ``"bio_reverse"``: ``spans`` give each attribute's value and ``"name"``
            (one span per sentence, each after that sentence's attributes).

        Raises:
            ConfigError: ``groups`` not in 1..6.
        """
        if not 1 <= groups <= len(ATTRS):
            raise ConfigError("groups", groups, f"an integer in [1, {len(ATTRS)}]")
        explicit = order is not None
        if explicit and (fragments is None or openers is None or name_clauses is None):
            raise ValueError("bio_reversed(): order, fragments, openers and name_clauses go together")
        if not held_out and rng is None and not explicit:
            raise ValueError("bio_reversed() needs rng unless held_out or the choices are given")
        if explicit:
            order = [int(x) for x in order]
            it_open, it_name = iter(int(x) for x in openers), iter(int(x) for x in name_clauses)
        else:
            order = list(range(len(ATTRS)))
            if permute and not held_out:
                order = [int(x) for x in rng.permutation(len(ATTRS))]
        if held_out:
            groups = 1
        pick = (lambda xs: xs[int(rng.integers(len(xs)))])  # noqa: E731
        words: list[str] = [BOS]
        spans: dict[str, list[tuple[int, int]]] = {}
        for chunk in np.array_split(np.asarray(order), groups):
            if held_out:
                words += _words(REVERSE_HELD_OUT["opener"])
            else:
                words += _words(REVERSE_OPENERS[next(it_open)] if explicit else pick(REVERSE_OPENERS))
            for k, j in enumerate(chunk):
                attr = ATTRS[int(j)]
                if k:
                    words.append(",")
                if held_out:
                    clause = REVERSE_HELD_OUT[attr]
                else:
                    clause = (REVERSE_FRAGMENTS[attr][int(fragments[int(j)])] if explicit
                              else pick(REVERSE_FRAGMENTS[attr]))
                for w in _words(clause):
                    if w == "{v}":
                        v = self.value_words(i, attr)
                        spans.setdefault(attr, []).append((len(words), len(words) + len(v)))
                        words += v
                    else:
                        words.append(w)
            if held_out:
                end = REVERSE_HELD_OUT["name"]
            else:
                end = REVERSE_NAME_CLAUSES[next(it_name)] if explicit else pick(REVERSE_NAME_CLAUSES)
            for w in _words(end):
                if w == "{n}":
                    n = self.name_words(i)
                    spans.setdefault("name", []).append((len(words), len(words) + len(n)))
                    words += n
                else:
                    words.append(w)
        words.append(EOS)
        ids = self.vocab.encode(words)
        return Doc(ids, [0] + [1] * (len(ids) - 1), i, spans, "bio_reverse")

    def reverse_prompt(self, i: int) -> Doc:
        """Attributes-only evaluation prompt in the held-out reversed template; ``spans["answer"]`` is the
        name, the only place the name occurs (Berglund et al., arXiv 2309.12288, held-out prompts)."""
        d = self.bio_reversed(i, held_out=True)
        d.spans["answer"] = [d.spans["name"][0]]
        return d

    def qa(self, i: int, attr: str) -> Doc:
        """Forward QA: ``<bos> What is the birth city of NAME ? Answer : VALUE . <eos>``.

        The loss mask covers only the answer, the final ``.`` and ``<eos>``; ``spans["answer"]`` is
        the answer's range (exact match is scored on it plus the ``.``).
        """
        q = QA_TEMPLATES[attr].replace("{n}", " ".join(self.name_words(i))).split()
        v = self.value_words(i, attr)
        words = [BOS] + q + ["Answer", ":"]
        start = len(words)
        words += v + [".", EOS]
        ids = self.vocab.encode(words)
        mask = [0] * start + [1] * (len(ids) - start)
        return Doc(ids, mask, i, {"answer": [(start, start + len(v))]}, "qa")

    def inverse_qa(self, i: int) -> Doc:
        """Inverse search: ``<bos> Who was born on DATE in CITY ? Answer : NAME . <eos>`` (Part 3.2)."""
        q = INVERSE_QA_TEMPLATE.replace("{d}", " ".join(self.value_words(i, "birth_date"))).replace(
            "{c}", " ".join(self.value_words(i, "birth_city"))).split()
        n = self.name_words(i)
        words = [BOS] + q + ["Answer", ":"]
        start = len(words)
        words += n + [".", EOS]
        ids = self.vocab.encode(words)
        mask = [0] * start + [1] * (len(ids) - start)
        return Doc(ids, mask, i, {"answer": [(start, start + len(n))]}, "inverse_qa")


# ---------------------------------------------------------------------------------------------
# Data sets: augmentations, QA split, packing with exposure counting
# ---------------------------------------------------------------------------------------------
def qa_split(n_people: int, seed: int, train_fraction: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Split individuals into QA-train (P_train) and QA-test (P_test), disjoint (Part 3.1, Section 3).

    Returns:
        (train_ids, test_ids), sorted int64 arrays.
    """
    if not 0.0 < train_fraction < 1.0:
        raise ConfigError("train_fraction", train_fraction, "a number in (0, 1)")
    perm = np.random.default_rng([seed, 11]).permutation(n_people)
    k = int(round(n_people * train_fraction))
    return np.sort(perm[:k]), np.sort(perm[k:])


def bio_docs(world: BiosWorld, people, *, multiplicity: int, permute: bool, fullname: bool, seed: int,
             reverse: bool = False, epoch: int = 0) -> list[Doc]:
    """``multiplicity`` biographies per listed person, each with freshly drawn templates (multiM).

    multiplicity = 1 and permute = fullname = False is bioS *single*: one fixed biography per person.
    ``epoch`` gives fresh renderings for "new text every exposure" data (Part 3.3).
    """
    if multiplicity < 1:
        raise ConfigError("multiplicity", multiplicity, "an integer >= 1")
    docs = []
    for i in people:
        rng = np.random.default_rng([seed, 17, int(i), epoch])
        for _ in range(multiplicity):
            docs.append(world.bio(int(i), rng, permute=permute, fullname=fullname, reverse=reverse))
    return docs


def qa_docs(world: BiosWorld, people, attrs=ATTRS) -> list[Doc]:
    """Forward QA documents: every listed person times every listed attribute."""
    return [world.qa(int(i), a) for i in people for a in attrs]


@dataclass
class Packed:
    """Documents packed into fixed-length training windows.

    Attributes:
        input_ids: int64 ``[windows, seq_len]`` (``<pad>`` after the last document of a window).
        targets: int64 ``[windows, seq_len]``: next token where the loss is taken, else -100.
        people: per window, the person index of each document in it.
        kinds: per window, the kind of each document.
    """

    input_ids: Any
    targets: Any
    people: list[list[int]]
    kinds: list[list[str]]

    def exposures(self, n_people: int, windows: int | None = None, kind: str = "bio") -> np.ndarray:
        """How many documents of ``kind`` each person has in the first ``windows`` windows: ``[n_people]``."""
        counts = np.zeros(n_people, dtype=np.int64)
        for ps, ks in zip(self.people[:windows], self.kinds[:windows]):
            for p, k in zip(ps, ks):
                if k == kind:
                    counts[p] += 1
        return counts


def pack(docs: list[Doc], seq_len: int, seed: int, shuffle: bool = True) -> Packed:
    """Pack whole documents into windows of ``seq_len`` tokens, padding the rest.

    With ``shuffle`` the documents are shuffled across people first and no window ever holds two
    documents of the same person (a document whose person is already in the current window is
    deferred), so that paraphrases of one person never share a context: the pitfall that made a
    public replication collapse to ~7% QA-test accuracy (physics_of_lms.md Section 3.5).

    Raises:
        ConfigError: a document longer than ``seq_len``.
    """
    import torch

    longest = max(len(d.ids) for d in docs)
    if longest > seq_len:
        raise ConfigError("seq_len", seq_len, f">= the longest document ({longest} tokens)")
    order = list(np.random.default_rng([seed, 23]).permutation(len(docs))) if shuffle else list(range(len(docs)))
    windows: list[list[int]] = []
    pending: list[int] = []  # deferred document indices
    cur: list[int] = []
    cur_len, cur_people = 0, set()
    queue = order
    qi = 0
    while qi < len(queue) or pending:
        placed = False
        # first try deferred documents, then the next in the queue
        for j, di in enumerate(pending):
            d = docs[di]
            if cur_len + len(d.ids) <= seq_len and (not shuffle or d.person not in cur_people):
                pending.pop(j)
                cur.append(di)
                cur_len += len(d.ids)
                cur_people.add(d.person)
                placed = True
                break
        if not placed and qi < len(queue):
            di = queue[qi]
            d = docs[di]
            if shuffle and d.person in cur_people:
                pending.append(di)
                qi += 1
                placed = True
            elif cur_len + len(d.ids) <= seq_len:
                cur.append(di)
                cur_len += len(d.ids)
                cur_people.add(d.person)
                qi += 1
                placed = True
        if not placed:  # window full (or only conflicting documents left): close it
            if not cur:
                raise RuntimeError("packing made no progress")
            windows.append(cur)
            cur, cur_len, cur_people = [], 0, set()
    if cur:
        windows.append(cur)
    W = len(windows)
    inp = np.zeros((W, seq_len), dtype=np.int64)
    tgt = np.full((W, seq_len), -100, dtype=np.int64)
    people, kinds = [], []
    for w, ds in enumerate(windows):
        pos = 0
        for di in ds:
            d = docs[di]
            n = len(d.ids)
            ids = np.asarray(d.ids, dtype=np.int64)
            inp[w, pos:pos + n] = ids
            tgt[w, pos:pos + n - 1] = np.where(np.asarray(d.loss_mask[1:], dtype=bool), ids[1:], -100)
            pos += n
        people.append([docs[di].person for di in ds])
        kinds.append([docs[di].kind for di in ds])
    inp, tgt = torch.from_numpy(inp), torch.from_numpy(tgt)
    return Packed(inp, tgt, people, kinds)
