"""word-order-lm (issue 45, item 5): a real instruct LM's zero-shot answers under word derangements, on the claims
engine. The smoke run uses a tiny random Llama with a tiny byte-level BPE tokenizer trained in the test (the real
model's quick run is in results/quick); verdicts on hand-made tables; bad input refused before any work."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.registry import get
from lmsci.sweep import run_experiment

TEXT = ["Alice is taller than Bob. Is the sentiment positive or negative? Answer yes or no.",
        "So fair and foul a day I have not seen, my gentle love, negative positive yes no Yes No"]


@pytest.fixture(scope="module")
def tiny_chat_llama(make_tiny_llama):
    return make_tiny_llama("tiny_chat_llama", TEXT * 5, 300)


def test_smoke_run_on_a_tiny_model_judges_every_claim_with_the_engine(tiny_chat_llama, tmp_path):
    exp = get("word-order-lm")()
    cfg = resolve_config(exp.Config, "smoke", {"model": str(tiny_chat_llama), "threads": 1})
    run = run_experiment(exp, cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results()
    assert (res["status"] == "ok").all() and len(res) == 8
    assert sorted(set(res["arm"])) == ["null", "real"] and sorted(set(res["task"])) == ["comparison", "sentiment"]
    for c in ("acc_orig", "acc_perm", "agree"):
        assert res[c].between(0, 1).all()
    # the comparison null arm keeps the statement in order: its answers on the "deranged" copies are the originals'
    cmp_null = res[(res["arm"] == "null") & (res["task"] == "comparison")]
    assert (cmp_null["agree"] == 1.0).all() and (cmp_null["acc_perm"] == cmp_null["acc_orig"]).all()
    v = {x.claim_id: x for x in run.verdicts()}
    assert set(v) == {"redundant-kept", "critical-chance"}
    assert all(x.outcome == "inconclusive" for x in v.values())  # 2 samples: below min_seeds
    assert get("word-order-lm").escape_hatches() == []
    report = next(run.path.glob("report*.md")).read_text()
    assert "The toy experiment `word-order`" in report and "redundant-unchanged" in report


def test_derange_words_moves_every_word_and_keeps_the_final_stop():
    from lmsci.experiments.syntax.word_order_lm import derange_words

    rng = np.random.default_rng(0)
    for _ in range(50):
        out = derange_words("Alice is taller than Bob.", rng)
        assert out.endswith(".") and sorted(out[:-1].split()) == sorted("Alice is taller than Bob".split())
        assert all(a != b for a, b in zip(out[:-1].split(), "Alice is taller than Bob".split()))
    with pytest.raises(ConfigError):
        derange_words("Alone.", rng)


def test_comparison_examples_are_balanced_and_label_by_order():
    from lmsci.experiments.syntax.word_order_lm import comparison_examples

    ex = comparison_examples(40, np.random.default_rng(1))
    assert sum(lab for *_, lab in ex) == 20
    for st, qn, lab in ex:
        a, b = st[:-1].split()[0], st[:-1].split()[-1]
        z, w = qn[:-1].split()[1], qn[:-1].split()[-1]
        assert (z, w) == ((a, b) if lab else (b, a))


def _table(agree_real, agree_null, acc_real, acc_null, gate=(0.9, 0.9, 0.9)):
    rows = []
    for k in range(3):
        rows += [{"arm": "real", "task": "sentiment", "seed_index": k, "agree": agree_real[k], "acc_orig": gate[k],
                  "acc_perm": 0.8, "status": "ok"},
                 {"arm": "null", "task": "sentiment", "seed_index": k, "agree": agree_null[k], "acc_orig": gate[k],
                  "acc_perm": 0.5, "status": "ok"},
                 {"arm": "real", "task": "comparison", "seed_index": k, "agree": 0.5, "acc_orig": gate[k],
                  "acc_perm": acc_real[k], "status": "ok"},
                 {"arm": "null", "task": "comparison", "seed_index": k, "agree": 1.0, "acc_orig": gate[k],
                  "acc_perm": acc_null[k], "status": "ok"}]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("agree_real,agree_null,acc_real,acc_null,gate,out_kept,out_chance", [
    ((0.9, 0.92, 0.88), (0.5, 0.55, 0.52), (0.5, 0.52, 0.48), (0.9, 0.95, 0.92), (0.9,) * 3,
     "reproduced", "reproduced"),
    ((0.6, 0.62, 0.58), (0.5, 0.55, 0.52), (0.9, 0.92, 0.88), (0.9, 0.95, 0.92), (0.9,) * 3,
     "not reproduced", "not reproduced"),
    ((0.9, 0.92, 0.88), (0.9, 0.91, 0.93), (0.5, 0.52, 0.48), (0.5, 0.49, 0.51), (0.9,) * 3,
     "inconclusive", "inconclusive"),   # the null arms meet the rules
    ((0.9, 0.92, 0.88), (0.5, 0.55, 0.52), (0.5, 0.52, 0.48), (0.9, 0.95, 0.92), (0.9, 0.5, 0.9),
     "inconclusive", "inconclusive"),   # a gate fails at one sample
])
def test_verdicts_on_hand_made_tables(agree_real, agree_null, acc_real, acc_null, gate, out_kept, out_chance):
    exp = get("word-order-lm")()
    cfg = resolve_config(exp.Config, "quick")
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(agree_real, agree_null, acc_real, acc_null, gate), None)}
    assert v["redundant-kept"].outcome == out_kept
    assert v["critical-chance"].outcome == out_chance


def test_bad_input_is_refused_before_any_work(tmp_path):
    exp = get("word-order-lm")()
    for over in ({"model": "smollm-135"}, {"model": str(tmp_path / "missing")}, {"tasks": ["sentiment", "cola"]},
                 {"n_examples": 5}):
        cfg = resolve_config(exp.Config, "smoke", over)
        with pytest.raises(ConfigError):
            run_experiment(exp, cfg, tmp_path / "never", progress=False, log=lambda m: None)
        assert not (tmp_path / "never").exists()
    with pytest.raises(ConfigError):
        resolve_config(exp.Config, "smoke", {"q": 0})
