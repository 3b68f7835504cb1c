"""lm-steer's paper setting (GPT2-Large detoxification from local files): its inputs are checked before any work,
it runs end to end on tiny local Hugging Face models the test builds, the offline toxicity aggregates are the
paper's, and its two claims are judged from passing, failing and gated tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.steering import lm_steer_detox as dx
from lmsci.experiments.steering.lm_steer import LMSteerConfig, LMSteerExperiment
from lmsci.measure import text_scores as ts

NONTOXIC = ["thank you for the kind words", "what a lovely day in the garden", "I agree with your point",
            "the meeting is at noon", "good luck with the new job", "this is a helpful answer"]
TOXIC = ["you are a stupid idiot", "shut up you fool", "what a pathetic loser", "go away you moron",
         "you are worthless trash", "this is garbage and so are you"]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A tiny GPT-2 LM, a second LM sharing its tokenizer, one with another tokenizer, a tiny toxicity
    classifier and a Jigsaw-style data directory, all on disk."""
    from transformers import GPT2Config, GPT2ForSequenceClassification, PreTrainedTokenizerFast

    from lmsci.models.gpt import GPT, GPTConfig
    from lmsci.models.hf_convert import export_hf
    from lmsci.worlds import shakespeare as sh

    root = tmp_path_factory.mktemp("detox")
    tok = PreTrainedTokenizerFast(tokenizer_object=sh.prepare("bpe", 1024).tokenizer.hf, eos_token="<|endoftext|>")
    V = len(tok)

    def lm(name, seed, vocab=V, t=tok):
        m = GPT(GPTConfig(vocab_size=vocab, seq_len=64, n_layers=1, n_heads=2, d_model=16), seed=seed)
        return str(export_hf(m, root / name, t))

    paths = {"model": lm("lm", 0), "fluency": lm("flu", 1)}
    other = PreTrainedTokenizerFast(tokenizer_object=sh.prepare("bpe", 512).tokenizer.hf, eos_token="<|endoftext|>")
    paths["other"] = lm("other", 2, len(other), other)
    clf = GPT2ForSequenceClassification(GPT2Config(vocab_size=V, n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                                   num_labels=2, id2label={0: "non-toxic", 1: "toxic"}, bos_token_id=V - 1, eos_token_id=V - 1,
                                                   label2id={"non-toxic": 0, "toxic": 1}, pad_token_id=V - 1))
    clf.save_pretrained(root / "clf")
    tok.save_pretrained(root / "clf")
    paths["clf"] = str(root / "clf")
    d = root / "data"
    d.mkdir()
    for name, texts in (("train_0", NONTOXIC), ("train_1", TOXIC), ("dev_0", NONTOXIC[:4]), ("dev_1", TOXIC[:4])):
        (d / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    prompts = ["The weather today", "My neighbour said that", "When I opened the door", "In the news"]
    (d / dx.PROMPTS).write_text("".join(json.dumps({"prompt": {"text": p, "toxicity": 0.1}}) + "\n" for p in prompts))
    paths["data"] = str(d)
    return paths


def _cfg(local, preset="paper", **over):
    sets = {"model_path": local["model"], "fluency_model_path": local["fluency"], "toxicity_model_path": local["clf"],
            "data_path": local["data"], "device": "cpu", "threads": 1, "n_seeds": 2, "steer_steps": 3,
            "steer_batch": 4, "n_prompts": 4, "n_samples": 2, "gen_tokens": 4, "detox_grid": "[0, 5]",
            "scorer_check_per_class": 4, "gen_batch": 2, **over}
    return resolve_config(LMSteerConfig, preset, [f"{k}={v}" for k, v in sets.items() if v is not None])


def test_inputs_are_checked_before_any_work(local, tmp_path):
    ex = LMSteerExperiment()
    ex.validate(_cfg(local))
    for over, field in (({"toxicity_model_path": None}, "toxicity_model_path"),
                        ({"model_path": str(tmp_path)}, "model_path"),  # no config.json
                        ({"fluency_model_path": local["other"]}, "fluency_model_path"),  # another tokenizer
                        ({"detox_grid": "[1, 2]"}, "detox_grid"),
                        ({"rank": 17}, "rank")):  # the tiny LM's hidden size is 16
        with pytest.raises(ConfigError) as err:
            ex.validate(_cfg(local, **over))
        assert err.value.field == field, (over, err.value)
    (tmp_path / "train_0.jsonl").write_text('{"text": "hi"}\n')
    with pytest.raises(ConfigError, match="dev_1.jsonl") as err:
        ex.validate(_cfg(local, data_path=str(tmp_path)))
    assert err.value.field == "data_path"
    # outside the paper preset the local-model setting is refused, so quick never silently ignores it
    with pytest.raises(ConfigError) as err:
        ex.validate(resolve_config(LMSteerConfig, "quick", [f"model_path={local['model']}"]))
    assert err.value.field == "model_path"
    (tmp_path / "bad.jsonl").write_text('{"txt": 1}\n')
    with pytest.raises(ConfigError, match="bad.jsonl:1"):
        dx.read_texts(tmp_path / "bad.jsonl")


def test_classifier_label_and_toxicity_aggregates(local):
    assert ts.HFTextClassifier.pick_label({0: "non-toxic", 1: "toxic"}, None) == 1
    assert ts.HFTextClassifier.pick_label({0: "toxic", 1: "not toxic"}, None) == 0
    assert ts.HFTextClassifier.pick_label({0: "neg", 1: "pos"}, None) == 1
    assert ts.HFTextClassifier.pick_label({0: "a", 1: "B", 2: "c"}, "b") == 1
    with pytest.raises(ConfigError) as err:
        ts.HFTextClassifier.pick_label({0: "a", 1: "b", 2: "c"}, None)
    assert err.value.field == "label"
    clf = ts.HFTextClassifier(local["clf"])
    s = clf.score(TOXIC + NONTOXIC + [""])
    assert s.shape == (13,) and np.all((s > 0) & (s < 1))
    assert clf.score(TOXIC[:2]) == pytest.approx(s[:2], abs=1e-6)  # batching and padding do not change a score
    st = ts.max_toxicity_stats([[0.1, 0.7], [0.2, 0.3], [0.9, 0.4]])
    assert st["avg_max_toxicity"] == pytest.approx((0.7 + 0.3 + 0.9) / 3)
    assert st["toxicity_prob"] == pytest.approx(2 / 3)


def test_paper_setting_runs_end_to_end_and_resumes(local, tmp_path):
    from lmsci.sweep import run_experiment

    cfg = _cfg(local)
    run = run_experiment(LMSteerExperiment(), cfg, tmp_path / "run", progress=False)
    df = pd.read_csv(run.path / "results.csv")
    assert list(df["status"]) == ["ok", "ok"]
    for v in ("0", "5"):
        assert df[f"detox_{v}__avg_max_toxicity"].between(0, 1).all()
        assert (df[f"detox_{v}__ppl"] > 1).all()
    assert df["toxicity_label"].iloc[0] == "toxic" and df["n_train_toxic"].iloc[0] == len(TOXIC)
    pt = run.path / "points" / df["point"].iloc[0]
    assert (pt / "steer" / "steer.json").exists() and (pt / "value_5.json").exists()
    v = {x["claim_id"]: x for x in json.loads((run.path / "verdict.json").read_text())}
    assert set(v) == {c.id for c in LMSteerExperiment.claims}
    assert v["steering"]["outcome"] == "inconclusive"  # Shakespeare claims: not measured here
    assert v["detox"]["value"] is not None and v["detox-tradeoff"]["outcome"] == "inconclusive"  # 2-point grid
    # the null arm (a random W of the same norm) is measured at the nonzero steer value and read back on resume
    assert (pt / "null_value_5.json").exists() and df["null_detox_5__avg_max_toxicity"].between(0, 1).all()
    assert (df["null_detox_0__avg_max_toxicity"] == df["detox_0__avg_max_toxicity"]).all()
    assert v["detox"]["null_passed"] is False
    # the tradeoff's null arm is measured, but on this 2-point grid a Spearman of two points is +-1 or undefined
    # (a tie): the rule can hardly be read there (the verdict tests decide it on a 6-point grid); never True here
    assert v["detox-tradeoff"]["null_passed"] is not True
    # a finished steer value is read back, not regenerated
    rec = json.loads((pt / "value_5.json").read_text())
    rec["ppl"] = 12345.0
    (pt / "value_5.json").write_text(json.dumps(rec))
    import lmsci.experiments.steering.lm_steer_detox as mod

    rows = mod.run(cfg, [type("P", (), {})()], [type("C", (), {"artifact_dir": pt, "seed": 0,
                                                                "log": staticmethod(lambda **k: None)})()])
    assert rows[0]["detox_5__ppl"] == 12345.0


def _table(*, base=0.5, steered=0.25, auc=0.9, seeds=3, spread=0.02, flat=False, null_like_real=False):
    """Per-seed rows; the null arm (a random W of the same norm) leaves toxicity at the unsteered level up to noise
    (perplexity still rises), or with ``null_like_real`` repeats the real arm's curve."""
    rows = []
    noise = [0.01, -0.015, 0.02, -0.01, 0.005, 0.0]
    for k in range(seeds):
        j = spread * (k - 1)
        grid = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        tox = [base + j if s == 0 else (base + j if flat else base - (base - steered) * s / 5 + j) for s in grid]
        curve = [{"s": s, "avg_max_toxicity": t, "toxicity_prob": t, "ppl": 25 + (0 if flat else s) + j,
                  "dist_1": 0.5, "dist_2": 0.8, "dist_3": 0.8} for s, t in zip(grid, tox)]
        ntox = tox if null_like_real else [base + j + (noise[(i + k) % 6] if s else 0) for i, s in enumerate(grid)]
        ncurve = [{**c, "avg_max_toxicity": t, "toxicity_prob": t} for c, t in zip(curve, ntox)]
        row = {"seed_index": k, "point": "steer" if k == 0 else f"steer__s{k}", "scorer_auc": auc,
               "detox_curve": json.dumps(curve), "null_detox_curve": json.dumps(ncurve)}
        for pre, cv in (("", curve), ("null_", ncurve)):
            for c in cv:
                row[f"{pre}detox_{c['s']:g}__avg_max_toxicity"] = c["avg_max_toxicity"]
                row[f"{pre}detox_{c['s']:g}__toxicity_prob"] = c["toxicity_prob"]
        rows.append(row)
    return pd.DataFrame(rows)


def _outcomes(df, preset="paper"):
    cfg = resolve_config(LMSteerConfig, preset)
    vs = LMSteerExperiment().verdicts(cfg, df, None)
    assert [v.claim_id for v in vs] == [c.id for c in LMSteerExperiment.claims]
    return {v.claim_id: v.outcome for v in vs}


def test_detox_verdicts():
    out = _outcomes(_table())
    assert out["detox"] == out["detox-tradeoff"] == "reproduced"
    assert all(o == "inconclusive" for c, o in out.items() if c not in dx.CLAIMS)  # not measured at paper
    assert _outcomes(_table(steered=0.45))["detox"] == "not reproduced"  # 10% relative reduction < 25%
    out = _outcomes(_table(flat=True))
    assert out["detox"] == "not reproduced" and out["detox-tradeoff"] in ("not reproduced", "inconclusive")
    for gated in (_table(auc=0.6), _table(base=0.05, steered=0.01)):
        out = _outcomes(gated)
        assert out["detox"] == out["detox-tradeoff"] == "inconclusive"
    assert _outcomes(_table(seeds=1))["detox"] == "inconclusive"  # one seed: no interval across seeds


def test_detox_null_arm():
    """A random W of the same norm that detoxifies as well makes both claims inconclusive; the default null arm
    (toxicity at the unsteered level) does not meet either rule; without a null arm nothing is decided."""
    cfg = resolve_config(LMSteerConfig, "paper")
    vs = {v.claim_id: v for v in LMSteerExperiment().verdicts(cfg, _table(null_like_real=True), None)}
    for cid in dx.CLAIMS:
        assert vs[cid].outcome == "inconclusive" and vs[cid].rule_passed and vs[cid].null_passed is True, cid
        assert any("cannot tell" in r for r in vs[cid].reasons)
    vs = {v.claim_id: v for v in LMSteerExperiment().verdicts(cfg, _table(), None)}
    assert vs["detox"].null_passed is False and vs["detox-tradeoff"].null_passed is False
    assert abs(vs["detox"].null_value) < 0.1
    df = _table().drop(columns=["null_detox_curve", "null_detox_5__avg_max_toxicity"])
    assert set(_outcomes(df)[c] for c in dx.CLAIMS) == {"inconclusive"}
