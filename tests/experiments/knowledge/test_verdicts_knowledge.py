"""Verdicts of the four bioS experiments on synthetic results tables (the shape ``run_point`` writes, with the
executor's ``seed_index`` and ``status`` columns, 3 seeds, the null arm's columns): the paper's numbers give
"reproduced", a clear failure "not reproduced", a failed gate (biography recall 0.5, a 1-layer model, ...) or a
null arm that meets the rule "inconclusive". The claims are decided at the gpu and paper presets (issue 29)."""

from __future__ import annotations

import pandas as pd
import pytest

from lmsci.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from lmsci.config import resolve_config
from lmsci.experiments import registry
from lmsci.report import compute_verdicts
from lmsci.runs import RunDir

SEEDS = (0, 1, 2)
JITTER = {0: -0.01, 1: 0.0, 2: 0.01}  # small seed-to-seed spread so the Student-t CI is finite


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def _verdicts(name: str, rows: list[dict], tmp_path, sets: list[str] | None = None, preset: str = "gpu"):
    exp = registry.get(name)()
    cfg = resolve_config(exp.Config, preset, sets or [])
    df = pd.DataFrame(rows)
    vs = exp.verdicts(cfg, df, RunDir(tmp_path))
    full = compute_verdicts(exp, cfg, df, RunDir(tmp_path))  # every registered claim gets a verdict
    assert [v.claim_id for v in full] == [c.id for c in exp.claims]
    return {v.claim_id: v for v in vs}


# -- knowledge-extraction ----------------------------------------------------------------------------
def _ke_rows(acc: dict[tuple[str, str], float], recall: float, seeds=SEEDS, null: float = 0.10) -> list[dict]:
    """``null``: P_test QA of the null arm (a second bioS single pretrain_ft model at another seed)."""
    rows = []
    for (d, r), a in acc.items():
        for s in seeds:
            pid = f"{d}_{r}" + (f"__s{s}" if s else "")
            rows.append({"arm": "real", "point": pid, "data": d, "regime": r, "condition": f"{d}_{r}",
                         "qa_test": _clip(a + JITTER[s]),
                         "qa_train": 1.0, "bio_recall_test": recall, "bio_recall_train": recall, "bio_recall": recall,
                         "n_qa_test": 480, "seed_index": s, "status": "ok"})
    for s in seeds:  # the null arm's point: a second single pretrain_ft model (its own seed)
        rows.append({"arm": "null", "point": "null-single_pretrain_ft" + (f"__s{s}" if s else ""), "data": "single",
                     "regime": "pretrain_ft", "condition": "single_pretrain_ft_second",
                     "qa_test": _clip(null - JITTER[s]), "qa_train": 1.0, "bio_recall_test": recall, "n_qa_test": 480,
                     "seed_index": s, "status": "ok"})
    return rows


KE_PAPER = {("single", "pretrain_ft"): 0.097, ("augmented", "pretrain_ft"): 0.962,
            ("single", "mixed"): 0.866, ("augmented", "mixed"): 0.90}
KE_FAIL = {("single", "pretrain_ft"): 0.10, ("augmented", "pretrain_ft"): 0.35,
           ("single", "mixed"): 0.15, ("augmented", "mixed"): 0.40}


def test_knowledge_extraction_paper_numbers_reproduce(tmp_path):
    vs = _verdicts("knowledge-extraction", _ke_rows(KE_PAPER, 0.99), tmp_path)
    assert vs["pretrain-ft-augmentation"].outcome == REPRODUCED
    assert vs["pretrain-ft-augmentation"].value == pytest.approx(0.962 - 0.097)
    assert vs["pretrain-ft-augmentation"].n_seeds == 3 and vs["pretrain-ft-augmentation"].ci is not None
    assert vs["mixed-vs-pretrain-ft"].outcome == REPRODUCED
    for v in vs.values():
        assert v.null_passed is False and v.null_value == pytest.approx(0.10 - 0.097)


def test_knowledge_extraction_null_arm_meeting_the_rule_is_inconclusive(tmp_path):
    # a second single model that answers P_test as well as the augmented one (the control condition alone extracts,
    # e.g. a seed-to-seed spread or an evaluation leak): the rule cannot tell
    vs = _verdicts("knowledge-extraction", _ke_rows(KE_PAPER, 0.99, null=0.95), tmp_path)
    for v in vs.values():
        assert v.outcome == INCONCLUSIVE and v.rule_passed and v.null_passed is True
        assert any("cannot tell the effect from its absence" in r for r in v.reasons)
    # ... and at quick, below the claims' scale, the values are reported but nothing is decided
    vs = _verdicts("knowledge-extraction", _ke_rows(KE_PAPER, 0.99), tmp_path, preset="quick")
    assert all(v.outcome == INCONCLUSIVE and any("below the scale" in r for r in v.reasons) for v in vs.values())


