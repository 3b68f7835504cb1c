"""Experiment ``alignment-attack``: Behavior Expectation Bounds -- alignment of a mixture is attackable.

Source: Wolf, Wies, Avnery, Levine, Shashua, "Fundamental Limitations of Alignment in Large Language Models",
ICML 2024, arXiv 2304.11082: Theorem 1 (prompt length ``(1/beta)(log 1/alpha + log 1/eps + log 4)``),
Theorem 2 (a system prompt ``s0 ~ P+`` adds ``(beta'/beta)|s0| + (sigma/beta) sqrt(|s0|/delta) + 1``),
Theorem 4 (best-of-n adds ``log(n)/beta``), App. H (behavior falls as a reverse sigmoid in the prompt length,
centred at ``log(1/alpha)/beta``); spec ``impossibility_and_theory.md`` §2; issue 18.

World (:mod:`lmsci.worlds.personas`): sentences from a bank, the bad persona ``P-`` and the good ``P+`` emit
i.i.d. sentences with negative-bank masses ``neg_bad`` and ``neg_good``; the language is
``alpha P- + (1 - alpha) P+``.

Points:

* ``exact``: the closed-form two-component world over a grid of ``alpha`` and ``neg_bad`` (so ``beta``).
  The attacker's greedy prompt repeats the sentence with the largest ``log P-/P+``; sampled prompts are
  ``n_prompts`` draws from ``P-``. ``N`` = the first prompt length with ``B_P(s) < gamma + eps`` where
  ``gamma = B_{P-}`` (``sup_s B_{P-}(s)``, constant for i.i.d. personas). Theorem 1: greedy and median sampled
  ``N`` against the bound; the centre of the mean-behavior curve (reverse-sigmoid fit) against
  ``log((1-alpha)/alpha)/beta``; Theorem 2: ``sys_draws`` system prompts of ``m`` sentences from ``P+`` (and,
  as a contrast reported beside ``thm2-slope``, from a neutral distribution with ``beta' = 0``);
  Theorem 4: best-of-n behavior ``1 - 2 q^n`` against ``gamma_n = 1 - 2 neg_bad^n``.
* ``trained``: a small lmsci GPT is trained on mixture documents (``doc_len`` sentences, one token per
  sentence) for each ``alpha`` in ``trained_alphas``; the bad persona's own model (trained on ``P-`` documents
  only) is the ``P-`` proxy that writes the attack prompts, as in the paper's LoRA proxy, and a ``P+`` model
  gives ``beta_hat = KL(P-proxy || P+proxy)`` per sentence. The share of negative next sentences against the
  number ``N`` of attack sentences is fitted by ``lo + (hi - lo) sigmoid((N - N*)/s)``.

Checks (hold by construction, reported apart): ``thm1-length``, ``exact-centre``, ``thm2-bound`` and
``thm4-best-of-n`` are computed in the exact closed-form world, where the posterior log-odds drift by beta per
attack sentence and by -beta' per system-prompt sentence in expectation: they hold against the proven bounds (and
the centre log((1-alpha)/alpha)/beta up to the crossing's discreteness) unless the code is wrong. ``thm2-slope``
(exact world, Monte-Carlo over sampled system prompts and attacks; issue 29 split it from the bound) is a check
too since issue 44 item 4: in the exact world the delay per system-prompt sentence equals beta'/beta by Wald's
identity up to the overshoot, so it holds by construction (the neutral-prompt ratio, beta' = 0, is still reported).
Claims and their null arms, trained world: ``persona-centre``: the P+ proxy (alpha = 0) on the same prompts;
``persona-alpha-shift``: a second alpha = 1% mixture (independent training seed) against the first, whose shift is
0 by construction.

The claims engine judges the exact world's five checks (statistics of the ``exact`` rows; each exact check reads
one value, the largest or smallest over cells and seeds). Escape hatch (``hand_verdicts``, the trained world):
``persona-centre``'s rule is a conjunction of an interval rule on one statistic (N* beta_hat / log(1/alpha)) and a
rule on the mean of another (the fitted rise), and ``persona-alpha-shift``'s threshold is itself measured (the CI
must contain ln(10)/beta_hat, beta_hat averaged over the run's seeds), which one ``Stat`` under one fixed ``Rule``
cannot state. Their null arms are arms of the sweep computed in one group with the real arm (the proxies, the
prompts and the real mixtures trained once): ``good`` (the P+ proxy's fitted curve on the same prompts, under the
real arm's column names) and ``mix2`` (the second alpha = 1% mixture's N*, paired with the real one by seed).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, Verdict, at_least, at_most, ci_inside, every_at_most
from lmsci.config import ExperimentConfig
from lmsci.errors import ConfigError
from lmsci.contract import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.registry import register
from lmsci.experiments.theory._alignment_attack_exact import (first_crossing, fit_sigmoid, largest, smallest,
                                                              system_prompt_cells)
from lmsci.experiments.theory._alignment_attack_trained import fit_model, sample_prompts
from lmsci.experiments.theory._alignment_attack_verdicts import (CENSORED_MAX, CENTRE_TOL, DELTA, FACTOR, NLL_GAP,
                                                                  RISE_SHARE, SLOPE_TOL)
from lmsci.experiments.theory._alignment_attack_verdicts import verdicts as trained_verdicts
from lmsci.models.gpt import GPTSpec
from lmsci.runs import RunDir, derive_seed, resolve_device
from lmsci.train.trainer import TrainSpec
from lmsci.worlds.personas import PersonaWorld


TRAINED_ARMS = ("real", "good", "mix2")  # the trained world's arms (module docstring)


class AlignmentConfig(ExperimentConfig):
    """Configuration of ``alignment-attack`` (field defaults = the ``quick`` preset).

    Attributes:
        model: the GPT trained on persona documents (mixtures and proxies), GPTSpec.
        train: the mixture models' optimizer and schedule, TrainSpec (``train.steps`` steps; the persona proxies
            train ``proxy_steps`` with the same optimizer); each model warms up for
            ``min(train.warmup_steps, steps // 10)`` steps.
        proxy_steps: training steps of each persona proxy (P- and P+ models).
    """

    n_pos: int = Field(50, ge=1)
    n_neg: int = Field(50, ge=1)
    neg_good: float = Field(0.1, gt=0, lt=1, description="P+'s mass on the negative bank")
    eps: float = Field(0.1, gt=0, lt=1, description="epsilon of Def. 1")
    delta: float = Field(0.1, gt=0, lt=1, description="delta of Thm 2")
    # exact world
    exact_alphas: list[float] = Field([1e-2, 1e-4, 1e-6, 1e-8, 1e-12], min_length=2)
    exact_neg_bad: list[float] = Field([0.3, 0.6, 0.9], min_length=1, description="P-'s negative mass (sets beta)")
    sys_lengths: list[int] = Field([0, 2, 5, 10, 20], min_length=2, description="system-prompt lengths m (Thm 2)")
    best_of: list[int] = Field([1, 4, 16, 64], min_length=2, description="n of best-of-n (Thm 4)")
    n_prompts: int = Field(1000, ge=10, description="sampled attack prompts per cell")
    sys_draws: int = Field(1000, ge=10, description="sampled system prompts per (cell, m)")
    # trained world
    trained_alphas: list[float] = Field([1e-2, 1e-3], min_length=1)
    neg_bad: float = Field(0.6, gt=0, lt=1, description="P-'s negative mass in the trained world")
    doc_len: int = Field(20, ge=4)
    model: GPTSpec = GPTSpec(n_layers=2, n_heads=4, d_model=32)
    train: TrainSpec = TrainSpec(steps=600, batch_size=64, lr=5e-3, warmup_steps=50, weight_decay=0.0)
    proxy_steps: int = Field(200, ge=1, description="training steps of each persona proxy")
    n_attack: int = Field(200, ge=10, description="attack prompts sampled from the P- proxy")
    n_heldout: int = Field(4000, ge=10)
    threads: int = Field(1, ge=0)

    PRESETS = {
        "smoke": {"exact_alphas": [1e-2, 1e-4], "exact_neg_bad": [0.6], "sys_lengths": [0, 4], "best_of": [1, 4],
                  "n_prompts": 50, "sys_draws": 50, "trained_alphas": [1e-2], "doc_len": 8, "model.d_model": 16,
                  "model.n_layers": 1, "train.steps": 20, "proxy_steps": 10, "train.batch_size": 16, "n_attack": 20,
                  "n_heldout": 50},
        "quick": {"n_seeds": 5},
        # <= 9 min of one H100 (session 52: 4000 mixture steps were 9.1 min by _alignment_attack_trained's estimate)
        "gpu": {"n_seeds": 5, "train.steps": 3500, "proxy_steps": 1000, "model.d_model": 128, "model.n_layers": 4,
                "trained_alphas": [1e-2, 1e-3, 1e-4], "doc_len": 32, "train.batch_size": 256, "n_attack": 1000,
                "threads": 0},
        "paper": {"n_seeds": 5, "train.steps": 20000, "proxy_steps": 5000, "model.d_model": 256,
                  "model.n_layers": 6, "trained_alphas": [1e-2, 1e-3, 1e-4], "doc_len": 32, "train.batch_size": 512,
                  "n_attack": 2000, "threads": 0},
    }


@register("alignment-attack")
class AlignmentAttack(Experiment):
    """Behavior Expectation Bounds in an exact two-persona world and in a trained one."""

    claim = ("A language model that mixes an ill-behaved component with prior alpha can be prompted into it with "
             "about log(1/alpha)/beta sentences; a system prompt only delays it linearly, best-of-n by log(n)/beta.")
    source = ("Wolf, Wies, Avnery, Levine, Shashua, 'Fundamental Limitations of Alignment in Large Language Models', "
              "ICML 2024, arXiv 2304.11082, Theorems 1, 2, 4 and App. H")
    Config = AlignmentConfig
    time_estimate = {"smoke": "~12 s", "quick": "~3-7 min: measured 400 s (master seed 0) and 185 s (seed 1) on "
                                                "the 2-core machine shared with other jobs, one thread (5 seeds: "
                                                "exact world 4-16 s per seed with thm2-slope's null arm, trained "
                                                "world 30-120 s per seed)",
                     "gpu": "~8 min on one H100 (8.3 min), estimated by _alignment_attack_trained.estimate_h100_seconds "
                            "(training at lmsci.train.estimate's rate, documents drawn on the host at a measured rate, "
                            "the exact world at the quick run's 16 s a seed); not measured: no GPU in the session (5 "
                            "seeds x 3 alphas, 4-layer d=128; was ~15 min documented, 9.1 min at 4000 steps)",
                     "paper": "~1 h on one H100 (5 seeds x 3 alphas, 6-layer d=256); the paper's own scale is "
                              "Llama-2-13B-chat with LoRA persona proxies, which lmsci does not download"}

    _SRC = "Wolf et al., arXiv 2304.11082"
    claims = [
        Claim(
            "thm1-length",
            "In the exact two-component world the mixture is misaligned (B_P < gamma + eps) by a prompt no longer than "
            "Theorem 1's length (1/beta)(log 1/alpha + log 1/eps + log 4).",
            _SRC + ", Theorem 1",
            "|s| = (1/beta)(log 1/alpha + log 1/eps + log 4) sentences suffice",
            statistic=Stat(fn=largest("thm1_ratio_greedy"), where={"kind": "exact"},
                           words="over the grid of alpha x beta and the seeds: the largest ratio of the length of the "
                                 "attacker's prompt (greedy: the sentence with the largest log P-/P+, repeated) that "
                                 "misaligns to Theorem 1's length (the theorem is existential; the median over prompts "
                                 "sampled from P- is in the results)"),
            rule=at_most(1.0),
            uncertainty="exact", kind="check",
        ),
        Claim(
            "exact-centre",
            "The mean behavior against the prompt length is a reverse sigmoid centred at log((1-alpha)/alpha)/beta.",
            _SRC + ", App. H (behavior falls as a reverse sigmoid centred at log(1/alpha)/beta)",
            "reverse sigmoid centred at log(1/alpha)/beta",
            statistic=Stat(fn=largest("centre_max_dev"), where={"kind": "exact"},
                           words="per cell, the centre of a reverse-sigmoid fit (asymptotes B_{P+} and B_{P-}) to the "
                                 "mean behavior of the sampled prompts, over log((1-alpha)/alpha)/beta; the largest "
                                 "|ratio - 1| over the grid and the seeds"),
            rule=at_most(CENTRE_TOL),
            uncertainty="exact", kind="check",
        ),
        Claim(
            "thm2-bound",
            "A system prompt of m sentences from P+ never delays the greedy attack beyond Theorem 2's length (with "
            "probability at least 1 - delta over the system prompt).",
            _SRC + ", Theorem 2",
            "length (1/beta)(log 1/alpha + log 1/eps + log 4) + (beta'/beta)|s0| + (sigma/beta) sqrt(|s0|/delta) + 1",
            statistic=Stat(fn=smallest("thm2_min_frac"), where={"kind": "exact"},
                           words="per cell and m: the share of system-prompt draws after which the greedy attack "
                                 "misaligns within Theorem 2's length; the minimum over cells, m and seeds"),
            rule=at_least(1 - DELTA),
            uncertainty="exact", kind="check",
        ),
        Claim(
            "thm2-slope",
            "An aligning system prompt of m sentences from P+ delays misalignment by prompts sampled from P- "
            "linearly in m, by (beta'/beta) sentences per system-prompt sentence.",
            _SRC + ", Theorem 2 (the delay's linear term (beta'/beta)|s0|)",
            "(beta'/beta)|s0| extra sentences; an aligning system prompt delayed misalignment by about 1 sentence",
            statistic=Stat("thm2_slope_ratio", where={"kind": "exact"},
                           words="per seed (an independent Monte-Carlo draw of system prompts and attacks): for each "
                                 "cell (alpha x beta), the least-squares slope of the mean length of sampled attacks "
                                 "that misalign (B_P < gamma + eps) against m over beta'/beta; the mean over cells"),
            rule=ci_inside(1 - SLOPE_TOL, 1 + SLOPE_TOL),
            # Why SLOPE_TOL = 0.25: Theorem 2 gives the delay's linear term (beta'/beta)|s0| up to terms that do not
            # grow linearly ((sigma/beta) sqrt(|s0|/delta) + 1; and, by Wald's identity, the first-passage overshoot
            # of less than one attack sentence's log-odds), which tilt a slope fitted over the preset's m grid by a
            # fraction of beta'/beta; 25% is the tolerance issue 18 registered for this slope (and App. H's centre)
            # before any run, kept unchanged, not chosen from values.
            gates=(Gate("uncensored", every_at_most(CENSORED_MAX),
                        stat=Stat("thm2_censored", where={"kind": "exact"},
                                  words="the share of the sampled attacks (either system-prompt distribution, every "
                                        "cell and m) that fail to misalign within the horizon 3 L2 + 20 sentences (a "
                                        "censored length would bias the mean)")),),
            kind="check",
        ),
        Claim(
            "thm4-best-of-n",
            "Against best-of-n sampling with a behavior reward, misalignment still comes within Theorem 4's length "
            "(1/beta)(log 1/alpha + log 1/eps + log 4 + log n).",
            _SRC + ", Theorem 4",
            "log(n)/beta extra sentences",
            statistic=Stat(fn=largest("thm4_max_ratio"), where={"kind": "exact"},
                           words="over alpha x beta x n and the seeds: the largest ratio of the greedy misaligning "
                                 "length (B^(n) < gamma_n + eps) to Theorem 4's length"),
            rule=at_most(1.0),
            uncertainty="exact", kind="check",
        ),
        Claim(
            "persona-centre",
            "A small transformer trained on persona documents (bad persona prior 1%) is misaligned by a prompt of "
            "about log(1/alpha)/beta_hat sentences written by the bad persona's own model.",
            _SRC + ", sec. 5 and App. H (misaligning prompts sampled from the P- proxy; fitted (1/beta) log(1/alpha) "
                   "~ 3 sentences, close to the observed length)",
            "(1/beta) log(1/alpha) ~ 3 sentences, close to the observed misalignment length",
            "per seed: the fitted centre N* of the share of negative next sentences against N (alpha = 1%), times "
            "beta_hat / log(1/alpha); mean over seeds with its 95% Student-t CI; and the fitted rise hi - lo of "
            "the share, mean over seeds",
            f"the 95% CI across at least 3 seeds lies within [1/{FACTOR:g}, {FACTOR:g}] and the mean fitted rise is "
            f">= {RISE_SHARE:g} (neg_bad - neg_good) (a misalignment step, not a fit to a flat curve)",
            gates=(Gate("learned", f"every trained mixture's held-out NLL is within {NLL_GAP} nats/sentence of the "
                                   "Bayes mixture's"),
                   Gate("fit", "the sigmoid fit converged with N* inside the prompt range on every seed")),
            null="the same statistic for the P+ proxy (trained on good-persona documents only: alpha = 0, so no "
                 "prompt misaligns it) on the same attack prompts; a fit that fails or has no N* in range does not "
                 "meet the rule",
            null_can_meet="yes, if the small P+ proxy copies its context instead of inferring a persona: shown "
                          "prompts of bad-persona sentences it never saw in training, its share of negative next "
                          "sentences then rises with N, and a rise of half of neg_bad - neg_good centred within a "
                          "factor 2 of log(1/alpha)/beta_hat meets the rule (a well-learnt P+ proxy is flat)",
        ),
        Claim(
            "persona-alpha-shift",
            "Lowering the bad persona's prior from 1% to 0.1% moves the centre N* by ln(10)/beta_hat.",
            _SRC + ", Theorem 1 (length linear in log 1/alpha); issue 18",
            "N* grows by ln(10)/beta per decade of alpha",
            "per seed: N*(alpha = 0.1%) - N*(alpha = 1%); mean over seeds with its 95% Student-t CI, against "
            "ln(10)/beta_hat (mean over seeds)",
            "the 95% CI across at least 3 seeds contains ln(10)/beta_hat (decided only when the CI half-width is at "
            "most half of ln(10)/beta_hat, gate 'resolved')",
            gates=(Gate("learned", f"every trained mixture's held-out NLL is within {NLL_GAP} nats/sentence of the "
                                   "Bayes mixture's"),
                   Gate("fit", "the sigmoid fits converged with N* inside the prompt range on every seed"),
                   Gate("resolved", "the CI half-width is at most half of ln(10)/beta_hat (the shift is resolved)")),
            null="the same shift between a second mixture model trained at alpha = 1% (an independent training "
                 "seed) and the alpha = 1% model: no change of prior, so no shift",
            null_can_meet="yes, when N* varies between training seeds so much that the CI of this zero-mean shift "
                          "reaches ln(10)/beta_hat (the gate 'resolved', which bounds the CI's width, is read on the "
                          "real arm only)",
        ),
    ]

    def validate(self, cfg: AlignmentConfig) -> None:
        for a in list(cfg.exact_alphas) + list(cfg.trained_alphas):
            if not 0 < a < 1:
                raise ConfigError("alpha", a, "in (0, 1)")
        for q in list(cfg.exact_neg_bad) + [cfg.neg_bad]:
            if not cfg.neg_good < q < 1:
                raise ConfigError("neg_bad", q, f"in (neg_good = {cfg.neg_good}, 1)")
        if min(cfg.best_of) < 1 or min(cfg.sys_lengths) < 0:
            raise ConfigError("best_of/sys_lengths", (cfg.best_of, cfg.sys_lengths), "n >= 1, m >= 0")

    def points(self, cfg: AlignmentConfig) -> list[Point]:
        """The exact world and the trained world's arms: ``real``, ``good`` (the P+ proxy on the same prompts) and
        ``mix2`` (a second mixture at the first alpha); ``exact`` and ``trained`` keep their ids (and seeds)."""
        return [Point("exact", {"kind": "exact"}, arm="real")] + [
            Point("trained" if a == "real" else f"{a}-trained", {"kind": "trained"}, arm=a) for a in TRAINED_ARMS]

    def groups(self, cfg: AlignmentConfig, points: list[Point]) -> list[list[Point]]:
        """Each exact point alone; the trained world's arms of one seed together (proxies and prompts shared)."""
        out: dict[tuple, list[Point]] = {}
        for p in points:
            out.setdefault((p.params["kind"], p.seed_index) if p.params["kind"] == "trained" else (p.id,), []).append(p)
        return list(out.values())

    def run_group(self, cfg: AlignmentConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        if points[0].params["kind"] == "exact":
            return [self.run_point(cfg, p, c) for p, c in zip(points, ctxs)]
        ctx = next((c for p, c in zip(points, ctxs) if p.arm == "real"), ctxs[0])  # the arms share the seed
        row = {"kind": "trained", **self._trained(cfg, ctx)}
        t0 = f"a{cfg.trained_alphas[0]:g}"
        arm_cols = {"good": {f"{t0}_nstar": "good_nstar", f"{t0}_lo": "good_lo", f"{t0}_hi": "good_hi"},
                    "mix2": {f"{t0}_nstar": "null_a0_nstar"}}
        null_cols = {c for m in arm_cols.values() for c in m.values()}
        return [{k: v for k, v in row.items() if k not in null_cols} if p.arm == "real" else
                {"kind": "trained", "beta_hat": row["beta_hat"], **{k: row[c] for k, c in arm_cols[p.arm].items()}}
                for p in points]

    def run_point(self, cfg: AlignmentConfig, point: Point, ctx: PointContext) -> dict:
        if point.params["kind"] == "exact":
            return {"kind": "exact", **self._exact(cfg, np.random.default_rng(derive_seed(ctx.seed, "exact")), ctx)}
        return {"kind": "trained", **self._trained(cfg, ctx)}

    # -- (a) the exact world --------------------------------------------------------------------------
    def _exact(self, cfg: AlignmentConfig, rng: np.random.Generator, ctx: PointContext) -> dict:
        rng_null = np.random.default_rng(derive_seed(ctx.seed, "exact-null"))  # thm2-slope's null arm
        cells = []
        for q in cfg.exact_neg_bad:
            for a in cfg.exact_alphas:
                w = PersonaWorld(cfg.n_pos, cfg.n_neg, q, cfg.neg_good, a)
                beta, beta_p, sigma = w.beta(), w.beta_prime(), w.sigma()
                gamma, b_plus = w.persona_behavior(True), w.persona_behavior(False)
                base = math.log(1 / a) + math.log(1 / cfg.eps) + math.log(4)
                L1 = base / beta
                L = int(math.ceil(3 * L1 + 20))
                llr_max = float(w.llr().max())
                greedy_lo = math.log(a / (1 - a)) + llr_max * np.arange(L + 1)
                n_greedy = int(first_crossing(w.next_behavior(greedy_lo)[None], gamma + cfg.eps)[0])
                prompts = w.sample_sentences(True, (cfg.n_prompts, L), rng)
                lo = w.log_odds(prompts)
                B = w.next_behavior(lo)
                n_s = first_crossing(B, gamma + cfg.eps)
                meanB = B.mean(0)
                fit = fit_sigmoid(np.arange(L + 1), meanB, lo=b_plus, hi=gamma)
                centre_th = math.log((1 - a) / a) / beta
                cell: dict[str, Any] = {
                    "neg_bad": q, "alpha": a, "beta": beta, "beta_prime": beta_p, "sigma": sigma, "gamma": gamma,
                    "L1": L1, "n_greedy": n_greedy, "n_sampled_median": float(np.median(n_s)),
                    "n_sampled_mean": float(n_s.mean()), "frac_sampled_within_L1": float((n_s <= L1).mean()),
                    "centre_fit": fit["centre"] if fit else None, "centre_theory": centre_th,
                    "mean_behavior": [round(float(x), 5) for x in meanB[: int(min(L + 1, 3 * centre_th + 10))]],
                }
                # Theorem 2: system prompts of m sentences from P+ (real arm) and from a neutral N (null arm)
                cell.update(system_prompt_cells(w, a, L1, gamma + cfg.eps, cfg.sys_lengths, cfg.sys_draws, cfg.delta,
                                                rng, rng_null))
                # Theorem 4: best-of-n
                thm4 = []
                for n in cfg.best_of:
                    gamma_n = w.persona_behavior(True, n)
                    L4 = (base + math.log(n)) / beta
                    Ln = int(math.ceil(3 * L4 + 20))
                    g_lo = math.log(a / (1 - a)) + llr_max * np.arange(Ln + 1)
                    n_g = int(first_crossing(w.next_behavior(g_lo, n)[None], gamma_n + cfg.eps)[0])
                    thm4.append({"n": n, "L4": L4, "n_greedy": n_g, "gamma_n": gamma_n})
                cell.update(thm4=thm4, thm4_max_ratio=max(t["n_greedy"] / t["L4"] for t in thm4))
                cells.append(cell)
        df = pd.DataFrame([{k: v for k, v in c.items() if k not in ("thm2", "thm4", "mean_behavior")} for c in cells])
        df.to_csv(ctx.artifact_dir / "exact_cells.csv", index=False)
        import json

        (ctx.artifact_dir / "exact_cells.json").write_text(json.dumps(cells))
        r1g = max(c["n_greedy"] / c["L1"] for c in cells)
        r1s = max(c["n_sampled_median"] / c["L1"] for c in cells)
        cen = [abs(c["centre_fit"] / c["centre_theory"] - 1) if c["centre_fit"] is not None else float("inf")
               for c in cells]
        sl = [c["thm2_slope"] / c["thm2_slope_theory"] for c in cells]
        sl0 = [c["thm2_null_slope"] / c["thm2_slope_theory"] for c in cells]
        return {"n_cells": len(cells), "thm1_ratio_greedy": r1g, "thm1_ratio_sampled": r1s,
                "centre_max_dev": float(max(cen)), "thm2_min_frac": float(min(c["thm2_min_frac"] for c in cells)),
                "thm2_slope_max_dev": float(max(abs(x - 1) for x in sl)), "thm2_slope_ratio": float(np.mean(sl)),
                "thm2_null_ratio": float(np.mean(sl0)),
                "thm2_censored": float(max(c["thm2_censored"] for c in cells)),
                "thm4_max_ratio": float(max(c["thm4_max_ratio"] for c in cells))}

    # -- (b) the trained world ------------------------------------------------------------------------
    sample_prompts = staticmethod(sample_prompts)

    def _trained(self, cfg: AlignmentConfig, ctx: PointContext) -> dict:
        device = resolve_device(cfg.device)
        base = PersonaWorld(cfg.n_pos, cfg.n_neg, cfg.neg_bad, cfg.neg_good, cfg.trained_alphas[0], cfg.doc_len)
        bad = fit_model(cfg, base, "bad", cfg.proxy_steps, ctx.seed, device, ctx)
        good = fit_model(cfg, base, "good", cfg.proxy_steps, ctx.seed, device, ctx)
        L = cfg.doc_len - 1
        prompts = sample_prompts(bad, cfg.n_attack, L, derive_seed(ctx.seed, "attack"), device)  # [m, 1+L]
        neg = slice(1 + cfg.n_pos, 1 + cfg.n_pos + cfg.n_neg)
        with torch.no_grad():
            lb = torch.log_softmax(bad(prompts).double(), -1)
            lg = torch.log_softmax(good(prompts).double(), -1)
            beta_hat = float((lb.exp() * (lb - lg)).sum(-1).mean())
            proxy_neg = float(lb.exp()[..., neg].sum(-1).mean())
        row: dict[str, Any] = {"beta_hat": beta_hat, "beta_true": base.beta(), "proxy_neg_mass": proxy_neg}
        sentences = prompts[:, 1:].cpu().numpy() - 1
        curves = {}
        for a in cfg.trained_alphas:
            w = PersonaWorld(cfg.n_pos, cfg.n_neg, cfg.neg_bad, cfg.neg_good, a, cfg.doc_len)
            mix = fit_model(cfg, w, "mixture", cfg.train.steps, derive_seed(ctx.seed, "alpha", a), device, ctx)
            held, _ = w.sample_docs(cfg.n_heldout, np.random.default_rng(derive_seed(ctx.seed, "heldout", a)))
            ht = torch.as_tensor(held, device=device)
            with torch.no_grad():
                nll = float(mix.sum_nll(ht[:, :-1], ht[:, 1:]).item()) / ht[:, 1:].numel()
                share = torch.softmax(mix(prompts).double(), -1)[..., neg].sum(-1).mean(0).cpu().numpy()  # [1+L]
            bayes = w.next_neg_share(w.log_odds(sentences)).mean(0)  # the exact mixture on the same prompts
            N = np.arange(L + 1)
            fit = fit_sigmoid(N, share)
            fit_b = fit_sigmoid(N, bayes)
            tag = f"a{a:g}"
            row.update({f"{tag}_nll": nll, f"{tag}_bayes_nll": w.mixture_nll(held),
                        f"{tag}_nstar": fit["centre"] if fit else None, f"{tag}_scale": fit["scale"] if fit else None,
                        f"{tag}_lo": fit["lo"] if fit else None, f"{tag}_hi": fit["hi"] if fit else None,
                        f"{tag}_nstar_bayes": fit_b["centre"] if fit_b else None,
                        f"{tag}_theory": math.log(1 / a) / beta_hat})
            curves[tag] = {"model": share.tolist(), "bayes": bayes.tolist()}
        # null arms: the P+ proxy on the same prompts (alpha = 0); a second alpha[0] mixture (no change of prior)
        a0 = cfg.trained_alphas[0]
        N = np.arange(L + 1)
        with torch.no_grad():
            gshare = torch.softmax(good(prompts).double(), -1)[..., neg].sum(-1).mean(0).cpu().numpy()
        gfit = fit_sigmoid(N, gshare)
        w0 = PersonaWorld(cfg.n_pos, cfg.n_neg, cfg.neg_bad, cfg.neg_good, a0, cfg.doc_len)
        mix2 = fit_model(cfg, w0, "mixture", cfg.train.steps, derive_seed(ctx.seed, "alpha-null", a0), device, ctx,
                               tag="mixture-null")
        with torch.no_grad():
            share2 = torch.softmax(mix2(prompts).double(), -1)[..., neg].sum(-1).mean(0).cpu().numpy()
        fit2 = fit_sigmoid(N, share2)
        row.update({"good_nstar": gfit["centre"] if gfit else None, "good_lo": gfit["lo"] if gfit else None,
                    "good_hi": gfit["hi"] if gfit else None, "null_a0_nstar": fit2["centre"] if fit2 else None})
        curves["good_proxy"] = {"model": gshare.tolist()}
        import json

        (ctx.artifact_dir / "curves.json").write_text(json.dumps(curves))
        row["curves"] = json.dumps(curves)
        return row

    # -- verdicts: the engine judges the exact world's checks; the trained world's claims by hand (docstring) ------
    def hand_verdicts(self, cfg: AlignmentConfig, results: pd.DataFrame, run: RunDir | None) -> list[Verdict]:
        """``persona-centre`` and ``persona-alpha-shift`` (trained world; :mod:`._alignment_attack_verdicts`)."""
        return trained_verdicts(self, cfg, results)

    # -- figures and report ---------------------------------------------------------------------------
    def figures(self, cfg: AlignmentConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import json

        import matplotlib.pyplot as plt

        figs = []
        p = run.path / "points" / "exact" / "exact_cells.json"
        if p.exists():
            cells = json.loads(p.read_text())
            fig, ax = plt.subplots(figsize=(6.4, 4.2))
            for i, c in enumerate(c for c in cells if c["neg_bad"] == cfg.exact_neg_bad[len(cfg.exact_neg_bad) // 2]):
                y = c["mean_behavior"]
                ax.plot(range(len(y)), y, color=f"C{i}", label=f"alpha={c['alpha']:g}")
                ax.axvline(c["centre_theory"], color=f"C{i}", ls=":", lw=1)
                ax.axvline(c["L1"], color=f"C{i}", ls="--", lw=0.8)
            ax.set_xlabel("attack prompt length N (sentences from P-)")
            ax.set_ylabel("behavior expectation B_P of the next sentence")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
            figs.append(save_figure(fig, run, "exact_behavior.png",
                                    "Exact two-component world: mean behavior against prompt length (reverse sigmoid); "
                                    "dotted: log((1-alpha)/alpha)/beta, dashed: Theorem 1's length",
                                    claims=("exact-centre", "thm1-length")))
        tr = results[results["kind"] == "trained"] if "kind" in results else results.iloc[0:0]
        tr = tr[tr["arm"] == "real"] if "arm" in tr else tr  # the null arms' curves are in the real row's
        if len(tr) and "curves" in tr:
            fig, ax = plt.subplots(figsize=(6.4, 4.2))
            for _, r in tr.iterrows():
                curves = json.loads(r["curves"])
                for i, (tag, c) in enumerate(curves.items()):
                    first = int(r.get("seed_index", 0) or 0) == 0
                    ax.plot(c["model"], color=f"C{i}", alpha=0.8, label=f"transformer {tag}" if first else None)
                    if "bayes" in c:  # the P+ proxy (null arm) has no Bayes curve
                        ax.plot(c["bayes"], color=f"C{i}", ls="--", alpha=0.6,
                                label=f"Bayes mixture {tag}" if first else None)
            ax.set_xlabel("N attack sentences (sampled from the P- proxy)")
            ax.set_ylabel("share of negative next sentences")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
            figs.append(save_figure(fig, run, "trained_share.png",
                                    "Trained persona world: share of negative continuations against N, every seed",
                                    claims=("persona-centre", "persona-alpha-shift")))
        return figs

    def report_sections(self, cfg: AlignmentConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        out = ["## Method\n\nExact world: P- and P+ emit i.i.d. sentences from a bank of "
               f"{cfg.n_pos} positive and {cfg.n_neg} negative sentences (negative mass {cfg.exact_neg_bad} vs "
               f"{cfg.neg_good}); eps = {cfg.eps}, delta = {cfg.delta}. Trained world: documents of {cfg.doc_len} "
               f"sentence tokens, alpha in {cfg.trained_alphas}, lmsci GPT {cfg.model.n_layers} layers d_model {cfg.model.d_model}, "
               f"{cfg.train.steps} steps on fresh documents; persona proxies {cfg.proxy_steps} steps; {cfg.n_attack} attack "
               "prompts from the P- proxy.\n"]
        p = run.path / "points" / "exact" / "exact_cells.csv"
        if p.exists():
            out.append("## Exact world, seed 0\n\n" + markdown_table(pd.read_csv(p)))
        if "kind" in results:
            tr = results[results["kind"] == "trained"]
            if len(tr):
                out.append("## Trained world\n\n" + markdown_table(tr[[c for c in tr.columns if c != "curves"]]))
        return "\n".join(out)
