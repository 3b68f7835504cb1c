"""Capacity search: the largest level of a task a model still solves, found by a bracketing search.

An instrument for "how much can a model of this size store?" (Nichani, Lee, Bietti, "Understanding
Factual Recall in Transformers via Associative Memories", arXiv 2412.06538, Figure 4 left: the largest
fact count stored as a function of parameters). It knows nothing of facts or models: the caller
says which levels exist (``level_min..level_max``, e.g. ``size`` with ``size**2`` facts), where to
start (a guess per item), and how to try levels: ``try_levels(round, probes)`` trains whatever must be
trained and reports, for each probed ``(item, level)``, whether it was solved.

Search (per item, several probes per round, all of one round tried at once by the caller): the first
round probes levels around the guess in half-octave steps (only to place the bracket; the answer does
not depend on it); later rounds gallop up/down until a bracket [largest solved, smallest failed]
exists, then split the bracket with up to ``probes_per_round`` interior levels (a k-ary bisection)
until its two ends are adjacent. A failure at or below a solved level (non-monotone noise) is ignored.

Moved here from ``lmsci.experiments.knowledge.factual_recall`` (issue 12, item 6) without a change in behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

def next_probes(lo: int, hi: int, guess: int, k: int, size_min: int, size_max: int) -> list[int]:
    """Sizes to try next, given the largest stored size ``lo`` and smallest failed size ``hi``.

    ``lo = size_min - 1`` means nothing stored yet, ``hi = size_max + 1`` nothing failed yet.
    Returns [] when the search is over (``hi - lo <= 1``).
    """
    if hi - lo <= 1:
        return []
    if lo < size_min and hi > size_max:  # first round: geometric probes around the guess
        g = min(max(guess, size_min), size_max)
        cands = [round(g * 2 ** ((i - (k - 1) / 2) / 2)) for i in range(k)]  # half-octave steps
    elif hi > size_max:  # everything stored so far: gallop up
        cands = [round(lo * 2 ** ((i + 1) / 2)) for i in range(k)]
        cands = [max(c, lo + 1 + i) for i, c in enumerate(cands)]
    elif lo < size_min:  # nothing stored so far: gallop down
        cands = [round(hi * 2 ** (-(i + 1) / 2)) for i in range(k)]
        cands = [min(c, hi - 1 - i) for i, c in enumerate(cands)]
    else:  # k-ary split of the open bracket (lo, hi)
        n = min(k, hi - lo - 1)
        cands = [lo + round((hi - lo) * (i + 1) / (n + 1)) for i in range(n)]
    out = sorted({min(max(c, size_min), size_max) for c in cands if lo < c < hi})
    return out or [(lo + hi) // 2]


def update_bracket(lo: int, hi: int, outcomes: dict[int, bool], size_max: int) -> tuple[int, int]:
    """New (lo, hi) after probing: lo = largest stored size, hi = smallest failed size above lo.

    A failure at or below a stored size (non-monotone noise) is ignored; ``hi = size_max + 1``
    means no failure above ``lo`` is known.
    """
    lo = max([lo] + [s for s, ok in outcomes.items() if ok])
    cands = [s for s, ok in outcomes.items() if not ok and s > lo] + ([hi] if hi > lo else [])
    return lo, (min(cands) if cands else size_max + 1)


@dataclass
class Bracket:
    """One item's search state and outcome.

    Attributes:
        lo: the largest solved level (``level_min - 1``: none solved).
        hi: the smallest failed level above ``lo`` (``level_max + 1``: none failed).
        guess: where the first round probed around.
        rounds: rounds in which this item was probed.
    """

    lo: int
    hi: int
    guess: int
    rounds: int = 0

    def censoring(self, level_min: int, level_max: int) -> str:
        """``"below_range"`` (nothing solved), ``"at_size_max"`` (the largest level solved),
        ``"unresolved"`` (rounds ran out with a gap between lo and hi) or ``""`` (exact)."""
        if self.lo < level_min:
            return "below_range"
        if self.lo >= level_max:
            return "at_size_max"
        return "unresolved" if self.hi - self.lo > 1 else ""


def search_capacity(
    guesses: Mapping[Hashable, int],
    try_levels: Callable[[int, list[tuple[Hashable, int]]], Mapping[Hashable, Mapping[int, bool]]],
    *,
    level_min: int,
    level_max: int,
    probes_per_round: int,
    max_rounds: int,
) -> dict[Hashable, Bracket]:
    """Find each item's largest solved level in ``[level_min, level_max]``.

    Args:
        guesses: ``{item: guessed level}``, in the order the probes are listed each round.
        try_levels: ``try_levels(round, probes) -> {item: {level: solved}}`` where ``probes`` is the
            list of ``(item, level)`` to try this round (items in ``guesses`` order, each item's levels
            ascending); all of one round may be tried together (one stacked training).
        level_min, level_max: the levels that exist. probes_per_round: levels tried per item and round.
        max_rounds: the search stops after this many rounds (a gap left: ``censoring`` "unresolved").

    Returns:
        ``{item: Bracket}``; ``Bracket.lo`` is the capacity (largest solved level).
    """
    st = {key: Bracket(level_min - 1, level_max + 1, int(g)) for key, g in guesses.items()}
    for rnd in range(max_rounds):
        probes = [(key, level) for key, b in st.items()
                  for level in next_probes(b.lo, b.hi, b.guess, probes_per_round, level_min, level_max)]
        if not probes:
            break
        for key in {k for k, _ in probes}:
            st[key].rounds += 1
        for key, outcomes in try_levels(rnd, probes).items():
            b = st[key]
            b.lo, b.hi = update_bracket(b.lo, b.hi, dict(outcomes), level_max)
    return st
