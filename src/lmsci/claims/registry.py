"""The registry's claims as data: digests with the resolved configuration of every preset a claim is decided at,
and the snapshot ``tests/data/claims.json`` holds (``scripts/register_claims.py`` writes it)."""

from __future__ import annotations

from typing import Any

from lmsci.claims.core import Claim
from lmsci.config import preset_digest


def claim_preset_digests(exp_cls: Any, claim: Claim) -> dict[str, str]:
    """preset -> :func:`lmsci.config.preset_digest` of the experiment's resolved configuration, for every
    preset the claim is decided at that the experiment defines."""
    have = getattr(exp_cls.Config, "PRESETS", {})
    return {p: preset_digest(exp_cls.Config, p) for p in claim.presets if p in have}


def registered_digest(exp_cls: Any, claim: Claim) -> str:
    """The digest the registry records: the claim's decision fields and the resolved configuration of
    every preset it is decided at (a preset change is a registered change, like a rule change)."""
    return claim.digest(claim_preset_digests(exp_cls, claim))


def snapshot(catalog: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every experiment's claims as plain data, with their preset digests and registered digests (what
    ``tests/data/claims.json`` holds)."""
    out = {}
    for name, cls in catalog.items():
        rows = []
        for c in cls.claims:
            pd_ = claim_preset_digests(cls, c)
            rows.append({**c.to_dict(), "preset_digests": pd_, "digest": c.digest(pd_)})
        out[name] = rows
    return out
