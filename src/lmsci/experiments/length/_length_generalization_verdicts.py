"""Hand verdicts of :mod:`lmsci.experiments.length.length_generalization`: the claims the claims engine cannot judge.

The engine judges the claims declared with a :class:`~lmsci.claims.Stat` (vanilla-nll-rises, with its null read from
other columns of the same rows, lm-infinite-flat, sliding-window-degrades, entropy-grows, theorem1-ceiling-bounds).
The escape hatch keeps two, whose rules are not one rule on one per-seed statistic: ``needs-starting-tokens``
(every G >= 1's interval above 0) and ``theorem1-logits-explode`` (an interval above 0 for more than half of the k in
more than half of the layers). Each function takes the experiment (for
:meth:`Experiment.judge`), the resolved config and the results table (one row per point: ``kind`` train / eval /
profile, ``method``, ``arm``, ``seed_index``) and returns the claim's verdict, or nothing when its measurements are
absent; the null arm is the same column on the null arm's rows. Statistics are per training seed with a Student-t
95% CI across seeds (:func:`lmsci.stats.across_seeds`); within-run intervals over evaluation sequences are reported
in the details. Source: Han et al., "LM-Infinite", NAACL 2024, arXiv 2308.16137, Sec. 3-4, Table 1, App. A.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from lmsci.claims import Stat
from lmsci.stats import across_seeds
from lmsci.experiments.base import Experiment
from lmsci.runs import Verdict

RISE = 0.25  # nats, registered by vanilla-nll-rises
#: vanilla-nll-rises (judged by the engine): its statistic on the vanilla eval row, and its null read from other
#: columns of the same row (the same model within its training length: nll_in minus the same reference)
_VANILLA = {"kind": "eval", "method": "vanilla"}
VANILLA_RISE = Stat("far_minus_ref", where=_VANILLA,
                    words="mean NLL over contexts 4L..T minus the in-length NLL of the same text cut into windows of L "
                          "(contexts L/2..L), paired over evaluation sequences, mean per training seed [nats]")
#: vanilla-nll-rises' caveat (reported with every verdict; the hand verdict printed it when the mean was below RISE)
NOTE_RISE = ("If the rise is below 0.25 nats: small char-level models can extrapolate RoPE partly; larger models / "
             "longer training sharpen the failure.")
VANILLA_IN = Stat("nll_in", where=_VANILLA, minus=Stat("nll_ref_in", where=_VANILLA),
                  words="the same model within its training length: NLL over contexts L/2..L minus the same "
                        "in-length reference [nats]")

#: claim id -> why its null arm could meet the registered rule (the claims' ``null_can_meet``; kept here, beside the
#: hand verdicts, because the experiment module is at its 500-line limit)
NULL_CAN_MEET = {
    "vanilla-nll-rises": "only if the first L tokens of the evaluation sequences are harder to predict than the "
                         "sequences as a whole by 0.25 nats: the null is each sequence's first window (contexts "
                         "L/2..L) against the mean over all its windows, on the same deterministic text for every "
                         "seed, so such a difficulty gap repeats across seeds and clears the interval part too",
    "lm-infinite-flat": "yes, if the vanilla model itself extrapolates (its NLL past 4L stays within 5% of the "
                        "in-length level), e.g. when its heads attend locally and far keys never win the softmax: "
                        "small RoPE models can partly extrapolate",
    "sliding-window-degrades": "yes, if LM-Infinite degrades past the training length too (far NLL >= 1.05 x the "
                               "in-length level), e.g. when the model does not use its starting tokens as attention "
                               "sinks or the distances clipped at L mislead it",
    "needs-starting-tokens": "yes, if G more recent keys help as much as G starting tokens (any extra visible "
                             "context lowers the far NLL), so that the CI of NLL(G0) - NLL(W_G) lies above 0 for "
                             "every G",
    "theorem1-logits-explode": "yes, if keys scored at the seen distance L outscore the nearest L keys in most bands "
                               "and layers: a model whose logits grow with distance up to L, or keys whose content "
                               "outscores recency (e.g. the starting tokens, in the last band); nothing bounds the "
                               "clipped bands below the in-window maximum",
    "theorem1-ceiling-bounds": "yes, if vanilla attention's logits at unseen distances stay below the in-window "
                               "maximum in every layer, sequence and seed (a recency bias strong enough that no key "
                               "beyond L outscores the nearest L keys), i.e. if Theorem 1's explosion does not "
                               "happen in this model",
}


def per_seed(results: pd.DataFrame, kind: str, method: str | None, column: str) -> dict[int, float]:
    """seed_index -> ``column`` of the (kind, method) row of that seed (finite values only)."""
    r = results[results["kind"] == kind]
    if method is not None:
        r = r[r["method"] == method]
    seeds = r["seed_index"] if "seed_index" in r else pd.Series(0, index=r.index)
    out = {}
    for k, v in zip(seeds, r[column] if column in r else [np.nan] * len(r)):
        try:
            v = float(v)
        except (TypeError, ValueError):
            continue
        if np.isfinite(v):
            out[int(k)] = v
    return out


def layer_lists(results: pd.DataFrame, arm: str, column: str) -> dict[int, list]:
    """seed_index -> the JSON list in ``column`` of that seed's profile row on ``arm``."""
    r = results[(results["kind"] == "profile") & (results["arm"] == arm)] if "arm" in results else results.iloc[0:0]
    if column not in r:
        return {}
    seeds = r["seed_index"] if "seed_index" in r else pd.Series(0, index=r.index)
    out = {}
    for k, v in zip(seeds, r[column]):
        if isinstance(v, str) and v:
            out[int(k)] = json.loads(v)
    return out


