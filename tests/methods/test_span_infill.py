"""The paper-scale oracles of the random-walk watermark attack: T5 span infilling and a reward-model quality oracle,
on tiny models the tests build (nothing downloaded), and watermark-removal's text walk end to end on them.

Source: Zhang et al., "Watermarks in the Sand", arXiv 2311.04378, Algorithm 1 and its camera-ready code (issue 18).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.watermark.watermark_removal import RemovalConfig, WatermarkRemoval
from lmsci.methods import span_infill as si
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf_convert import export_hf


def _tiny_t5(path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    texts = ["the king is dead long live the king", "a horse a horse my kingdom for a horse"] * 5
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=80, show_progress=False, special_tokens=[
        "<pad>", "</s>", "<unk>", si.SENTINEL, si.SENTINEL_END]))
    ht = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    cfg = T5Config(vocab_size=ht.vocab_size, d_model=16, d_ff=32, d_kv=8, num_layers=1, num_decoder_layers=1,
                   num_heads=2, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    torch.manual_seed(0)
    T5ForConditionalGeneration(cfg).save_pretrained(path)
    ht.save_pretrained(path)
    return str(path)


def test_fill_extraction_and_word_spans():
    # as the official perturb: every non-special token, the fills of further sentinels included
    assert si.extract_fill("<pad> <extra_id_0> fair  lady <extra_id_1> rest</s>", ["<pad>", "</s>"]) == "fair lady rest"
    assert si.extract_fill("<pad>no sentinel here</s>", ["<pad>", "</s>"]) == "no sentinel here"
    rng = np.random.default_rng(0)
    text = " ".join(f"w{i}" for i in range(20))
    starts = set()
    for _ in range(200):
        left, right = si.mask_word_span(text, 6, rng)
        assert len(left.split()) + len(right.split()) == 14
        assert text.startswith(left) and text.endswith(right)
        starts.add(len(left.split()))
    assert starts == set(range(1, 14))  # the official support 1 .. n-7: never the first word, never the last span
    assert si.mask_word_span("too short", 6, rng) == ("", "")
    # words as the official mask_text: a newline starts a word of its own
    left, right = si.mask_word_span("a\nb c d e f g h i", 6, np.random.default_rng(0))
    assert len(left.split(" ")) + len(right.split(" ")) == 3


def test_correct_text_and_reward_text():
    assert si.correct_text("a  b ,c..  d!!! e\n f ;; g ?? h::") == "a b,c. d! e f; g? h:"
    assert si.reward_text("p", "r") == "###Human: p###Assistant: r"


def test_reward_scores_score_the_official_single_text():
    class Tok:
        def __call__(self, texts, **kw):
            self.texts = list(texts)
            return _Enc(n=len(texts))

    class Model:
        device = torch.device("cpu")

        def __call__(self, n):
            return type("O", (), {"logits": torch.arange(n, dtype=torch.float32)[:, None]})()

    tok = Tok()
    assert si.reward_scores(Model(), tok, ["p1", "p2"], ["r1", "r2"]).tolist() == [0.0, 1.0]
    assert tok.texts == ["###Human: p1###Assistant: r1", "###Human: p2###Assistant: r2"]
    with pytest.raises(ValueError):
        si.reward_scores(Model(), tok, ["p1"], ["r1", "r2"])


class _Enc(dict):
    def to(self, device):
        return self


def test_infill_samples_a_fill_per_text_and_is_seeded(tmp_path):
    model, tok = si.load_infiller(_tiny_t5(tmp_path / "t5"))
    a = si.infill(model, tok, ["the king is", "a horse"], ["long live", ""], seed=3)
    b = si.infill(model, tok, ["the king is", "a horse"], ["long live", ""], seed=3)
    assert len(a) == 2 and a == b and all(isinstance(x, str) for x in a)
    assert all("<pad>" not in x and "</s>" not in x and "<extra_id_" not in x for x in a)
    c = si.infill(model, tok, ["the king is", "a horse"], ["long live", ""], seed=3, prompts=["a king", "a horse"])
    assert len(c) == 2
    with pytest.raises(ValueError):
        si.infill(model, tok, ["the king is"], ["long live"], prompts=["a", "b"])


def test_bad_oracle_paths_are_named_before_any_work(tmp_path):
    g = str(export_hf(GPT(GPTConfig(vocab_size=64, seq_len=48, n_layers=1, n_heads=2, d_model=16), seed=0),
                      tmp_path / "g"))
    local = [f"generator_model={g}", f"attacker_model={g}", f"judge_model={g}"]
    t5 = _tiny_t5(tmp_path / "t5")
    ex = WatermarkRemoval()
    for sets, field in ([[f"reward_model={g}"], "infiller_model"],  # a reward model judges the T5 walk only
                        [[f"infiller_model={t5}"], "generator_model"],  # text edits need the generator's tokenizer
                        [local + [f"infiller_model={g}"], "infiller_model"],  # no tokenizer, no sentinel
                        [local + [f"infiller_model={t5}", "reward_model=OpenAssistant/reward-model-deberta-v3-large-v2"],
                         "reward_model"],  # never downloaded
                        [["walk_max_steps=100"], "walk_max_steps"],  # the hard cap below walk_total_steps = 400
                        [["backtrack_patience=-1"], "backtrack_patience"],
                        [["target_valid_steps=0"], "target_valid_steps"]):
        with pytest.raises(ConfigError) as err:
            ex.validate(resolve_config(RemovalConfig, "smoke", sets))
        assert err.value.field == field


def test_text_walk_keeps_only_proposals_the_reward_model_accepts(tmp_path):
    from transformers import GPT2Config, GPT2ForSequenceClassification, PreTrainedTokenizerFast

    from lmsci.sweep import run_experiment
    from lmsci.worlds import shakespeare as sh

    corpus = sh.prepare("bpe", 1024)
    tok = PreTrainedTokenizerFast(tokenizer_object=corpus.tokenizer.hf)
    tok.pad_token = tok.convert_ids_to_tokens(0)
    dirs = {}
    for i, name in enumerate(("generator_model", "attacker_model", "judge_model")):
        m = GPT(GPTConfig(vocab_size=corpus.vocab_size, seq_len=48, n_layers=1, n_heads=2, d_model=16), seed=i)
        dirs[name] = str(export_hf(m, tmp_path / name, tok))
    torch.manual_seed(1)
    rm = GPT2ForSequenceClassification(GPT2Config(vocab_size=corpus.vocab_size, n_embd=16, n_layer=1, n_head=2,
                                                  num_labels=1, pad_token_id=0))
    rm.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    sets = ["threads=1", "device=cpu", *(f"{k}={v}" for k, v in dirs.items()),
            f"infiller_model={_tiny_t5(tmp_path / 't5')}", f"reward_model={tmp_path / 'rm'}",
            "walk_total_steps=4", "walk_max_steps=4", "detect_every=2"]
    cfg = resolve_config(RemovalConfig, "smoke", sets)
    run = run_experiment(WatermarkRemoval(), cfg, tmp_path / "run", progress=False)
    df = run.results()
    df = df[df["arm"] == "real"]  # the walk (the null arm is the walk with zero edits)
    assert df["status"].iloc[0] == "ok" and np.isfinite(df["zf_median"].iloc[0])
    assert df["reward_drop_median"].iloc[0] <= 0  # only proposals at least as good as the original are kept
    assert 0 <= df["accept_rate"].iloc[0] <= 1
    assert df["walk_steps_max"].iloc[0] == 4  # stopped at walk_total_steps (z <= 2) or at the hard cap
    assert 0 <= df["capped_share"].iloc[0] <= 1
    curve = pd.read_csv(run.path / "points" / "real-walk" / "curve.csv")
    assert list(curve["step"]) == [0, 2, 4]
    # the null arm: the same text walk with every proposal accepted, as many steps per text as the real walk made
    null = run.results().query("arm == 'null'").iloc[0]
    assert null["accept_rate"] == 1.0 and null["backtracks_mean"] == 0
    assert null["walk_steps_median"] == df["walk_steps_median"].iloc[0] and null["walk_steps_max"] == 4
