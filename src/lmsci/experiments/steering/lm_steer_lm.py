"""Experiment ``lm-steer-lm``: LM-Steer on a real pretrained LM (SmolLM2-135M), sentiment from Shakespeare lines.

LM-Steer steers the sentiment of a real LM's continuations with a steer trained on VADER-labelled Shakespeare lines.

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798 (Sec. 3.3 the
steer ``e_v <- (I + eps W) e_v``; Sec. 4 sentiment control on neutral prompts, Table 2; Sec. 5 continuous control;
App. D training; App. G the SVD probe). Issue 45, item 2. The toy version (GPTs trained on Shakespeare in minutes)
is ``lm-steer``; its published quick rows are shown beside this report's.

**Model.** A pretrained causal LM from the model zoo, frozen (default ``smollm2-135m``: SmolLM2-135M-Instruct, a
tied-embedding ``LlamaForCausalLM``, d_model 576, dequantised from Q4_1; any zoo name, local Hugging Face
directory or ``.gguf`` file with a tokenizer via ``model=PATH``; ``tiny-llama``, a random 2-layer Llama, for the
smoke preset). The library's :class:`~lmsci.methods.lm_steer.LMSteer` acts on any Hugging Face causal LM through a
forward pre-hook on ``lm_head`` (tied or not: the steer edits the input of the unembedding, ``h <- h + eps h
W(s)``, which is the paper's ``(I + eps W) e_v`` on every output embedding and leaves the tied input embedding
alone); :func:`~lmsci.methods.lm_steer.train_steer` works on it unchanged (checked: same loss to the bit as
the cached path below on a tied tiny Llama). Each step of it runs the whole frozen LM forward and backward, so this
experiment trains with :func:`lmsci.methods.lm_steer_cached.train_steer_cached`, the same objective and loop on the
training lines' final hidden states computed once (exact: the steer never reaches the blocks in teacher-forced
training; :func:`~lmsci.methods.lm_steer_cached.check_cache` compares the cached logits with the model's before
any training), about 5x cheaper per step on SmolLM2-135M.

**Data** (the toy's recipe, :func:`~lmsci.experiments.steering._lm_steer_lm_data.build_data`). The comedies and
tragedies of the First Folio are split per genre into *steer plays* and *held-out plays*
(:func:`lmsci.worlds.shakespeare.split_plays_by_genre`, ``scorer_fraction`` held out). Dialogue lines of
``min_words..max_words`` words (``lines_per_play`` sampled per play) are scored by VADER (``vaderSentiment``):
``n_train_lines`` lines of the steer plays with compound >= ``vader_threshold`` are the positive texts (steer value
+1) and as many with compound <= -threshold the negative ones (-1); each text is the line after a newline. The
prompts are the first ``prompt_tokens`` tokens of VADER-neutral lines (compound 0) of the held-out plays.

**Training** (App. D; per seed of W): an LM-Steer of full rank (``rank`` None: ``W = P1 P2^T``, ``P1, P2 [d, d]``)
with the explicit dummy steer at 1 for every text, eps = eps0 = 1e-3, init ``N(0, init_std^2)``; Adam at
``steer_lr`` for ``steer_steps`` steps of ``steer_batch`` texts: maximise the likelihood of the positive texts
with ``+eps W`` and of the negative ones with ``-eps W`` (next-token cross-entropy over the real tokens).

**Measurement** (per seed: ``n_prompts`` prompts drawn for the seed, ``n_samples`` continuations each of exactly
``gen_tokens`` tokens, nucleus sampling ``top_p`` at ``temperature``, the same sampling seed at every steer value
and in both arms: common random numbers). At each steer value of ``steer_grid`` (units of eps0, the dummy at 1,
the README's ``--steer_values s 1``): sentiment = mean VADER compound of the continuations (without the prompt);
perplexity = mean ``exp`` of the continuation's conditional NLL under the frozen model itself, unsteered.
Statistics per seed: ``spread`` = sentiment(+5 eps0) - sentiment(-5 eps0); ``spearman`` = Spearman(steer value,
sentiment) over the grid; ``ppl_cost`` = mean perplexity at +-5 eps0 minus at 0. Gates: ``loss_drop`` (NLL of the
first ``n_loss_lines`` training lines unsteered minus with the trained steer at their labels: the steer fits its
data) and ``nll_below_uniform`` (``ln V`` minus the unsteered NLL of those lines: a pretrained model, not random
weights). The SVD probe (App. G, :func:`~lmsci.methods.lm_steer_analysis.svd_probe`) lists the top and bottom whole-word
tokens of W's first ``probe_dims`` singular directions (signs: top = promoted at positive steer values).

**Composition** (sec. 5, Thm 3; :mod:`~lmsci.experiments.steering._lm_steer_lm_extra`). A genre steer is trained
the same way (cached, same hyper-parameters) on ``n_genre_lines`` comedy (+1) and as many tragedy (-1) lines of the
steer plays, once per run (seed ``derive_seed(seed, "genre-steer")``) and shared by every seed and both arms; a
TF-IDF + logistic-regression genre classifier trains on the held-out plays' lines (the toy's recipe) and scores
P(comedy) of the continuations; its accuracy on the steer plays' lines (Wilson lower bound) is a gate. The two
steers are summed exactly (:meth:`~lmsci.methods.lm_steer.LMSteer.combine`, both dummies at 1) and valued at
sentiment +5 / -5 eps0 with the genre held at +5 eps0, so the genre steer's own push on sentiment is the same in
both and cancels in their difference. ``comp_spread`` = sentiment at (+5, +5) minus at (-5, +5); the statistic
``comp_margin`` = ``comp_spread - 0.5 spread`` (> 0: the sum keeps more than half of the sentiment steer's own
spread; a margin rather than a ratio, whose noisy denominator made the toy's first retention verdicts unstable);
``comp_retention`` is reported. The real arm also measures (+5, -5) for the genre spread under the sum (reported).

**Probe** (App. G). ``probe_excess`` = the VADER-lexicon fraction among the probe's top and bottom tokens minus the
same fraction for ``probe_random`` sets of ``probe_dims`` random orthonormal directions of the embedding space
(the same candidates, the same ``probe_top``; drawn per seed, the same in both arms).

**Baselines** (the ablation ``vs-baselines``, real arm only, decides nothing). Neither baseline is trained (cheap on
a CPU): activation addition (Turner et al. 2023, arXiv 2308.10248) adds ``s`` times the mean residual stream
(leaving the middle block) of ``baseline_lines`` positive lines minus that of as many negative lines, at every
position (:meth:`~lmsci.methods.steering.ActAdd.from_contrast`); the logit offset adds ``s`` times the
add-one-smoothed log-ratio of the token frequencies of the positive and negative training lines to the logits.
Each is swept over its grid (``actadd_grid``, ``offset_grid``); with the unsteered model's continuations (``none``)
the gains and perplexity increases are over ``none``; a baseline's gain at LM-Steer's +5 eps0 perplexity increase
is interpolated linearly from (0, 0) through its sweep (NaN outside it), and ``vs_baselines_margin`` = LM-Steer's
gain minus the larger matched baseline gain.

**Null arm** (``cross_arms``; every claim but the ablations): the same run on the same lines with their +-1 labels
shuffled among them (a seed-specific permutation), the same initialisation, batches, prompts and sampling seeds. The
dummy steer still learns the domain and W still grows, but no sentiment direction separates its +1 and -1 texts.
For ``compositional`` it is this steer summed with the same genre steer; for ``probe`` its W's singular directions.

**Timing** (2026-12-06, one thread at nice 10 on the 2-core machine shared with the publication runs, float32,
SmolLM2-135M on CPU). The first helper's pilot (master seed 1000001): hidden states 8.3 ms/token; a cached
training step 0.43 s at batch 8; sampling 0.020-0.022 s per continuation-token (KV cache) plus ~1-3 s per
``generate`` call; the perplexity pass ~0.09 s per continuation; model load 5 s from the converted cache. A second
pilot (master seed 1000001, the same day, under a heavier load: 32 ms/token of hidden states, 2.5 s per step, i.e.
~4x slower) timed the genre lines and classifier at 14 s and checked the new pieces' costs are of those kinds. At
the first pilot's rates the quick preset (3 seeds x 2 arms; per point 80 steps and 7 generate calls of 12
continuations x 16 tokens, the real arm 4 more: the genre spread under the sum, the unsteered model and one value
of each baseline; once per run the lines' hidden states, 80 genre-steer steps and the activation-addition contrast,
~2 min) costs ~12 min per master seed (34 s of training per point and ~7 s per generate call; 10-14 min by the
machine's load), less on a quiet thread. For it the quick preset has fewer prompts (12), tokens (16) and steps (80)
than the single-steer version had (16, 20, 100).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, every_at_least, mean_at_least
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms, save_figure
from lmsci.errors import ConfigError
from lmsci.experiments.registry import register
from lmsci.experiments.steering import _lm_steer_lm_data as data_mod
from lmsci.experiments.steering import _lm_steer_lm_extra as extra
from lmsci.experiments.steering._lm_steer_lm_common import (LMSteerSourceConfig, cache_source, check_source,
                                                             train_point_steer)
from lmsci.experiments.steering._lm_steer_lm_extra import probe_section
from lmsci.measure import text_scores as ts
from lmsci.report.published import toy_rows_section
from lmsci.runs import RunDir, resolve_device

SRC = "Han et al., 'Word Embeddings Are Steers for Language Models', ACL 2024, arXiv 2305.12798"
LOSS_DROP_MIN = 0.01   # registered gate: the trained steer lowers its training lines' NLL by >= 0.01 nats/token
PRETRAINED_MIN = 2.0   # registered gate: the unsteered NLL of the lines is >= 2 nats/token below ln V


class LMSteerLMConfig(LMSteerSourceConfig):
    """Configuration of ``lm-steer-lm`` (field defaults = the quick preset): the source LM's data, steer training and
    sampling (:class:`~lmsci.experiments.steering._lm_steer_lm_common.LMSteerSourceConfig`), then the grid, the
    probe, the composition and the baselines."""

    steer_grid: list[float] = Field([-5.0, -2.5, 0.0, 2.5, 5.0], min_length=3, description="units of eps0")
    probe_dims: int = Field(3, ge=1)
    probe_top: int = Field(10, ge=1)
    probe_random: int = Field(20, ge=1, description="random direction sets of the probe's reference")
    # composition (the genre steer: comedy +1 vs tragedy -1 lines of the steer plays, trained once per run)
    n_genre_lines: int = Field(64, ge=2, description="genre steer training lines per class (comedy, tragedy)")
    clf_C: float = Field(1.0, gt=0, description="genre classifier's inverse L2 strength")
    # baselines (not trained: activation addition from a contrast, a logit offset in closed form)
    baseline_lines: int = Field(64, ge=1, description="lines per class of the activation-addition contrast")
    actadd_layer: int | None = Field(None, ge=0, description="block of the activation addition (None: the middle)")
    actadd_grid: list[float] = Field([4.0], min_length=1, description="activation-addition steer values")
    offset_grid: list[float] = Field([1.0], min_length=1, description="logit-offset steer values")

    PRESETS = {
        "smoke": {"model": data_mod.TINY, "n_seeds": 2, "lines_per_play": 40, "n_train_lines": 12,
                  "steer_steps": 4, "steer_batch": 4, "n_loss_lines": 8, "n_prompts": 3, "gen_tokens": 3,
                  "prompt_tokens": 3, "steer_grid": [-5.0, 0.0, 5.0], "probe_dims": 1, "probe_top": 3,
                  "gen_batch": 2, "n_genre_lines": 12, "probe_random": 2, "baseline_lines": 4,
                  "actadd_grid": [4.0], "offset_grid": [1.0]},
        "quick": {},
        "gpu": {"threads": 0, "n_seeds": 5, "lines_per_play": None, "n_train_lines": 1000, "steer_steps": 1000,
                "steer_batch": 32, "n_loss_lines": 256, "n_prompts": 200, "n_samples": 5, "gen_tokens": 20,
                "steer_grid": [-5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0], "probe_dims": 5,
                "gen_batch": 500, "n_genre_lines": 1000, "probe_random": 100, "baseline_lines": 256,
                "actadd_grid": [1.0, 2.0, 4.0, 8.0], "offset_grid": [0.25, 0.5, 1.0, 2.0]},
        "paper": {"threads": 0, "n_seeds": 3, "lines_per_play": None, "n_train_lines": 2000, "max_words": 30,
                  "max_length": 64, "steer_steps": 1000, "steer_batch": 32, "n_loss_lines": 512, "n_prompts": 2500,
                  "gen_tokens": 20,
                  "n_samples": 25, "steer_grid": [-5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
                  "probe_dims": 5, "probe_top": 20, "gen_batch": 500, "n_genre_lines": 2000, "probe_random": 100,
                  "baseline_lines": 512, "actadd_grid": [1.0, 2.0, 4.0, 8.0], "offset_grid": [0.25, 0.5, 1.0, 2.0]},
    }


_WORDS_SEED = ("per seed (a training seed of W with its own sample of n_prompts held-out neutral prompts, n_samples "
               "continuations of gen_tokens tokens each, the same sampling seed at every steer value and arm; the LM "
               "fixed)")
_GATES = (
    Gate("steer-fits", every_at_least(LOSS_DROP_MIN), arm="real",
         stat=Stat("loss_drop", words="NLL of the first n_loss_lines training lines unsteered minus with the trained "
                                      "steer at their labels (dummy at 1), nats/token")),
    Gate("pretrained", every_at_least(PRETRAINED_MIN), arm="real",
         stat=Stat("nll_below_uniform", words="ln(vocabulary size) minus the unsteered NLL of those lines, "
                                              "nats/token (a pretrained model, not random weights)")),
)
_NULL = ("the same training on the same lines with their positive/negative labels shuffled among them (a "
         "seed-specific permutation), the same initialisation, batches, prompts and sampling seeds; the same "
         "statistic: the steer learns the domain and a W of its own, but no sentiment direction")


_COMP_GATES = (*_GATES,
               Gate("sentiment-steers", ci_above(0.0), arm="real",
                    stat=Stat("spread", words="the sentiment steer's own spread (the steering claim's statistic)")),
               Gate("genre-classifier", every_at_least(0.5), arm="real",
                    stat=Stat("clf_acc_lo", words="95% Wilson lower bound of the genre classifier's accuracy on "
                                                  "lines of the steer plays (it trained on the other plays only)")))
_NULL_COMP = ("the same composition and statistic with the sentiment steer replaced by the one trained on "
              "shuffled labels (the null arm's steer), summed with the same genre steer (trained once per run on "
              "the true comedy/tragedy labels), the same prompts and sampling seeds")


@register("lm-steer-lm")
class LMSteerLM(Experiment):
    """LM-Steer on a real pretrained LM: sentiment steering of SmolLM2-135M from VADER-labelled Shakespeare lines."""

    claim = ("A steer on the output word embeddings of a real pretrained LM (SmolLM2-135M), trained with the LM frozen "
             "on positive and negative lines, moves the sentiment of its continuations of held-out neutral prompts, "
             "monotonically in the steer value.")
    source = SRC + ", Sec. 3.3-5, Table 2, App. D, G"
    Config = LMSteerLMConfig
    time_estimate = {"smoke": "~30 s (a tiny random Llama)",
                     "quick": "~12 min per master seed (10-14 min by load), estimated from the rates of a timing pilot "
                              "(2026-12-06, one thread on the shared 2-core machine: 0.43-0.67 s per training step, "
                              "0.021 s per continuation-token + ~2 s per generate call, 8.3 ms per token of hidden "
                              "states; 6 points x (80 steps + 7-11 generate calls of 12 x 16 tokens) + ~2 min once; "
                              "module docstring)",
                     "gpu": "~5 min on one H100 (estimated, not measured: 10 points x (1,000 cached steps + 11 steer "
                            "values x 1,000 continuations), VADER on the CPU)",
                     "paper": "~2 h on one H100 (estimated, not measured: 6 points x 11 steer values x 62,500 "
                              "continuations of 20 tokens, the paper's 2.5K prompts x 25 samples, in batches of 500, "
                              "each scored by VADER on the CPU and by the model)"}
    claims = [
        Claim(
            id="steering",
            statement="Continuations of held-out neutral prompts are more positive (mean VADER compound) with the "
                      "sentiment steer at +5 eps0 than at -5 eps0.",
            source=SRC + ", Table 2 (sentiment control, 5 eps0)",
            paper_value="GPT2-Large sentiment: positive steering on neutral prompts 90.7% positive vs 50.0% "
                        "unsteered; negative 8.0% vs 50.0%",
            statistic=Stat("spread", words=_WORDS_SEED + ": mean VADER compound of the continuations at +5 eps0 "
                                                         "minus at -5 eps0"),
            rule=ci_above(0.0), gates=_GATES, null=_NULL,
            null_can_meet="a W trained on shuffled labels is still a large learned map; +5 and -5 eps0 push the "
                          "continuations in opposite directions along whatever it picked up from the label noise or "
                          "from the lines themselves, so the difference can come out positive on every seed"),
        Claim(
            id="continuous",
            statement="The continuations' sentiment rises monotonically with the steer value over -5..5 eps0.",
            source=SRC + ", Sec. 5 (continuous control), Table 5 (eps ablation)",
            paper_value="detox: max-toxicity 0.322/0.293/0.268/0.246/0.249 at 1-5 eps0 (Table 5); sentiment "
                        "control with the steer value shown qualitatively",
            statistic=Stat("spearman", words=_WORDS_SEED + ": Spearman correlation between the steer value and "
                                                           "the mean VADER compound over steer_grid"),
            rule=ci_above(0.0), gates=_GATES, null=_NULL,
            null_can_meet="any W moves the continuations monotonically along its own direction as the steer value "
                          "grows; if that direction happens to carry sentiment the correlation is positive"),
        Claim(
            id="ppl-cost",
            statement="Steering costs fluency: the continuations' perplexity under the unsteered model is higher at "
                      "+-5 eps0 than at 0 (an ablation: reported, decides nothing; any W of this size may cost "
                      "fluency, so it has no null arm).",
            source=SRC + ", Table 1 (PPL 28.3 at 5 eps0 vs 25.5 unsteered), Table 5",
            paper_value="PPL 22.4/23.4/24.5/25.9/28.3 at 1-5 eps0 (Table 5)",
            statistic=Stat("ppl_cost", words=_WORDS_SEED + ": mean perplexity of the continuations under the "
                                                           "unsteered model at +5 and -5 eps0 (their mean) minus at 0"),
            rule=ci_above(0.0), gates=_GATES, ablation=True),
        Claim(
            id="compositional",
            statement=f"Summed with a genre steer (comedy vs tragedy lines), the sentiment steer keeps more than "
                      f"{extra.COMP_KEEP:g} of its own effect on the continuations' sentiment.",
            source=SRC + ", Sec. 5 (compositional control), Thm 3",
            paper_value="not given as a number for composition (Thm 3 bounds the deviation of the composed steer "
                        "from the sum of the edits); the toy lm-steer registers a mean retention >= 0.6",
            statistic=Stat("comp_margin", words=_WORDS_SEED + f": composed spread - {extra.COMP_KEEP:g} x the "
                           "sentiment steer's own spread, composed spread = mean VADER compound with the summed steer "
                           "at sentiment +5 eps0 and genre +5 eps0 minus at sentiment -5 eps0 and genre +5 eps0, own "
                           "spread = at +5 minus at -5 eps0 of the sentiment steer alone (VADER compound units; > 0 "
                           f"means a retention above {extra.COMP_KEEP:g} without dividing by a noisy spread)"),
            rule=ci_above(0.0), gates=_COMP_GATES, null=_NULL_COMP,
            null_can_meet="the shuffled-label sentiment steer is still a large learned W; if it moves sentiment "
                          "consistently along what it picked up, its composed spread exceeds half of its own "
                          "(near-zero) spread on every seed; and the genre steer's interaction with it (the sum is "
                          "only approximately additive, Thm 3) can push the composed spread above 0 by itself"),
        Claim(
            id="probe",
            statement="The top and bottom tokens of the first singular directions of the sentiment steer's W are "
                      "richer in sentiment words (VADER lexicon) than those of random directions.",
            source=SRC + ", App. G (SVD of W, word dimensions)",
            paper_value="qualitative lists (toxic and sentiment words along the first dimensions)",
            statistic=Stat("probe_excess", words="per seed (a training seed of W; the LM fixed): the fraction of "
                           "VADER-lexicon words among the probe_top top and bottom whole-word tokens (>= 3 letters, "
                           "with a leading space where the tokenizer marks word starts so) of W's first probe_dims "
                           "right-singular directions, minus the same fraction for probe_random sets of probe_dims "
                           "random orthonormal directions of the same space (a difference of fractions)"),
            rule=ci_above(0.0), gates=_GATES, null=_NULL,
            null_can_meet="a W trained on shuffled labels still aligns with the directions of the output embeddings "
                          "that the training lines excite (the domain's words, high-variance embedding directions); "
                          "if the extremes of those directions hold more lexicon words than random directions' "
                          "extremes, its excess is above 0 on every seed"),
        Claim(
            id="vs-baselines",
            statement="At the same perplexity increase, LM-Steer's sentiment gain is at least that of activation "
                      "addition and of a logit offset (an ablation: reported, decides nothing).",
            source=SRC + ", Sec. 4 baselines, Table 2; Turner et al. 2023, arXiv 2308.10248 (activation addition)",
            paper_value="LM-Steer is 2nd-3rd of the sentiment-control methods (Table 2), best on detoxification "
                        "(Table 1)",
            statistic=Stat("vs_baselines_margin", words=_WORDS_SEED + ": LM-Steer's sentiment gain at +5 eps0 over "
                           "the unsteered model minus the larger of the baselines' gains at the same perplexity "
                           "increase (linear interpolation along each baseline's sweep from the unsteered model; a "
                           "baseline whose sweep does not reach it is left out, a seed with none left out), VADER "
                           "compound units; baselines: activation addition of the positive-minus-negative mean "
                           "residual stream at the middle block, and a logit offset of the smoothed token log-ratio "
                           "of the positive and negative lines, neither trained"),
            rule=mean_at_least(0.0), gates=_GATES, ablation=True),
    ]

    # ------------------------------------------------------------------------------------------ config
    def validate(self, cfg: LMSteerLMConfig) -> None:
        check_source(cfg)
        grid = list(cfg.steer_grid)
        if sorted(set(grid)) != grid:
            raise ConfigError("steer_grid", grid, "increasing distinct steer values")
        for v in (cfg.steer_value, -cfg.steer_value, 0.0):
            if v not in grid:
                raise ConfigError("steer_grid", grid, f"a grid containing 0 and +-steer_value={cfg.steer_value}")
        for field in ("actadd_grid", "offset_grid"):
            if not all(v > 0 for v in getattr(cfg, field)):
                raise ConfigError(field, getattr(cfg, field), "positive steer values (toward the positive lines)")

    def points(self, cfg: LMSteerLMConfig) -> list[Point]:
        return cross_arms([Point("steer")], ("real", "null"))  # trained on the true / the shuffled labels

    def groups(self, cfg: LMSteerLMConfig, points: list[Point]) -> list[list[Point]]:
        return [points] if points else []  # the model, the lines and their hidden states once for every point

    # ------------------------------------------------------------------------------------------ run
    def run_group(self, cfg: LMSteerLMConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        """Load the model, build the lines, cache their hidden states, then train and measure each point."""
        device = str(resolve_device(cfg.device))
        data = data_mod.build_data(cfg)
        genre = extra.build_genre(cfg)
        hf = data_mod.get_model(cfg.model, device, data["texts"] + data["neutral"] + genre["texts"])
        ctxs[0].run.record_model(getattr(hf, "provenance", {"source": cfg.model}))
        src = cache_source(cfg, hf, data)
        cache = src["cache"]
        contexts = cache.h[cache.mask.bool()]
        cand = data_mod.whole_word_tokens(hf.tokenizer, src["V"])
        common = {**src["columns"], "n_probe_candidates": len(cand[0]),
                  "n_pos_available": data["n_pos_available"], "n_neg_available": data["n_neg_available"],
                  "steer_plays": ";".join(data["steer_plays"]), "scorer_plays": ";".join(data["scorer_plays"])}
        ex: dict[str, Any] = {"clf": genre["clf"]}  # the genre classifier, genre steer and baselines of every point
        common.update(self._shared_steers(cfg, hf, genre, src["enc"], src["pad"], ex))
        rows = []
        for point, ctx in zip(points, ctxs):
            row = dict(common)
            row.update(self._run_one(cfg, point, ctx, hf, data, src, contexts, cand, ex))
            rows.append(row)
        return rows

    def _shared_steers(self, cfg, hf, genre, enc, pad, ex) -> dict[str, Any]:
        """The genre steer (trained once per run, cached like the sentiment steer) and the baselines into ``ex``;
        returns their columns (the genre classifier's accuracy, the genre steer's fit)."""
        from lmsci.methods.lm_steer_cached import cached_loss, final_hidden_states, train_steer_cached
        from lmsci.runs import derive_seed

        gcache = final_hidden_states(hf, [data_mod.encode(hf.tokenizer, s) for s in genre["texts"]],
                                     max_length=cfg.max_length, pad_id=pad)
        ex["genre_steer"] = g = train_steer_cached(
            hf, gcache, genre["labels"], rank=cfg.rank, epsilon=cfg.epsilon, init_std=cfg.init_std, lr=cfg.steer_lr,
            steps=cfg.steer_steps, batch_size=cfg.steer_batch, l2=cfg.l2, seed=derive_seed(cfg.seed, "genre-steer"))
        n = cfg.n_train_lines
        ex["bases"] = extra.baseline_steers(cfg, hf, enc[:n], enc[n:], pad)
        return {"clf_acc": genre["clf_acc"], "clf_acc_lo": genre["clf_acc_lo"], "clf_n": genre["clf_n"],
                "genre_loss_drop": cached_loss(hf, gcache, None, genre["labels"]) - cached_loss(hf, gcache, g,
                                                                                                genre["labels"]),
                "genre_train_seconds": g.train_seconds, "actadd_layer": ex["bases"]["act_add"].layer}

    def _run_one(self, cfg, point, ctx, hf, data, src, contexts, cand, ex) -> dict[str, Any]:
        from lmsci.runs import derive_seed

        steer, fit = train_point_steer(cfg, point.arm, ctx.seed, hf, data, src)
        h = steer.history
        n = max(1, min(10, len(h) // 4))
        row: dict[str, Any] = {"train_loss_first": float(np.mean(h[:n])), "train_loss_last": float(np.mean(h[-n:])),
                               **fit}
        prompts = data_mod.sample_prompts(cfg, hf.tokenizer, data["neutral"], derive_seed(ctx.seed, "prompts"))
        gen_seed = derive_seed(ctx.seed, "gen")
        curve, texts = [], {}
        for v in cfg.steer_grid:
            r = data_mod.evaluate(cfg, hf, steer, v, prompts, gen_seed, ex["clf"])
            texts[f"{v:+g}"] = r.pop("_texts")
            curve.append({"s": v, **r})
            ctx.log(arm=point.arm, steer_value=v, **r)
        at = {c["s"]: c for c in curve}
        S = cfg.steer_value
        row.update({"sentiment_pos": at[S]["sentiment"], "sentiment_neg": at[-S]["sentiment"],
                    "sentiment_zero": at[0.0]["sentiment"], "ppl_pos": at[S]["ppl"], "ppl_neg": at[-S]["ppl"],
                    "ppl_zero": at[0.0]["ppl"], "spread": at[S]["sentiment"] - at[-S]["sentiment"],
                    "spearman": ts.spearman([c["s"] for c in curve], [c["sentiment"] for c in curve]),
                    "ppl_cost": (at[S]["ppl"] + at[-S]["ppl"]) / 2 - at[0.0]["ppl"], "curve": json.dumps(curve)})
        row.update(extra.measure_composition(cfg, point, hf, steer, ex, prompts, gen_seed, at, texts))
        if point.arm == "real":  # vs-baselines is an ablation: no null arm
            row.update(extra.measure_baselines(cfg, hf, ex["bases"], prompts, gen_seed, at, texts))
        probe = data_mod.probe_words(cfg, hf, steer, cand, contexts, seed=derive_seed(ctx.seed, "probe-random"))
        row.update({k: v for k, v in probe.items() if k != "probe"})
        row["probe_json"] = json.dumps(probe["probe"])
        (ctx.artifact_dir / "generations.json").write_text(json.dumps({k: v[:8] for k, v in texts.items()}, indent=1))
        return row

    # ------------------------------------------------------------------------------------------ report
    def figures(self, cfg: LMSteerLMConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        """Sentiment and perplexity against the steer value, real and null arm (mean and per seed)."""
        import matplotlib.pyplot as plt

        if results.empty or "curve" not in results:
            return []
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for j, (arm, g) in enumerate(results.dropna(subset=["curve"]).groupby("arm")):
            curves = [json.loads(c) for c in g["curve"]]
            s = [p["s"] for p in curves[0]]
            for ax, key in zip(axes, ("sentiment", "ppl")):
                ys = np.array([[p[key] for p in c] for c in curves], dtype=float)
                for y in ys:
                    ax.plot(s, y, color=f"C{j}", alpha=0.25, lw=0.8)
                ax.plot(s, np.nanmean(ys, 0), "o-", color=f"C{j}", label=f"{arm} (mean of {len(ys)} seeds)")
        axes[0].set_ylabel("mean VADER compound of continuations")
        axes[1].set_ylabel("perplexity under the unsteered model")
        for ax in axes:
            ax.set_xlabel("steer value (units of eps0)")
            ax.legend(fontsize=7)
        fig.suptitle(f"{cfg.model}: LM-Steer sentiment steer", fontsize=9)
        fig.tight_layout()
        return [save_figure(fig, run, "steer_curve.png", "Sentiment (left) and perplexity (right) of the "
                            "continuations against the steer value: the real steer and the shuffled-label null "
                            "(thin lines: seeds)", claims=("steering", "continuous", "ppl-cost"))]

    def report_sections(self, cfg: LMSteerLMConfig, results: pd.DataFrame, run: RunDir) -> str:
        """The mean curves, the SVD probe's words of the real arm's first seed, then the toy's published quick rows."""
        return (curve_section(results) + extra.composition_section(results) + extra.baselines_section(results)
                + probe_section(results) + toy_rows_section("lm-steer"))


def curve_section(results: pd.DataFrame) -> str:
    """A markdown table: per arm and steer value, the mean over seeds of the continuations' sentiment (VADER
    compound) and perplexity under the unsteered model."""
    if results.empty or "curve" not in results:
        return ""
    lines = ["\n## Sentiment and perplexity by steer value (mean over seeds)\n", "| arm | steer value (eps0) | "
             "mean VADER compound | perplexity | seeds |", "|---|---|---|---|---|"]
    for arm, g in results.dropna(subset=["curve"]).groupby("arm"):
        curves = [json.loads(c) for c in g["curve"]]
        for i, p in enumerate(curves[0]):
            sent = np.nanmean([c[i]["sentiment"] for c in curves])
            ppl = np.nanmean([c[i]["ppl"] for c in curves])
            lines.append(f"| {arm} | {p['s']:+g} | {sent:.3f} | {ppl:.4g} | {len(curves)} |")
    return "\n".join(lines) + "\n"
