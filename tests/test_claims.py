"""The claims engine: three outcomes, gates, preset scale, seeds; the registry's claims as data, the
checked-in snapshot and the dated CLAIMS.md line every registered rule needs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lmsci.claims import (FAILED, INCONCLUSIVE, NOT_REPRODUCED, NULL_MEETS_RULE, PASSED, PILOT_SEED_MIN, POST_HOC,
                          REPRODUCED, Claim, Gate, Verdict, complete, judge, registered_digest, snapshot)
from lmsci.stats import across_seeds
from lmsci.experiments.registry import shipped

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "data" / "claims.json"
CLAIMS_MD = ROOT / "CLAIMS.md"

C = Claim("c", "x grows", "Someone 2024, arXiv 0000.00000, Fig. 1", "1.0", "slope", "CI inside (0.5, 1.5)",
          gates=(Gate("trained", "train accuracy >= 0.9"),), presets=("quick", "paper"),
          null="the same slope on random-init models")
NULL_FAILS = (0.02, False)


def test_reproduced_needs_gates_scale_seeds_and_a_null_arm_that_fails():
    v = judge(C, "quick", value=1.0, passed=True, ci=(0.8, 1.2), n_seeds=3, gates={"trained": (0.95, True)},
              null=NULL_FAILS)
    assert v.outcome == REPRODUCED and v.reproduced and not v.reasons
    assert v.gates[0].passed is True and v.paper_value == "1.0"
    assert v.null_value == 0.02 and v.null_passed is False and v.kind == "claim"


def test_rule_failure_is_not_reproduced():
    v = judge(C, "quick", value=0.2, passed=False, n_seeds=3, gates={"trained": (0.95, True)}, null=NULL_FAILS)
    assert v.outcome == NOT_REPRODUCED and v.rule_passed is False


def test_a_null_arm_that_meets_the_rule_makes_the_claim_inconclusive():
    v = judge(C, "quick", value=1.0, passed=True, n_seeds=3, gates={"trained": (0.95, True)}, null=(0.99, True))
    assert v.outcome == INCONCLUSIVE and v.null_passed is True
    assert any(NULL_MEETS_RULE in r for r in v.reasons), v.reasons
    # whatever the real arm did
    assert judge(C, "quick", value=0.1, passed=False, n_seeds=3, gates={"trained": (0.95, True)},
                 null=(0.99, True)).outcome == INCONCLUSIVE


@pytest.mark.parametrize("null", [None, (None, None)])
def test_a_claim_without_a_measured_null_arm_is_inconclusive(null):
    v = judge(C, "quick", value=1.0, passed=True, n_seeds=3, gates={"trained": (0.95, True)}, null=null)
    assert v.outcome == INCONCLUSIVE and any("null arm not measured" in r for r in v.reasons), v.reasons


def test_checks_pass_or_fail_and_need_no_null_arm():
    k = Claim("k", "bound holds", "src", "p", "stat", "<= 1", kind="check", uncertainty="exact")
    assert judge(k, "quick", value=0.5, passed=True).outcome == PASSED
    assert judge(k, "quick", value=1.5, passed=False).outcome == FAILED
    assert judge(k, "quick", value=None, passed=None).outcome == INCONCLUSIVE
    with pytest.raises(ValueError, match="kind"):
        Claim("x", "s", "src", "p", "s", "r", kind="vibe")


def test_ablations_need_no_null_arm():
    a = Claim("a", "s", "src", "p", "stat", "r", ablation=True)
    assert judge(a, "quick", value=1, passed=True, n_seeds=3).outcome == REPRODUCED


@pytest.mark.parametrize("uncertainty", ["seeds", "within-run"])
@pytest.mark.parametrize("passed", [True, False])
def test_too_few_seeds_is_inconclusive_for_every_uncertainty_but_exact(uncertainty, passed):
    w = Claim("w", "s", "src", "p", "stat", "rule", uncertainty=uncertainty, null="n")
    v = judge(w, "quick", value=1, passed=passed, n_seeds=2, null=NULL_FAILS)
    assert v.outcome == INCONCLUSIVE and any("at least 3 training seeds" in r for r in v.reasons), v.reasons
    e = Claim("e", "s", "src", "p", "stat", "rule", uncertainty="exact", null="n")
    assert judge(e, "quick", value=1, passed=passed, n_seeds=1, null=NULL_FAILS).outcome in (REPRODUCED, NOT_REPRODUCED)


def test_post_hoc_and_pilot_marks(monkeypatch):
    monkeypatch.setitem(POST_HOC, "exp/c", {"quick": (0,)})
    kw = dict(value=1.0, passed=True, n_seeds=3, gates={"trained": (0.95, True)}, null=NULL_FAILS, experiment="exp")
    assert judge(C, "quick", master_seed=0, **kw).post_hoc is True
    assert judge(C, "quick", master_seed=5, **kw).post_hoc is False  # a fresh master seed clears it
    assert judge(C, "paper", master_seed=0, **kw).post_hoc is False  # another preset is not affected
    assert judge(C, "quick", master_seed=PILOT_SEED_MIN, **kw).pilot is True
    assert judge(C, "quick", master_seed=PILOT_SEED_MIN - 1, **kw).pilot is False


def test_every_post_hoc_entry_names_a_registered_claim_and_has_a_claims_md_line():
    cat = shipped()
    text = CLAIMS_MD.read_text()
    for key, presets in POST_HOC.items():
        exp, cid = key.split("/", 1)
        assert exp in cat and cid in [c.id for c in cat[exp].claims], key
        assert set(presets) <= {"smoke", "quick", "gpu", "paper"}
        assert re.search(rf"^- \d{{4}}-\d{{2}}-\d{{2}} .*post hoc.*`{re.escape(exp)}`", text, flags=re.M | re.I), key


@pytest.mark.parametrize("kw, reason", [
    (dict(gates={"trained": (0.5, False)}), "gate 'trained' failed"),
    (dict(gates={}), "not measured"),
    (dict(gates={"trained": (0.95, True)}, preset="smoke"), "below the scale"),
    (dict(gates={"trained": (0.95, True)}, n_seeds=1), "1 seed"),
])
def test_inconclusive_reasons(kw, reason):
    preset = kw.pop("preset", "quick")
    kw.setdefault("n_seeds", 3)
    v = judge(C, preset, value=1.0, passed=True, null=NULL_FAILS, **kw)
    assert v.outcome == INCONCLUSIVE
    assert any(reason in r for r in v.reasons), v.reasons


def test_failed_gate_beats_failed_rule_and_uncomputed_statistic():
    assert judge(C, "quick", value=0.1, passed=False, n_seeds=3, null=NULL_FAILS,
                 gates={"trained": (0.1, False)}).outcome == INCONCLUSIVE
    v = judge(C, "quick", value=None, passed=None, why_not_computed="fit did not converge",
              gates={"trained": (1.0, True)})
    assert v.outcome == INCONCLUSIVE and "fit did not converge" in v.reasons


def test_one_seed_failure_is_inconclusive_too():
    assert judge(C, "quick", value=0.1, passed=False, n_seeds=1, null=NULL_FAILS,
                 gates={"trained": (1, True)}).outcome == INCONCLUSIVE


def test_unregistered_gate_and_claim_are_programming_errors():
    with pytest.raises(ValueError, match="unregistered gates"):
        judge(C, "quick", value=1, passed=True, gates={"nope": (1, True)})
    with pytest.raises(ValueError, match="unregistered claim"):
        complete([C], [judge(Claim("other", "s", "x", "p", "s", "r"), "quick", value=1, passed=True)], "quick")


def test_complete_fills_missing_claims_as_inconclusive_in_registered_order():
    d = Claim("d", "s", "x", "p", "s", "r", null="n")
    vs = complete([C, d], [judge(d, "quick", value=1, passed=True, n_seeds=3, null=NULL_FAILS)], "quick")
    assert [v.claim_id for v in vs] == ["c", "d"]
    assert vs[0].outcome == INCONCLUSIVE and vs[1].outcome == REPRODUCED


def test_verdict_roundtrip_is_strict_json():
    v = judge(C, "quick", value=float("nan"), passed=None, details={"x": float("inf")})
    d = json.loads(json.dumps(v.to_dict(), allow_nan=False))
    assert Verdict.from_dict(d).to_dict() == d


def test_an_interval_with_a_non_finite_end_is_dropped_and_the_report_prints_it():
    from lmsci.report import _fmt_value

    v = judge(C, "quick", value=0.5, passed=False, ci=(float("nan"), float("nan")), n_seeds=3, null=NULL_FAILS)
    assert v.ci is None and _fmt_value(v) == "0.5"
    d = Verdict.from_dict(json.loads(json.dumps(v.to_dict(), allow_nan=False)))
    assert _fmt_value(d) == "0.5"
    assert _fmt_value(judge(C, "quick", value=0.5, passed=False, ci=(0.25, 0.75), n_seeds=3)) == "0.5 [0.25, 0.75]"


def test_across_seeds_student_t():
    s = across_seeds([1.0, 2.0, 3.0])
    assert s.n == 3 and s.mean == 2.0
    assert s.hi - s.mean == pytest.approx(4.302653 * 1.0 / 3 ** 0.5, rel=1e-5)  # t_{0.975, 2} * sd / sqrt(n)
    one = across_seeds([5.0, float("nan")])
    assert one.n == 1 and one.ci is None and "1 seed" in one.kind
    with pytest.raises(ValueError):
        across_seeds([float("nan")])


def test_claim_validation():
    with pytest.raises(ValueError, match="presets"):
        Claim("x", "s", "src", "p", "s", "r", presets=("huge",))
    with pytest.raises(ValueError, match="uncertainty"):
        Claim("x", "s", "src", "p", "s", "r", uncertainty="vibes")


def test_digest_tracks_the_rule_not_the_wording_of_the_statement():
    a = Claim("x", "statement", "src", "p", "stat", "rule")
    assert a.digest() == Claim("x", "other words", "src2", "p2", "stat", "rule").digest()
    assert a.digest() != Claim("x", "statement", "src", "p", "stat", "rule, loosened").digest()
    assert a.digest() != Claim("x", "statement", "src", "p", "stat", "rule", presets=("paper",)).digest()
    assert a.digest() != Claim("x", "statement", "src", "p", "stat", "rule", null="random init").digest()
    assert a.digest() != Claim("x", "statement", "src", "p", "stat", "rule", kind="check").digest()
    assert a.digest({"quick": "00000000"}) != a.digest({"quick": "00000001"})


def test_a_preset_change_changes_the_registered_digest(monkeypatch):
    cat = shipped()
    name, cls = next((n, c) for n, c in cat.items() if "quick" in c.Config.PRESETS)
    claim = next(c for c in cls.claims if "quick" in c.presets)
    before = registered_digest(cls, claim)
    quick = dict(cls.Config.PRESETS["quick"])
    monkeypatch.setitem(cls.Config.PRESETS, "quick", {**quick, "seed": 12345})
    assert registered_digest(cls, claim) != before
    monkeypatch.setitem(cls.Config.PRESETS, "quick", {**quick, "threads": 7})  # where it runs is not the preset
    assert registered_digest(cls, claim) == before


def test_every_claim_has_a_null_arm_and_every_item_a_kind():
    missing = [f"{n}/{c.id}" for n, cls in shipped().items() for c in cls.claims if c.needs_null and not c.null]
    assert not missing, f"claims without a registered null arm: {missing}"


# -- the registry ------------------------------------------------------------------------------------
def test_every_experiment_registers_claims_with_unique_ids():
    for name, cls in shipped().items():
        ids = [c.id for c in cls.claims]
        assert ids, f"{name} registers no claims"
        assert len(set(ids)) == len(ids), f"{name}: duplicate claim ids {ids}"
        for c in cls.claims:
            assert c.statement and c.source and c.paper_value and c.statistic and c.rule, (name, c.id)


def test_claims_match_the_checked_in_snapshot():
    """A rule changes only together with tests/data/claims.json and a dated CLAIMS.md line."""
    current = snapshot(shipped())
    stored = json.loads(SNAPSHOT.read_text())
    assert current == stored, (
        "registered claims differ from tests/data/claims.json. If a rule really changes, write the snapshot "
        "with `lmsci claims --json > tests/data/claims.json` and add a dated line to CLAIMS.md saying why, "
        "in a commit of its own (never the commit that records the result it changes).")


def test_every_registered_rule_has_a_dated_line_in_claims_md():
    text = CLAIMS_MD.read_text()
    missing = []
    for name, cls in shipped().items():
        for c in cls.claims:
            dg = registered_digest(cls, c)
            pat = rf"^- \d{{4}}-\d{{2}}-\d{{2}} .*`{re.escape(name)}/{re.escape(c.id)}` \[{dg}\]"
            if not re.search(pat, text, flags=re.M):
                missing.append(f"{name}/{c.id} [{dg}]")
    assert not missing, f"CLAIMS.md has no dated line for: {missing}"


def test_judge_arms_applies_one_rule_to_both_arms():
    from lmsci.claims import judge_arms

    seen = {}

    def judge(cid, **kw):
        seen[cid] = kw
        return kw

    def rule(s):
        return bool(s.n >= 2 and s.lo > 0)

    kw = judge_arms(judge, "c", [1.0, 1.2, 1.1], [0.1, -0.2, 0.05], rule, gates={"g": (1, True)})
    assert kw["passed"] is True and kw["null"][1] is False and kw["n_seeds"] == 3
    assert kw["details"]["null_per_seed"] == [0.1, -0.2, 0.05] and kw["gates"] == {"g": (1, True)}
    kw = judge_arms(judge, "c", [1.0, 1.2], [], rule)
    assert kw["null"] is None and kw["details"]["null_ci"] is None
