"""The shared line-gathering helper (experiments/steering/_lm_steer_lines.play_lines) gives, on the real Shakespeare
corpus, exactly what the three copies it replaced gave (code review: lm-steer-lm's build_data and build_genre and the
toy lm-steer's prepare_data each gathered the plays' lines): the functions are compared with frozen copies of
themselves as they stood before (commit 752ba6c), in the same process."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.experiments.registry import get
from lmsci.experiments.steering import _lm_steer_lm_data as data_mod
from lmsci.experiments.steering import _lm_steer_lm_extra as extra_mod
from lmsci.experiments.steering import _lm_steer_run as run_mod
from lmsci.experiments.steering._lm_steer_lines import play_lines
from lmsci.measure import text_scores as ts
from lmsci.runs import derive_seed
from lmsci.worlds import shakespeare as sh


def _old_lines(cfg, rng, ws, shape):
    """The per-play gathering each old function held (``shape``: what each kept per line)."""
    out = []
    for w in ws:
        y = int(sh.genre_of(w.name) == "comedy")
        ls = sh.dialogue_lines(w, cfg.min_words, cfg.max_words)
        if cfg.lines_per_play is not None and len(ls) > cfg.lines_per_play:
            ls = [ls[i] for i in sorted(rng.permutation(len(ls))[: cfg.lines_per_play])]
        out += [shape(ln, y, w.name) for ln in ls]
    return out


def _split(cfg):
    return sh.split_plays_by_genre(sh.load_works(), ("comedy", "tragedy"), cfg.scorer_fraction, cfg.play_split_seed)


def _old_build_data(cfg):
    """_lm_steer_lm_data.build_data before the helper (its ConfigError check left out)."""
    scorer, steer = _split(cfg)
    rng = np.random.default_rng(derive_seed(cfg.seed, "lines"))
    st, sc = (_old_lines(cfg, rng, ws, lambda ln, y, p: ln) for ws in (steer, scorer))
    comp = ts.vader_compound(st)
    pos = [s for s, c in zip(st, comp) if c >= cfg.vader_threshold]
    neg = [s for s, c in zip(st, comp) if c <= -cfg.vader_threshold]
    n = cfg.n_train_lines
    pos = [pos[i] for i in rng.permutation(len(pos))[:n]]
    neg = [neg[i] for i in rng.permutation(len(neg))[:n]]
    neutral = [s for s, c in zip(sc, ts.vader_compound(sc)) if c == 0.0]
    return {"texts": pos + neg, "labels": np.array([1.0] * n + [-1.0] * n), "neutral": neutral,
            "steer_plays": [w.name for w in steer], "scorer_plays": [w.name for w in scorer],
            "n_pos_available": len([c for c in comp if c >= cfg.vader_threshold]),
            "n_neg_available": len([c for c in comp if c <= -cfg.vader_threshold])}


def _old_build_genre(cfg):
    """_lm_steer_lm_extra.build_genre before the helper, up to the classifier (the lines it is fitted on)."""
    scorer, steer = _split(cfg)
    rng = np.random.default_rng(derive_seed(cfg.seed, "genre-lines"))
    st, sc = (_old_lines(cfg, rng, ws, lambda ln, y, p: (ln, y)) for ws in (steer, scorer))
    n = cfg.n_genre_lines
    picked = []
    for y in (1, 0):
        items = [s for s, g in st if g == y]
        picked.append([items[i] for i in rng.permutation(len(items))[:n]])
    return {"texts": picked[0] + picked[1], "clf_n": len(st), "clf_lines": sc, "steer_lines": st}


def _old_prepare_data(cfg, tok):
    """_lm_steer_run.prepare_data before the helper, without the classifier (its inputs are compared instead)."""
    scorer, steer = _split(cfg)
    rng = np.random.default_rng(derive_seed(cfg.seed, "lines"))
    steer_lines, scorer_lines = (_old_lines(cfg, rng, ws, lambda ln, y, p: (ln, y, p)) for ws in (steer, scorer))

    def pick(items, n):
        return [items[i] for i in rng.permutation(len(items))[:n]]

    comp = ts.vader_compound([s for s, _, _ in steer_lines])
    pos = [s for (s, _, _), c in zip(steer_lines, comp) if c >= cfg.vader_threshold]
    neg = [s for (s, _, _), c in zip(steer_lines, comp) if c <= -cfg.vader_threshold]
    n = cfg.n_train_lines
    sent = [(s, 1.0) for s in pick(pos, n)] + [(s, -1.0) for s in pick(neg, n)]
    com = [s for s, y, _ in steer_lines if y == 1]
    tra = [s for s, y, _ in steer_lines if y == 0]
    genre = [(s, 1.0) for s in pick(com, n)] + [(s, -1.0) for s in pick(tra, n)]
    sc_comp = ts.vader_compound([s for s, _, _ in scorer_lines])
    prompts = []
    for y in (1, 0):
        cand = [s for (s, g, _), c in zip(scorer_lines, sc_comp) if g == y and c == 0.0]
        cand = [ids for ids in (tok.encode("\n" + s) for s in (cand[i] for i in rng.permutation(len(cand))))
                if len(ids) > cfg.prompt_tokens][: cfg.n_prompts // 2]
        prompts += [ids[: cfg.prompt_tokens] for ids in cand]
    hl = []
    for lab, sel in ((1, sc_comp >= cfg.vader_threshold), (-1, sc_comp <= -cfg.vader_threshold)):
        cand = [s for (s, _, _), m in zip(scorer_lines, sel) if m and len(s.split()) >= cfg.highlight_min_words]
        hl += [(s, lab) for s in pick(cand, min(cfg.n_highlight_lines, len(cand)))]
    return {"sentiment": sent, "genre": genre, "clf_n": len(steer_lines),
            "prompts": torch.tensor(prompts, dtype=torch.long), "highlight": hl,
            "steer_plays": [w.name for w in steer], "scorer_plays": [w.name for w in scorer]}


class _CharTok:
    """A character tokenizer standing in for the toy's BPE (prepare_data only calls ``encode``)."""

    def encode(self, s):
        return [ord(c) % 997 for c in s]


