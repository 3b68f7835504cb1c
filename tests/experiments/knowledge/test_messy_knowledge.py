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
def _rows(neg, trans, ripple, recall=1.0, p_after=0.9, null_neg=0.0, null_trans=0.5, null_ripple=0.0, seeds=3):
    """One row per arm and seed: the registered differences (negation - same template, translation - same template
    in language 2, X's ripple - Z's) on the real arm, the same with the partner replaced on the null arm."""
    rows = []
    for k in range(seeds):
        j = (k - 1) * 0.01
        common = {"seed_index": k, "fact_recall": recall, "cos_negation": 0.5 + j, "cos_negation_sd": 0.1,
                  "cos_translation": 0.1 + j, "cos_unrelated": 0.05, "cos_paraphrase": 0.6, "cos_two_hop": 0.05,
                  "barrier_diff": 0.05 + j, "ripple_target_dlogp": 3.0, "ripple_control_dlogp": 0.1,
                  "ripple_control2_dlogp": 0.1 + null_ripple, "ripple_p_after": p_after}
        rows.append({"arm": "real", "point": "real-messy" + (f"__s{k}" if k else ""), **common,
                     "negation_vs_same_template": neg + j, "translation_vs_same_template_l2": trans + j,
                     "ripple_related_dlogp": ripple + 0.1 + j, "ripple_specific": ripple + j})
        rows.append({"arm": "null", "point": "null-messy" + (f"__s{k}" if k else ""), **common,
                     "negation_vs_same_template": null_neg - j, "translation_vs_same_template_l2": null_trans + j,
                     "ripple_related_dlogp": 0.1 + null_ripple, "ripple_specific": null_ripple - j})
    return pd.DataFrame(rows)


def _verdicts(df, tmp_path, preset="quick"):
    exp = registry.get("messy-knowledge")()
    cfg = resolve_config(exp.Config, preset, [])
    return {v.claim_id: v for v in exp.verdicts(cfg, df, RunDir(tmp_path))}


def _outcomes(df, tmp_path):
    return {k: v.outcome for k, v in _verdicts(df, tmp_path).items()}


def test_verdicts(tmp_path):
    ok = _outcomes(_rows(neg=0.4, trans=0.01, ripple=0.8), tmp_path)
    # negation-curse and cross-lingual-barrier are design checks (an untrained model meets them: issue 29)
    assert ok == {"negation-curse": "passed", "cross-lingual-barrier": "passed", "over-ripple": "reproduced",
                  "over-ripple-raw": "reproduced"}
    bad = _outcomes(_rows(neg=-0.3, trans=0.5, ripple=-0.5), tmp_path)
    assert bad == {"negation-curse": "failed", "cross-lingual-barrier": "failed", "over-ripple": "not reproduced",
                   "over-ripple-raw": "not reproduced"}
    gated = _outcomes(_rows(neg=0.4, trans=0.01, ripple=0.8, recall=0.4), tmp_path)
    assert set(gated.values()) == {"inconclusive"}
    unlearned = _outcomes(_rows(neg=0.4, trans=0.01, ripple=0.8, p_after=0.1), tmp_path)
    assert unlearned["over-ripple"] == "inconclusive" and unlearned["negation-curse"] == "passed"
    few = _outcomes(_rows(neg=0.4, trans=0.01, ripple=0.8, seeds=2), tmp_path)
    assert set(few.values()) == {"inconclusive"}


def test_quick_preset_has_five_seeds():
    exp = registry.get("messy-knowledge")()
    assert resolve_config(exp.Config, "quick", []).n_seeds == 5


def test_null_arm_meeting_the_rule_is_inconclusive(tmp_path):
    """over-ripple's null arm meeting the same rule (a second other person Z2 rising as much as X over Z) makes the
    claim inconclusive, whatever the real arm did; the two checks have no null arm (their comparators are reported)."""
    vs = _verdicts(_rows(neg=0.4, trans=0.01, ripple=0.8, null_neg=0.4, null_trans=0.0, null_ripple=0.8), tmp_path)
    v = vs["over-ripple"]
    assert v.outcome == "inconclusive" and v.rule_passed and v.null_passed is True
    assert any("cannot tell the effect from its absence" in r for r in v.reasons)
    assert vs["negation-curse"].kind == "check" and vs["negation-curse"].outcome == "passed"
    assert vs["negation-curse"].null_value is None  # a check: its null rows are reported, not judged
    ok = _verdicts(_rows(neg=0.4, trans=0.01, ripple=0.8), tmp_path)
    assert ok["over-ripple"].null_passed is False and ok["over-ripple"].null_value is not None


def test_smoke_run_measures_the_null_arms(tmp_path):
    """The smoke preset end to end (3 seeds so that an interval exists). Its 1-epoch model memorises nothing, so
    the arms are measured but prove nothing. over-ripple's null arm (a second other person) does not meet the rule
    here; it is asserted not to, as the smoke model's per-fact changes are small and its interval straddles 0. The
    untrained model already meets negation-curse's rule, which is why it is a design check."""
    from lmsci.sweep import run_experiment

    exp = registry.get("messy-knowledge")()
    cfg = resolve_config(exp.Config, "smoke", ["n_seeds=3"])
    run = run_experiment(exp, cfg, tmp_path / "run", progress=False, log=lambda *a: None)
    vs = {v.claim_id: v for v in run.verdicts()}
    assert set(vs) == {c.id for c in exp.claims}
    assert all(v.outcome == "inconclusive" for v in vs.values())  # smoke is below the claims' scale
    assert vs["over-ripple"].null_value is not None and vs["over-ripple"].null_passed is False
    assert vs["negation-curse"].kind == vs["cross-lingual-barrier"].kind == "check"
    res = run.results()
    assert sorted(res["arm"]) == ["null"] * 3 + ["real"] * 3  # one model per seed, read on both arms
    real, null = (res[res["arm"] == a].set_index("seed_index").sort_index() for a in ("real", "null"))
    assert (real["fact_recall"] == null["fact_recall"]).all() and (real["pretrain_steps"] == null["pretrain_steps"]).all()
    assert (real["ripple_control2_dlogp"] == null["ripple_related_dlogp"]).all()  # Z2 in X's place
    assert not any(c.startswith("null_") for c in res.columns)
    assert (real["init_negation_vs_same_template"] > 0.3).all()  # the shared tokens align an untrained model


def test_gpu_preset_is_estimated_within_9_minutes_and_says_so():
    """Session 52: the gpu preset fits the 10 minutes of one H100 by its estimate (for the whole epoch budget), which
    the documented time repeats."""
    import re

    from lmsci.config import resolve_config
    from lmsci.experiments.knowledge._messy_knowledge_estimate import estimate_h100_seconds
    from lmsci.experiments.knowledge.messy_knowledge import MessyKnowledge, MessyKnowledgeConfig

    cfg = resolve_config(MessyKnowledgeConfig, "gpu")
    est = estimate_h100_seconds(cfg)
    assert 60 < est["total"] <= 9 * 60 and est["pretrain"] > est["measure"] > 0
    text = MessyKnowledge.time_estimate["gpu"]
    assert int(re.match(r"~(\d+) min", text).group(1)) == round(est["total"] / 60)
    assert f"({est['total'] / 60:.1f} min)" in text and "not measured" in text
    assert cfg.n_seeds >= 3 and cfg.model.n_layers == 8 and cfg.n_people > resolve_config(MessyKnowledgeConfig).n_people
