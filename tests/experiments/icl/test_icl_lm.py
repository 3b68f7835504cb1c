"""icl-lm (issue 45, item 4): ICL of a pretrained LM on words and facts, the best head's kernel vote vs MiniLM, on the
claims engine. The smoke run uses a tiny random Llama with a tiny byte-level BPE tokenizer trained in the test (the
real model's quick run is in results/quick); verdicts on hand-made tables; bad input refused before any work."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.registry import get
from lmsci.sweep import run_experiment

TEXT = ["Input: happy Output: positive\nInput: France Output: Europe\nInput: Kenya Output: Africa\n",
        "Input: grief Output: negative\nInput: Japan Output: Asia\n Africa Asia Europe negative positive"]


@pytest.fixture(scope="module")
def tiny_llama_with_tokenizer(make_tiny_llama):
    # the labels as whole words: their first tokens must differ
    return make_tiny_llama("tiny_llama_icl", TEXT * 20, 600, ("Africa", "Asia", "Europe"))


def test_smoke_run_on_a_tiny_model_judges_every_claim_with_the_engine(tiny_llama_with_tokenizer, tmp_path):
    exp = get("icl-lm")()
    cfg = resolve_config(exp.Config, "smoke", {"model": str(tiny_llama_with_tokenizer), "threads": 1})
    run = run_experiment(exp, cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results()
    assert (res["status"] == "ok").all() and len(res) == 12
    assert sorted(set(res["arm"])) == ["random_head", "random_labels", "real"]
    real = res[res["arm"] == "real"]
    assert real["acc_gain"].notna().all() and real["head_agree"].between(0, 1).all()
    assert res[res["arm"] == "random_labels"]["head_agree"].isna().all()  # that arm runs the curve only
    assert (res["head_layer"].dropna() < 2).all()
    v = {x.claim_id: x for x in run.verdicts()}
    assert set(v) == {"icl-rises", "head-reconstructs", "beats-minilm"}
    assert all(x.outcome == "inconclusive" for x in v.values())  # 2 samples: below min_seeds
    report = next(run.path.glob("report*.md")).read_text()
    assert "The toy experiment `icl-kernel-regression`" in report


def test_task_pools_and_prompts():
    from lmsci.experiments.icl.icl_lm import draw_prompts, task_pool

    pool, labels = task_pool("continents")
    assert labels == ("Africa", "Asia", "Europe") and len(pool) == 42
    assert ("Kenya", 0) in pool and ("Japan", 1) in pool and ("France", 2) in pool
    words, lab = task_pool("sentiment-words")
    d = dict(words)
    assert lab == ("negative", "positive") and len(words) > 50 and d.get("love") == 1 and d.get("hate") == 0
    rng = np.random.default_rng(0)
    for demos, x, y in draw_prompts(pool, 3, 5, 20, rng, False):
        assert len(demos) == 5 and x not in [a for a, _ in demos] and all(dict(pool)[a] == b for a, b in demos)
    shuffled = draw_prompts(pool, 3, 8, 50, np.random.default_rng(1), True)
    assert np.mean([dict(pool)[a] == b for demos, _, _ in shuffled for a, b in demos]) < 0.6


def _table(gain_real, gain_null, head_real, head_rand, minilm=0.5, icl=0.3):
    rows = []
    for k in range(3):
        for task in ("sentiment-words", "continents"):
            rows += [{"arm": "real", "task": task, "seed_index": k, "acc_gain": gain_real[k],
                      "head_agree": head_real[k], "minilm_agree": minilm, "acc_kr_over_chance": icl, "status": "ok"},
                     {"arm": "random_labels", "task": task, "seed_index": k, "acc_gain": gain_null[k], "status": "ok"},
                     {"arm": "random_head", "task": task, "seed_index": k, "head_agree": head_rand[k],
                      "minilm_agree": minilm, "acc_kr_over_chance": icl, "status": "ok"}]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("gain_real,gain_null,head_real,head_rand,icl,outcomes", [
    ((0.2, 0.25, 0.3), (-0.1, 0.0, -0.05), (0.8, 0.85, 0.82), (0.5, 0.55, 0.45), 0.3,
     ("reproduced", "reproduced", "reproduced")),
    ((0.0, -0.05, 0.02), (-0.1, 0.0, -0.05), (0.55, 0.6, 0.5), (0.5, 0.55, 0.45), 0.3,
     ("not reproduced", "not reproduced", "not reproduced")),
    ((0.2, 0.25, 0.3), (0.2, 0.25, 0.3), (0.8, 0.85, 0.82), (0.8, 0.84, 0.83), 0.3,
     ("inconclusive", "inconclusive", "inconclusive")),  # the null arms meet the rules
    ((0.2, 0.25, 0.3), (-0.1, 0.0, -0.05), (0.8, 0.85, 0.82), (0.5, 0.55, 0.45), 0.0,
     ("reproduced", "inconclusive", "inconclusive")),  # the model does no ICL: the head claims' gate fails
])
def test_verdicts_on_hand_made_tables(gain_real, gain_null, head_real, head_rand, icl, outcomes):
    exp = get("icl-lm")()
    cfg = resolve_config(exp.Config, "quick")
    v = {x.claim_id: x for x in exp.verdicts(cfg, _table(gain_real, gain_null, head_real, head_rand, icl=icl), None)}
    assert (v["icl-rises"].outcome, v["head-reconstructs"].outcome, v["beats-minilm"].outcome) == outcomes


def test_bad_input_is_refused_before_any_work(tmp_path):
    exp = get("icl-lm")()
    for over in ({"model": "smollm-135"}, {"model": str(tmp_path / "missing")}, {"tasks": ["antonyms"]},
                 {"n_grid": [2, 4]}):
        cfg = resolve_config(exp.Config, "smoke", over)
        with pytest.raises(ConfigError):
            run_experiment(exp, cfg, tmp_path / "never", progress=False, log=lambda m: None)
        assert not (tmp_path / "never").exists()


def test_speedups_keep_the_numbers(tiny_llama_with_tokenizer, monkeypatch):
    """predict's head at the last positions only, last_token_attention without the [T, vocab] head, and the kernel
    vote shared by the real and random_head arms give the numbers of the plain computations."""
    import torch

    import lmsci.experiments.icl.icl_lm as M
    from lmsci.measure.icl import build_text_prompt, last_token_attention
    from lmsci.models.zoo import load_cached

    hf = load_cached(str(tiny_llama_with_tokenizer), "cpu", attn_implementation="eager")
    pool, labels = M.task_pool("continents")
    first = M.label_first_tokens(hf.tokenizer, labels)
    prompts = M.draw_prompts(pool, 3, 4, 7, np.random.default_rng(3), False)
    enc = [build_text_prompt(hf.tokenizer, [(d, labels[y]) for d, y in demos], x)[0] for demos, x, _ in prompts]
    assert len({len(e) for e in enc}) > 1  # padding exercised
    want = []
    with torch.no_grad():
        for e in enc:
            want.append(int(hf.model(input_ids=torch.tensor([e])).logits[0, -1, first].argmax()))
    assert M.predict(hf.model, hf.tokenizer, prompts, labels, first, 4, "cpu").tolist() == want
    with torch.no_grad():  # the plain forward: every position's logits, attention weights read at the last query
        full = hf.model(input_ids=torch.tensor([enc[0]]), output_attentions=True, use_cache=False).attentions
    plain = torch.stack([a[:, :, -1, :].float() for a in full], dim=1).numpy()
    np.testing.assert_allclose(last_token_attention(hf.model, torch.tensor([enc[0]]), device="cpu"), plain, atol=1e-6)
    cfg = M.ICLLMConfig(model=str(tiny_llama_with_tokenizer), n_kr=2, n_val=3, n_test=3, minilm=False)
    M._VOTES.clear()
    a = M._vote_sample(cfg, hf, pool, labels, first, "continents", 11, "cpu")
    monkeypatch.setattr(M, "predict", lambda *a, **k: pytest.fail("the second arm recomputed the kernel vote"))
    b = M._vote_sample(cfg, hf, pool, labels, first, "continents", 11, "cpu")
    for x, y in zip(a[:3], b[:3]):
        np.testing.assert_array_equal(x, y)
    assert a[1].shape[0] == 6 and a[3] == b[3] == {}
