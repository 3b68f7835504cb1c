"""Post hoc per seed: which master seeds behind a published row were seen before its rule, gate, null or preset
changed, and the outcome on the fresh seeds alone.

A claim's verdict at a master seed is post hoc when that seed's result was seen before the claim changed
(:data:`lmsci.claims.POST_HOC`, each entry with its dated line in ``CLAIMS.md``). A row of the claims table rests
on several master seeds; it is **post hoc when any of them is** (a row that was reproduced on seed 1 after its
rule was rewritten in the light of seed 0 is not evidence on seed 0). :func:`refresh_post_hoc` recomputes, for every
row, the seeds that are post hoc and the outcome over the other (fresh) seeds, so the table can count
"reproduced on fresh seeds only" beside "reproduced".
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from lmsci.claims.seen import POST_HOC


def _seeds(cell: Any) -> list[int]:
    if cell is None or (isinstance(cell, float) and pd.isna(cell)):
        return []
    return [int(float(x)) for x in str(cell).replace(";", ",").split(",") if x.strip() not in ("", "nan")]


def post_hoc_seeds(experiment: str, claim: str, preset: str, seeds: list[int]) -> list[int]:
    """The master seeds among ``seeds`` at which ``experiment/claim`` is post hoc at ``preset``."""
    seen = set(POST_HOC.get(f"{experiment}/{claim}", {}).get(preset, ()))
    return [s for s in seeds if s in seen]


def fresh_outcome(outcomes: list[str], seeds: list[int], post_hoc: list[int]) -> str:
    """The outcome over the fresh seeds: their common outcome, ``seed-dependent`` when they differ, ``""`` when
    every seed is post hoc (or none is known)."""
    fresh = [o for o, s in zip(outcomes, seeds) if s not in post_hoc]
    if not fresh:
        return ""
    return fresh[0] if len(set(fresh)) == 1 else "seed-dependent"


def refresh_post_hoc(table: pd.DataFrame, preset: str) -> pd.DataFrame:
    """``table`` with ``post_hoc`` (any seed post hoc), ``post_hoc_seeds`` and ``fresh_outcome`` recomputed per row
    from :data:`~lmsci.claims.POST_HOC`, the row's ``master_seeds`` and its ``seed_outcomes`` (one outcome per seed;
    a single-seed row uses ``outcome``)."""
    t = table.copy()
    ph, phs, fresh = [], [], []
    for _, r in t.iterrows():
        seeds = _seeds(r.get("master_seeds"))
        so = r.get("seed_outcomes")
        outcomes = [o.strip() for o in str(so).split(";")] if isinstance(so, str) and so.strip() else \
            [str(r.get("outcome"))] * len(seeds)
        if len(outcomes) != len(seeds):
            outcomes = [str(r.get("outcome"))] * len(seeds)
        seen = post_hoc_seeds(str(r.get("experiment")), str(r.get("claim")), preset, seeds)
        ph.append(bool(seen))
        phs.append(",".join(map(str, seen)))
        fresh.append(fresh_outcome(outcomes, seeds, seen) if seen else str(r.get("outcome")))
    t["post_hoc"], t["post_hoc_seeds"], t["fresh_outcome"] = ph, phs, fresh
    return t
