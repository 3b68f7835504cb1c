"""Issue 11, presets that chain 10-minute commands: a bioS point killed mid-training resumes from its trainer
checkpoint when the same run is repeated into the same directory, and ends with the results of an uninterrupted
run; the memorisation-first sequence lifted into ``knowledge_common.pretrain_check_finetune`` gives the results
the experiments gave before (same seed, same numbers)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import lmsci.train.trainer as trainer
from lmsci.config import resolve_config
from lmsci.experiments.knowledge.celebrity import CelebrityHelpsMinority
from lmsci.experiments.knowledge.knowledge_capacity import KnowledgeCapacity
from lmsci.experiments.knowledge.knowledge_extraction import KnowledgeExtraction
from lmsci.sweep import run_experiment

TIMING = {"seconds", "pretrain_seconds", "tokens_per_s", "ft_seconds", "null_ft_seconds", "commit", "resumed_from"}


class Killed(Exception):
    """Stands for the end of a 10-minute command (the process stops mid-training)."""


def _run(exp, overrides, out):
    cfg = resolve_config(exp.Config, "smoke", {"threads": 1, **overrides})
    return pd.read_csv(run_experiment(exp, cfg, out, progress=False, log=lambda m: None).path / "results.csv")


def _kill_at(monkeypatch, step: int, point_hint: str | None = None):
    """Make the trainer raise :class:`Killed` before optimizer step ``step`` the first time it gets there."""
    real = trainer.lr_at
    fired = []

    def lr_at(s, cfg):
        if s == step and not fired and cfg.steps > step:
            fired.append(s)
            raise Killed(f"killed before step {s}")
        return real(s, cfg)

    monkeypatch.setattr(trainer, "lr_at", lr_at)
    return fired


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    a, b = a.set_index("point").sort_index(), b.set_index("point").sort_index()
    for c in a.columns:
        if c in TIMING:
            continue
        x, y = a[c], b[c]
        if x.dtype.kind in "fi" and y.dtype.kind in "fi":
            assert np.allclose(x.astype(float), y.astype(float), rtol=0, atol=0, equal_nan=True), c
        else:
            assert x.astype(str).tolist() == y.astype(str).tolist(), c


@pytest.mark.parametrize("exp, overrides, kill", [
    # train_packed (knowledge_common): checkpoints every memorise_check_every = 2 steps; the augmented point has 6
    (CelebrityHelpsMinority(), {}, 4),
    # knowledge-capacity: its own train() call with a BioStream resumed by skipping batches
    (KnowledgeCapacity(), {"checkpoint_every": 1, "min_steps": 6}, 3),
])
def test_a_killed_point_resumes_from_its_checkpoint(exp, overrides, kill, tmp_path, monkeypatch):
    whole = _run(exp, overrides, tmp_path / "whole")
    fired = _kill_at(monkeypatch, kill)
    with pytest.raises(Killed):
        _run(exp, overrides, tmp_path / "chained")
    assert fired == [kill]
    monkeypatch.undo()
    chained = _run(exp, overrides, tmp_path / "chained")  # the next command, same --out
    # one training resumed from the step it was killed at; its rows are the arms of one point (knowledge-capacity's
    # null arm scores the real arm's model on held-out people, so both rows come from that one training)
    resumed = chained[chained["resumed_from"] == kill]
    assert len(resumed) >= 1 and resumed["point"].str.replace(r"^(real|null)-", "", regex=True).nunique() == 1
    assert (chained["resumed_from"].fillna(0) == 0).sum() == len(chained) - len(resumed)
    _same(whole, chained)  # and it ends exactly where the uninterrupted run does


def test_resumed_pretraining_keeps_the_recall_checks_made_before_the_kill(tmp_path, monkeypatch):
    exp = CelebrityHelpsMinority()
    whole = _run(exp, {}, tmp_path / "whole")
    _kill_at(monkeypatch, 5)
    with pytest.raises(Killed):
        _run(exp, {}, tmp_path / "chained")
    monkeypatch.undo()
    chained = _run(exp, {}, tmp_path / "chained")
    row = chained.set_index("point").loc["celebrities_augmented"]
    assert row["resumed_from"] == 4
    assert row["recall_checks"] == whole.set_index("point").loc["celebrities_augmented", "recall_checks"]
    assert row["recall_checks"].count("[") >= 4  # checks at steps 2, 4 (before the kill) and 6


# the smoke results of celebrity-helps-minority and knowledge-extraction before the memorisation-first sequence
# was lifted into knowledge_common.pretrain_check_finetune (commit 6d54970 with the seeded LoRA initialisation)
# ft_final_loss since the step-matched LoRA embedding adapter (train.finetune.matched_embedding_alpha, 2026-11-26)
BEFORE_LIFT = {
    "celebrity-helps-minority": {
        "baseline_all_single": {"ft_final_loss": 6.2334442138671875, "qa_minority": 0.0, "pretrain_steps": 1},
        "celebrities_augmented": {"ft_final_loss": 5.814022424086085, "qa_minority": 0.0, "pretrain_steps": 6}},
    "knowledge-extraction": {
        "single_pretrain_ft": {"ft_final_loss": 6.230308981502757, "qa_test": 0.0, "pretrain_steps": 1,
                               "p_probe_before": 0.1111111111111111},
        "augmented_pretrain_ft": {"ft_final_loss": 5.900301073418289, "qa_test": 0.0, "pretrain_steps": 7,
                                  "p_probe_before": 0.1111111111111111},
        "single_mixed": {"ft_final_loss": None, "qa_test": 0.0, "pretrain_steps": 7, "p_probe_before": None}},
}


@pytest.mark.parametrize("exp", [CelebrityHelpsMinority(), KnowledgeExtraction()])
def test_the_lifted_sequence_gives_the_same_results_as_before(exp, tmp_path):
    got = _run(exp, {}, tmp_path / "run").set_index("point")
    for point, want in BEFORE_LIFT[exp.name].items():
        for col, v in want.items():
            g = got.loc[point, col]
            if v is None:
                assert g is None or (isinstance(g, float) and math.isnan(g)), (point, col)
            elif col == "pretrain_steps":
                assert g == v, (point, col)
            else:
                # recorded on one CPU: a few training steps differ by ~1e-7 relative between CPU kernels (6.233444779
                # on an AVX-512 Xeon vs 6.233444214 here, issue 46), while a changed protocol (data, steps, seeds,
                # LoRA init) moves the fine-tuning loss by more than 1e-2: 1e-4 tells them apart
                assert g == pytest.approx(v, rel=1e-4, abs=1e-9), (point, col)
    # the forgetting columns: held-out recall after fine-tuning, and its drop
    col = "bio_recall_minority" if exp.name == "celebrity-helps-minority" else "bio_recall_test"
    ft = got.dropna(subset=["ft_final_loss"])
    assert np.allclose(ft[f"forgetting_{col.split('_')[-1]}"], ft[col] - ft[f"{col}_after_ft"])
