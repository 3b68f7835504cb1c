"""Registered claims as values, and the one engine that judges them.

- :mod:`lmsci.claims.core`: :class:`Claim`, :class:`Gate`, :class:`Verdict`, :func:`judge` (the decision:
  gates, scale, seeds, the null arm), :data:`POST_HOC`, the registry snapshot and digests.
- :mod:`lmsci.claims.rules`: decision rules as values (:func:`ci_above`, :func:`ci_inside`,
  :func:`equivalent_within`, :func:`mean_at_least`, :func:`all_of`, ...): each renders its words and its parameters.
- :mod:`lmsci.claims.stat`: :class:`Stat`, a statistic of the results table, one value per training seed.
- :mod:`lmsci.claims.seen` (:data:`POST_HOC`) and :mod:`lmsci.claims.posthoc` (post hoc per seed in the table);
  :mod:`lmsci.claims.registry`: digests and the registry snapshot.
- :mod:`lmsci.claims.engine`: :func:`judge_claim`, which computes a declared statistic on the real and the null
  arm, applies the same rule to both, measures the gates and calls :func:`judge`.

The architecture page of the documentation (``docs/architecture.md``) says where this sits.
"""

from lmsci.claims.core import (
    ALL_PRESETS, FAILED, INCONCLUSIVE, KINDS, NOT_REPRODUCED, NULL_MEETS_RULE, OUTCOMES, PASSED, PILOT_SEED_MIN,
    REPRODUCED, UNCERTAINTY, Claim, Gate, GateResult, Verdict, add_gate_failure, complete, finite_or_none, judge,
    not_measured,
)
from lmsci.claims.registry import claim_preset_digests, registered_digest, snapshot
from lmsci.claims.seen import POST_HOC
from lmsci.claims.engine import judge_arms, judge_claim
from lmsci.claims.rules import (
    Rule, all_of, at_least, at_most, between, ci_above, ci_below, ci_excludes, ci_inside, equivalent_within,
    every_at_least, every_at_most, mean_at_least, mean_at_most, mean_below,
)
from lmsci.claims.stat import Stat

__all__ = [
    "ALL_PRESETS", "FAILED", "INCONCLUSIVE", "KINDS", "NOT_REPRODUCED", "NULL_MEETS_RULE", "OUTCOMES", "PASSED",
    "PILOT_SEED_MIN", "POST_HOC", "REPRODUCED", "UNCERTAINTY", "Claim", "Gate", "GateResult", "Rule", "Stat",
    "Verdict", "add_gate_failure", "all_of", "at_least", "at_most", "between", "ci_above", "ci_below", "ci_excludes",
    "ci_inside", "claim_preset_digests", "complete", "equivalent_within", "every_at_least", "every_at_most",
    "finite_or_none", "judge", "judge_arms", "judge_claim", "mean_at_least", "mean_at_most", "mean_below",
    "not_measured", "registered_digest", "snapshot",
]