ps = per_seed


def needs_starting_tokens(exp: Experiment, cfg, results: pd.DataFrame) -> list[Verdict]:
    """``needs-starting-tokens``: NLL(G0) - NLL(G) per seed for every G >= 1 [nats].

    Null arm: G recent keys (``lm_infinite_W<G>``) instead of G starting tokens. Returns [] when the measurements are absent.
    """
    out: list[Verdict] = []
    # needs-starting-tokens
    g0 = ps(results, "eval", "lm_infinite_G0", "nll_far")
    gs = sorted(g for g in set(cfg.ablation_n_global) | {cfg.n_global} if g >= 1)
    if g0 and gs:
        def gains(arm: str) -> tuple[dict, dict]:
            """per-seed nll_far(G0) - nll_far(<arm><G>) and its across-seed stat, for every G."""
            diffs, stats = {}, {}
            for g in gs:
                gv = ps(results, "eval", f"lm_infinite_{arm}{g}", "nll_far")
                d = {k: g0[k] - gv[k] for k in g0 if k in gv}
                if d:
                    diffs[f"{arm}{g}"] = d
                    stats[g] = across_seeds(d.values())
            return diffs, stats

        diffs, stats = gains("G")
        # the null arm: G extra recent keys (lm_infinite_W<G>) in place of the G starting tokens
        ndiffs, nstats = gains("W")
        null = None
        if stats and set(nstats) == set(stats):
            null = (min(s.mean for s in nstats.values()), bool(all(s.lo > 0 for s in nstats.values())))
        if stats:
            worst = min(stats, key=lambda g: stats[g].lo)
            st = stats[worst]
            out.append(exp.judge(
                cfg, "needs-starting-tokens", value=min(s.mean for s in stats.values()),
                passed=bool(all(s.lo > 0 for s in stats.values())), ci=st.ci,
                ci_kind=f"{st.kind}, for G={worst} (the lowest CI)", n_seeds=min(s.n for s in stats.values()),
                null=null,
                details={"per_seed_nll_far_G0_minus_G": diffs,
                         "ci_by_G": {f"G{g}": [s.lo, s.hi] for g, s in stats.items()},
                         "null_per_seed_nll_far_G0_minus_W (G recent keys instead)": ndiffs,
                         "null_ci_by_G": {f"W{g}": [s.lo, s.hi] for g, s in nstats.items()}}))
    return out


def theorem1_logits_explode(exp: Experiment, cfg, results: pd.DataFrame) -> list[Verdict]:
    """``theorem1-logits-explode``: band max logit [kL, (k+1)L) minus [0, L), per layer and k [logit units].

    Null arm: the distance ceiling alone. Returns [] when the measurements are absent.
    """
    out: list[Verdict] = []
    # theorem1-logits-explode (equal key counts: bands of L keys)
    t1 = layer_lists(results, "vanilla", "band_minus_in")
    if t1:
        arr = np.array([t1[k] for k in sorted(t1)], dtype=float)  # [seeds, layers, k]
        n_layers, n_k = arr.shape[1], arr.shape[2]
        lo = np.empty((n_layers, n_k))
        mean = arr.mean(0)
        for i in range(n_layers):
            for j in range(n_k):
                lo[i, j] = across_seeds(arr[:, i, j]).lo
        frac_k = (lo > 0).mean(1)  # per layer: fraction of k >= 1 with CI above 0
        layers_ok = int((frac_k > 0.5).sum())
        # the null arm: the same bands under the distance ceiling alone (no unseen distance)
        c1 = layer_lists(results, "ceiling", "band_minus_in")
        null, nd = None, {}
        if c1 and set(c1) == set(t1):
            carr = np.array([c1[k] for k in sorted(c1)], dtype=float)
            clo = np.array([[across_seeds(carr[:, i, j]).lo if np.isfinite(carr[:, i, j]).any() else np.nan
                             for j in range(carr.shape[2])] for i in range(carr.shape[1])])
            c_layers_ok = int(((clo > 0).mean(1) > 0.5).sum())
            finite = carr[np.isfinite(carr)]
            null = (float(finite.mean()) if finite.size else None, bool(c_layers_ok > carr.shape[1] / 2))
            nd = {"null_ceiling_layers_with_most_k_above_0": f"{c_layers_ok} of {carr.shape[1]}",
                  "null_ceiling_mean_by_layer_and_k": np.round(carr.mean(0), 4).tolist()}
        se = layer_lists(results, "vanilla", "band_minus_in_se")
        out.append(exp.judge(
            cfg, "theorem1-logits-explode", value=float(mean.mean()), passed=bool(layers_ok > n_layers / 2),
            ci_kind=f"per (layer, k) 95% CI across {arr.shape[0]} seed(s) (Student t); value = mean over layers, "
                    "k and seeds", n_seeds=arr.shape[0], null=null,
            details={**nd, "layers_with_most_k_above_0": f"{layers_ok} of {n_layers}",
                     "fraction_of_k_with_ci_above_0_by_layer": frac_k.tolist(),
                     "mean_by_layer_and_k": np.round(mean, 4).tolist(),
                     "within-run SE over profile sequences (seed 0)": se.get(min(se), None) if se else None},
            note=f"Bands of L={cfg.seq_len} keys: [kL, (k+1)L) vs [0, L), k = 1..{n_k}; each max is over the same "
                 "number of keys."))
    return out


# the claims judged by hand, in the order of ``LengthGeneralization.claims``
HAND_VERDICTS = (needs_starting_tokens, theorem1_logits_explode)
