"""Claims as values (issue 44, items 1-3): rules and statistics are values testable alone; the engine judges the
real and the null arm by the same rule; the digest covers the rule's parameters, the statistic's definition and the
arms; the report kit draws each engine-judged claim."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lmsci.claims import (
    Claim, Gate, Stat, at_least, between, ci_above, ci_below, ci_excludes, ci_inside, equivalent_within, every_at_least,
    every_at_most, judge_claim, mean_at_least, mean_at_most, mean_below,
)
from lmsci.claims.rules import all_of
from lmsci.contract import Experiment, Point, cross_arms


# -- rules ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rule,values,expected", [
    (ci_above(1.0), [1.5, 1.6, 1.55], True),
    (ci_above(1.0), [0.5, 1.6, 2.55], False),           # the interval reaches below 1
    (ci_below(0.0), [-1.0, -1.1, -0.9], True),
    (ci_inside(0.75, 1.25), [0.99, 1.0, 1.01], True),
    (ci_inside(0.75, 1.25), [0.7, 1.0, 1.3], False),
    (ci_excludes(0.0), [-1.0, -1.2, -0.8], True),
    (ci_excludes(0.0), [-1.0, 1.0, 0.1], False),
    (equivalent_within(0.1), [0.01, -0.02, 0.0], True),
    (equivalent_within(0.1), [0.2, 0.3, 0.25], False),
    (mean_at_least(0.9), [0.95, 0.85, 0.92], True),
    (mean_at_most(0.1), [0.2, 0.0, 0.05], True),
    (at_least(2.0), [2.0], True),
    (between(1, 2), [2.5], False),
    (every_at_least(0.9), [0.95, 0.89], False),
    (every_at_most(0.1), [0.05, 0.1], True),
])
def test_rules_decide_per_seed_values(rule, values, expected):
    assert rule(values) is expected
    assert rule.text() and rule.spec()["rule"] == type(rule).__name__


def test_a_rule_with_no_finite_value_does_not_hold_and_bad_parameters_are_refused():
    assert ci_above(0.0)([math.nan]) is False
    with pytest.raises(ValueError):
        ci_inside(2, 1)
    with pytest.raises(ValueError):
        equivalent_within(0)


def test_an_interval_rule_does_not_get_stricter_with_more_seeds_where_a_minimum_does():
    rng = np.random.default_rng(0)
    few, many = 1.3 + 0.05 * rng.standard_normal(3), 1.3 + 0.05 * rng.standard_normal(40)
    assert ci_above(1.2)(few) and ci_above(1.2)(many)
    many[0] = 1.15  # one unlucky seed among forty
    assert ci_above(1.2)(many) and not every_at_least(1.2)(many)


# -- statistics -----------------------------------------------------------------------------------------
def _table():
    rows = []
    for arm, base in (("real", 1.0), ("null", 0.0), ("control", 0.5)):
        for k in range(3):
            for probe, off in (("a", 0.0), ("b", 0.2)):
                rows.append({"arm": arm, "seed_index": k, "probe": probe, "acc": base + off + 0.01 * k, "status": "ok"})
    rows.append({"arm": "real", "seed_index": 3, "probe": "a", "acc": 99.0, "status": "diverged"})
    return pd.DataFrame(rows)


def test_stat_reduces_each_seed_and_filters_rows():
    t = _table()
    real = t[t["arm"] == "real"]
    assert Stat("acc", where={"probe": "a"}).per_seed(real).tolist() == pytest.approx([1.0, 1.01, 1.02, 99.0])
    assert Stat("acc", agg="max").per_seed(real.iloc[:6]).tolist() == pytest.approx([1.2, 1.21, 1.22])
    diff = Stat("acc", where={"probe": "b"}, minus=Stat("acc", where={"probe": "a"}))
    assert diff.per_seed(real.iloc[:6]).tolist() == pytest.approx([0.2] * 3)
    contrast = Stat("acc", where={"probe": "a"}, minus=Stat("acc", where={"probe": "a"}, arm="control"))
    assert contrast.per_seed(real.iloc[:6], t).tolist() == pytest.approx([0.5] * 3)
    assert "minus" in diff.text() and diff.spec()["minus"]["where"] == [["probe", "a"]]
    with pytest.raises(ValueError):
        Stat("acc", agg="mode")
    with pytest.raises(ValueError):
        Stat()


def test_stat_fn_is_an_escape_hatch_hashed_by_its_source():
    def spread(rows):
        return rows.groupby("seed_index")["acc"].agg(lambda x: x.max() - x.min())

    s = Stat(fn=spread, words="spread over probes")
    t = _table()
    assert s.per_seed(t[(t["arm"] == "real") & (t["status"] == "ok")]).tolist() == pytest.approx([0.2] * 3)
    assert len(s.spec()["fn"]) == 12


# -- the engine -------------------------------------------------------------------------------------------
def _claim(rule=ci_above(0.5), **kw):
    return Claim("c", "statement", "src", "paper", statistic=Stat("acc", where={"probe": "a"}, words="accuracy"),
                 rule=rule, null="shuffled labels", **kw)


def test_engine_judges_both_arms_by_the_same_rule_and_drops_unfinished_rows():
    v = judge_claim(_claim(), "quick", _table())
    assert v.outcome == "reproduced" and v.n_seeds == 3 and v.value == pytest.approx(1.01)
    assert v.null_passed is False and v.null_value == pytest.approx(0.01)
    assert v.details["per_seed"] == pytest.approx([1.0, 1.01, 1.02])  # the diverged seed 3 is not counted


def test_engine_outcomes_not_reproduced_null_meets_rule_gate_and_scale():
    t = _table()
    assert judge_claim(_claim(ci_above(1.5)), "quick", t).outcome == "not reproduced"
    v = judge_claim(_claim(ci_above(-0.5)), "quick", t)
    assert v.outcome == "inconclusive" and v.null_passed and any("cannot tell" in r for r in v.reasons)
    gated = _claim(gates=(Gate("trained", every_at_least(0.5), stat=Stat("acc"), arm="control"),
                          Gate("by-hand", "measured by the experiment")))
    v = judge_claim(gated, "quick", t, gate_values={"by-hand": (1, True)})
    assert v.outcome == "reproduced" and [g.passed for g in v.gates] == [True, True]
    v = judge_claim(gated, "quick", t)
    assert v.outcome == "inconclusive" and any("by-hand" in r and "not measured" in r for r in v.reasons)
    assert judge_claim(_claim(), "smoke", t).outcome == "inconclusive"
    two = t[t["seed_index"] < 2]
    assert judge_claim(_claim(), "quick", two).outcome == "inconclusive"   # below min_seeds


def test_engine_reports_a_missing_arm_and_a_check_needs_no_null():
    t = _table()
    v = judge_claim(_claim(), "quick", t[t["arm"] != "null"])
    assert v.outcome == "inconclusive" and any("null arm not measured" in r for r in v.reasons)
    v = judge_claim(_claim(), "quick", t[t["arm"] != "real"])
    assert v.outcome == "inconclusive" and v.value is None
    check = Claim("k", "s", "src", "p", statistic=Stat("acc"), rule=at_least(0.5), kind="check", uncertainty="exact")
    v = judge_claim(check, "quick", t)
    assert v.outcome == "passed" and v.ci is None


def test_a_claim_in_words_is_not_judged_by_the_engine_and_objects_must_come_together():
    words = Claim("w", "s", "src", "p", "a statistic in words", "a rule in words", null="n")
    with pytest.raises(ValueError):
        judge_claim(words, "quick", _table())
    with pytest.raises(ValueError):
        Claim("x", "s", "src", "p", statistic=Stat("acc"), rule="in words")
    with pytest.raises(ValueError):
        Gate("g", every_at_least(1.0))   # a rule object needs its statistic


def test_digest_covers_the_rule_parameters_the_statistic_and_the_arms():
    base = _claim().digest()
    assert _claim(ci_above(0.6)).digest() != base
    assert _claim(arms=("real", "control")).digest() != base
    other = Claim("c", "statement", "src", "paper", statistic=Stat("acc", where={"probe": "b"}, words="accuracy"),
                  rule=ci_above(0.5), null="shuffled labels")
    assert other.digest() != base
    assert _claim().digest() == base
    d = _claim().to_dict()
    assert d["rule"] == ci_above(0.5).text() + " (>= 3 training seeds)" and d["rule_spec"]["x"] == 0.5
    # a claim in words keeps its old shape (its digest does not move)
    words = Claim("w", "s", "src", "p", "stat", "rule", null="n").to_dict()
    assert "rule_spec" not in words and "arms" not in words


# -- conjunctions, groups and several null arms (issue 44 item 1) ---------------------------------------------
def test_all_of_is_a_conjunction_on_one_statistic_with_every_threshold_in_its_spec():
    r = all_of(mean_at_least(0.3), ci_above(0.0))
    assert r([0.4, 0.5, 0.45]) and not r([0.2, 0.25, 0.22]) and not r([0.9, -0.9, 0.5])
    assert r.text() == mean_at_least(0.3).text() + " and " + ci_above(0.0).text()
    assert r.spec() == {"rule": "AllOf", "rules": [mean_at_least(0.3).spec(), ci_above(0.0).spec()]}
    assert r.interval and r.margin([0.2, 0.25, 0.22]) < 0 <= r.margin([0.4, 0.5, 0.45])
    assert mean_below(0.05)([0.0, 0.04]) and not mean_below(0.05)([0.05])
    assert _claim(all_of(ci_above(0.5), mean_at_least(1.0))).digest() != \
        _claim(all_of(ci_above(0.5), mean_at_least(0.9))).digest()
    with pytest.raises(ValueError):
        all_of(ci_above(0.0))


def test_also_conditions_conjoin_statistics_on_each_arm_at_the_main_statistics_seeds():
    t = _table()
    also = ((Stat("acc", where={"probe": "b"}, words="probe b"), mean_at_least(1.1)),)
    c = _claim(also=also)
    v = judge_claim(c, "quick", t)
    assert v.outcome == "reproduced" and v.value == pytest.approx(1.01)     # the main statistic is reported
    assert "; and probe b: the mean over seeds is >= 1.1" in v.rule and "also_spec" in c.to_dict()
    v = judge_claim(_claim(also=((Stat("acc", where={"probe": "b"}), mean_at_least(1.3)),)), "quick", t)
    assert v.outcome == "not reproduced" and v.rule_passed is False          # the second condition fails
    # an also-condition pinned to the real arm is read there on the null arm too
    pinned = _claim(ci_above(-0.5), also=((Stat("acc", arm="real"), mean_at_most(0.5)),))
    v = judge_claim(pinned, "quick", t)
    assert v.rule_passed is False and v.null_passed is False
    assert "also_spec" not in _claim().to_dict() and "for_each" not in _claim().to_dict()


def test_for_each_needs_the_rule_in_every_group_and_reports_the_weakest():
    t = _table()
    def each(rule):
        return Claim("c", "s", "src", "p", statistic=Stat("acc"), rule=rule, null="n", for_each="probe")

    v = judge_claim(each(ci_above(0.5)), "quick", t)
    assert v.outcome == "reproduced" and v.details["probe"] == "a" and v.value == pytest.approx(1.01)
    v = judge_claim(each(ci_above(1.1)), "quick", t)   # probe b holds, probe a does not
    assert v.rule_passed is False and v.details["probe"] == "a" and "probe = a" in v.ci_kind
    assert each(ci_above(1.1)).rule_text.startswith("in every group of `probe`: ")
    with pytest.raises(ValueError):
        Claim("x", "s", "src", "p", "words", "words", for_each="probe")


def test_several_null_arms_meet_the_rule_if_any_does_and_report_the_closest():
    t = _table()
    v = judge_claim(_claim(arms=("real", "null", "control")), "quick", t)
    assert v.outcome == "reproduced" and v.null_value == pytest.approx(0.51)   # control: the larger margin
    v = judge_claim(_claim(ci_above(0.45), arms=("real", "null", "control")), "quick", t)
    assert v.null_passed is True and v.outcome == "inconclusive"
    assert judge_claim(_claim(arms=("real", "null", "gone")), "quick", t).null_passed is None  # one not measured
    with pytest.raises(ValueError):
        _claim(arms=("real",))



def test_null_stat_reads_other_columns_of_the_real_rows_by_the_same_rule():
    t = _table()
    t["acc_in"] = t["acc"] - 0.9  # a null measured beside the real value, on the same rows
    c = _claim(null_stat=Stat("acc_in", where={"probe": "a"}))
    v = judge_claim(c, "quick", t)
    assert v.outcome == "reproduced" and v.null_value == pytest.approx(0.11) and v.null_passed is False
    assert v.details["null_per_seed"] == pytest.approx([0.1, 0.11, 0.12])   # real rows, not the null arm's
    v = judge_claim(_claim(ci_above(0.05), null_stat=Stat("acc_in", where={"probe": "a"})), "quick", t)
    assert v.null_passed is True and v.outcome == "inconclusive"
    assert judge_claim(_claim(null_stat=Stat("gone")), "quick", t).null_passed is None       # not measured
    assert judge_claim(_claim(arms=("real",), null_stat=Stat("acc_in", where={"probe": "a"})), "quick",
                       t).null_value == pytest.approx(0.11)                         # the real arm alone
    assert c.digest() != _claim().digest() and "null_stat_spec" not in _claim().to_dict()    # others keep digests
    with pytest.raises(ValueError):
        Claim("c", "s", "src", "p", "in words", "in words", null="n", null_stat=Stat("acc"))
    also = ((Stat("acc", where={"probe": "b"}), ci_above(1.1)),)       # with also: one null Stat per condition
    t["acc_in_b"] = t["acc_in"] + 1.0
    null = (Stat("acc_in", where={"probe": "a"}), Stat("acc_in_b", where={"probe": "b"}))
    v = judge_claim(_claim(ci_above(0.05), also=also, null_stat=null), "quick", t)
    assert v.null_passed is True and v.null_value == pytest.approx(0.11)       # 1.31 > 1.1 on acc_in_b
    t["acc_in_b"] = t["acc_in"]
    assert judge_claim(_claim(ci_above(0.05), also=also, null_stat=null), "quick", t).null_passed is False
    with pytest.raises(ValueError):
        _claim(also=also, null_stat=Stat("acc_in"))

# -- the contract: arms as an axis, the default verdicts -----------------------------------------------------
class _Exp(Experiment):
    name = "test-engine"
    claims = [_claim(), Claim("hand", "s", "src", "p", "in words", "in words", null="n")]

    def hand_verdicts(self, cfg, results, run):
        return [self.judge(cfg, "hand", value=1.0, passed=True, n_seeds=3, null=(0.0, False))]


def test_arms_are_an_axis_and_the_default_verdicts_compose_engine_and_escape_hatch():
    pts = cross_arms([Point("p1", {"w": 2})], ("real", "null"))
    assert [(p.id, p.arm, p.params["arm"]) for p in pts] == [("real-p1", "real", "real"), ("null-p1", "null", "null")]
    with pytest.raises(ValueError):
        cross_arms(pts, ("bad arm",))

    class Cfg:
        preset, seed = "quick", 0

    v = _Exp().verdicts(Cfg(), _table(), None)
    assert [x.claim_id for x in v] == ["c", "hand"] and _Exp.escape_hatches() == ["hand"]
    assert all(x.outcome == "reproduced" for x in v)


def test_report_kit_draws_a_claims_statistic_per_arm(tmp_path):
    import matplotlib.pyplot as plt

    from lmsci.report.figures import claim_points, head_heatmap, loglog_fit

    fig = claim_points(_claim(), _table())
    assert fig is not None and [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["real", "null"]
    plt.close(fig)
    fig = head_heatmap(np.arange(6.0).reshape(2, 3), label="score")
    plt.close(fig)
    with pytest.raises(ValueError):
        head_heatmap(np.arange(3.0), label="x")
    fig = loglog_fit([1, 10, 100], [1.0, 0.5, 0.25], xlabel="N", ylabel="L")
    assert "b = -0.301" in fig.axes[0].get_legend().get_texts()[-1].get_text()
    plt.close(fig)


def test_the_arms_of_a_point_are_paired_by_seed():
    class Cfg:
        seed = 7

    exp = _Exp()
    real, null = cross_arms([Point("p1")], ("real", "null"))
    s = exp.point_seed(Cfg(), real)
    assert s == exp.point_seed(Cfg(), null) == exp.point_seed(Cfg(), Point("p1"))
    assert s != exp.point_seed(Cfg(), Point("p2"))
