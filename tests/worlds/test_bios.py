"""bios world: determinism, unique names, pools and bits, QA split, shuffled packing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lmsci.errors import ConfigError
from lmsci.worlds.bios import ATTRS, BiosWorld
from lmsci.worlds.bios_datasets import bio_docs, pack, qa_docs, qa_split
from lmsci.worlds.bios_pools import build_pools
from lmsci.worlds.bios_templates import TEMPLATES


def test_generator_is_deterministic():
    a, b = BiosWorld(300, seed=4), BiosWorld(300, seed=4)
    assert np.array_equal(a.names, b.names) and np.array_equal(a.attrs, b.attrs)
    da = bio_docs(a, range(20), multiplicity=3, permute=True, fullname=True, seed=1)
    db = bio_docs(b, range(20), multiplicity=3, permute=True, fullname=True, seed=1)
    assert [d.ids for d in da] == [d.ids for d in db]
    c = BiosWorld(300, seed=5)
    assert not np.array_equal(a.attrs, c.attrs)
    assert a.vocab.itos == c.vocab.itos  # vocabulary is a world constant


def test_unique_names_and_unique_date_city():
    w = BiosWorld(3000, seed=0)
    names = {w.full_name(i) for i in range(w.n)}
    assert len(names) == w.n
    keys = set(map(tuple, w.attrs[:, :2].tolist()))
    assert len(keys) == w.n


def test_pool_sizes_and_bits(tmp_path):
    p = build_pools()
    s = p.sizes
    assert (s["first_name"], s["middle_name"], s["last_name"]) == (400, 400, 1000)
    assert (s["birth_city"], s["university"], s["major"], s["company"]) == (200, 300, 100, 263)
    assert s["birth_date"] == 12 * 28 * 200 and p.n0 == 160_000_000
    assert len(set(p.universities)) == 300 and len(set(p.companies)) == 263 and len(set(p.cities)) == 200
    w = BiosWorld(10, seed=0)
    bits = w.value_bits()
    assert bits["birth_date"] == pytest.approx(16.036, abs=1e-3)
    assert bits["company_city"] == 0.0
    assert sum(bits.values()) == pytest.approx(46.59, abs=0.01)  # physics_of_lms.md 3.1
    rec = json.loads(w.write_pools(tmp_path / "pools.json").read_text())
    assert rec["bits"]["attributes_per_person"] == pytest.approx(46.59, abs=0.01)
    assert len(rec["pools"]["companies"]) == 263
    # company city is determined by the company
    for i in range(10):
        c = int(w.attrs[i, 4])
        assert w.value_words(i, "company_city")[0] == p.cities[p.company_city[c]][0] + "@@"


def test_templates_and_spans():
    assert all(len(t) >= 24 for t in TEMPLATES.values())
    w = BiosWorld(20, seed=0)
    rng = np.random.default_rng(0)
    for i in range(20):
        d = w.bio(i, rng, permute=True, fullname=False)
        for a in ATTRS:
            s, e = d.spans[a][0]
            assert w.vocab.decode(d.ids[s:e]) == w.value_text(i, a)
        text = w.vocab.decode(d.ids)
        assert text.count(w.full_name(i)) == 1  # name once, pronouns elsewhere
        wrong = "She" if i % 2 == 0 else "He"
        assert f" {wrong} " not in text  # pronoun consistent with id parity
        q = w.qa(i, "major")
        s, e = q.spans["answer"][0]
        assert w.vocab.decode(q.ids[s:e]) == w.value_text(i, "major")


def test_qa_split_disjoint():
    tr, te = qa_split(101, seed=3)
    assert len(set(tr) & set(te)) == 0 and len(tr) + len(te) == 101
    with pytest.raises(ConfigError):
        qa_split(10, 0, train_fraction=1.5)


def test_shuffled_packing_never_puts_one_persons_copies_together():
    w = BiosWorld(12, seed=0)
    docs = bio_docs(w, range(12), multiplicity=6, permute=True, fullname=True, seed=0)
    p = pack(docs, 512, seed=0, shuffle=True)
    assert all(len(ps) == len(set(ps)) for ps in p.people)
    assert (p.exposures(12) == 6).all()
    # unshuffled packing does put copies together (the pitfall the shuffle avoids)
    q = pack(docs, 512, seed=0, shuffle=False)
    assert any(len(ps) != len(set(ps)) for ps in q.people)
    # targets: next tokens where the mask allows, -100 elsewhere
    qa = pack(qa_docs(w, [0]), 128, seed=0)
    assert (qa.targets != -100).sum() == sum(sum(d.loss_mask[1:]) for d in qa_docs(w, [0]))


def test_bad_input_raises():
    with pytest.raises(ConfigError):
        BiosWorld(0)
    w = BiosWorld(3, seed=0)
    with pytest.raises(ConfigError):
        pack(bio_docs(w, range(3), multiplicity=1, permute=False, fullname=True, seed=0), 16, seed=0)
