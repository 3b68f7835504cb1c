"""World ``bios``: synthetic biographies of fake individuals (bioS) and their QA pairs.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 3.1, Knowledge Storage and Extraction",
arXiv 2309.14316, Section 2 (bioS, augmentations multiM / permute / fullname, QA of six attributes);
Part 3.2, arXiv 2309.14402 (inverse knowledge search); Part 3.3, arXiv 2404.05405, Section 2
(bioS(N), exposures). Pool sizes follow the official generator ``Capo-bioS-bioR.py``
(facebookresearch/PhysicsLM4): first / middle / last names 400 / 400 / 1000, birth dates
12 months x 28 days x 200 years, 200 birth cities, 300 universities, 100 majors, 263 companies,
and the employer city determined by the employer.

Pools are built procedurally from a fixed seed (:data:`~lmsci.worlds.bios_pools.POOL_SEED`), so they are world
constants: the same for every N and every experiment seed; :meth:`BiosWorld.pools_record` writes them, with
their sizes and bits, next to each data set.

Tokenisation (word level, :class:`~lmsci.worlds.bios_pools.Vocab`). Every template word and every value piece is
one token.
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

A token ending in ``@@`` glues to the next one when text is shown (:meth:`~lmsci.worlds.bios_pools.Vocab.decode`).
Documents start with ``<bos>`` and end with ``<eos>``.

This module holds the world (:class:`BiosWorld`, :class:`Doc`); its parts live beside it: the attribute pools and
the vocabulary in :mod:`lmsci.worlds.bios_pools`, the sentence templates in :mod:`lmsci.worlds.bios_templates`,
and the in-memory data sets (augmented biographies, QA split, packing with exposure counting) in
:mod:`lmsci.worlds.bios_datasets`.
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
from lmsci.worlds.bios_pools import BOS, EOS, MONTHS, N_DAYS, N_YEARS, POOL_SEED, YEAR0, Vocab, build_pools
from lmsci.worlds.bios_templates import (INVERSE_QA_TEMPLATE, QA_TEMPLATES, REVERSE_FRAGMENTS, REVERSE_HELD_OUT,
                                         REVERSE_NAME_CLAUSES, REVERSE_OPENERS, REVERSE_TEMPLATES, TEMPLATES)

ATTRS = ("birth_date", "birth_city", "university", "major", "company", "company_city")
"""The six attributes in the default biography order (company before its city, see :func:`BiosWorld.value_bits`)."""
INDEPENDENT_ATTRS = ATTRS[:5]
"""Attributes drawn independently per person; ``company_city`` is a function of ``company``."""


def _words(s: str) -> list[str]:
    return s.split()


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
        vocab: the :class:`~lmsci.worlds.bios_pools.Vocab`.

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