_OVERRIDES = [{}, {"lines_per_play": None, "seed": 7, "play_split_seed": 3}]
_DATA_OVERRIDES = [{}, {"lines_per_play": 70, "seed": 7, "play_split_seed": 3}]  # every line: 10x slower


@pytest.mark.parametrize("over", _OVERRIDES, ids=["smoke", "all-lines"])
def test_play_lines_is_the_old_gathering_and_leaves_the_generator_where_it_was(over):
    cfg = resolve_config(get("lm-steer-lm")().Config, "smoke", over)
    scorer, steer = _split(cfg)
    old_rng, new_rng = np.random.default_rng(11), np.random.default_rng(11)
    old = [_old_lines(cfg, old_rng, ws, lambda ln, y, p: (ln, y, p)) for ws in (steer, scorer)]
    pl = play_lines(cfg, new_rng)
    assert [pl.steer, pl.scorer] == old and len(pl.steer) > 100 and {y for _, y, _ in pl.steer} == {0, 1}
    assert [w.name for w in pl.steer_plays] == [w.name for w in steer]
    assert [w.name for w in pl.scorer_plays] == [w.name for w in scorer]
    assert new_rng.bit_generator.state == old_rng.bit_generator.state  # the callers' next draws are unchanged


@pytest.mark.parametrize("over", _DATA_OVERRIDES, ids=["smoke", "other-seeds"])
def test_lm_steer_lm_data_and_genre_lines_are_unchanged(over):
    cfg = resolve_config(get("lm-steer-lm")().Config, "smoke", over)
    new, old = data_mod.build_data(cfg), _old_build_data(cfg)
    assert new.keys() == old.keys() and np.array_equal(new.pop("labels"), old.pop("labels"))
    assert new == old
    g, og = extra_mod.build_genre(cfg), _old_build_genre(cfg)
    assert g["texts"] == og["texts"] and g["clf_n"] == og["clf_n"]
    clf = ts.fit_text_classifier([s for s, _ in og["clf_lines"]], [y for _, y in og["clf_lines"]], C=cfg.clf_C,
                                 seed=cfg.seed)
    assert g["clf_acc"] == ts.classifier_accuracy(clf, [s for s, _ in og["steer_lines"]],
                                                  [y for _, y in og["steer_lines"]])


@pytest.mark.parametrize("over", _OVERRIDES[:1], ids=["smoke"])
def test_toy_prepare_data_is_unchanged(over):
    cfg = resolve_config(get("lm-steer")().Config, "smoke", over)
    new, old = run_mod.prepare_data(cfg, _CharTok()), _old_prepare_data(cfg, _CharTok())
    assert torch.equal(new.pop("prompts"), old.pop("prompts"))
    for k in ("clf", "clf_acc"):
        new.pop(k)
    assert new == old and len(old["sentiment"]) == 2 * cfg.n_train_lines