def test_knowledge_extraction_clear_failure(tmp_path):
    vs = _verdicts("knowledge-extraction", _ke_rows(KE_FAIL, 0.99), tmp_path)
    assert vs["pretrain-ft-augmentation"].outcome == NOT_REPRODUCED
    assert vs["mixed-vs-pretrain-ft"].outcome == NOT_REPRODUCED
    # a high single accuracy fails the rule even with a large gap
    high_single = {**KE_PAPER, ("single", "pretrain_ft"): 0.40, ("augmented", "pretrain_ft"): 0.95}
    assert _verdicts("knowledge-extraction", _ke_rows(high_single, 0.99), tmp_path)[
        "pretrain-ft-augmentation"].outcome == NOT_REPRODUCED


def test_knowledge_extraction_not_memorised_is_inconclusive(tmp_path):
    vs = _verdicts("knowledge-extraction", _ke_rows(KE_PAPER, 0.5), tmp_path)
    for v in vs.values():
        assert v.outcome == INCONCLUSIVE and any("memorised" in r for r in v.reasons)
    # ... also when the failure is a clear one: an unmemorised model says nothing about extraction
    assert _verdicts("knowledge-extraction", _ke_rows(KE_FAIL, 0.5), tmp_path)[
        "pretrain-ft-augmentation"].outcome == INCONCLUSIVE


def test_knowledge_extraction_one_seed_and_smoke_are_inconclusive(tmp_path):
    v = _verdicts("knowledge-extraction", _ke_rows(KE_PAPER, 0.99, seeds=(0,)), tmp_path)["pretrain-ft-augmentation"]
    assert v.outcome == INCONCLUSIVE and v.rule_passed and any("1 seed" in r for r in v.reasons)
    v = _verdicts("knowledge-extraction", _ke_rows(KE_PAPER, 0.99), tmp_path, preset="smoke")["mixed-vs-pretrain-ft"]
    assert v.outcome == INCONCLUSIVE


# -- celebrity-helps-minority ------------------------------------------------------------------------
def _celeb_rows(single: float, celeb: float, recall: float, null: float | None = None) -> list[dict]:
    """``null``: minority QA of the null arm (a second all-single model at another seed; default: ``single``)."""
    null = single if null is None else null
    rows = []
    for aug, a in ((False, single), (True, celeb)):
        for s in SEEDS:
            pid = ("celebrities_augmented" if aug else "baseline_all_single") + (f"__s{s}" if s else "")
            rows.append({"arm": "real", "point": pid, "celebrities_augmented": aug,
                         "condition": "celebrities_augmented" if aug else "all_single",
                         "qa_minority": _clip(a + JITTER[s]), "qa_celebrity": 1.0, "bio_recall_minority": recall,
                         "n_qa_minority": 480, "seed_index": s, "status": "ok"})
    for s in SEEDS:  # the null arm's point: a second all-single model at another seed
        rows.append({"arm": "null", "point": "null-baseline_all_single" + (f"__s{s}" if s else ""),
                     "celebrities_augmented": False, "condition": "all_single_second",
                     "qa_minority": _clip(null - JITTER[s]), "qa_celebrity": 1.0, "bio_recall_minority": recall,
                     "n_qa_minority": 480, "seed_index": s, "status": "ok"})
    return rows


@pytest.mark.parametrize("single, celeb, recall, outcome", [
    (0.044, 0.868, 0.99, REPRODUCED),      # the paper: 4.4% -> 86.8%
    (0.05, 0.25, 0.99, NOT_REPRODUCED),    # a lift of 0.2 (what the old rule accepted)
    (0.40, 0.95, 0.99, NOT_REPRODUCED),    # minority already extractable without celebrities
    (0.044, 0.868, 0.5, INCONCLUSIVE),     # the minority was not memorised
])
def test_celebrity_verdict(single, celeb, recall, outcome, tmp_path):
    v = _verdicts("celebrity-helps-minority", _celeb_rows(single, celeb, recall), tmp_path)["minority-lift"]
    assert v.outcome == outcome, v.reasons
    assert v.value == pytest.approx(celeb - single) and v.n_seeds == 3
    assert v.null_passed is False and v.null_value == pytest.approx(0, abs=1e-9)  # a second all-single model


def test_celebrity_null_arm_meeting_the_rule_is_inconclusive(tmp_path):
    # a second all-single model whose minority answers as well as with celebrities (a seed spread or a leak)
    v = _verdicts("celebrity-helps-minority", _celeb_rows(0.044, 0.868, 0.99, null=0.8), tmp_path)["minority-lift"]
    assert v.outcome == INCONCLUSIVE and v.rule_passed and v.null_passed is True
    v = _verdicts("celebrity-helps-minority", _celeb_rows(0.044, 0.868, 0.99), tmp_path, preset="quick")["minority-lift"]
    assert v.outcome == INCONCLUSIVE and any("below the scale" in r for r in v.reasons)


# reversal-curse and knowledge-capacity: tests/experiments/knowledge/test_knowledge_reversal_capacity.py (issue 11 protocols)
