"""word-order: the tasks and derangements, the permutation metrics on hand-made predictions, verdicts from
synthetic tables (reproduced / not reproduced / inconclusive), and a smoke run.

Sources: Sinha et al., arXiv 2101.00010 (Omega_x, P^c/P^f); Pham et al., arXiv 2012.15180 (unchanged share).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.syntax.word_order import WordOrder, WordOrderConfig
from lmsci.measure.permutation import permutation_metrics
from lmsci.runs import RunDir
from lmsci.worlds.word_order import WordOrderTask, derange


def test_tasks_are_balanced_and_the_taller_bags_carry_no_label():
    rng = np.random.default_rng(0)
    for name in ("overlap", "taller"):
        t = WordOrderTask(name)
        x, y = t.sample(400, rng)
        assert x.shape == (400, t.seq_len) and (x[:, -1] == t.vocab.ASK).all() and 0.4 < y.mean() < 0.6
    t = WordOrderTask("taller")
    x, y = t.sample(200, rng)
    (ps, pe), (hs, he) = t.segments()
    # the multiset of premise + hypothesis names is the same whatever the label
    for row in x:
        assert sorted(n for n in row[ps:pe] if n < 12) == sorted(n for n in row[hs:he] if n < 12)
    t = WordOrderTask("overlap")
    x, y = t.sample(200, rng)
    for row, lab in zip(x, y):
        hyp_name = [n for n in row[hs:he] if n < 12][0]
        assert (hyp_name in row[ps:pe]) == bool(lab)


def test_derangements_move_every_word_and_keep_the_bag():
    t = WordOrderTask("taller")
    rng = np.random.default_rng(1)
    x, _ = t.sample(20, rng)
    xp = derange(x, t.segments(), 5, rng)
    assert xp.shape == (20, 5, t.seq_len)
    for i in range(20):
        for k in range(5):
            for s, e in t.segments():
                assert sorted(xp[i, k, s:e]) == sorted(x[i, s:e]) and not np.array_equal(xp[i, k, s:e], x[i, s:e])
            assert xp[i, k, t.premise_len] == t.vocab.SEP and xp[i, k, -1] == t.vocab.ASK


def test_permutation_metrics_by_hand():
    gold = np.array([1, 0, 1, 0])
    orig = np.array([1, 0, 0, 0])  # three correct
    perm = np.array([[1, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    m = permutation_metrics(gold, orig, perm, xs=(0.5, 1.0))
    assert m["acc_orig"] == 0.75 and m["acc_perm"] == pytest.approx(8 / 16)
    assert m["omega_max"] == 0.75  # example 3 never gets its gold label
    assert m["omega"] == {0.5: 0.5, 1.0: 0.25}
    assert m["p_c"] == pytest.approx((0.75 + 1 + 0) / 3) and m["p_f"] == pytest.approx(0.25)
    assert m["unchanged_correct"] == pytest.approx((3 + 4 + 0) / 12)


def rows(overlap: dict, taller: dict, n: int = 3, encoder: bool = True, null_nn_own: float = 0.3) -> pd.DataFrame:
    """Each task on its own arm (overlap, taller), n seeds; the ablation rows on arms real and null (random init)."""
    out = []
    for k in range(n):
        for name, v in (("overlap", overlap), ("taller", taller)):
            out.append({"point": name + (f"__s{k}" if k else ""), "arm": name, "kind": "task", "task": name, "q": 20,
                        "acc_orig": v["acc"], "acc_perm": v["perm"] + 0.005 * k, "omega_max": v["omega"],
                        "p_c": 0.9, "p_f": 0.3, "unchanged_correct": v["unch"] - 0.01 * k, "unchanged_all": 0.8,
                        "omega_0.5": 0.7, "omega_1": 0.4, "seed_index": k, "status": "ok"})
    if encoder:
        enc = {"kind": "encoder", "task": "minilm", "n_sentences": 100, "example_swap": "a / b", "seed_index": 0,
               "status": "ok"}
        out.append({**enc, "point": "encoder", "arm": "real", "nn_own": 0.93, "cos_own_derangement": 0.8,
                    "cos_swap": 0.97, "cos_unrelated": 0.1})
        out.append({**enc, "point": "null-encoder", "arm": "null", "nn_own": null_nn_own, "cos_own_derangement": 0.5,
                    "cos_swap": 0.7, "cos_unrelated": 0.6})
        cc = {"kind": "cfg", "task": "cfg-contrast", "deranged_in_language": 0.0, "seed_index": 0, "status": "ok"}
        out.append({**cc, "point": "cfg-contrast", "arm": "real", "nll_strings": 0.4, "nll_deranged": 2.5,
                    "nll_drop": 2.1})
        out.append({**cc, "point": "null-cfg-contrast", "arm": "null", "nll_strings": 3.0, "nll_deranged": 3.01,
                    "nll_drop": 0.01})
    return pd.DataFrame(out)


def verdicts(df, tmp_path, preset="quick"):
    cfg = resolve_config(WordOrderConfig, preset)
    return {v.claim_id: v for v in WordOrder().verdicts(cfg, df, RunDir(tmp_path))}


def test_papers_numbers_are_reproduced(tmp_path):
    # Pham: 75-90% unchanged; Sinha: Omega_max 98.7%; order-critical (CoLA-like) at chance
    vs = verdicts(rows({"acc": 0.99, "perm": 0.95, "omega": 0.987, "unch": 0.85},
                       {"acc": 0.98, "perm": 0.5, "omega": 0.99, "unch": 0.5}), tmp_path)
    assert vs["redundant-unchanged"].outcome == "reproduced" and vs["redundant-unchanged"].n_seeds == 3
    # the null arm: the order-critical classifier's unchanged share (0.5 here) does not meet the rule
    assert vs["redundant-unchanged"].null_value == pytest.approx(0.49) and vs["redundant-unchanged"].null_passed is False
    # design checks: passed, never reproduced
    assert vs["redundant-omega"].kind == "check" and vs["redundant-omega"].outcome == "passed"
    assert vs["critical-chance"].kind == "check" and vs["critical-chance"].outcome == "passed"
    assert vs["encoder-derangement-nn"].ablation and vs["encoder-swap-similarity"].rule_passed
    assert vs["cfg-shuffle-drop"].rule_passed
    assert all(vs[c].null_passed is False for c in ("encoder-derangement-nn", "encoder-swap-similarity",
                                                     "cfg-shuffle-drop"))


def test_null_arm_meeting_the_rule_is_inconclusive(tmp_path):
    # an order-critical classifier that keeps its correct predictions under derangement (a constant one does):
    # the unchanged share cannot tell order-insensitivity from not looking at the input
    vs = verdicts(rows({"acc": 0.99, "perm": 0.95, "omega": 0.987, "unch": 0.85},
                       {"acc": 0.98, "perm": 0.5, "omega": 0.99, "unch": 0.9}), tmp_path)
    v = vs["redundant-unchanged"]
    assert v.outcome == "inconclusive" and v.rule_passed and v.null_passed
    assert any("cannot tell the effect from its absence" in r for r in v.reasons)
    # a random-init encoder that also finds a line's own derangement
    df = rows({"acc": 0.99, "perm": 0.95, "omega": 0.987, "unch": 0.85}, {"acc": 0.98, "perm": 0.5, "omega": 0.99,
                                                                          "unch": 0.5}, null_nn_own=0.95)
    assert verdicts(df, tmp_path)["encoder-derangement-nn"].outcome == "inconclusive"


def test_order_sensitive_redundant_task_and_surviving_critical_task_are_not_reproduced(tmp_path):
    vs = verdicts(rows({"acc": 0.99, "perm": 0.6, "omega": 0.7, "unch": 0.55},
                       {"acc": 0.98, "perm": 0.8, "omega": 1.0, "unch": 0.5}), tmp_path)
    assert vs["redundant-unchanged"].outcome == "not reproduced"
    assert vs["redundant-omega"].outcome == "failed"
    assert vs["critical-chance"].outcome == "failed"


def test_unlearned_tasks_too_few_seeds_or_smoke_are_inconclusive(tmp_path):
    vs = verdicts(rows({"acc": 0.6, "perm": 0.6, "omega": 0.95, "unch": 0.9},
                       {"acc": 0.55, "perm": 0.5, "omega": 0.9, "unch": 0.5}), tmp_path)
    assert {vs[c].outcome for c in ("redundant-unchanged", "redundant-omega", "critical-chance")} == {"inconclusive"}
    assert any("learned" in r for r in vs["critical-chance"].reasons)
    vs = verdicts(rows({"acc": 0.99, "perm": 0.95, "omega": 0.99, "unch": 0.85},
                       {"acc": 0.98, "perm": 0.5, "omega": 0.99, "unch": 0.5}, n=2, encoder=False), tmp_path)
    assert vs["redundant-unchanged"].outcome == "inconclusive" and vs["redundant-unchanged"].rule_passed
    assert vs["encoder-swap-similarity"].outcome == "inconclusive" and vs["encoder-swap-similarity"].value is None
    vs = verdicts(rows({"acc": 0.99, "perm": 0.95, "omega": 0.99, "unch": 0.85},
                       {"acc": 0.98, "perm": 0.5, "omega": 0.99, "unch": 0.5}), tmp_path, preset="smoke")
    assert all(v.outcome == "inconclusive" for v in vs.values())


def test_bad_config_is_a_named_error():
    with pytest.raises(ConfigError):
        WordOrder().validate(resolve_config(WordOrderConfig, "smoke", {"tasks": ["sentiment"]}))
    with pytest.raises(ConfigError):
        WordOrder().validate(resolve_config(WordOrderConfig, "smoke", {"model.d_model": 18, "model.n_heads": 4}))


def test_smoke_run(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(WordOrderConfig, "smoke", {"threads": 1})
    run = run_experiment(WordOrder(), cfg, tmp_path / "run", progress=False, log=lambda *a, **k: None)
    res = run.results()
    assert set(res["task"]) == {"overlap", "taller", "cfg-contrast"} and (res["status"] == "ok").all()
    assert set(res["arm"]) == {"overlap", "taller", "real", "null"}
    t = res[res["kind"] == "task"]
    assert t["omega_max"].between(0, 1).all() and t["acc_perm"].between(0, 1).all()
    assert (run.path / "figures" / "omega_curve.png").exists() and (run.path / "verdict.json").exists()
    vs = {v.claim_id: v for v in run.verdicts()}
    assert {vs[c].kind for c in ("redundant-omega", "critical-chance")} == {"check"}
    # the CFG contrast's random-init null arm is measured and does not meet the rule
    assert vs["cfg-shuffle-drop"].null_value is not None and vs["cfg-shuffle-drop"].null_passed is False
    # redundant-unchanged's null arm is measured; after 5 smoke steps the taller classifier is constant, so its
    # correct predictions all survive derangement and the null arm meets the rule -- the very case it is there to
    # flag -- and the verdict is inconclusive (at quick the taller classifier has learned its task; see the docstring)
    v = vs["redundant-unchanged"]
    assert v.null_value is not None and v.outcome == "inconclusive"
