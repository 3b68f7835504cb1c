"""Parity of lmsci's bioS world with the official bioS generator (issue 30, item 2: bioS and the knowledge protocols).

Fixture (``fixtures/bios/``, see ``fixtures/bios/SOURCE.json`` and ``scripts/parity/bios.md``): outputs of
facebookresearch/PhysicsLM4 at 7580696, ``data-synthetic-pretrain/Capo-bioS-bioR/`` (``Capo-bioS-bioR.py`` and
``fields/*.txt``, last changed in 5d0a3c2): the sizes of the official attribute lists, the number of sentence
templates per attribute of ``get_text_simple3`` (the bioS generator), 2400 official bioS biographies analysed into
(attribute, subject, template) per sentence (1200 with ``order=0``, 1200 with ``order=1``) and 1200 outputs of the
official permutation ``augmentation_permutation2`` (sentence order and subjects). No official code is used here.

The official folder holds no person sampler, no ``fullname`` augmentation and no QA templates; for those the test
uses the paper's stated facts (Part 3.1, arXiv 2309.14316, Section 2), written below with their source.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chi2_contingency, chisquare

from lmsci.worlds.bios import ATTRS, BiosWorld
from lmsci.worlds.bios_datasets import bio_docs
from lmsci.worlds.bios_pools import MONTHS, build_pools
from lmsci.worlds.bios_render import BiosRenderer
from lmsci.worlds.bios_templates import QA_TEMPLATES, TEMPLATES

FIX = Path(__file__).parent / "fixtures" / "bios"

#: alpha of every distribution test (two-sample chi-square against the official draws, or goodness of fit to the
#: uniform law that the official ``random.choice`` / ``random.shuffle`` implement); one test per statistic
ALPHA = 1e-3

#: the paper's birth-date space (Part 3.1, Section 2.1: 200 years 1900-2099 x 12 months x 28 days); the official
#: folder has no person sampler, so this number is the paper's, not the code's
PAPER_BIRTH_DATES = 200 * 12 * 28
#: Part 3.1, Section 2.2: the six QA questions (example person "Anya Briar Forger"), with {n} for the full name
PAPER_QA = {
    "birth_date": "What is the birth date of {n}?",
    "birth_city": "What is the birth city of {n}?",
    "university": "Which university did {n} study?",
    "major": "What major did {n} study?",
    "company": "Which company did {n} work for?",
    "company_city": "Where did {n} work?",
}
#: Part 3.1, Section 2.1 / 3.3, Section 2: N = 100,000 individuals with unique full names
PAPER_N = 100_000

# the official list behind each lmsci pool
OFFICIAL_POOL = {"first_name": "first_name", "middle_name": "middle_name", "last_name": "last_name",
                 "birth_city": "birth_city", "university": "university", "major": "major", "company": "company"}


@lru_cache(maxsize=None)
def official() -> dict:
    return json.loads((FIX / "official.json").read_text())


@lru_cache(maxsize=None)
def world(n: int = 2400) -> BiosWorld:
    return BiosWorld(n, seed=0)


class _Recorder:
    """Wraps a numpy Generator and records the template and order draws that ``BiosWorld.bio`` makes."""

    def __init__(self, seed: int):
        self.g = np.random.default_rng(seed)
        self.ints: list[int] = []
        self.perms: list[list[int]] = []

    def integers(self, n):
        v = int(self.g.integers(n))
        self.ints.append(v)
        return v

    def permutation(self, n):
        p = [int(x) for x in self.g.permutation(n)]
        self.perms.append(p)
        return np.array(p)


def _sentences(w: BiosWorld, doc) -> list[str]:
    text = w.vocab.decode(doc.ids).replace("<bos>", "").replace("<eos>", "").strip()
    parts = [s.strip() for s in text.split(" . ") if s.strip()]
    parts[-1] = parts[-1].rstrip(" .")
    return parts


def _attr_order(doc) -> list[str]:
    return [a for _, a in sorted((doc.spans[a][0][0], a) for a in ATTRS)]


def _predicate(w: BiosWorld, i: int, sentence: str) -> str:
    """A sentence without its subject (full name or He/She)."""
    if sentence.split()[0] in ("He", "She"):
        return " ".join(sentence.split()[1:])
    return sentence.replace(w.full_name(i), "", 1).strip()


def _two_sample(a: list, b: list) -> float:
    keys = sorted(set(a) | set(b))
    ca, cb = Counter(a), Counter(b)
    return float(chi2_contingency(np.array([[ca[k] for k in keys], [cb[k] for k in keys]]))[1])


# ---------------------------------------------------------------------------------------------------------------
def test_fixture_is_the_official_output():
    src = json.loads((FIX / "SOURCE.json").read_text())
    assert src["repository"] == "facebookresearch/PhysicsLM4"
    assert src["commit"] == "75806965208c55e9f7f2e2363d3793d2da75d2e4"
    o = official()
    assert o["single"]["order=0"]["n"] == o["single"]["order=1"]["n"] == 1200
    assert o["permute"]["n"] == len(o["permute"]["orders"]) == 1200
    assert set(o["template_counts"]) == set(ATTRS)
    # every official permutation kept each sentence's template and produced one of the 720 orders
    assert o["permute"]["templates_kept"] == 1200
    assert all(sorted(s) == list("012345") for s in o["permute"]["orders"])


@pytest.mark.parametrize("pool", sorted(OFFICIAL_POOL))
def test_pool_sizes_match_the_official_lists(pool):
    """first / middle / last names 400 / 400 / 1000, birth cities 200, universities 300, majors 100, companies 263."""
    assert build_pools().sizes[pool] == official()["pools"][OFFICIAL_POOL[pool]]


def test_birth_dates_and_unique_names_as_the_paper():
    p = build_pools()
    assert p.sizes["birth_date"] == PAPER_BIRTH_DATES
    o = official()["pools"]
    assert p.n0 == o["first_name"] * o["middle_name"] * o["last_name"]
    w = BiosWorld(PAPER_N, seed=0)
    assert len(np.unique(w.names, axis=0)) == PAPER_N  # unique full names (the paper's requirement)
    assert len({w.full_name(i) for i in range(5000)}) == 5000  # also as text
    dates = [w.value_text(i, "birth_date") for i in range(20000)]
    years = {int(d[-4:]) for d in dates}
    days = {int(d.split()[1]) for d in dates}
    months = {d.split()[0] for d in dates}
    assert min(years) == 1900 and max(years) == 2099 and len(years) == 200
    assert days == set(range(1, 29)) and months == set(MONTHS)


def test_date_format_is_the_official():
    """Official: f"{birthmonth} {birthday}, {birthyear}" (month name, day without a leading zero, 4-digit year)."""
    pat = re.compile(r"^(%s) ([1-9]|1[0-9]|2[0-8]), (19|20)[0-9]{2}$" % "|".join(MONTHS))
    w = world()
    assert all(pat.match(w.value_text(i, "birth_date").replace(" ,", ",")) for i in range(2400))
    ex = official()["examples"][0]["single_order1"]
    assert re.search(r"(%s) ([1-9]|1[0-9]|2[0-8]), (19|20)[0-9]{2}\." % "|".join(MONTHS), ex)


def test_company_city_is_a_function_of_the_company():
    p, w = build_pools(), world()
    for i in range(200):
        assert w.value_words(i, "company_city") == w._city_words(p.company_city[int(w.attrs[i, 4])])


@pytest.mark.xfail(strict=True, reason="official company.txt: 263 companies with 133 distinct headquarters, of "
                   "which only 44 are among the 200 birth cities; lmsci draws each company's city uniformly from "
                   "the 200 birth cities (147 distinct, all of them birth cities)")
def test_company_headquarters_as_the_official_list():
    p, o = build_pools(), official()["pools"]
    assert len(set(p.company_city)) == o["company_hq_distinct"]


@pytest.mark.xfail(strict=True, reason="official first_name.txt and middle_name.txt share 286 of their 400 names "
                   "(first/last share 64, middle/last 70); lmsci's name syllables are disjoint between the three pools")
def test_name_pools_overlap_as_the_official_lists():
    p, o = build_pools(), official()["pools"]
    firsts = {a + b for a in p.first1 for b in p.first2}
    middles = {a + b for a in p.middle1 for b in p.middle2}
    assert len(firsts & middles) == o["first_middle_overlap"]


@pytest.mark.xfail(strict=True, reason="templates per attribute: official get_text_simple3 has 46 / 49 / 49 / 52 / "
                   "48 / 47 (birth date, birth city, university, major, company, company city; 291 in all), the paper "
                   "says about 50; lmsci has 25 for every attribute (150)")
def test_template_counts_match_the_official():
    assert {a: len(TEMPLATES[a]) for a in ATTRS} == official()["template_counts"]


def test_template_choice_is_uniform_and_independent_per_sentence():
    o = official()["template_draws"]
    for a in ATTRS:  # the fixture itself: the official random.choice is uniform over the attribute's list
        assert len(o[a]) == official()["template_counts"][a]
        assert chisquare(o[a]).pvalue > ALPHA, a
    w = world()
    rec = _Recorder(30)
    for i in range(2400):
        w.bio(i, rec)
    draws = np.array(rec.ints).reshape(2400, 6)
    ren = BiosRenderer(w).choices(np.arange(2400), np.zeros(2400, dtype=np.int64), seed=31)[0]
    for k, a in enumerate(ATTRS):
        for d in (draws[:, k], ren[:, k]):
            c = np.bincount(d, minlength=len(TEMPLATES[a]))
            assert len(c) == len(TEMPLATES[a]) and chisquare(c).pvalue > ALPHA, a
    # independent across sentences (official: one random.choice per sentence): birth date x major template
    for d in (draws, ren):
        tab = np.zeros((25, 25))
        np.add.at(tab, (d[:, 0], d[:, 3]), 1)
        assert chi2_contingency(tab)[1] > ALPHA


def test_single_biography_structure_is_the_official():
    """bioS single: six sentences, birth date / birth city / university / major / company / company city (the
    official ``order=1``; its default ``order=0`` puts the company city before the company), the full name in the
    first sentence, He (even id) or She (odd id) in the other five."""
    o = official()["single"]
    assert o["order=1"]["attribute_sequences"] == {" ".join(ATTRS): 1200}
    assert o["order=0"]["attribute_sequences"] == {" ".join(ATTRS[:4] + ("company_city", "company")): 1200}
    assert o["order=0"]["person_parity_of_pronoun"] == {"He": [0], "She": []}
    assert o["order=1"]["person_parity_of_pronoun"] == {"He": [], "She": [1]}
    w = world()
    rng = np.random.default_rng(32)
    for i in range(400):
        d = w.bio(i, rng)
        assert _attr_order(d) == list(ATTRS)
        s = _sentences(w, d)
        assert len(s) == 6 and s[0].startswith(w.full_name(i))
        pron = "He" if i % 2 == 0 else "She"
        assert all(x.split()[0] == pron for x in s[1:]), (i, s)
        assert len(d.spans["name"]) == 1 and d.spans["name"][0][0] == 1
    # the streaming renderer (what the experiments train on) is token-identical to the reference
    ren = BiosRenderer(w)
    docs = ren.to_doc_list(ren.bios(np.arange(50), np.zeros(50, dtype=np.int64), seed=33))
    tmpl = ren.choices(np.arange(50), np.zeros(50, dtype=np.int64), seed=33)[0]
    for i, d in enumerate(docs):
        assert d.ids == w.bio(i, templates=[int(t) for t in tmpl[i]]).ids


def test_permute_matches_the_official_in_distribution():
    """Official ``augmentation_permutation2``: the six sentences in a uniformly random order, the full name moved to
    the first sentence, He/She in the others, each sentence keeping its template."""
    o = official()["permute"]
    assert o["subject_sequences"] == {"fullname She She She She She": 1200}
    off = o["orders"]
    w = world()
    rng = np.random.default_rng(34)
    mine = []
    for k in range(1200):
        i = 2 * k + 1  # odd ids, as the official sample
        d = w.bio(i, rng, permute=True)
        order = _attr_order(d)
        mine.append("".join(str(ATTRS.index(a)) for a in order))
        s = _sentences(w, d)
        assert s[0].startswith(w.full_name(i)) and all(x.split()[0] == "She" for x in s[1:])
        assert len(d.spans["name"]) == 1
    ren_order = BiosRenderer(w).choices(np.arange(1200), np.zeros(1200, dtype=np.int64), seed=35, permute=True)[1]
    stream = ["".join(str(x) for x in r) for r in ren_order]
    for side in (mine, stream):
        for a in range(6):  # where each attribute lands (position 0 carries the full name)
            p = _two_sample([s.index(str(a)) for s in off], [s.index(str(a)) for s in side])
            assert p > ALPHA, (a, p)
        # company directly before its city, as often as the official
        adj = lambda ss: ["45" in s for s in ss]  # noqa: E731
        assert _two_sample(adj(off), adj(side)) > ALPHA
    # permuting keeps each sentence (template) and only moves the name
    for i in range(20):
        t = [int(x) for x in np.random.default_rng(i).integers(25, size=6)]
        a = w.bio(i, templates=t)
        b = w.bio(i, templates=t, order=list(np.random.default_rng(100 + i).permutation(6)))
        pa, pb = ([_predicate(w, i, x) for x in _sentences(w, d)] for d in (a, b))
        assert sorted(pa) == sorted(pb)


def test_fullname_names_the_person_in_every_sentence():
    """Part 3.1, Section 2 (fullname): He/She replaced by the person's full name (no official code)."""
    w = world()
    rng = np.random.default_rng(36)
    for i in range(100):
        for permute in (False, True):
            d = w.bio(i, rng, permute=permute, fullname=True)
            s = _sentences(w, d)
            assert len(d.spans["name"]) == 6 and all(x.startswith(w.full_name(i)) for x in s)
            assert not {"He", "She"} & set(w.vocab.decode(d.ids).split())


def test_multi_biographies_redraw_templates():
    """Part 3.1, Section 2 (multiM): M biographies per person, each with freshly drawn templates."""
    w = world()
    docs = bio_docs(w, range(200), multiplicity=5, permute=False, fullname=False, seed=37)
    assert len(docs) == 1000
    distinct = [len({tuple(d.ids) for d in docs[5 * k:5 * k + 5]}) for k in range(200)]
    assert np.mean(distinct) > 4.9


def test_qa_questions_are_the_papers():
    w = world()
    for a in ATTRS:
        assert QA_TEMPLATES[a].replace(" ?", "?") == PAPER_QA[a]
        d = w.qa(3, a)
        text = w.vocab.decode(d.ids)
        q = PAPER_QA[a].replace("{n}", w.full_name(3)).replace("?", " ?")
        assert text.startswith("<bos> " + q + " Answer : " + w.value_text(3, a)), text
