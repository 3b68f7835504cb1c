"""The bios-messy world (negations, second language, two-hop, related-but-false) and messy-knowledge verdicts."""

from __future__ import annotations

import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError, UnknownNameError
from lmsci.experiments import registry
from lmsci.runs import RunDir
from lmsci.worlds.bios_messy import RELATIONS, MessyBiosWorld, statement_batch


@pytest.fixture(scope="module")
def world():
    return MessyBiosWorld(10, seed=1)


def words(w, st):
    return [w.vocab.itos[i] for i in st.ids]


def test_statements_negation_translation(world):
    f = world.statement(3, "birth_city")
    assert f.true and f.kind == "fact" and f.lang == 1
    assert words(world, f)[f.span[0]:f.span[1]] == world.value_words(3, "birth_city")
    assert words(world, f)[f.subject[0]:f.subject[1]] == world.base.name_words(3)
    n = world.statement(3, "birth_city", kind="negation")
    assert "not" in words(world, n) and not n.true  # the negation of a true fact is false
    assert n.ids[n.span[0]:n.span[1]] == f.ids[f.span[0]:f.span[1]]
    other = world.distractor(3, "birth_city", __import__("numpy").random.default_rng(0))
    assert world.statement(3, "birth_city", kind="negation", value=other).true
    t = world.statement(3, "birth_city", lang=2)
    assert t.true and len(t.ids) == len(f.ids) and t.span == f.span
    assert not set(t.ids[1:-1]) & set(f.ids[1:-1])  # the translation shares no token with the fact
    assert world.statement(4, "birth_city", lang=2).ids[t.span[0] - 3] == t.ids[t.span[0] - 3]  # a bijection
    h = world.statement(3, "company_city", kind="two_hop")
    assert h.true and words(world, h)[:3] == ["<bos>", "The", "employer"]
    assert words(world, h)[h.span[0]:h.span[1]] == world.value_words(3, "company_city")


def test_related_false_and_training_set(world):
    i = next(i for i in range(world.n)
             if world.value_words(i, "birth_city") != world.value_words(i, "company_city"))
    r = world.related_false(i)
    assert r.relation == "company_city" and not r.true
    assert words(world, r)[r.span[0]:r.span[1]] == world.value_words(i, "birth_city")
    st = world.training_statements(seed=0)
    per = 2 * (3 * 2 + 3 + 1)
    assert len(st) == world.n * per
    assert all(s.true for s in st)  # training holds only true statements (true negations)
    assert {s.kind for s in st} == {"fact", "negation", "two_hop"} and {s.lang for s in st} == {1, 2}
    x, y = statement_batch(st[:5])
    assert x.shape == y.shape and (y[0, :len(st[0].ids) - 1] == x[0, 1:len(st[0].ids)]).all()
    assert (y[:, -1] == -100).all()


def test_bad_input(world):
    with pytest.raises(ConfigError, match="person"):
        world.statement(world.n, "birth_city")
    with pytest.raises(UnknownNameError, match="birth_city"):
        world.statement(0, "hometown")
    with pytest.raises(UnknownNameError):
        world.statement(0, "birth_city", kind="question")
    with pytest.raises(ConfigError, match="template"):
        world.statement(0, "birth_city", template=5)
    with pytest.raises(ConfigError, match="company_city"):
        world.statement(0, "birth_city", kind="two_hop")
    assert set(RELATIONS) == {"birth_city", "company", "company_city"}


# -- verdicts ---------------------------------------------------------------------------------------------------
def _rows(neg, trans, unrel, ripple, recall=1.0, p_after=0.9):
    rows = []
    for k in range(3):
        j = (k - 1) * 0.01
        rows.append({"point": "messy" + (f"__s{k}" if k else ""), "seed_index": k, "fact_recall": recall,
                     "cos_negation": neg + j, "cos_negation_sd": 0.1, "cos_translation": trans + j,
                     "cos_unrelated": unrel, "cos_paraphrase": 0.6, "cos_two_hop": 0.05,
                     "barrier_diff": trans + j - unrel, "ripple_related_dlogp": ripple + j,
                     "ripple_target_dlogp": 3.0, "ripple_control_dlogp": 0.01, "ripple_p_after": p_after,
                     "ripple_specific": ripple + j - 0.01})
    return pd.DataFrame(rows)


def _verdicts(df, tmp_path):
    exp = registry.get("messy-knowledge")()
    cfg = resolve_config(exp.Config, "quick", [])
    return {v.claim_id: v.outcome for v in exp.verdicts(cfg, df, RunDir(tmp_path))}


def test_verdicts(tmp_path):
    ok = _verdicts(_rows(neg=0.4, trans=0.01, unrel=0.05, ripple=0.8), tmp_path)
    assert ok == {"negation-curse": "reproduced", "cross-lingual-barrier": "reproduced", "over-ripple": "reproduced",
                  "over-ripple-specific": "reproduced"}
    bad = _verdicts(_rows(neg=-0.3, trans=0.5, unrel=0.05, ripple=-0.5), tmp_path)
    assert set(bad.values()) == {"not reproduced"}
    gated = _verdicts(_rows(neg=0.4, trans=0.01, unrel=0.05, ripple=0.8, recall=0.4), tmp_path)
    assert set(gated.values()) == {"inconclusive"}
    unlearned = _verdicts(_rows(neg=0.4, trans=0.01, unrel=0.05, ripple=0.8, p_after=0.1), tmp_path)
    assert unlearned["over-ripple"] == "inconclusive" and unlearned["negation-curse"] == "reproduced"
