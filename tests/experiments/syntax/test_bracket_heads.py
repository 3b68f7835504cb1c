"""bracket-heads: the Dyck world and its labels, the head instruments on hand-made patterns and a tiny GPT,
verdicts from synthetic tables (reproduced / not reproduced / gated / null-passing), bad input, a smoke run.

Sources: Ebrahimi et al., arXiv 2010.04303; Yao et al., arXiv 2105.11115; Wang et al., arXiv 2211.00593 (mean
ablation).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.syntax.bracket_heads import BracketHeads, BracketHeadsConfig
from lmsci.measure.heads import (argmax_match_accuracy, head_mean_z, rule_match_accuracy, token_nll)
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.runs import RunDir
from lmsci.worlds.dyck import Dyck


def test_dyck_strings_are_balanced_bounded_and_labelled():
    w = Dyck(k=3, length=20, max_depth=3)
    x = w.sample(200, np.random.default_rng(0))
    assert x.shape == (200, 21) and (x[:, 0] == 0).all() and x.max() <= 6
    lab = w.labels(x)  # raises on a string that is not well nested
    assert lab["depth"].max() <= 3 and (lab["depth"][:, -1] == 0).all()
    close = w.is_close(x)
    # a close and its match are of the same type, the match is earlier, and matching is an involution
    b, j = np.nonzero(close)
    o = lab["match"][b, j]
    assert (o < j).all() and (x[b, o] == x[b, j] - 3).all() and (lab["match"][b, o] == j).all()
    # the innermost unmatched open before a close is its match (the oracle rule is exact)
    assert (lab["recent_unmatched_open"][b, j - 1] == o).all()


def test_labels_by_hand_and_rules():
    w = Dyck(k=2, length=6, max_depth=3)
    x = np.array([[0, 1, 2, 4, 3, 1, 3]])  # ^ ( [ ] ) ( )
    lab = w.labels(x)
    assert lab["match"][0].tolist() == [-1, 4, 3, 2, 1, 6, 5]
    assert lab["recent_open"][0].tolist() == [-1, 1, 2, 2, 2, 5, 5]
    assert lab["recent_unmatched_open"][0].tolist() == [-1, 1, 2, 1, -1, 5, -1]
    q = np.zeros_like(x, dtype=bool)
    q[:, :-1] = w.is_close(x)[:, 1:]
    tgt = np.full_like(x, -1)
    tgt[:, :-1] = lab["match"][:, 1:]
    # closes at 3, 4, 6; most recent open before them: 2 (right), 2 (wrong: match is 1), 5 (right)
    assert rule_match_accuracy(lab["recent_open"], q, tgt) == pytest.approx(2 / 3)
    assert rule_match_accuracy(lab["recent_unmatched_open"], q, tgt) == 1.0
    with pytest.raises(ValueError):
        w.labels(np.array([[0, 1, 4, 0, 0, 0, 0]]))


def test_argmax_match_accuracy_on_a_hand_made_pattern():
    T = 4
    pat = torch.zeros(1, 1, 2, T, T)
    pat[0, 0, 0] = torch.eye(T)  # head 0 attends to itself
    pat[0, 0, 1, :, 0] = 1.0  # head 1 attends to position 0
    q = torch.tensor([[False, True, True, False]])
    tgt = torch.tensor([[0, 1, 0, 0]])
    acc = argmax_match_accuracy(pat, q, tgt)
    assert acc.shape == (1, 2) and acc[0, 0] == 0.5 and acc[0, 1] == 0.5


def test_mean_ablation_changes_only_with_a_real_head():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=9, seq_len=12, n_layers=1, n_heads=2, d_model=16), seed=0).eval()
    x = torch.randint(0, 9, (8, 12))
    mz = head_mean_z(m, x, 0)
    assert mz.shape == (12, 2, 8)
    clean = token_nll(m, x[:, :-1], x[:, 1:])
    abl = token_nll(m, x[:, :-1], x[:, 1:], ablate=(0, 0, head_mean_z(m, x[:, :-1], 0)))
    assert clean.shape == abl.shape == (8, 11) and not torch.allclose(clean, abl, atol=1e-6)
    # on identical rows the per-position mean is the head's own output: ablation changes nothing
    xs = x[:1].expand(8, -1)
    c1 = token_nll(m, xs[:, :-1], xs[:, 1:])
    a1 = token_nll(m, xs[:, :-1], xs[:, 1:], ablate=(0, 0, head_mean_z(m, xs[:, :-1], 0)))
    assert torch.allclose(c1, a1, atol=1e-5)


def rows(acc=0.97, eff=0.8, close=1.0, null_acc=0.3, rule=0.55, null_eff=0.0, oracle=1.0, n=3,
         init_eff=0.0) -> pd.DataFrame:
    """Arm real (the trained model; ``other_*``: a random non-best head's ablation, effect ``null_eff``, the null of
    ablation-closing) and arm null (the same model at random init, effect ``init_eff``), n seeds."""
    out = []
    for k in range(n):
        common = {"status": "ok", "seed_index": k, "best_layer": 1, "best_head": k % 2, "best_acc_at_close": 0.3,
                  "d_open": 0.05, "nll_close": 0.01, "nll_open": 1.5, "rule_recent_open": rule, "rule_oracle": oracle}
        out.append({**common, "point": "dyck" + (f"__s{k}" if k else ""), "arm": "real", "best_acc": acc - 0.01 * k,
                    "d_close": eff + 0.02 * k + 0.05, "ablation_effect": eff + 0.02 * k, "close_acc": close,
                    "other_layer": 0, "other_head": k % 2, "other_ablation_effect": null_eff + 0.001 * k})
        out.append({**common, "point": "null-dyck" + (f"__s{k}" if k else ""), "arm": "null", "best_acc": null_acc,
                    "d_close": 0.0, "ablation_effect": init_eff + 0.001 * k, "close_acc": 0.3})
    return pd.DataFrame(out)


def verdicts(df, tmp_path, preset="quick"):
    cfg = resolve_config(BracketHeadsConfig, preset, {})
    return {v.claim_id: v for v in BracketHeads().verdicts(cfg, df, RunDir(tmp_path))}


def test_passing_table_is_reproduced(tmp_path):
    v = verdicts(rows(), tmp_path)
    assert v["matching-head"].outcome == "reproduced" and v["ablation-closing"].outcome == "reproduced"
    assert v["matching-head"].null_passed is False and v["oracle-rule"].outcome == "passed"


def test_failing_table_is_not_reproduced(tmp_path):
    v = verdicts(rows(acc=0.85, eff=0.05), tmp_path)
    assert v["matching-head"].outcome == "not reproduced" and v["ablation-closing"].outcome == "not reproduced"


def test_gated_null_passing_and_few_seeds_are_inconclusive(tmp_path):
    v = verdicts(rows(close=0.6), tmp_path)
    assert all(v[c].outcome == "inconclusive" for c in ("matching-head", "ablation-closing"))
    v = verdicts(rows(null_acc=0.95), tmp_path)  # a random-init head that matches: the rule cannot tell
    assert v["matching-head"].outcome == "inconclusive" and v["matching-head"].null_passed
    v = verdicts(rows(rule=0.92), tmp_path)  # the trivial 'most recent open' rule also matches
    assert v["matching-head"].outcome == "inconclusive"
    v = verdicts(rows(null_eff=0.8), tmp_path)  # a random other trained head hurts closing brackets as much
    assert v["ablation-closing"].outcome == "inconclusive" and v["ablation-closing"].null_passed
    v = verdicts(rows(init_eff=0.8), tmp_path)  # the random-init model decides nothing since 2026-12-06
    assert v["ablation-closing"].outcome == "reproduced"
    v = verdicts(rows(n=2), tmp_path)
    assert v["matching-head"].outcome == "inconclusive"
    v = verdicts(rows(), tmp_path, preset="smoke")
    assert v["matching-head"].outcome == "inconclusive"


def test_bad_config_is_a_named_error():
    with pytest.raises(ConfigError, match="dyck_length"):
        BracketHeads().validate(resolve_config(BracketHeadsConfig, "smoke", {"dyck_length": 13}))
    with pytest.raises(ConfigError, match="d_model"):
        BracketHeads().validate(resolve_config(BracketHeadsConfig, "smoke", {"d_model": 18, "n_heads": 4}))
    with pytest.raises(ConfigError, match="p_open"):
        resolve_config(BracketHeadsConfig, "smoke", {"p_open": 1.5})


def test_smoke_run(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(BracketHeadsConfig, "smoke", {"threads": 1})
    run = run_experiment(BracketHeads(), cfg, tmp_path / "run", progress=False, log=lambda *a, **k: None)
    res = run.results()
    assert (res["status"] == "ok").all() and res["best_acc"].between(0, 1).all()
    assert set(res["arm"]) == {"real", "null"}
    assert (run.path / "figures" / "bracket_heads.png").exists()
    vs = {v.claim_id: v for v in run.verdicts()}
    # the null arms are measured and, for an almost untrained model, do not meet the rules
    assert vs["matching-head"].null_value is not None and vs["matching-head"].null_passed is False
    assert vs["ablation-closing"].null_passed is False
    assert res["rule_oracle"].iloc[0] == 1.0
    # ablation-closing's null: a non-best head of the trained model, read from the real row's other_* columns
    real = res[res["arm"] == "real"].iloc[0]
    assert (real["other_layer"], real["other_head"]) != (real["best_layer"], real["best_head"])
    assert real["other_ablation_effect"] == pytest.approx(real["other_d_close"] - real["other_d_open"])
    assert vs["ablation-closing"].null_value == pytest.approx(real["other_ablation_effect"])


def test_other_head_is_uniform_over_the_non_best_heads():
    from lmsci.experiments.syntax.bracket_heads import other_head

    draws = [other_head(2, 4, (1, 2), s) for s in range(800)]
    assert (1, 2) not in draws and len(set(draws)) == 7
    counts = np.array([draws.count(h) for h in sorted(set(draws))])
    assert counts.min() > 800 / 7 * 0.6  # roughly uniform (expected ~114 each)
    assert other_head(2, 4, (1, 2), 5) == other_head(2, 4, (1, 2), 5)  # seeded
    assert other_head(1, 1, (0, 0), 3) == (0, 0)
