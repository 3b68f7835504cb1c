"""passkey-lm (issue 45, item 1, passkey part): passkey retrieval beyond LM-Infinite's window on a real pretrained
model. The smoke run uses a tiny random Llama with a word-level tokenizer (the real model's quick run is the lead's);
the shared-prefix decoding equals decoding each method from scratch; prompts are placed where the arms say; bad input
refused before any work; verdicts on hand-made tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.registry import get
from lmsci.sweep import run_experiment


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    exp = get("passkey-lm")()
    cfg = resolve_config(exp.Config, "smoke", {"threads": 1})
    return run_experiment(exp, cfg, tmp_path_factory.mktemp("passkey_lm") / "run", progress=False, log=lambda m: None)


def test_smoke_run_end_to_end_judged_by_the_engine(smoke_run):
    res = smoke_run.results()
    assert sorted(set(res["arm"])) == ["null", "real"] and len(res) == 4 and (res["status"] == "ok").all()
    for m in ("vanilla", "lm_infinite", "lm_infinite_topk"):
        assert res[f"acc_{m}"].between(0, 1).all()
    assert np.allclose(res["gain"], res["acc_lm_infinite_topk"] - res["acc_lm_infinite"])
    v = {x.claim_id: x for x in smoke_run.verdicts()}
    assert set(v) == {"topk-recovers-beyond-window"}
    assert v["topk-recovers-beyond-window"].outcome == "inconclusive"  # smoke is below every preset
    assert get("passkey-lm").escape_hatches() == []
    assert (smoke_run.path / "figures" / "passkey_accuracy.png").is_file()
    report = (smoke_run.path / "report.md").read_text()
    assert "passkey-retrieval" in report and "Accuracy (all digits)" in report


def _tiny():
    from lmsci.experiments.length import _passkey_lm_task as T

    return T, T.load(T.TINY, "cpu", "float32", 1)


def test_prompts_are_placed_beyond_or_inside_the_window():
    T, hf = _tiny()
    parts = T.prompt_parts(hf.tokenizer, "plain")
    rng = np.random.default_rng(0)
    for inside in (False, True):
        for _ in range(20):
            p = T.make_prompt(parts, 300, 4, inside, 64, rng)
            assert len(p.ids) == 300 and len(p.key) == 4 and p.key[0] != "0"
            key_start = 300 - p.distance
            assert p.ids[key_start:key_start + p.key_len] == parts.key_ids(p.key)
            if inside:
                assert p.distance <= 64 - 16
            else:
                assert p.distance - p.key_len >= 64 + 16  # the whole key sentence left the window
    with pytest.raises(ConfigError):
        T.make_prompt(parts, 120, 4, False, 64, rng)
    with pytest.raises(ConfigError):  # no chat template on the tiny tokenizer
        T.prompt_parts(hf.tokenizer, "chat")
    assert T.read_key(" 12345. Remember") == "12345" and T.read_key(" is is") == ""


def test_shared_prefix_decoding_equals_decoding_each_method_from_scratch():
    """One pass over the first n - 1 tokens, then per method: the same greedy answers (and logits) as the toy's
    decoding of the whole prompt through its own streaming session under that method."""
    from lmsci.methods.lm_infinite import AttentionPatch, lm_infinite_policy

    T, hf = _tiny()
    model = hf.model
    ids = torch.randint(2, 40, (2, 150), generator=torch.Generator().manual_seed(1))
    pols = {"lm_infinite": lm_infinite_policy(48, 2, block_size=32),
            "lm_infinite_topk": lm_infinite_policy(48, 2, top_k=5, top_k_from_layer=1, block_size=32)}
    prefix = lm_infinite_policy(48, 2, top_k=5, top_k_from_layer=4, block_size=32)
    got = T.streamed_answers(model, ids, 6, pols, prefix)
    for name, pol in pols.items():
        patch, out = AttentionPatch(model, pol), []
        with patch, patch.stream() as s:
            logits = s.feed(ids)
            for _ in range(6):
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                out.append(nxt)
                logits = s.feed(nxt)
        assert torch.equal(torch.cat(out, 1), got[name]), name
    # and the top-k rows differ from plain LM-Infinite's at the last position (top-k acts)
    with AttentionPatch(model, pols["lm_infinite"]) as p, p.stream() as s:
        a = s.feed(ids)[:, -1]
    with AttentionPatch(model, pols["lm_infinite_topk"]) as p, p.stream() as s:
        b = s.feed(ids)[:, -1]
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("over", [{"model": "no-such-model"}, {"dtype": "float16"}, {"prompt_format": "json"},
                                  {"contexts": [400]}, {"contexts": []}, {"n_global": 600}, {"n_local": 8}])
def test_bad_input_refused_before_any_work(over, tmp_path):
    exp = get("passkey-lm")()
    with pytest.raises((ConfigError, ValueError)):
        cfg = resolve_config(exp.Config, "quick", over)
        exp.validate(cfg)


def test_top_k_layer_is_the_papers_ratio():
    from lmsci.experiments.length.passkey_lm import claim_layer

    assert claim_layer(32) == 5 and claim_layer(30) == 5 and claim_layer(4) == 1 and claim_layer(12) == 2


def _table(gains_real, gains_null, vanilla=(0.9, 0.9, 0.9)):
    rows = []
    for arm, gains in (("real", gains_real), ("null", gains_null)):
        for k, g in enumerate(gains):
            rows.append({"point": f"{arm}-n2048" + (f"__s{k}" if k else ""), "status": "ok", "arm": arm,
                         "seed_index": k, "context": 2048, "in_train": 1, "acc_vanilla": vanilla[k],
                         "acc_lm_infinite": 0.2, "acc_lm_infinite_topk": 0.2 + g, "gain": g})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("real,null,vanilla,outcome", [
    ((0.6, 0.7, 0.8), (0.0, 0.0, 0.05), (0.9, 0.9, 1.0), "reproduced"),
    ((0.0, 0.05, -0.05), (0.0, 0.0, 0.05), (0.9, 0.9, 1.0), "not reproduced"),
    ((0.6, 0.7, 0.8), (0.6, 0.7, 0.8), (0.9, 0.9, 1.0), "inconclusive"),   # the null arm meets the rule
    ((0.6, 0.7, 0.8), (0.0, 0.0, 0.05), (0.9, 0.2, 1.0), "inconclusive"),  # vanilla cannot retrieve: gate fails
])
def test_verdicts_on_hand_made_tables(real, null, vanilla, outcome):
    exp = get("passkey-lm")()
    cfg = resolve_config(exp.Config, "quick", {})
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(real, null, vanilla), None)}
    assert v["topk-recovers-beyond-window"].outcome == outcome
