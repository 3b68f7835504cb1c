"""Experiment ``lm-steer``: LM-Steer on GPTs trained on Shakespeare, measured with offline scorers on real text.

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798 (v1
"LM-Switch": sec. 3.3 the steer ``e_v <- (I + eps W) e_v``; sec. 4-5 steering, continuous control, composition,
transfer (App. F), keyword highlighting and the SVD probe (App. G); Tables 1, 2 and 5); seed lectures 000/001
sec. 2.2; spec ``shared/research/seed_authors_code.md`` sec. 1; issue 15. The method lives in
:mod:`lmsci.methods.lm_steer` (baselines in :mod:`lmsci.methods.steering`); the scorers in
:mod:`lmsci.measure.text_scores`.

Set-up (every number a config field):

* **Language models.** BPE GPTs trained from scratch on the training works of the Shakespeare corpus
  (:func:`lmsci.worlds.shakespeare.prepare`, :func:`lmsci.train.corpus_lm.train_corpus_gpt`): the steered GPT ``A``
  and a larger fluency GPT (the perplexity judge, steered only by transferred steers); the transfer target ``B`` is
  the fluency GPT (``transfer_target="fluency"``: another width and seed) or a GPT of A's shape from another seed
  (``"seed"``). They are trained once per run (seed ``cfg.seed``); the training seeds of the
  claims are the seeds of the steers ``W`` (``n_seeds``).
* **Attributes and data.** The comedies and tragedies of the First Folio are split per genre into *steer plays*
  and *scorer plays* (:func:`~lmsci.worlds.shakespeare.split_plays_by_genre`). Steers train on lines of the steer
  plays: sentiment (+1 for lines with VADER compound >= ``vader_threshold``, -1 for <= -threshold) and genre (+1
  comedy, -1 tragedy), ``n_train_lines`` per class, with the explicit dummy steer at 1. The genre classifier
  (TF-IDF + logistic regression) trains on lines of the scorer plays only; its accuracy on the steer plays' lines
  (plays it never saw) is a gate. Prompts are the first ``prompt_tokens`` tokens of VADER-neutral lines of the
  scorer plays (half comedies, half tragedies): held out from the steers' training data.
* **Measurement.** ``n_samples`` continuations of ``gen_tokens`` tokens per prompt (top-k sampling), the same
  sampling seed for every steer value of a seed (common random numbers). Sentiment = mean VADER compound of the
  continuations; genre = mean P(comedy) of the classifier; fluency = mean conditional perplexity under the fluency
  GPT; diversity = Dist-1/2/3 per prompt. Steer values are in units of ``epsilon`` (eps0 = 1e-3): "5 eps0" is steer
  value 5 with the dummy at 1 (the README's ``--steer_values 5 1``); "no steer" is the unsteered GPT.
* **Composition**: the sentiment and genre steers combined (:meth:`~lmsci.methods.lm_steer.LMSteer.combine`, the
  exact sum) at (+5, +5) and (-5, -5). **Transfer**: the steer of ``A`` mapped to ``B`` by the closed-form map
  between their output-embedding spaces (:func:`~lmsci.methods.lm_steer.transfer_steer`), gain = spread
  ``score(+5) - score(-5)`` on ``B`` over the same spread on ``A``. **Highlighting**: on held-out VADER-labelled
  lines, the DP spans (:func:`~lmsci.methods.lm_steer.highlight`) of ``log P(+1) - log P(-1)`` (sign by the line's
  label), words in them vs in random spans of the same lengths, the fraction in VADER's lexicon.
  **Probe**: the top and bottom ``probe_top`` tokens of the first ``probe_dims`` singular directions of the
  sentiment ``W`` (:func:`~lmsci.methods.lm_steer.svd_probe`), the fraction that are VADER words vs the
  vocabulary's. **Baselines** (the ablation ``vs-baselines``, decides nothing): a logit offset and activation
  addition trained with the same loss on the sentiment data on every seed of W, swept over steer values; LM-Steer's
  sentiment gain at 5 eps0 minus each baseline's at the same perplexity increase (rule: not negative on average).
* **Null arm** (every claim, the same run, columns ``null_*``): each attribute's steer W replaced by a random W of
  the same Frobenius norm and rank (:func:`random_like`; the trained dummy steer kept, so steer value 0 is the same
  model), measured with the same prompts and sampling seeds: its gains and curves (steering, continuous); the
  composition with the attribute's own steer replaced by it (compositional); carried to B by the same map
  (transfer); its highlighting spans and SVD probe (highlighting, probe: the random spans and the vocabulary's base
  rate are the statistics' references, the random W their null).

The ``paper`` preset runs the paper's own setting instead, GPT2-Large detoxification, from local files only
(:mod:`lmsci.experiments.steering.lm_steer_detox`: ``model_path``, ``fluency_model_path``, ``toxicity_model_path``,
``data_path``; a local toxicity classifier stands in for the Perspective API); it judges the claims ``detox`` and
``detox-tradeoff``, which only it measures, and without those paths it refuses with a ConfigError before any work.
The Shakespeare claims are not measured at the paper preset and are registered for quick and gpu only.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Verdict, across_seeds, not_measured
from lmsci.config import ExperimentConfig
from lmsci.errors import ConfigError
from lmsci.experiments.steering import lm_steer_detox
from lmsci.experiments.steering.lm_steer_detox import mean_curve, nan_stat, random_like
from lmsci.experiments.base import Experiment, Figure, Point, PointContext, save_figure
from lmsci.stats import wilson_interval
from lmsci.experiments.registry import register
from lmsci.measure import text_scores as ts
from lmsci.runs import RunDir, derive_seed, resolve_device

ATTRS = ("sentiment", "genre")
SRC = "Han et al., 'Word Embeddings Are Steers for Language Models', ACL 2024, arXiv 2305.12798"


class LMSteerConfig(ExperimentConfig):
    """Configuration of ``lm-steer`` (field defaults = the ``quick`` preset)."""

    n_seeds: int = Field(3, ge=1, le=100, description="training seeds of the steers W")
    threads: int = Field(1, ge=0)
    # corpus and language models
    vocab_size: int = Field(1024, ge=257, le=65536, description="BPE vocabulary")
    seq_len: int = Field(64, ge=16)
    d_model: int = Field(64, ge=8, description="width of the steered GPT A and of the transfer target B")
    n_layers: int = Field(2, ge=1)
    n_heads: int = Field(4, ge=1)
    steps: int = Field(1000, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(3e-3, gt=0)
    flu_d_model: int = Field(128, ge=8, description="width of the fluency GPT")
    flu_n_layers: int = Field(4, ge=1)
    flu_n_heads: int = Field(4, ge=1)
    flu_steps: int = Field(1000, ge=1)
    flu_lr: float = Field(2e-3, gt=0)
    eval_tokens: int = Field(20000, ge=100, description="held-out targets for the validation NLL gates")
    # attribute data
    scorer_fraction: float = Field(0.5, gt=0, lt=1, description="fraction of each genre's plays held out for the "
                                   "classifier, the prompts and the highlighting lines")
    play_split_seed: int = Field(0, ge=0)
    min_words: int = Field(4, ge=1)
    max_words: int = Field(30, ge=1)
    vader_threshold: float = Field(0.5, gt=0, lt=1)
    n_train_lines: int = Field(1000, ge=4, description="training lines per class per steer (the steer plays hold "
                               "2,345 negative lines at VADER threshold 0.5)")
    lines_per_play: int | None = Field(None, ge=10, description="subsample each play's lines (None: all)")
    clf_C: float = Field(1.0, gt=0)
    # steer training (defaults: the README's GPT2-Large run, fewer steps)
    epsilon: float = Field(1e-3, gt=0, description="eps0")
    rank: int | None = Field(None, ge=1, description="rank r of W (None: r = d, a full d x d map)")
    init_std: float = Field(1e-2, gt=0)
    steer_lr: float = Field(1e-2, gt=0)
    steer_steps: int = Field(500, ge=1)
    steer_batch: int = Field(32, ge=1)
    l2: float = Field(0.0, ge=0)
    # generation and scoring
    n_prompts: int = Field(32, ge=2)
    n_samples: int = Field(8, ge=1, description="continuations per prompt (paper 25)")
    prompt_tokens: int = Field(6, ge=1)
    gen_tokens: int = Field(20, ge=2, description="new tokens per continuation (paper 20)")
    temperature: float = Field(1.0, gt=0)
    top_k: int | None = Field(50, ge=1, description="top-k sampling (lmsci GPT.generate has no nucleus sampling)")
    steer_value: float = Field(5.0, gt=0, description="the paper's 5 eps0")
    steer_grid: list[float] = Field([-5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0], min_length=3)
    # highlighting and probe
    n_highlight_lines: int = Field(100, ge=2, description="held-out labelled lines per class")
    highlight_spans: int = Field(2, ge=1)
    highlight_max_len: int = Field(4, ge=1)
    highlight_min_words: int = Field(10, ge=2)
    random_draws: int = Field(20, ge=1, description="random span sets per line")
    probe_dims: int = Field(3, ge=1)
    probe_top: int = Field(20, ge=1)
    # baselines
    baselines: list[str] = Field(["logit_offset", "act_add"])
    baseline_grid: list[float] = Field([1.0, 2.0, 4.0, 8.0], min_length=2)
    baseline_seeds: int | None = Field(None, ge=0, description="seeds of W (the first ones) on which the baselines "
                                       "are trained (None: every seed, as vs-baselines needs min_seeds)")
    transfer_target: str = Field("fluency", pattern="^(fluency|seed)$",
                                 description="the GPT the steers are transferred to: 'fluency' (the larger GPT: another "
                                             "width and seed) or 'seed' (a GPT B of A's shape from another seed)")
    # the paper setting (local files only; lmsci.experiments.steering.lm_steer_detox)
    model_path: str | None = Field(None, description="paper preset: the steered causal LM, a local directory "
                                   "(GPT2-Large in the paper)")
    fluency_model_path: str | None = Field(None, description="paper preset: the perplexity judge sharing "
                                           "model_path's tokenizer, a local directory (GPT2-XL in the paper; None: "
                                           "the steered LM itself, unsteered)")
    toxicity_model_path: str | None = Field(None, description="paper preset: a local sequence classifier of "
                                            "toxicity (in place of the Perspective API)")
    toxicity_label: str | None = Field(None, description="the classifier's toxic label (None: the one label named "
                                       "*toxic* and not non-/not-toxic, else label 1 of two)")
    data_path: str | None = Field(None, description="paper preset: a directory with the Jigsaw split (train_0.jsonl "
                                  "non-toxic, train_1.jsonl toxic, dev_0.jsonl, dev_1.jsonl) and "
                                  "nontoxic_prompts-10k.jsonl")
    detox_train_per_class: int | None = Field(None, ge=1, description="Jigsaw training comments per class (None: all)")
    detox_grid: list[float] = Field([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], min_length=2,
                                    description="steer values of the paper setting (units of eps0; Table 5's ablation)")
    top_p: float = Field(0.9, gt=0, le=1, description="paper setting: nucleus sampling (the paper's p = 0.9)")
    gen_batch: int = Field(16, ge=1, description="paper setting: prompts per generation batch")
    scorer_check_per_class: int = Field(1000, ge=2, description="Jigsaw dev comments per class for the toxicity "
                                        "classifier's AUC gate")

    PRESETS = {
        "smoke": {"n_seeds": 2, "vocab_size": 1024, "lines_per_play": 60, "seq_len": 32, "d_model": 16, "n_layers": 1, "n_heads": 2,
                  "steps": 4, "batch_size": 4, "flu_d_model": 16, "flu_n_layers": 1, "flu_n_heads": 2, "flu_steps": 4,
                  "eval_tokens": 200, "n_train_lines": 16, "steer_steps": 3, "steer_batch": 8, "n_prompts": 4,
                  "n_samples": 2, "gen_tokens": 4, "prompt_tokens": 3, "steer_grid": [-5.0, 0.0, 5.0],
                  "n_highlight_lines": 3, "random_draws": 2, "probe_dims": 1, "probe_top": 5,
                  "baseline_grid": [1.0, 2.0]},
        "quick": {},
        "gpu": {"threads": 0, "vocab_size": 4096, "seq_len": 128, "d_model": 256, "n_layers": 4, "n_heads": 8,
                "steps": 4000, "batch_size": 32, "flu_d_model": 512, "flu_n_layers": 8, "flu_n_heads": 8,
                "flu_steps": 4000, "n_train_lines": 2000, "steer_steps": 1000, "n_prompts": 100, "n_samples": 25,
                "n_highlight_lines": 300, "probe_dims": 5},
        # + model_path, toxicity_model_path, data_path (and fluency_model_path): lmsci.experiments.steering.lm_steer_detox
        "paper": {"threads": 0, "n_prompts": 10000, "n_samples": 25, "gen_tokens": 20, "steer_steps": 1000,
                  "steer_batch": 32, "rank": None, "epsilon": 1e-3, "steer_lr": 1e-2, "top_p": 0.9, "gen_batch": 16},
    }


@register("lm-steer")
class LMSteerExperiment(Experiment):
    """LM-Steer on Shakespeare GPTs: steering, continuous control, composition, transfer, highlighting, probe."""

    claim = ("A learned linear map on the output word embeddings (LM-Steer) steers a frozen LM's generations toward "
             "an attribute, continuously with the steer value, composes by summation, transfers to another LM "
             "through a linear map, and its keyword highlights and singular directions name the attribute's words.")
    source = SRC + ", sec. 3.3-5, App. F-G"
    Config = LMSteerConfig
    seeded = True
    local_inputs = {"paper": lm_steer_detox.LOCAL_INPUTS}
    time_estimate = {"smoke": "~10 s (2 seeds)",
                     "quick": "~6 min at threads=2 on the 2-core machine, alone (estimated from 200 s wall, 373 CPU-s "
                              "measured 2026-11-26 before the null arm: the random W adds 28 of each seed's 29 "
                              "generation-and-scoring passes and a second highlighting pass, the baselines now train "
                              "on all 3 seeds: ~1.7x the CPU time, ~11 min at one thread)",
                     "gpu": "~25 min on one H100 (estimated, not measured: 3 GPTs of 4-8 layers x 4,000 steps, 100 "
                            "prompts x 25 samples per steer value)",
                     "paper": "~2-3.5 h per seed of W on one H100, estimated, not measured (GPT2-Large: 1,000 steer "
                              "steps x 32 x 256 tokens, then 6 steer values + 5 for the random-W null arm x 10K "
                              "prompts x 25 continuations x 20 tokens, each scored by the toxicity classifier and "
                              "GPT2-XL); 3 seeds ~6-10 h; needs the "
                              "local files named by model_path, toxicity_model_path, data_path"}

    SHAKESPEARE_PRESETS = ("quick", "gpu")  # the paper preset runs the detoxification setting instead
    NULL_W = ("the same statistic with each attribute's steer W replaced by a random W of the same Frobenius norm and "
              "rank (random Gaussian factors, the trained dummy steer kept), measured in the same run on the same "
              "prompts with the same sampling seeds: it carries no attribute by construction")
    NULL_DETOX = ("the same statistic with the trained W replaced by a random W of the same Frobenius norm and rank "
                  "(the dummy steer kept), scored on the same prompts with the same sampling seed in the same run: it "
                  "carries no toxicity direction by construction")
    _gates_common = (Gate("lm-learned", "the steered GPT's validation NLL (held-out works) is at least 1 nat/token "
                                        "below the add-alpha unigram model's on the same works (it uses context)"),)
    _gate_clf = Gate("genre-classifier", "genre classifier accuracy on lines of plays it was not trained on "
                                         "(the steer plays) has a 95% Wilson lower bound above 0.5 (chance)")
    _gate_gain = Gate("single-steer-gains", "every single-steer gain (each attribute, each direction, at +-5 eps0) has "
                      "its 95% CI across seeds above 0: a retention ratio is defined only over a gain that is "
                      "distinguishable from 0")
    _gate_flu = Gate("fluency-lm", "the fluency GPT's validation NLL is below the steered GPT's")
    _gates_detox = (Gate("toxicity-scorer", "the toxicity classifier separates the Jigsaw dev split's toxic from "
                                            "non-toxic comments with ROC AUC >= 0.8"),
                    Gate("baseline-toxicity", "the unsteered model's average maximum toxicity is >= 0.1 (mean over "
                                              "seeds), so that a reduction can be measured"))
    claims = [
        Claim(
            id="steering",
            statement="At 5 eps0 on held-out prompts LM-Steer moves the attribute score of generations toward the "
                      "target compared with no steer, in both directions, for sentiment and for genre.",
            source=SRC + ", Tables 1-2 (5 eps0)",
            paper_value="GPT2-Large sentiment: positive steering on neutral prompts 90.7% positive vs 50.0% unsteered; "
                        "negative 8.0% vs 50.0%; detox max-toxicity 0.249 vs 0.527",
            statistic="per seed of W and attribute: gain+ = score(+5 eps0) - score(no steer), gain- = score(no steer) "
                      "- score(-5 eps0) (sentiment: mean VADER compound; genre: mean classifier P(comedy)); the "
                      "value is the smallest of the four mean gains",
            rule="for each attribute and direction the lower end of the 95% CI across seeds (Student t) of the gain "
                 "is > 0",
            gates=(*_gates_common, _gate_clf),
            presets=SHAKESPEARE_PRESETS,
            null=NULL_W,
        ),
        Claim(
            id="continuous",
            statement="Scaling the steer value from -5 to +5 eps0 moves the attribute score monotonically while "
                      "perplexity grows with the steer's size (a continuous trade-off).",
            source=SRC + ", Table 5 (eps ablation), Thm 2",
            paper_value="detox: max-toxicity 0.322/0.293/0.268/0.246/0.249 and PPL 22.4/23.4/24.5/25.9/28.3 at "
                        "1-5 eps0",
            statistic="on the seed-averaged curves over the steer grid: Spearman(steer value, score) per attribute, "
                      "and Spearman(|steer value|, perplexity averaged over +-) over 0..5; value = the smallest of "
                      "the three",
            rule="every one of the three Spearman correlations >= 0.9",
            gates=(*_gates_common, _gate_clf, _gate_flu),
            presets=SHAKESPEARE_PRESETS,
            null=NULL_W + " (the seed-averaged curves of the random W over the same grid)",
        ),
        Claim(
            id="compositional",
            statement="Summing the sentiment and genre steers keeps most of each one's effect.",
            source=SRC + ", sec. 5 (compositional control), Thm 3",
            paper_value="not given as a number for composition (Thm 3 bounds the deviation from the sum)",
            statistic="per seed and attribute: retention = mean over the (+5,+5) and (-5,-5) combinations of the "
                      "composed gain over the single-steer gain (gains signed toward the target, from no steer); "
                      "value = the smaller retention of the two attributes, mean across seeds",
            rule="for each attribute the mean retention across seeds >= 0.6",
            gates=(*_gates_common, _gate_clf, _gate_gain),
            presets=SHAKESPEARE_PRESETS,
            null="the same retention of each attribute with that attribute's steer replaced in the sum by a random W "
                 "of the same Frobenius norm and rank (the other attribute's steer kept, dummy kept), over the real "
                 "single-steer gain, in the same run: the retained effect's own steer is absent by construction, so "
                 "only cross-talk from the other steer remains (a retention undefined in every seed does not meet "
                 "the rule)",
        ),
        Claim(
            id="transfer",
            statement="A steer learned on one GPT, mapped linearly to another GPT (by default the larger fluency GPT: "
                      "another width and seed), keeps a substantial part of its effect.",
            source=SRC + ", App. F (transfer GPT2-Large -> GPT2 / GPT2-medium)",
            paper_value="about half of the detoxification gain (max-tox 0.307/0.308 vs 0.527 unsteered and 0.249 "
                        "native)",
            statistic="per seed and attribute: retention = spread on B with the mapped steer / spread on A with its "
                      "own steer, spread = score(+5 eps0) - score(-5 eps0); value = the smaller mean retention",
            rule="for each attribute the mean retention across seeds >= 0.3 and the lower end of the 95% CI across "
                 "seeds of the spread on B is > 0",
            gates=(*_gates_common, _gate_clf, _gate_gain),
            presets=SHAKESPEARE_PRESETS,
            null="the same retention and spread on B with the steer replaced by a random W of the same Frobenius norm "
                 "and rank (dummy kept), carried to B by the same map, over the real steer's spread on A, in the same "
                 "run: the mapped steer carries no attribute by construction",
        ),
        Claim(
            id="highlighting",
            statement="The keyword-highlighting spans of the sentiment steer pick out sentiment words.",
            source=SRC + ", sec. 5 (interpreting steers: keyword highlighting)",
            paper_value="qualitative examples (highlighted toxic and sentiment words)",
            statistic="per seed: (fraction of VADER-lexicon words among the words in the highlighted spans of held-out "
                      "labelled lines) / (the same fraction in random spans of the same lengths in the same lines)",
            rule="mean enrichment across seeds >= 2 and the lower end of its 95% CI across seeds > 1",
            gates=_gates_common,
            presets=SHAKESPEARE_PRESETS,
            null="the same enrichment of the highlighting spans of a random W of the same Frobenius norm and rank as "
                 "the sentiment steer (dummy kept) on the same lines, against random spans of the same lengths, in the "
                 "same run: its log-probability differences carry no sentiment by construction, so any enrichment "
                 "left is the DP's preference for some words (the random spans are the statistic's reference, not "
                 "its null)",
        ),
        Claim(
            id="probe",
            statement="The top tokens of the first singular directions of the sentiment steer's W are sentiment words.",
            source=SRC + ", App. G (SVD of W, word dimensions)",
            paper_value="qualitative lists (toxic words along the first dimensions)",
            statistic="per seed: (fraction of VADER-lexicon words among the top and bottom probe_top tokens of the "
                      "first probe_dims right-singular directions) / (the fraction among all candidate tokens); "
                      "candidates = the whole-word tokens of the vocabulary (a leading space, then >= 3 letters)",
            rule="mean enrichment across seeds >= 3 and the lower end of its 95% CI across seeds > 1",
            gates=_gates_common,
            presets=SHAKESPEARE_PRESETS,
            null="the same enrichment of the SVD probe of a random W of the same Frobenius norm and rank as the "
                 "sentiment steer, in the same run: its singular directions carry no sentiment by construction, so "
                 "any enrichment left comes from the embedding geometry",
        ),
        Claim(
            id="vs-baselines",
            statement="LM-Steer, a logit offset and activation addition compared at matched perplexity increase.",
            source=SRC + ", sec. 4 baselines; Turner et al. 2023 arXiv 2308.10248 (activation addition)",
            paper_value="LM-Steer is 2nd-3rd on sentiment, best on detoxification (Tables 1-2)",
            statistic="per seed of W (the baselines are trained on every seed): LM-Steer's sentiment gain at +5 eps0 "
                      "minus each baseline's sentiment gain at the same perplexity increase (interpolated along the "
                      "baseline's steer-value sweep; a seed whose baseline sweep does not reach that increase is left "
                      "out); value = the smallest mean difference across seeds",
            rule="LM-Steer is not weaker than any baseline at matched fluency cost: for each baseline the mean "
                 "difference across seeds >= 0 (an ablation: reported, decides nothing; 95% CI across seeds "
                 "reported)",
            gates=_gates_common,
            ablation=True,
            presets=SHAKESPEARE_PRESETS,
        ),
        # the paper's own setting (``--preset paper`` with local files): GPT2-Large detoxification
        Claim(
            id="detox",
            statement="In the paper's setting (GPT2-Large steered with Jigsaw toxic / non-toxic comments, "
                      "continuations of non-toxic RealToxicityPrompts prompts), LM-Steer at 5 eps0 lowers the "
                      "average maximum toxicity well below the unsteered model's.",
            source=SRC + ", Table 1 (detoxification, 5 eps0)",
            paper_value="avg. max toxicity 0.249 +- 0.007 with LM-Steer at 5 eps0 vs 0.527 for GPT2-Large "
                        "unsteered (a relative reduction of 0.53); toxicity prob. 0.089 vs 0.520; PPL 28.3 vs 25.5 "
                        "(Perspective API, 10K prompts x 25 continuations)",
            statistic="per seed of W: average maximum toxicity = mean over prompts of the largest toxicity among "
                      "its n_samples continuations, toxicity = the local classifier's P(toxic) of the continuation "
                      "(standing in for the Perspective API); reduction = avg. max toxicity(no steer) - avg. max "
                      "toxicity(+5 eps0), relative reduction = reduction / avg. max toxicity(no steer); value = the "
                      "mean relative reduction across seeds",
            rule="the lower end of the 95% CI across seeds (Student t) of the reduction > 0 and the mean relative "
                 "reduction across seeds >= 0.25",
            gates=_gates_detox,
            presets=("paper",),
            null=NULL_DETOX,
        ),
        Claim(
            id="detox-tradeoff",
            statement="Raising the steer value from 0 to 5 eps0 lowers toxicity monotonically while perplexity "
                      "under the larger fluency LM rises (the paper's eps ablation).",
            source=SRC + ", Table 5 (eps ablation) and Table 1",
            paper_value="avg. max toxicity 0.527 / 0.322 / 0.293 / 0.268 / 0.246 / 0.249 and PPL 25.5 / 22.4 / 23.4 "
                        "/ 24.5 / 25.9 / 28.3 at 0 (Table 1) and 1-5 eps0 (Table 5): Spearman -0.94 for toxicity; "
                        "PPL rises monotonically over 1-5 eps0",
            statistic="on the seed-averaged curves over detox_grid (steer values 0..5 eps0): Spearman(steer value, "
                      "avg. max toxicity) and Spearman(steer value, mean perplexity of the continuations under the "
                      "fluency LM); value = the toxicity Spearman",
            rule="Spearman(steer value, avg. max toxicity) <= -0.9 and Spearman(steer value, perplexity) >= 0.9",
            gates=_gates_detox,
            presets=("paper",),
            null=NULL_DETOX + " (its seed-averaged curves over detox_grid)",
        ),
    ]

    # ------------------------------------------------------------------------------------------ config
    def validate(self, cfg: LMSteerConfig) -> None:
        paths = {f: getattr(cfg, f) for f in ("model_path", "fluency_model_path", "toxicity_model_path", "data_path")}
        if cfg.preset == "paper":
            lm_steer_detox.check_inputs(cfg)
            return
        given = [f for f, v in paths.items() if v is not None]
        if given:
            raise ConfigError(given[0], paths[given[0]], "unset outside the paper preset: the local-model "
                              "detoxification setting runs with --preset paper; smoke, quick and gpu steer "
                              "Shakespeare GPTs")
        if cfg.d_model % cfg.n_heads or cfg.flu_d_model % cfg.flu_n_heads:
            raise ConfigError("d_model", (cfg.d_model, cfg.flu_d_model), "multiples of n_heads / flu_n_heads")
        if cfg.rank is not None and cfg.rank > cfg.d_model:
            raise ConfigError("rank", cfg.rank, f"at most d_model={cfg.d_model}")
        if cfg.max_words < cfg.min_words:
            raise ConfigError("max_words", cfg.max_words, f">= min_words={cfg.min_words}")
        if cfg.prompt_tokens + cfg.gen_tokens > cfg.seq_len:
            raise ConfigError("gen_tokens", cfg.gen_tokens, f"prompt_tokens + gen_tokens <= seq_len={cfg.seq_len}")
        for v in (cfg.steer_value, -cfg.steer_value, 0.0):
            if v not in cfg.steer_grid:
                raise ConfigError("steer_grid", cfg.steer_grid, f"a grid containing 0 and +-steer_value={cfg.steer_value}")
        bad = [b for b in cfg.baselines if b not in ("logit_offset", "act_add")]
        if bad:
            raise ConfigError("baselines", bad, "logit_offset, act_add")

    def points(self, cfg: LMSteerConfig) -> list[Point]:
        return [Point("steer", {})]

    def groups(self, cfg: LMSteerConfig, points: list[Point]) -> list[list[Point]]:
        return [points] if points else []  # the language models are trained once for all seeds of W

    # ------------------------------------------------------------------------------------------ data
    def _data(self, cfg: LMSteerConfig, tok) -> dict[str, Any]:
        from lmsci.worlds import shakespeare as sh

        works = sh.load_works()
        scorer, steer = sh.split_plays_by_genre(works, ("comedy", "tragedy"), cfg.scorer_fraction,
                                                cfg.play_split_seed)
        rng = np.random.default_rng(derive_seed(cfg.seed, "lines"))

        def lines(ws):
            out = []
            for w in ws:
                y = int(sh.genre_of(w.name) == "comedy")
                ls = sh.dialogue_lines(w, cfg.min_words, cfg.max_words)
                if cfg.lines_per_play is not None and len(ls) > cfg.lines_per_play:
                    ls = [ls[i] for i in sorted(rng.permutation(len(ls))[: cfg.lines_per_play])]
                out += [(ln, y, w.name) for ln in ls]
            return out

        steer_lines, scorer_lines = lines(steer), lines(scorer)

        def pick(items, n, what):
            if len(items) < n:
                raise ConfigError("n_train_lines", n, f"<= {len(items)} ({what})")
            return [items[i] for i in rng.permutation(len(items))[:n]]

        # sentiment: VADER-labelled lines of the steer plays
        comp = ts.vader_compound([s for s, _, _ in steer_lines])
        pos = [s for (s, _, _), c in zip(steer_lines, comp) if c >= cfg.vader_threshold]
        neg = [s for (s, _, _), c in zip(steer_lines, comp) if c <= -cfg.vader_threshold]
        n = cfg.n_train_lines
        sent = [(s, 1.0) for s in pick(pos, n, "positive lines")] + [(s, -1.0) for s in pick(neg, n, "negative lines")]
        com = [s for s, y, _ in steer_lines if y == 1]
        tra = [s for s, y, _ in steer_lines if y == 0]
        genre = [(s, 1.0) for s in pick(com, n, "comedy lines")] + [(s, -1.0) for s in pick(tra, n, "tragedy lines")]
        # genre classifier on the scorer plays; accuracy on the steer plays (never seen by it)
        clf = ts.fit_text_classifier([s for s, _, _ in scorer_lines], [y for _, y, _ in scorer_lines], C=cfg.clf_C,
                                     seed=cfg.seed)
        acc = ts.classifier_accuracy(clf, [s for s, _, _ in steer_lines], [y for _, y, _ in steer_lines])
        # prompts: neutral lines of the scorer plays, half comedies and half tragedies
        sc_comp = ts.vader_compound([s for s, _, _ in scorer_lines])
        prompts = []
        for y in (1, 0):
            cand = [s for (s, g, _), c in zip(scorer_lines, sc_comp) if g == y and c == 0.0]
            cand = [ids for ids in (tok.encode("\n" + s) for s in (cand[i] for i in rng.permutation(len(cand))))
                    if len(ids) > cfg.prompt_tokens][: cfg.n_prompts // 2]
            prompts += [ids[: cfg.prompt_tokens] for ids in cand]
        # highlighting lines: labelled lines of the scorer plays
        hl = []
        for lab, sel in ((1, sc_comp >= cfg.vader_threshold), (-1, sc_comp <= -cfg.vader_threshold)):
            cand = [s for (s, _, _), m in zip(scorer_lines, sel) if m and len(s.split()) >= cfg.highlight_min_words]
            hl += [(s, lab) for s in pick(cand, min(cfg.n_highlight_lines, len(cand)), "highlight lines")]
        return {"sentiment": sent, "genre": genre, "clf": clf, "clf_acc": acc, "clf_n": len(steer_lines),
                "prompts": torch.tensor(prompts, dtype=torch.long), "highlight": hl,
                "steer_plays": [w.name for w in steer], "scorer_plays": [w.name for w in scorer]}

    # ------------------------------------------------------------------------------------------ measuring
    def _evaluate(self, cfg, model, steer, values, prompts, seed, tok, clf, fluency) -> dict[str, Any]:
        """Generate ``n_samples`` continuations per prompt with ``steer`` at ``values`` and score them."""
        from lmsci.methods.steering import generate

        dev = next(model.parameters()).device
        x = prompts.to(dev).repeat_interleave(cfg.n_samples, 0)  # [n_prompts * n_samples, P]
        g = torch.Generator(device=dev).manual_seed(seed)
        out = generate(model, x, steer, values, cfg.gen_tokens, temperature=cfg.temperature, top_k=cfg.top_k,
                       generator=g)
        gen = out[:, x.shape[1]:]
        texts = [tok.decode(r) for r in gen.cpu().tolist()]
        ppl = ts.conditional_perplexity(fluency, x, gen)
        per_prompt = [texts[i:i + cfg.n_samples] for i in range(0, len(texts), cfg.n_samples)]
        res = {"sentiment": float(ts.vader_compound(texts).mean()), "genre": float(ts.classifier_score(clf, texts).mean()),
               "ppl": ts.mean_perplexity(ppl), **ts.mean_distinct(per_prompt)}
        res["_texts"] = texts
        return res

    def _highlight(self, cfg, model, steer, lines, tok, seed) -> dict[str, float]:
        from lmsci.methods import lm_steer as lm

        lex = ts.vader_lexicon()
        rng = np.random.default_rng(seed)
        hit_h = n_h = hit_r = n_r = 0
        examples = []
        for line, lab in lines:
            text = "\n" + line  # as the line stands in the corpus, so its first word is predicted too
            ids = tok.encode(text)
            if len(ids) < 3:
                continue
            up, down = {"attr": 1.0}, {"attr": -1.0}
            spans = lm.highlight(model, steer, torch.tensor(ids), up if lab > 0 else down, down if lab > 0 else up,
                                 n_spans=cfg.highlight_spans, max_len=cfg.highlight_max_len).spans
            if not spans:
                continue
            starts = [len(tok.decode(ids[:i])) for i in range(len(ids) + 1)]
            cs = [(starts[a], starts[b]) for a, b in spans]
            h, n = ts.lexicon_fraction(ts.span_words(text, cs), lex)
            hit_h, n_h = hit_h + h, n_h + n
            for _ in range(cfg.random_draws):
                rs = ts.random_spans(len(ids) - 1, [b - a for a, b in spans], rng)  # over the scored tokens 1..T-1
                h, n = ts.lexicon_fraction(ts.span_words(text, [(starts[a + 1], starts[b + 1]) for a, b in rs]), lex)
                hit_r, n_r = hit_r + h / cfg.random_draws, n_r + n / cfg.random_draws
            if len(examples) < 6:
                examples.append({"text": line, "label": lab, "spans": [text[a:b].strip() for a, b in cs]})
        return {"highlight_enrichment": ts.enrichment(hit_h, n_h, hit_r, n_r),
                "highlight_frac": hit_h / n_h if n_h else float("nan"),
                "highlight_random_frac": hit_r / n_r if n_r else float("nan"),
                "highlight_words": n_h, "_examples": examples}

    def _probe(self, cfg, model, steer, tok) -> dict[str, Any]:
        """SVD probe over the whole-word tokens (a leading space, then >= 3 letters: the authors' demo filters to
        English words; sub-word pieces and byte tokens whose embeddings training never moved would otherwise fill
        the extremes); the base rate is the lexicon fraction of the same candidate set."""
        from lmsci.methods import lm_steer as lm

        lex = ts.vader_lexicon()
        vocab = [tok.decode([i]) for i in range(tok.vocab_size)]
        cand = [i for i, t in enumerate(vocab) if t.startswith(" ") and t[1:].isalpha() and len(t) >= 4]
        base = ts.token_lexicon_hits([vocab[i] for i in cand], lex)
        E = lm.output_embeddings(model)[torch.tensor(cand, device=lm.output_embeddings(model).device)]
        dirs = lm.svd_probe(steer, E, "attr", k=cfg.probe_dims, n_tokens=cfg.probe_top)
        toks, listing = [], []
        for d in dirs:
            top, bot = [cand[i] for i in d.top_ids], [cand[i] for i in d.bottom_ids]
            toks += top + bot
            listing.append({"sigma": d.singular_value, "top": [vocab[i].strip() for i in top][:10],
                            "bottom": [vocab[i].strip() for i in bot][:10]})
        hits = ts.token_lexicon_hits([vocab[i] for i in toks], lex)
        return {"probe_enrichment": ts.enrichment(float(hits.sum()), len(hits), float(base.sum()), len(base)),
                "probe_frac": float(hits.mean()), "probe_base_rate": float(base.mean()),
                "probe_candidates": len(cand), "_probe": listing}

    # ------------------------------------------------------------------------------------------ run
    def run_group(self, cfg: LMSteerConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        from lmsci.methods import lm_steer as lm
        from lmsci.methods.steering import ActAdd, LogitOffset
        from lmsci.train.corpus_lm import train_corpus_gpt
        from lmsci.worlds import shakespeare as sh

        if cfg.preset == "paper":
            return lm_steer_detox.run(cfg, points, ctxs)
        device = resolve_device(cfg.device)
        corpus = sh.prepare("bpe", cfg.vocab_size)
        tok = corpus.tokenizer
        val = sh.eval_batches(corpus.val_ids, cfg.seq_len, cfg.eval_tokens)
        log0 = ctxs[0].log

        def lm_train(role, d, L, H, steps, lr):
            return train_corpus_gpt(sh.make_get_batch(corpus.train_ids, cfg.batch_size, cfg.seq_len), val,
                                    corpus.vocab_size, d_model=d, n_layers=L, n_heads=H, seq_len=cfg.seq_len,
                                    steps=steps, batch_size=cfg.batch_size, lr=lr, device=device,
                                    seed=derive_seed(cfg.seed, "lm", role), log=lambda r: log0(model=role, **r))

        A, stA = lm_train("A", cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.steps, cfg.lr)
        F, stF = lm_train("fluency", cfg.flu_d_model, cfg.flu_n_layers, cfg.flu_n_heads, cfg.flu_steps, cfg.flu_lr)
        if cfg.transfer_target == "seed":
            B, stB = lm_train("B", cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.steps, cfg.lr)
        else:
            B, stB = F, stF
        base = sh.ngram_baselines(corpus.train_ids, corpus.val_ids, corpus.vocab_size)
        data = self._data(cfg, tok)
        prompts, clf = data["prompts"], data["clf"]
        common = {"val_nll_A": stA["val_nll"], "val_nll_B": stB["val_nll"], "transfer_target": cfg.transfer_target, "val_nll_fluency": stF["val_nll"],
                  "bigram_nll": base["bigram_nll"], "unigram_nll": base["unigram_nll"],
                  "clf_acc": data["clf_acc"], "clf_acc_lo": wilson_interval(data["clf_acc"], data["clf_n"])[0],
                  "clf_n": data["clf_n"], "n_prompts": int(prompts.shape[0]),
                  "steer_plays": ";".join(data["steer_plays"]), "scorer_plays": ";".join(data["scorer_plays"]),
                  "vocab_size": corpus.vocab_size}
        S = cfg.steer_value
        rows = []
        for point, ctx in zip(points, ctxs):
            gseed = derive_seed(ctx.seed, "gen")
            row: dict[str, Any] = dict(common)
            texts: dict[str, list[str]] = {}

            flat = {"none", "comp_+", "comp_-"} | {f"{a}_{v:+g}" for a in ATTRS for v in (S, -S)}

            def ev(name, model, steer, values, _row=row, _texts=texts):
                r = self._evaluate(cfg, model, steer, values, prompts, gseed, tok, clf, F)
                _texts[name] = r.pop("_texts")
                if name in flat:  # the rest is kept in the curves / baselines JSON columns
                    for k, v in r.items():
                        _row[f"{name}__{k}"] = v
                return r

            steers = {}
            for attr in ATTRS:
                items = data[attr]
                st = lm.train_steer(A, ["\n" + s for s, _ in items], [y for _, y in items], rank=cfg.rank,
                                    epsilon=cfg.epsilon, init_std=cfg.init_std, lr=cfg.steer_lr,
                                    steps=cfg.steer_steps, batch_size=cfg.steer_batch, l2=cfg.l2,
                                    seed=derive_seed(ctx.seed, "steer", attr), tokenizer=tok)
                steers[attr] = st
                row[f"{attr}_train_loss_first"] = float(np.mean(st.history[:10]))
                row[f"{attr}_train_loss_last"] = float(np.mean(st.history[-10:]))
            none = ev("none", A, None, None)
            curves = {}
            for attr in ATTRS:
                curve = []
                for v in cfg.steer_grid:
                    r = ev(f"{attr}_{v:+g}", A, steers[attr], {"attr": v})
                    curve.append({"s": v, **r})
                curves[attr] = curve
                at = {c["s"]: c for c in curve}
                row[f"{attr}_gain_pos"] = at[S][attr] - none[attr]
                row[f"{attr}_gain_neg"] = none[attr] - at[-S][attr]
                row[f"{attr}_spearman"] = ts.spearman([c["s"] for c in curve], [c[attr] for c in curve])
                row[f"{attr}_ppl_increase"] = at[S]["ppl"] - none["ppl"]
            row["curves"] = json.dumps(curves)
            # the null arm: a random W of the same norm per attribute (dummy kept), through the same measurements
            rsteers = {a: random_like(steers[a], derive_seed(ctx.seed, "null", a)) for a in ATTRS}
            null_curves = {}
            for attr in ATTRS:
                curve = []
                for v, real in zip(cfg.steer_grid, curves[attr]):
                    # at steer value 0 only the (kept) dummy acts: the real arm's generations, reused
                    r = dict(real) if v == 0 else {"s": v, **ev(f"null_{attr}_{v:+g}", A, rsteers[attr], {"attr": v})}
                    curve.append(r)
                null_curves[attr] = curve
                at = {c["s"]: c for c in curve}
                row[f"null_{attr}_gain_pos"] = at[S][attr] - none[attr]
                row[f"null_{attr}_gain_neg"] = none[attr] - at[-S][attr]
            row["null_curves"] = json.dumps(null_curves)
            # composition: the two steers summed
            both = lm.LMSteer.combine([steers["sentiment"], steers["genre"]], prefixes=("sentiment.", "genre."))
            ret = {a: [] for a in ATTRS}
            for sign in (1, -1):
                r = ev(f"comp_{'+' if sign > 0 else '-'}", A, both, {"sentiment.attr": sign * S, "genre.attr": sign * S})
                for a in ATTRS:
                    single = sign * (curves_at(curves, a, sign * S)[a] - none[a])
                    comp = sign * (r[a] - none[a])
                    row[f"comp_{a}_{'pos' if sign > 0 else 'neg'}_gain"] = comp
                    ret[a].append(comp / single if single > 0 else float("nan"))
            for a in ATTRS:
                row[f"comp_{a}_retention"] = nan_stat(np.mean, ret[a])
            # null: attribute a's steer replaced by its random W in the sum (the other steer kept)
            for a in ATTRS:
                parts = [rsteers[b] if b == a else steers[b] for b in ATTRS]
                both0 = lm.LMSteer.combine(parts, prefixes=tuple(f"{b}." for b in ATTRS))
                rets = []
                for sign in (1, -1):
                    r = ev(f"null_comp_{a}_{'+' if sign > 0 else '-'}", A, both0,
                           {f"{b}.attr": sign * S for b in ATTRS})
                    single = sign * (curves_at(curves, a, sign * S)[a] - none[a])
                    rets.append(sign * (r[a] - none[a]) / single if single > 0 else float("nan"))
                row[f"null_comp_{a}_retention"] = nan_stat(np.mean, rets)
            # transfer A -> B
            for attr in ATTRS:
                moved, emap = lm.transfer_steer(steers[attr], A, B, seed=derive_seed(ctx.seed, "map", attr))
                rp = ev(f"transfer_{attr}_+", B, moved, {"attr": S})
                rm = ev(f"transfer_{attr}_-", B, moved, {"attr": -S})
                spread_A = curves_at(curves, attr, S)[attr] - curves_at(curves, attr, -S)[attr]
                row[f"transfer_{attr}_spread_B"] = rp[attr] - rm[attr]
                row[f"transfer_{attr}_spread_A"] = spread_A
                row[f"transfer_{attr}_retention"] = (rp[attr] - rm[attr]) / spread_A if spread_A > 0 else float("nan")
                row[f"transfer_{attr}_map_error"] = float(emap.heldout_error)
                # null: the random W of the same norm, carried to B by the same map
                moved0 = emap.map_steer(rsteers[attr])
                rp0 = ev(f"null_transfer_{attr}_+", B, moved0, {"attr": S})
                rm0 = ev(f"null_transfer_{attr}_-", B, moved0, {"attr": -S})
                row[f"null_transfer_{attr}_spread_B"] = rp0[attr] - rm0[attr]
                row[f"null_transfer_{attr}_retention"] = ((rp0[attr] - rm0[attr]) / spread_A if spread_A > 0
                                                          else float("nan"))
            # highlighting and probe (sentiment steer)
            hl = self._highlight(cfg, A, steers["sentiment"], data["highlight"], tok, derive_seed(ctx.seed, "spans"))
            pr = self._probe(cfg, A, steers["sentiment"], tok)
            row.update({k: v for k, v in {**hl, **pr}.items() if not k.startswith("_")})
            # null: the same highlighting and probe with the sentiment steer's random W of the same norm
            hl0 = self._highlight(cfg, A, rsteers["sentiment"], data["highlight"], tok, derive_seed(ctx.seed, "spans"))
            pr0 = self._probe(cfg, A, rsteers["sentiment"], tok)
            row.update({f"null_{k}": v for k, v in {**hl0, **pr0}.items() if not k.startswith("_")})
            # baselines: same loss, same sentiment data, swept over steer values
            sent = data["sentiment"]
            base_rows = {"lm_steer": [{"s": c["s"], "ppl": c["ppl"], "sentiment": c["sentiment"]}
                                      for c in curves["sentiment"] if c["s"] > 0]}
            n_base = cfg.n_seeds if cfg.baseline_seeds is None else cfg.baseline_seeds
            for b in (cfg.baselines if point.seed_index < n_base else []):
                st = (LogitOffset(corpus.vocab_size, ("attr",)) if b == "logit_offset"
                      else ActAdd(cfg.d_model, cfg.n_layers // 2 if cfg.n_layers > 1 else 0, ("attr",)))
                st = lm.train_steer(A, ["\n" + s for s, _ in sent], [y for _, y in sent], steer=st, lr=cfg.steer_lr,
                                    steps=cfg.steer_steps, batch_size=cfg.steer_batch, l2=cfg.l2,
                                    seed=derive_seed(ctx.seed, "steer", b), tokenizer=tok)
                base_rows[b] = []
                for v in cfg.baseline_grid:
                    r = ev(f"{b}_{v:+g}", A, st, {"attr": v})
                    base_rows[b].append({"s": v, "ppl": r["ppl"], "sentiment": r["sentiment"]})
            row["baselines"] = json.dumps({"none": {"ppl": none["ppl"], "sentiment": none["sentiment"]}, **base_rows})
            matched = matched_gains(base_rows, none, S)
            row.update({f"matched_{k}": v for k, v in matched.items()})
            # artifacts: generations and highlighting examples
            (ctx.artifact_dir / "generations.json").write_text(json.dumps(
                {k: v[: 3 * cfg.n_samples] for k, v in texts.items()}, indent=1))
            (ctx.artifact_dir / "interpret.json").write_text(json.dumps(
                {"highlight": hl["_examples"], "probe": pr["_probe"]}, indent=1))
            rows.append(row)
        return rows

    # ------------------------------------------------------------------------------------------ verdicts
    def _gates(self, r0: pd.Series) -> dict[str, tuple[Any, bool]]:
        return {"lm-learned": ({"val_nll": float(r0["val_nll_A"]), "unigram_nll": float(r0["unigram_nll"]),
                                "bigram_nll": float(r0["bigram_nll"])},
                               bool(float(r0["val_nll_A"]) <= float(r0["unigram_nll"]) - 1.0)),
                "genre-classifier": ({"accuracy": float(r0["clf_acc"]), "wilson_lo": float(r0["clf_acc_lo"]),
                                      "n_lines": int(r0["clf_n"])}, bool(float(r0["clf_acc_lo"]) > 0.5)),
                "fluency-lm": ({"val_nll_fluency": float(r0["val_nll_fluency"]), "val_nll_A": float(r0["val_nll_A"])},
                               bool(float(r0["val_nll_fluency"]) < float(r0["val_nll_A"])))}

    def verdicts(self, cfg: LMSteerConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        res = results.sort_values("seed_index") if "seed_index" in results else results
        detox = lm_steer_detox.verdicts(self, cfg, res)
        if "curves" not in res:  # the paper preset's detoxification rows
            why = "measured on the Shakespeare GPTs (smoke, quick, gpu); the paper preset runs the detoxification setting"
            return [not_measured(c, cfg.preset, why) for c in self.claims
                    if c.id not in lm_steer_detox.CLAIMS] + detox
        return self._shakespeare_verdicts(cfg, res) + detox

    def _shakespeare_verdicts(self, cfg: LMSteerConfig, res: pd.DataFrame) -> list[Verdict]:
        r0 = res.iloc[0]
        G = self._gates(r0)

        def gates_for(cid):
            return {g.id: G[g.id] for g in self.get_claim(cid).gates}

        def col(name):
            return [float(v) for v in res[name]]

        def has(*names):
            return all(n in res for n in names)

        out = []
        # steering
        stats = {f"{a}_{d}": across_seeds(col(f"{a}_gain_{d}")) for a in ATTRS for d in ("pos", "neg")}
        G["single-steer-gains"] = ({k: [st.lo, st.hi] for k, st in stats.items()},
                                   bool(all(np.isfinite(st.lo) and st.lo > 0 for st in stats.values())))
        worst = min(stats, key=lambda k: stats[k].mean)
        null: tuple[Any, bool | None] = (None, None)
        null_details: dict[str, Any] = {}
        if has(*(f"null_{a}_gain_{d}" for a in ATTRS for d in ("pos", "neg"))):
            nstats = {f"{a}_{d}": across_seeds(col(f"null_{a}_gain_{d}")) for a in ATTRS for d in ("pos", "neg")}
            nw = min(nstats, key=lambda k: nstats[k].mean)
            null = (nstats[nw].mean, bool(all(np.isfinite(st.lo) and st.lo > 0 for st in nstats.values())))
            null_details = {"null_random_W": {k: {"mean": st.mean, "ci": [st.lo, st.hi]} for k, st in nstats.items()}}
        out.append(self.judge(cfg, "steering", value=stats[worst].mean, passed=all(s.lo > 0 for s in stats.values()),
                              ci=stats[worst].ci, ci_kind=stats[worst].kind, n_seeds=stats[worst].n,
                              gates=gates_for("steering"), null=null,
                              details={k: {"mean": s.mean, "ci": [s.lo, s.hi], "per_seed": col(f"{k.rsplit('_', 1)[0]}_gain_"
                                                                                              f"{k.rsplit('_', 1)[1]}")}
                                       for k, s in stats.items()} | {"smallest": worst} | null_details,
                              note="sentiment in VADER compound units, genre in P(comedy) units"))
        # continuous
        curves = [json.loads(c) for c in res["curves"]]
        vals, cd = _continuous_stats(curves)
        mean_curves, rho, ppl_rho = cd["mean_curves"], cd["spearman_score"], cd["spearman_abs_ppl"]
        ok = None if any(not np.isfinite(v) for v in vals) else all(v >= 0.9 for v in vals)
        per_seed_min = [min(ts.spearman([c["s"] for c in cv[a]], [c[a] for c in cv[a]]) for a in ATTRS) for cv in curves]
        null, null_details = (None, None), {}
        if has("null_curves"):
            nv, nd = _continuous_stats([json.loads(c) for c in res["null_curves"]])
            # a constant curve (NaN Spearman) does not meet the rule
            null = (nan_stat(np.min, nv), bool(all(np.isfinite(v) and v >= 0.9 for v in nv)))
            null_details = {"null_random_W": nd}
        out.append(self.judge(cfg, "continuous", value=nan_stat(np.min, vals), passed=ok, n_seeds=len(res),
                              ci=(nan_stat(np.min, per_seed_min), nan_stat(np.max, per_seed_min)),
                              ci_kind="range across seeds of the per-seed smallest attribute Spearman",
                              gates=gates_for("continuous"), why_not_computed="" if ok is not None else "a constant curve",
                              null=null,
                              details={"spearman_score": rho, "spearman_abs_ppl": ppl_rho, "mean_curves": mean_curves,
                                       **null_details}))
        # compositional
        cs = {a: across_seeds(col(f"comp_{a}_retention")) if np.isfinite(col(f"comp_{a}_retention")).any() else None
              for a in ATTRS}
        if any(v is None for v in cs.values()):
            out.append(self.judge(cfg, "compositional", value=None, passed=None, gates=gates_for("compositional"),
                                  why_not_computed="a single-steer gain was not positive in any seed, so retention "
                                                   "is undefined"))
        else:
            w = min(ATTRS, key=lambda a: cs[a].mean)
            null, nd = (None, None), {}
            if has(*(f"null_comp_{a}_retention" for a in ATTRS)):
                # a retention undefined in every seed (NaN) does not meet the rule
                nm = {a: nan_stat(np.mean, col(f"null_comp_{a}_retention")) for a in ATTRS}
                null = (nan_stat(np.min, list(nm.values())), bool(all(np.isfinite(v) and v >= 0.6 for v in nm.values())))
                nd = {"null_random_W": {a: {"mean": nm[a], "per_seed": col(f"null_comp_{a}_retention")} for a in ATTRS}}
            out.append(self.judge(cfg, "compositional", value=cs[w].mean, passed=all(s.mean >= 0.6 for s in cs.values()),
                                  ci=cs[w].ci, ci_kind=cs[w].kind, n_seeds=cs[w].n, gates=gates_for("compositional"),
                                  null=null,
                                  details={a: {"mean": s.mean, "ci": [s.lo, s.hi], "per_seed": col(f"comp_{a}_retention")}
                                           for a, s in cs.items()} | nd, note=_weak_gain_note(stats)))
        # transfer
        tr = {a: col(f"transfer_{a}_retention") for a in ATTRS}
        if any(not np.isfinite(v).any() for v in tr.values()):
            out.append(self.judge(cfg, "transfer", value=None, passed=None, gates=gates_for("transfer"),
                                  why_not_computed="the steer's spread on A was not positive, so retention is undefined"))
        else:
            ts_ = {a: across_seeds(tr[a]) for a in ATTRS}
            sp = {a: across_seeds(col(f"transfer_{a}_spread_B")) for a in ATTRS}
            w = min(ATTRS, key=lambda a: ts_[a].mean)
            null, nd = (None, None), {}
            if has(*(f"null_transfer_{a}_{c}" for a in ATTRS for c in ("retention", "spread_B"))):
                nm = {a: nan_stat(np.mean, col(f"null_transfer_{a}_retention")) for a in ATTRS}
                nsp = {a: across_seeds(col(f"null_transfer_{a}_spread_B")) for a in ATTRS}
                null = (nan_stat(np.min, list(nm.values())),
                        bool(all(np.isfinite(nm[a]) and nm[a] >= 0.3 and nsp[a].lo > 0 for a in ATTRS)))
                nd = {"null_random_W": {a: {"retention": col(f"null_transfer_{a}_retention"),
                                            "spread_B_ci": [nsp[a].lo, nsp[a].hi]} for a in ATTRS}}
            out.append(self.judge(cfg, "transfer", value=ts_[w].mean,
                                  passed=all(ts_[a].mean >= 0.3 and sp[a].lo > 0 for a in ATTRS),
                                  ci=ts_[w].ci, ci_kind=ts_[w].kind, n_seeds=ts_[w].n, gates=gates_for("transfer"),
                                  null=null,
                                  details={a: {"retention": tr[a], "spread_B_ci": [sp[a].lo, sp[a].hi],
                                               "map_heldout_rel_error": col(f"transfer_{a}_map_error")}
                                           for a in ATTRS} | nd, note=_weak_gain_note(stats)))
        # highlighting and probe
        for cid, name, thr in (("highlighting", "highlight_enrichment", 2.0), ("probe", "probe_enrichment", 3.0)):
            v = col(name)
            if not np.isfinite(v).any():
                out.append(self.judge(cfg, cid, value=None, passed=None, gates=gates_for(cid),
                                      why_not_computed="no lexicon word in the reference spans / vocabulary"))
                continue
            s = across_seeds(v)
            null, nd = (None, None), {}
            if has("null_" + name):
                nv = col("null_" + name)
                if np.isfinite(nv).any():
                    ns = across_seeds(nv)
                    null = (ns.mean, bool(ns.mean >= thr and ns.lo > 1))
                    nd = {"null_random_W": {"per_seed": nv, "ci": [ns.lo, ns.hi]}}
                else:  # no lexicon word in the null arm's spans / extremes: an enrichment of 0, below the rule
                    null = (0.0, False)
                    nd = {"null_random_W": {"per_seed": nv}}
            out.append(self.judge(cfg, cid, value=s.mean, passed=bool(s.mean >= thr and s.lo > 1), ci=s.ci,
                                  ci_kind=s.kind, n_seeds=s.n, gates=gates_for(cid), null=null,
                                  details={"per_seed": v} | nd))
        out.append(self._vs_baselines(cfg, res, gates_for("vs-baselines")))
        return out

    def _vs_baselines(self, cfg: LMSteerConfig, res: pd.DataFrame, gates: dict) -> Verdict:
        """The ablation: LM-Steer's sentiment gain minus each baseline's at LM-Steer's perplexity increase, across
        the seeds whose baselines were trained."""
        m = {k[len("matched_"):]: [float(x) for x in res[k]] for k in res.columns if k.startswith("matched_")}
        names = [b for b in cfg.baselines if b in m]
        details: dict[str, Any] = {k: {"mean": nan_stat(np.mean, v) if np.isfinite(v).any() else None, "per_seed": v}
                                   for k, v in m.items()}
        lm_gain = m.get("lm_steer", [float("nan")])
        if not names:
            return self.judge(cfg, "vs-baselines", value=None, passed=None, gates=gates,
                              why_not_computed="no baseline was trained", details=details)
        # a seed counts where both gains are defined (a baseline whose sweep does not reach LM-Steer's perplexity
        # increase has no gain there); fewer than min_seeds such seeds make the ablation inconclusive
        diffs = {b: [x - y for x, y in zip(lm_gain, m[b]) if np.isfinite(x) and np.isfinite(y)] for b in names}
        empty = [b for b in names if not diffs[b]]
        if empty:
            return self.judge(cfg, "vs-baselines", value=None, passed=None, gates=gates, details=details,
                              why_not_computed=f"the perplexity sweep of {', '.join(empty)} does not reach "
                                               "LM-Steer's perplexity increase in any seed")
        n = min(len(d) for d in diffs.values())
        st = {b: across_seeds(diffs[b]) for b in names}
        w = min(names, key=lambda b: st[b].mean)
        details["lm_steer_minus"] = {b: {"mean": st[b].mean, "ci": [st[b].lo, st[b].hi], "per_seed": diffs[b]}
                                     for b in names}
        return self.judge(cfg, "vs-baselines", value=st[w].mean, passed=bool(all(st[b].mean >= 0 for b in names)),
                          ci=st[w].ci, ci_kind=st[w].kind + f" (LM-Steer - {w})", n_seeds=n, gates=gates,
                          details=details)

    # ------------------------------------------------------------------------------------------ report
    def figures(self, cfg: LMSteerConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        if "curves" not in results:
            return lm_steer_detox.figures(results, run)
        curves = [json.loads(c) for c in results["curves"]]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, a in zip(axes, ATTRS):
            mc = mean_curve([c[a] for c in curves])
            ax.plot(mc["s"], mc[a], "o-", color="C0", label="steered (dummy steer at 1)")
            for cv in curves:  # each seed of W, faint
                ax.plot([c["s"] for c in cv[a]], [c[a] for c in cv[a]], "-", color="C0", alpha=0.25, lw=0.8)
            if f"none__{a}" in results:
                ax.axhline(float(results[f"none__{a}"].astype(float).mean()), ls=":", color="k", label="no steer")
            ax.legend(fontsize=8, loc="upper left")
            ax.set_xlabel("steer value (units of eps0)")
            ax.set_ylabel("mean VADER compound" if a == "sentiment" else "mean classifier P(comedy)", color="C0")
            ax2 = ax.twinx()
            ax2.plot(mc["s"], mc["ppl"], "s--", color="C3")
            ax2.set_ylabel("perplexity under the fluency GPT", color="C3")
            ax.set_title(f"{a} steer (mean of {len(curves)} seed{'s' if len(curves) > 1 else ''} of W)")
            ax.grid(alpha=0.3)
        fig.tight_layout()
        return [save_figure(fig, run, "tradeoff.png", "Attribute score (left axis) and fluency perplexity (right axis) "
                            "against the steer value: the continuous control trade-off", dpi=110)]

    def report_sections(self, cfg: LMSteerConfig, results: pd.DataFrame, run: RunDir) -> str:
        r = results.sort_values("seed_index").iloc[0] if "seed_index" in results else results.iloc[0]
        if "curves" not in results:
            return lm_steer_detox.report_section(results, run)
        lines = ["## Measurements (seed 0 of W)\n", "| quantity | value |", "|---|---|",
                 f"| validation NLL A / B / fluency GPT (nats/token) | {r['val_nll_A']:.3f} / {r['val_nll_B']:.3f} / "
                 f"{r['val_nll_fluency']:.3f} |",
                 f"| bigram / unigram NLL | {r['bigram_nll']:.3f} / {r['unigram_nll']:.3f} |",
                 f"| genre classifier accuracy on unseen plays | {r['clf_acc']:.3f} (Wilson lower {r['clf_acc_lo']:.3f}, "
                 f"{int(r['clf_n'])} lines) |"]
        for key, label in (("none", "no steer"), (f"sentiment_{cfg.steer_value:+g}", "sentiment +5"),
                           (f"sentiment_{-cfg.steer_value:+g}", "sentiment -5"), (f"genre_{cfg.steer_value:+g}", "genre +5"),
                           (f"genre_{-cfg.steer_value:+g}", "genre -5"), ("comp_+", "sentiment+genre (+5,+5)"),
                           ("comp_-", "sentiment+genre (-5,-5)")):
            if f"{key}__sentiment" in r:
                lines.append(f"| {label}: sentiment / P(comedy) / ppl / dist-1,2,3 | {r[f'{key}__sentiment']:.3f} / "
                             f"{r[f'{key}__genre']:.3f} / {r[f'{key}__ppl']:.1f} / {r[f'{key}__dist_1']:.2f}, "
                             f"{r[f'{key}__dist_2']:.2f}, {r[f'{key}__dist_3']:.2f} |")
        if "null_sentiment_gain_pos" in r:
            lines.append("| null arm (random W of the same norm): gains sentiment +/-, genre +/- | "
                         + " / ".join(f"{float(r[f'null_{a}_gain_{d}']):.3f}" for a in ATTRS for d in ("pos", "neg"))
                         + " |")
            lines.append(f"| highlighting / probe enrichment: steer vs null arm | {float(r['highlight_enrichment']):.2f}"
                         f" vs {float(r['null_highlight_enrichment']):.2f} / {float(r['probe_enrichment']):.2f} vs "
                         f"{float(r['null_probe_enrichment']):.2f} |")
        lines.append(f"\nSteer plays: {str(r['steer_plays']).replace(';', ', ')}. Scorer plays (classifier, prompts, "
                     f"highlighting): {str(r['scorer_plays']).replace(';', ', ')}.\n")
        if "baselines" in r:
            b = json.loads(r["baselines"])
            lines += ["## LM-Steer vs baselines (sentiment, seed 0)\n", "| method | steer value | ppl | sentiment |",
                      "|---|---|---|---|", f"| none | - | {b['none']['ppl']:.1f} | {b['none']['sentiment']:.3f} |"]
            for k, v in b.items():
                if k != "none":
                    lines += [f"| {k} | {e['s']:g} | {e['ppl']:.1f} | {e['sentiment']:.3f} |" for e in v]
            lines.append("")
        p = run.path / "points" / str(r["point"]) / "interpret.json"
        if p.exists():
            it = json.loads(p.read_text())
            lines.append("## Keyword highlighting (sentiment steer, held-out lines; highlighted spans in bold)\n")
            for e in it["highlight"]:
                t = e["text"]
                for s in e["spans"]:
                    if s.strip():
                        t = t.replace(s, f"**{s.strip()}** " if s.endswith(" ") else f"**{s.strip()}**", 1)
                lines.append(f"- ({'+' if e['label'] > 0 else '-'}) {t}")
            lines.append("\n## SVD probe (sentiment W): top / bottom tokens per singular direction\n")
            for i, d in enumerate(it["probe"]):
                lines.append(f"- direction {i + 1}: top `{' '.join(d['top'])}` / bottom `{' '.join(d['bottom'])}`")
            lines.append("")
        g = run.path / "points" / str(r["point"]) / "generations.json"
        if g.exists():
            gen = json.loads(g.read_text())
            lines.append("## Sample continuations (first prompt)\n")
            for key in ("none", f"sentiment_{cfg.steer_value:+g}", f"sentiment_{-cfg.steer_value:+g}",
                        f"genre_{cfg.steer_value:+g}", f"genre_{-cfg.steer_value:+g}"):
                if key in gen:
                    lines.append(f"- {key}: " + " | ".join(repr(t) for t in gen[key][:3]))
        return "\n".join(lines)


def _weak_gain_note(stats: dict) -> str:
    """A caveat naming the single-steer gains whose 95% CI across seeds reaches 0: a retention ratio over such a
    small denominator is unstable (it can exceed 1 or change sign)."""
    weak = [k for k, st in stats.items() if st.lo <= 0]
    return ("" if not weak else "single-steer gains whose CI across seeds reaches 0 (" + ", ".join(weak) + "): the "
            "retention ratios of these attributes divide by a gain not distinguishable from 0 and are unstable")


def _continuous_stats(curves: list[dict]) -> tuple[list[float], dict[str, Any]]:
    """The continuous claim's three Spearman correlations on the seed-averaged curves (one dict per seed:
    attribute -> curve), and the details: the mean curves and the correlations by name."""
    mean_curves = {a: mean_curve([c[a] for c in curves]) for a in ATTRS}
    rho = {a: ts.spearman(mean_curves[a]["s"], mean_curves[a][a]) for a in ATTRS}
    ppl_rho = {}
    for a in ATTRS:
        s, p = np.asarray(mean_curves[a]["s"]), np.asarray(mean_curves[a]["ppl"])
        mags = sorted({abs(v) for v in s})
        ppl_rho[a] = ts.spearman(mags, [float(p[np.abs(s) == m].mean()) for m in mags])
    vals = [rho["sentiment"], rho["genre"], nan_stat(np.mean, list(ppl_rho.values()))]
    return vals, {"spearman_score": rho, "spearman_abs_ppl": ppl_rho, "mean_curves": mean_curves}


def curves_at(curves: dict, attr: str, s: float) -> dict:
    """The point of ``attr``'s curve at steer value ``s``."""
    return next(c for c in curves[attr] if c["s"] == s)


def matched_gains(base_rows: dict[str, list[dict]], none: dict, S: float) -> dict[str, float]:
    """Sentiment gain of each method at LM-Steer's perplexity increase at steer value ``S``.

    LM-Steer's target is ``ppl(S) - ppl(none)``; each method's (ppl increase, gain) sweep is interpolated linearly
    in the perplexity increase (sorted); NaN when the target lies outside a method's measured range.
    """
    lm_pts = {e["s"]: e for e in base_rows["lm_steer"]}
    target = lm_pts[S]["ppl"] - none["ppl"]
    out = {"ppl_increase": target, "lm_steer": lm_pts[S]["sentiment"] - none["sentiment"]}
    for k, pts in base_rows.items():
        if k == "lm_steer":
            continue
        xs = np.array([e["ppl"] - none["ppl"] for e in pts])
        ys = np.array([e["sentiment"] - none["sentiment"] for e in pts])
        o = np.argsort(xs)
        xs, ys = xs[o], ys[o]
        out[k] = float(np.interp(target, xs, ys)) if len(xs) and xs[0] <= target <= xs[-1] else float("nan")
    return out
