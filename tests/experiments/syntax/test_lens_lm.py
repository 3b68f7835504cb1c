"""lens-lm (issue 40): the smoke preset end to end on a tiny random Llama (states cached once per sample and read
back), verdicts from hand-made tables (reproduced / not reproduced / the null meeting the rule), bad input refused
before work.

Source: Belrose et al., arXiv 2303.08112 (tuned lens vs logit lens, KL by layer)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.syntax import lens_lm as LL
from lmsci.experiments.syntax.lens_lm import LensLM, LensLMConfig, measured_layers
from lmsci.sweep import run_experiment


def test_measured_layers():
    assert measured_layers(30, 3) == [2, 5, 8, 11, 14, 17, 20, 23, 26, 29]
    assert measured_layers(2, 1) == [0, 1]
    with pytest.raises(ConfigError):
        measured_layers(2, 2)


def test_smoke_run_end_to_end_and_the_state_cache(tmp_path):
    cls = LensLM
    cfg = resolve_config(cls.Config, "smoke", {"threads": 1})
    run = run_experiment(cls(), cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results()
    assert (res["status"] == "ok").all() and set(res["arm"]) == {"real", "null"} and len(res) == 4
    assert (res["n_train"] == 64).all() and (res["n_eval"] == 32).all()
    real = res[res["arm"] == "real"].set_index("seed_index")
    null = res[res["arm"] == "null"].set_index("seed_index")
    # both arms of a seed read the same held-out states: the same logit-lens KL; the samples differ
    assert (real["kl_logit_mean"] == null["kl_logit_mean"]).all()
    assert real["kl_logit_mean"].iloc[0] != real["kl_logit_mean"].iloc[1]
    assert (res["kl_logit_mean"] > 0).all() and (res["kl_gain"] >= res["kl_gain_min"]).all()
    assert (res["n_screened"] > 100).all() and (res["n_known"] <= res["n_screened"]).all()
    assert {v.claim_id for v in run.verdicts()} == {c.id for c in cls.claims}
    assert (run.path / "figures" / "kl_by_layer.png").is_file()
    path = run.path / "points" / "real-text__s1" / "states.pt"
    st = torch.load(path)
    assert st["train"].shape == (2, 64, 48) and st["eval"].shape == (2, 32, 48) and st["layers"] == [0, 1]
    # a fresh process reads the cache instead of gathering: poison it and see the poison come back
    LL._STATES.clear()
    LL._LOGIT.clear()
    st["eval"] = st["eval"] * 0 + st["eval"][:, :1]                   # every held-out token = the first one
    torch.save(st, path)
    ctx = type("C", (), {"run": run, "device": "cpu"})()
    point = LensLM().seeded_points(cfg)[1]
    got = LL.sample_states(cfg, point, ctx, LL.load_lm(cfg.model, "cpu"), [0, 1])
    assert torch.equal(got["eval"], st["eval"])


def _table(real: tuple, null: tuple, real_min=None, null_min=None, known=(60, 60, 60)) -> pd.DataFrame:
    rows = []
    for arm, vals, mins in (("real", real, real_min or real), ("null", null, null_min or null)):
        for k in range(3):
            rows.append({"arm": arm, "seed_index": k, "status": "ok", "kl_gain": vals[k], "kl_gain_min": mins[k],
                         "layer_gain": vals[k], "n_known": known[k]})
    return pd.DataFrame(rows)


def _verdicts(table):
    cfg = resolve_config(LensLMConfig, "quick")
    return {v.claim_id: v.outcome for v in LensLM().verdicts(cfg, table, None)}


def test_verdicts_from_hand_made_tables():
    good, null = (1.5, 1.7, 1.6), (-2.0, -1.5, -2.5)
    assert set(_verdicts(_table(good, null)).values()) == {"reproduced"}
    v = _verdicts(_table(good, null, real_min=(0.2, -0.1, 0.3)))       # one layer worse in one sample
    assert v["tuned-lens-lower-kl"] == "reproduced" and v["tuned-lens-every-layer"] == "not reproduced"
    v = _verdicts(_table((-0.1, 0.05, -0.2), null))
    assert v["tuned-lens-lower-kl"] == "not reproduced"
    v = _verdicts(_table(good, (0.8, 0.9, 1.0)))                         # training alone lowers the KL
    assert v["tuned-lens-lower-kl"] == "inconclusive"
    v = _verdicts(_table(good, null, known=(60, 10, 60)))                # too few known facts in one sample
    assert v["answers-earlier"] == "inconclusive" and v["tuned-lens-lower-kl"] == "reproduced"


@pytest.mark.parametrize("override,field", [({"model": "no-such-model"}, "model"),
                                            ({"optimizer": "lbfgs"}, "optimizer"),
                                            ({"n_train_tokens": 70}, "n_train_tokens"),
                                            ({"n_eval_tokens": 33}, "n_eval_tokens"),
                                            ({"layer_stride": 2}, "layer_stride")])
def test_bad_input_is_refused_before_any_work(tmp_path, override, field):
    cfg = resolve_config(LensLMConfig, "smoke", override)
    with pytest.raises(ConfigError) as e:
        run_experiment(LensLM(), cfg, tmp_path / "never", progress=False, log=lambda m: None)
    assert e.value.field == field
    if field != "layer_stride":  # known once the model is loaded: refused in run_point, before any gathering
        assert not (tmp_path / "never").exists()


def test_first_top1_finds_the_layer_where_the_answer_is_top1():
    from lmsci.experiments.syntax import _lens_lm_facts as FX
    from lmsci.measure import lens as LN

    lm = LL.load_lm("tiny-random-llama", "cpu")
    ids = torch.randint(4, 256, (6, 8), generator=torch.Generator().manual_seed(0))
    h = LN.residual_stream(lm, ids)[0][:, :, -1]                      # [2 layers, 6, d] at the last token
    at0, at1 = LN.decode(lm, h[0]).argmax(-1), LN.decode(lm, h[1]).argmax(-1)
    f = FX.first_top1(lm, h, at0, [0, 1])
    assert (f == 0).all()
    f = FX.first_top1(lm, h, at1, [0, 1])
    assert ((f == 0) == (at0 == at1).numpy()).all() and set(f) <= {0, 1}
    assert (FX.first_top1(lm, h, at1, [0, 1], LN.TunedLens(2, h.shape[-1])) == f).all()   # identity lens = logit lens


def _local_gpt2(path):
    """A tiny random GPT-2 with a byte-level BPE tokenizer trained on a few lines, saved as a local HF directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    lines = ["To be, or not to be, that is the question.", "The capital of France is Paris.",
             "Whether 'tis nobler in the mind to suffer the slings and arrows of outrageous fortune."] * 4
    tk.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>").save_pretrained(path)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        GPT2LMHeadModel(GPT2Config(vocab_size=tk.get_vocab_size(), n_positions=64, n_embd=32, n_layer=3, n_head=2,
                                   initializer_range=0.2)).save_pretrained(path)
    return path


def test_a_local_hf_directory_runs(tmp_path):
    # --set model=PATH: any local causal LM the architecture map knows (here GPT-2 with its own tokenizer)
    path = _local_gpt2(tmp_path / "gpt2")
    cfg = resolve_config(LensLMConfig, "smoke", {"model": str(path), "n_seeds": 1, "layer_stride": 2})
    run = run_experiment(LensLM(), cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results()
    assert (res["status"] == "ok").all() and (res["layers"] == "1 2").all() and (res["n_screened"] > 100).all()
