"""The verdicts seen before a claim's rule, gate, null arm or preset changed: :data:`POST_HOC`.

A verdict at a preset from one of the master seeds listed here is ``post hoc`` (the change was made after seeing
it) until the claim is rerun on a fresh master seed. Each entry has its dated line in ``CLAIMS.md``.
:mod:`lmsci.claims.posthoc` reads it per seed for the published table.
"""

from __future__ import annotations

#: Verdicts seen before a preset, gate, null or rule changed: ``"experiment/claim" -> {preset: [master seeds]}``.
#: A verdict at that preset from one of those master seeds is ``post hoc`` (the change was made after seeing
#: it) until the claim is rerun on a fresh master seed. Each entry has its dated line in CLAIMS.md.
POST_HOC: dict[str, dict[str, tuple[int, ...]]] = {
    "cfg-learning/rot-beats-abs": {"quick": (0,)},
    "cfg-learning/uni-effective": {"quick": (0,)},
    "cfg-learning/pos-effective": {"quick": (0,)},
    "cfg-probing/probe-ancestor": {"quick": (0, 1)},  # 1: 2026-12-07, quick 2000 steps + shuffled null after seed 1
    "cfg-probing/probe-ancestor-at-end": {"quick": (0, 1)},  # 1: 2026-12-07 (as above)
    "cfg-probing/probe-beats-random": {"quick": (0, 1)},  # 1: 2026-12-07 (as above)
    "cfg-probing/probe-beats-random-at-end": {"quick": (0, 1)},  # 1: 2026-12-07 (as above)
    "word-order/redundant-unchanged": {"quick": (0,)},
    "word-order/redundant-omega": {"quick": (0,)},
    "word-order/critical-chance": {"quick": (0,)},
    "word-order/encoder-derangement-nn": {"quick": (0,)},
    "word-order/encoder-swap-similarity": {"quick": (0,)},
    "word-order/cfg-shuffle-drop": {"quick": (0,)},
    "celebrity-helps-minority/minority-lift": {"quick": (0,)},
    "reversal-curse/reversal": {"quick": (0,)},
    "reversal-curse/reverse-completion": {"quick": (0,)},
    "reversal-curse/name-logprob": {"quick": (0,)},
    "causal-tracing/mlp-early-site": {"quick": (0,)},
    "causal-tracing/attn-late-site": {"quick": (0,)},
    "causal-tracing/rome-edit": {"quick": (0, 1)},  # 2026-12-06: null -> the trained GPT at a non-peak layer
    "messy-knowledge/negation-curse": {"quick": (0,)},
    "messy-knowledge/cross-lingual-barrier": {"quick": (0,)},
    "messy-knowledge/over-ripple": {"quick": (0,)},
    "messy-knowledge/over-ripple-raw": {"quick": (0,)},
    "knowledge-extraction/pretrain-ft-augmentation": {"quick": (0,)},
    "knowledge-extraction/mixed-vs-pretrain-ft": {"quick": (0,)},
    "lm-steer/compositional": {"quick": (0,)},
    "lm-steer/transfer": {"quick": (0,)},
    "alignment-attack/thm1-length": {"quick": (0,)},
    "alignment-attack/exact-centre": {"quick": (0,)},
    # alignment-attack/thm2-system-prompt (post hoc at quick seed 0) was retired on 2026-11-27: split into the check
    # thm2-bound and the claim thm2-slope, both registered before any run of theirs (CLAIMS.md)
    "alignment-attack/thm4-best-of-n": {"quick": (0,)},
    "alignment-attack/persona-centre": {"quick": (0,)},
    "alignment-attack/persona-alpha-shift": {"quick": (0,)},
    "benign-overfitting/interpolates": {"quick": (0,)},
    "benign-overfitting/benign-risk": {"quick": (0, 1)},
    "benign-overfitting/risk-falls-with-junk": {"quick": (0, 1)},
    "benign-overfitting/isotropic-harmful": {"quick": (0, 1)},
    "benign-overfitting/effective-ranks": {"quick": (0,)},
    "calibration-hallucination/bound-holds": {"quick": (0,)},
    "calibration-hallucination/gt-tracks-mf": {"quick": (0,)},
    "calibration-hallucination/transformer-tracks-mf": {"quick": (0, 1, 2)},  # 2026-12-06: null -> the cold network
    "calibration-hallucination/temperature-tradeoff": {"quick": (0, 1)},  # 2026-12-06: made a check (issue 44)
    "chinchilla-refit/grid-refit": {"quick": (0,)},
    "chinchilla-refit/final-in-ci": {"quick": (0,)},
    "chinchilla-refit/hoffmann-rejected": {"quick": (0,)},
    "double-descent/u-curve": {"quick": (0, 1)},
    "double-descent/peak-at-threshold": {"quick": (0, 1)},
    "double-descent/second-descent": {"quick": (0, 1)},  # 2026-12-06: null -> uninformative extra features
    "double-descent/ridge-removes-peak-digits": {"quick": (0, 1)},
    "double-descent/ridge-removes-peak-linear": {"quick": (0, 1)},  # 2026-12-06: null -> ridge 1e-8, gate dropped
    "double-descent/isotropic-exact": {"quick": (0,)},
    "implicit-bias/angle-rate": {"quick": (0,)},
    "implicit-bias/norm-log-t": {"quick": (0, 1)},  # 2026-12-06: null arm -> another data set's SVM (issue 44 item 4)
    "implicit-bias/loss-rate": {"quick": (0, 1)},  # 2026-12-06: made a check (issue 44 item 4)
    "implicit-bias/heldout-loss-rises": {"quick": (0,)},
    "hallucination-stage/plateau-structured": {"quick": (0, 1), "gpu": (0,)},  # 2026-12-06: null -> S = R world
    "hallucination-stage/plateau-random": {"quick": (0, 1), "gpu": (0,)},  # 2026-12-06: null -> S = R world
    "scaling-sweep/alpha-range": {"quick": (0,)},
    "scaling-sweep/beta-range": {"quick": (0,)},
    "scaling-sweep/heldout-within-noise": {"quick": (0,)},
    "scaling-sweep/form-comparison": {"quick": (0,)},
    "shakespeare-lm/beats-bigram": {"quick": (0,)},
    "shakespeare-lm/beats-unigram": {"quick": (0,)},
    "grokking/delay": {"quick": (0, 1), "gpu": (0,)},  # 2026-12-06: null arm -> the dense arm (issue 44 item 4)
    "knowledge-neurons/amplify-strengthens": {"quick": (0,)},
    "lm-steer/steering": {"quick": (0,)},
    "lm-steer/continuous": {"quick": (0,)},
    "lm-steer/highlighting": {"quick": (0,)},
    "lm-steer/probe": {"quick": (0,)},
    "lm-steer/vs-baselines": {"quick": (0,)},
    "grokking-fractions/fraction-sweep": {"gpu": (0,)},
    "grokking/restricted-before-test": {"quick": (0, 1)},
    "alignment-attack/thm2-slope": {"quick": (0, 1)},
    "cfg-learning/gen-accuracy": {"quick": (0, 1, 2)},  # 2: 2026-12-07, quick 3000 -> 2000 steps after seed 2 (issue 46)
    "length-generalization/entropy-grows": {"quick": (0, 1)},
    "shakespeare-lm/beats-bigram": {"quick": (0, 1)},
    "shakespeare-lm/beats-unigram": {"quick": (0, 1)},
    # 2026-12-06 (issue 44 item 4): nulls and rules changed after the published quick seeds 0 and 1 were read
    "icl-kernel-regression/icl-rises": {"quick": (0, 1)},
    "icl-kernel-regression/near-bayes": {"quick": (0, 1)},
    "icl-kernel-regression/head-reconstructs": {"quick": (0, 1)},
    "icl-kernel-regression/beats-minilm": {"quick": (0, 1)},
    "icl-linear-regression/ls-error": {"quick": (0, 1)},
    "icl-linear-regression/beats-baselines": {"quick": (0, 1)},
    "icl-linear-regression/implied-ridge": {"quick": (0, 1)},
    "icl-linear-regression/probe-w": {"quick": (0, 1)},
    "alpine-planning/observed-accuracy": {"quick": (0, 1)},
    "alpine-planning/wm-adjacency": {"quick": (0, 1)},
    "alpine-planning/transitive-gap": {"quick": (0, 1)},
    # 2026-12-06 (issue 44 item 4, null audit): nulls changed after these quick verdicts were read
    "grokking/fourier-sparse": {"quick": (2,)},
    "syntactic-embeddings/role-probe": {"quick": (0, 1)},
    "syntactic-embeddings/kmeans-purity": {"quick": (0, 1)},
    "induction-heads/prefix-matching-head": {"quick": (0, 1)},  # null -> 2-layer model without repeats
    "induction-heads/phase-change": {"quick": (0, 1)},  # null -> t_pm and t_icl paired across seeds
    "induction-heads/copying": {"quick": (0, 1)},  # null -> a random non-best layer-2 head
    "induction-heads/shakespeare-prefix-matching-head": {"quick": (0, 1)},  # null -> shuffled-window 2-layer model
    "induction-heads/shakespeare-copying": {"quick": (0, 1)},  # null -> a random non-best layer-2 head
    "induction-heads/shakespeare-repeat-icl": {"quick": (0, 1)},  # null -> shuffled-window model (was 1-layer)
    "induction-heads/shakespeare-phase-change": {"quick": (0, 1)},  # null -> t_pm and t_icl paired across seeds
    "bracket-heads/ablation-closing": {"quick": (0, 1)},  # 2026-12-06: null -> a random non-best trained head
    "mlp-memories/rises-with-depth": {"quick": (0, 1)},  # 2026-12-06: null -> the trained shuffled baseline
    "mlp-memories/upper-exceeds-shuffled": {"quick": (0, 1)},  # 2026-12-06: null -> the same-last-token shuffle
}

