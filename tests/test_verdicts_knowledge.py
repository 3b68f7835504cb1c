"""Verdicts of the four bioS experiments on synthetic results tables (the shape ``run_point`` writes, with the
executor's ``seed_index`` and ``status`` columns, 3 seeds): the paper's numbers give "reproduced", a clear
failure "not reproduced", a failed gate (biography recall 0.5, a 1-layer model, ...) "inconclusive"."""

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


def _verdicts(name: str, rows: list[dict], tmp_path, sets: list[str] | None = None, preset: str = "quick"):
    exp = registry.get(name)()
    cfg = resolve_config(exp.Config, preset, sets or [])
    df = pd.DataFrame(rows)
    vs = exp.verdicts(cfg, df, RunDir(tmp_path))
    full = compute_verdicts(exp, cfg, df, RunDir(tmp_path))  # every registered claim gets a verdict
    assert [v.claim_id for v in full] == [c.id for c in exp.claims]
    return {v.claim_id: v for v in vs}


# -- knowledge-extraction ----------------------------------------------------------------------------
def _ke_rows(acc: dict[tuple[str, str], float], recall: float, seeds=SEEDS) -> list[dict]:
    rows = []
    for (d, r), a in acc.items():
        for s in seeds:
            pid = f"{d}_{r}" + (f"__s{s}" if s else "")
            rows.append({"point": pid, "data": d, "regime": r, "qa_test": _clip(a + JITTER[s]), "qa_train": 1.0,
                         "bio_recall_test": recall, "bio_recall_train": recall, "bio_recall": recall,
                         "n_qa_test": 480, "seed_index": s, "status": "ok"})
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
def _celeb_rows(single: float, celeb: float, recall: float) -> list[dict]:
    rows = []
    for aug, a in ((False, single), (True, celeb)):
        for s in SEEDS:
            pid = ("celebrities_augmented" if aug else "baseline_all_single") + (f"__s{s}" if s else "")
            rows.append({"point": pid, "celebrities_augmented": aug, "qa_minority": _clip(a + JITTER[s]),
                         "qa_celebrity": 1.0, "bio_recall_minority": recall, "n_qa_minority": 480,
                         "seed_index": s, "status": "ok"})
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


# -- reversal-curse ----------------------------------------------------------------------------------
def _rev_rows(inv_fwd: float, inv_rev: float, recall: float = 0.99, fwd_qa: float = 0.95,
              sent_fwd: float = 0.0, sent_rev: float = 0.9) -> list[dict]:
    rows = []
    for rev, inv, sent in ((False, inv_fwd, sent_fwd), (True, inv_rev, sent_rev)):
        for s in SEEDS:
            pid = ("with_reverse" if rev else "forward_only") + (f"__s{s}" if s else "")
            rows.append({"point": pid, "reverse_in_training": rev, "inverse_test": _clip(inv + JITTER[s]),
                         "inverse_train": 1.0, "qa_test": fwd_qa, "qa_train": 1.0, "bio_recall_test": recall,
                         "bio_recall": recall, "reverse_sentence_name_test": _clip(sent + JITTER[s]),
                         "name_logprob_gap_bits_test": 0.0, "n_test": 80, "seed_index": s, "status": "ok"})
    return rows


@pytest.mark.parametrize("kw, outcome, reason", [
    (dict(inv_fwd=0.0, inv_rev=0.9), REPRODUCED, None),               # curse, lifted by reversed text
    (dict(inv_fwd=0.3, inv_rev=0.9), NOT_REPRODUCED, None),           # no curse
    (dict(inv_fwd=0.0, inv_rev=0.1), NOT_REPRODUCED, None),           # reversed text does not help
    (dict(inv_fwd=0.0, inv_rev=0.9, recall=0.5), INCONCLUSIVE, "memorised"),
    # an untrained model has no inverse search either: the forward-QA gate keeps that from counting
    (dict(inv_fwd=0.0, inv_rev=0.0, fwd_qa=0.0), INCONCLUSIVE, "forward-qa"),
])
def test_reversal_verdict(kw, outcome, reason, tmp_path):
    v = _verdicts("reversal-curse", _rev_rows(**kw), tmp_path)["reversal"]
    assert v.outcome == outcome, v.reasons
    if reason:
        assert any(reason in r for r in v.reasons)


def test_reversal_sentence_is_an_ablation(tmp_path):
    v = _verdicts("reversal-curse", _rev_rows(0.0, 0.9), tmp_path)["reverse-sentence"]
    assert v.ablation and v.outcome == REPRODUCED


# -- knowledge-capacity ------------------------------------------------------------------------------
def _cap_rows(peak_bpp: float, n_layers: int = 4, steps: int = 80_000) -> list[dict]:
    rows = []
    for model, params in (("L4_d128", 1.0e6), ("L4_d256", 3.5e6), ("L8_d256", 6.6e6)):
        for k, n in enumerate((10_000, 20_000, 50_000)):
            bpp = peak_bpp * (0.6, 1.0, 0.9)[k]  # the ratio peaks at the middle N
            for s in SEEDS:
                pid = f"{model}_N{n}" + (f"__s{s}" if s else "")
                b = (bpp + JITTER[s]) * params
                rows.append({"point": pid, "model": model, "n_layers": n_layers, "d_model": 128, "n_people": n,
                             "exposures": 100.0, "tokens_seen": steps * 96 * 512, "steps": steps, "final_loss": 1.0,
                             "bits": b, "ideal_bits": 60.0 * n, "fraction_of_ideal": b / (60.0 * n),
                             "params": params, "params_non_embedding": 0.8 * params,
                             "bits_per_param": b / params, "bits_per_param_non_embedding": b / (0.8 * params),
                             "seed_index": s, "status": "ok"})
    return rows


@pytest.mark.parametrize("exposures, peak, kw, outcome, reason", [
    (100, 1.0, {}, REPRODUCED, None),                         # the paper: ~1 bit/param at 100 exposures
    (100, 0.3, {}, NOT_REPRODUCED, None),
    (100, 2.0, {}, NOT_REPRODUCED, None),                      # 2 bits/param is not "about 1" at 100 exposures
    (1000, 2.2, {}, REPRODUCED, None),                         # the paper: >= 2 bits/param at 1000 exposures
    (1000, 1.0, {}, NOT_REPRODUCED, None),
    (100, 1.0, dict(n_layers=1), INCONCLUSIVE, "depth"),
    (1000, 1.0, dict(steps=5_000), INCONCLUSIVE, "training-steps"),  # a failure, but undertrained
])
def test_capacity_verdict(exposures, peak, kw, outcome, reason, tmp_path):
    vs = _verdicts("knowledge-capacity", _cap_rows(peak, **kw), tmp_path, sets=[f"exposures={exposures}"])
    v = vs[f"capacity-{exposures}-exposures"]
    assert v.outcome == outcome, v.reasons
    assert v.value == pytest.approx(peak) and v.n_seeds == 3
    assert v.ci_kind.startswith("range across models") and v.ci[0] <= v.value <= v.ci[1]
    if reason:
        assert any(reason in r for r in v.reasons)
    other = 1000 if exposures == 100 else 100
    assert vs[f"capacity-{other}-exposures"].outcome == INCONCLUSIVE  # not measured in this run
