"""The dialogue lines of the Shakespeare plays split by genre, gathered the one way that the toy ``lm-steer``
(:func:`lmsci.experiments.steering._lm_steer_run.prepare_data`) and ``lm-steer-lm``
(:func:`lmsci.experiments.steering._lm_steer_lm_data.build_data`, the genre lines of
:func:`lmsci.experiments.steering._lm_steer_lm_extra.build_genre`) share.

The comedies and tragedies are split, per genre, into *scorer* and *steer* plays
(:func:`lmsci.worlds.shakespeare.split_plays_by_genre`, ``scorer_fraction`` to the scorer plays, seeded by
``play_split_seed``); each play's dialogue lines of ``min_words..max_words`` words
(:func:`lmsci.worlds.shakespeare.dialogue_lines`) are subsampled to ``lines_per_play`` (drawn with the caller's
generator, kept in play order; None: all), the steer plays first, then the scorer plays.

Source: Han, Xu, Li, Ji, arXiv 2305.12798 (ACL 2024), Sec. 4 (attribute data of labelled texts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class PlayLines:
    """The lines of the two play sets (:func:`play_lines`).

    Attributes:
        steer_plays, scorer_plays: the :class:`~lmsci.worlds.shakespeare.Work` of each set, sorted by name.
        steer, scorer: ``(line, comedy, play)`` per line, ``comedy`` 1 for a comedy's line and 0 for a tragedy's,
            in play order and each play's line order.
    """

    steer_plays: list[Any]
    scorer_plays: list[Any]
    steer: list[tuple[str, int, str]]
    scorer: list[tuple[str, int, str]]


def play_lines(cfg: Any, rng: np.random.Generator) -> PlayLines:
    """The steer and scorer plays' dialogue lines (module docstring).

    Args:
        cfg: with ``scorer_fraction``, ``play_split_seed``, ``min_words``, ``max_words``, ``lines_per_play``.
        rng: draws each play's subsample (steer plays first, then scorer plays); the caller goes on drawing from it.
    """
    from lmsci.worlds import shakespeare as sh

    works = sh.load_works()
    scorer, steer = sh.split_plays_by_genre(works, ("comedy", "tragedy"), cfg.scorer_fraction, cfg.play_split_seed)

    def lines(ws: list[Any]) -> list[tuple[str, int, str]]:
        out = []
        for w in ws:
            y = int(sh.genre_of(w.name) == "comedy")
            ls = sh.dialogue_lines(w, cfg.min_words, cfg.max_words)
            if cfg.lines_per_play is not None and len(ls) > cfg.lines_per_play:
                ls = [ls[i] for i in sorted(rng.permutation(len(ls))[: cfg.lines_per_play])]
            out += [(ln, y, w.name) for ln in ls]
        return out

    steer_lines = lines(steer)
    return PlayLines(steer, scorer, steer_lines, lines(scorer))
