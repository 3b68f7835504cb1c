"""Offline text scorers (lmsci.measure.text_scores) on known inputs, and the Shakespeare genre/line helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.measure import text_scores as ts


def test_vader_orders_positive_above_negative():
    s = ts.vader_compound(["What a wonderful, happy, lovely day.", "the door", "This is a terrible, hateful, sad death."])
    assert s.shape == (3,)
    assert s[0] > 0.5 > s[1] == 0.0 > -0.5 > s[2]
    lex = ts.vader_lexicon()
    assert {"love", "hate", "happy", "death"} <= lex and "door" not in lex


def test_distinct_n_exact():
    samples = ["a b a b", "a b c"]  # 7 words; unigrams {a,b,c}; bigrams {ab, ba, bc}; trigrams {aba, bab, abc}
    assert ts.distinct_n(samples, 1) == pytest.approx(3 / 7)
    assert ts.distinct_n(samples, 2) == pytest.approx(3 / 7)
    assert ts.distinct_n(samples, 3) == pytest.approx(3 / 7)
    assert ts.distinct_n(["x y z"], 2) == pytest.approx(2 / 3)
    assert ts.distinct_n([""], 1) == 0.0
    d = ts.mean_distinct([["a a"], ["a b"]])
    assert d["dist_1"] == pytest.approx((1 / 2 + 2 / 2) / 2) and d["dist_2"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    with pytest.raises(ConfigError):
        ts.distinct_n(["a"], 0)


def test_classifier_beats_chance_on_held_out_plays():
    from lmsci.worlds import shakespeare as sh

    works = {w.name: w for w in sh.load_works()}

    def lines(names):
        X, y = [], []
        for n in names:
            L = sh.dialogue_lines(works[n])
            X += L
            y += [int(sh.genre_of(n) == "comedy")] * len(L)
        return X, np.array(y)

    Xtr, ytr = lines(["twelfth_night", "much_ado_about_nothing", "as_you_like_it", "hamlet", "macbeth", "othello"])
    Xte, yte = lines(["comedy_of_errors", "merchant_of_venice", "lear", "julius_caesar"])
    clf = ts.fit_text_classifier(Xtr, ytr)
    acc = ts.classifier_accuracy(clf, Xte, yte)
    n = len(yte)
    assert acc > 0.5 + 2 * np.sqrt(0.25 / n), (acc, n)  # above chance by more than two binomial s.d.
    p = ts.classifier_score(clf, ["Sweet love, merry jest and a wedding song", "Murder, blood and the dead king's ghost"])
    assert p[0] > p[1]
    with pytest.raises(ConfigError):
        ts.fit_text_classifier(["a b", "c d"], [1, 1])


def test_conditional_perplexity_lower_on_training_text_than_shuffled():
    from lmsci.models.gpt import GPT, GPTConfig
    from lmsci.train.trainer import TrainConfig, train

    torch.manual_seed(0)
    seq = torch.arange(40) % 10  # a deterministic cycle 0..9

    def get_batch(step, g):
        starts = torch.randint(0, 10, (8,), generator=g)
        w = torch.stack([torch.roll(seq, -int(s))[:17] for s in starts])
        return w[:, :-1], w[:, 1:]

    model = GPT(GPTConfig(vocab_size=10, seq_len=32, n_layers=1, n_heads=2, d_model=32), seed=0)
    train(model, get_batch, TrainConfig(steps=60, batch_size=8, lr=1e-2, warmup_steps=5, device="cpu"), seed=0)
    prompt = seq[:6].repeat(4, 1)
    gen = seq[6:16].repeat(4, 1)
    shuffled = torch.stack([gen[0][torch.randperm(10)] for _ in range(4)])
    ppl_true = ts.conditional_perplexity(model, prompt, gen)
    ppl_shuf = ts.conditional_perplexity(model, prompt, shuffled)
    assert ppl_true.shape == (4,) and np.all(ppl_true < ppl_shuf)
    # the identity (NLL(prompt+gen) - NLL(prompt)) / |gen| with the model's full-sequence log-likelihood
    with torch.no_grad():
        x = torch.cat([prompt, shuffled], 1)
        lp = torch.log_softmax(model(x[:, :-1]), -1).gather(-1, x[:, 1:, None])[..., 0]
    direct = -lp[:, 5:].mean(1).numpy()
    assert np.allclose(np.log(ppl_shuf), direct, atol=1e-5)
    assert ts.mean_perplexity(np.array([2.0, 4.0, 1e5])) == pytest.approx(3.0)
    with pytest.raises(ConfigError):
        ts.conditional_nll(model, prompt, gen[:2])


def test_span_and_lexicon_helpers():
    rng = np.random.default_rng(0)
    for _ in range(50):
        spans = ts.random_spans(12, [3, 2, 1], rng)
        assert sorted(b - a for a, b in spans) == [1, 2, 3]
        cover = [i for a, b in spans for i in range(a, b)]
        assert len(cover) == len(set(cover)) and min(cover) >= 0 and max(cover) < 12
    with pytest.raises(ConfigError):
        ts.random_spans(3, [2, 2], rng)
    text = "O happy dagger, this is thy sheath"
    assert ts.span_words(text, [(2, 8)]) == ["happy"]
    assert ts.span_words(text, [(0, 1), (24, 27)]) == ["o", "thy"]
    assert ts.span_words(text, [(26, 29)]) == ["thy", "sheath"]
    lex = ts.vader_lexicon()
    assert ts.lexicon_fraction(["happy", "dagger", "love's"], lex) == (2, 3)
    hits = ts.token_lexicon_hits(["\u0120love", " hate", "ing", "door", "ok"], lex)
    assert hits.tolist() == [True, True, False, False, False]
    assert ts.enrichment(3, 10, 1, 10) == pytest.approx(3.0)
    assert np.isnan(ts.spearman([1, 2, 3], [5, 5, 5]))
    assert ts.spearman([1, 2, 3], [1, 4, 9]) == pytest.approx(1.0)


def test_shakespeare_genres_and_lines():
    from lmsci.errors import UnknownNameError
    from lmsci.worlds import shakespeare as sh

    works = sh.load_works()
    assert all(w.name in sh.FOLIO_GENRE for w in works)
    counts = {g: sum(v == g for v in sh.FOLIO_GENRE.values()) for g in ("comedy", "history", "tragedy")}
    assert counts == {"comedy": 14, "history": 10, "tragedy": 12}
    with pytest.raises(UnknownNameError):
        sh.genre_of("hamlet_ii")
    hamlet = next(w for w in works if w.name == "hamlet")
    lines = sh.dialogue_lines(hamlet, 4, 30)
    assert "Nay, answer me: stand, and unfold yourself." in lines
    assert not any(ln.startswith(("[", "ACT", "Scene")) for ln in lines)
    a, b = sh.split_plays_by_genre(works, ("comedy", "tragedy"), 0.5, seed=0)
    assert not {w.name for w in a} & {w.name for w in b}
    assert {sh.genre_of(w.name) for w in a} == {sh.genre_of(w.name) for w in b} == {"comedy", "tragedy"}
    assert len(a) + len(b) == 26


def test_conditional_nll_on_a_hugging_face_model_matches_its_logits():
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    prompt = torch.randint(0, 50, (3, 4))
    gen = torch.randint(0, 50, (3, 5))
    nll = ts.conditional_nll(hf, prompt, gen)
    with torch.no_grad():
        x = torch.cat([prompt, gen], 1)
        lp = torch.log_softmax(hf(x).logits[:, :-1].float(), -1).gather(-1, x[:, 1:, None])[..., 0]
    assert np.allclose(nll, -lp[:, 3:].mean(1).numpy(), atol=1e-5)
