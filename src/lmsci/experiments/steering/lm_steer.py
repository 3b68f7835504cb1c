"""Experiment ``lm-steer``: LM-Steer on GPTs trained on Shakespeare, measured with offline scorers on real text.

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798 (v1
"LM-Switch": sec. 3.3 the steer ``e_v <- (I + eps W) e_v``; sec. 4-5 steering, continuous control, composition,
transfer (App. F), keyword highlighting and the SVD probe (App. G); Tables 1, 2 and 5); seed lectures 000/001
sec. 2.2; spec ``shared/research/seed_authors_code.md`` sec. 1; issue 15. The method lives in
:mod:`lmsci.methods.lm_steer` (baselines in :mod:`lmsci.methods.steering`); the scorers in
:mod:`lmsci.measure.text_scores`.

Set-up (every number a config field):

* **Language models.** BPE GPTs trained from scratch on the training works of the Shakespeare corpus
  (:func:`lmsci.worlds.shakespeare.prepare`; ``model``: GPTSpec, ``train``: TrainSpec,
  :func:`~lmsci.experiments.steering._lm_steer_run.train_language_models`): the steered GPT ``A``
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
  between their output-embedding spaces (:func:`~lmsci.methods.lm_steer_transfer.transfer_steer`), gain = spread
  ``score(+5) - score(-5)`` on ``B`` over the same spread on ``A``. **Highlighting**: on held-out VADER-labelled
  lines, the DP spans (:func:`~lmsci.methods.lm_steer_analysis.highlight`) of ``log P(+1) - log P(-1)`` (sign by
  the line's label), words in them vs in random spans of the same lengths, the fraction in VADER's lexicon.
  **Probe**: the top and bottom ``probe_top`` tokens of the first ``probe_dims`` singular directions of the
  sentiment ``W`` (:func:`~lmsci.methods.lm_steer_analysis.svd_probe`), the fraction that are VADER words vs the
  vocabulary's. **Baselines** (the ablation ``vs-baselines``, decides nothing): a logit offset and activation
  addition trained with the same loss on the sentiment data on every seed of W, swept over steer values; LM-Steer's
  sentiment gain at 5 eps0 minus each baseline's at the same perplexity increase (rule: not negative on average).
* **Null arm** (every claim; the arm ``null`` of the sweep, one row per seed of W beside the real arm's, computed in
  the same pass over the seed, so nothing is trained twice): each attribute's steer W replaced by a random W of
  the same Frobenius norm and rank (:func:`random_like`; the trained dummy steer kept, so steer value 0 is the same
  model), measured with the same prompts and sampling seeds: its gains and curves (steering, continuous); the
  composition with the attribute's own steer replaced by it (compositional); carried to B by the same map
  (transfer); its highlighting spans and SVD probe (highlighting, probe: the random spans and the vocabulary's base
  rate are the statistics' references, the random W their null).

The ``paper`` preset runs the paper's own setting instead, GPT2-Large detoxification, from local files only
(:mod:`lmsci.experiments.steering.lm_steer_detox`: ``model_path``, ``fluency_model_path``, ``toxicity_model_path``,
``data_path``; a local toxicity classifier stands in for the Perspective API); it judges the claims ``detox`` and
``detox-tradeoff``, which only it measures, and without those paths it refuses with a ConfigError before any work.
The Shakespeare claims are not measured at the paper preset and are registered for quick and gpu only. (The
detoxification rows keep their random-W null arm in ``null_*`` columns: that setting runs from local files only.)

Escape hatch (``hand_verdicts``; every claim): each registered rule is a conjunction the claims engine's one rule on
one per-seed statistic cannot express. ``steering``: a CI above 0 for each of four gains (two attributes x two
directions); ``continuous``: three Spearman correlations computed on the seed-averaged curves (not per seed), each
>= 0.9; ``compositional``: each attribute's mean retention >= 0.6 (two statistics); ``transfer``: per attribute a
mean retention >= 0.3 and a CI of the spread on B above 0 (four conditions); ``highlighting`` and ``probe``: a mean
enrichment at least a threshold and a CI lower end above 1 on the same statistic (two rules); ``vs-baselines``: per
baseline a mean over the seeds where both gains are defined; ``detox``: a CI of the reduction above 0 and a mean
relative reduction >= 0.25; ``detox-tradeoff``: two Spearman correlations on seed-averaged curves.
"""

from __future__ import annotations

import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Verdict, not_measured
from lmsci.claims.engine import arm_rows
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms
from lmsci.errors import ConfigError
from lmsci.experiments.registry import register
from lmsci.experiments.steering import _lm_steer_figures, _lm_steer_run, lm_steer_detox
from lmsci.experiments.steering._lm_steer_verdicts import ATTRS, NULL_CAN_MEET, shakespeare_verdicts
from lmsci.models.gpt import GPTSpec
from lmsci.runs import RunDir, resolve_device
from lmsci.train.trainer import TrainSpec

__all__ = ["ATTRS", "LMSteerConfig", "LMSteerExperiment"]

SRC = "Han et al., 'Word Embeddings Are Steers for Language Models', ACL 2024, arXiv 2305.12798"


class LMSteerConfig(ExperimentConfig):
    """Configuration of ``lm-steer`` (field defaults = the ``quick`` preset).

    Attributes:
        model: the steered GPT ``A`` and the transfer target ``B`` (:class:`~lmsci.models.gpt.GPTSpec`); the fluency
            GPT is this architecture with ``flu_d_model``, ``flu_n_layers`` and ``flu_n_heads``.
        train: their optimizer and schedule (:class:`~lmsci.train.trainer.TrainSpec`: ``batch_size`` windows of
            ``seq_len`` BPE tokens per step); the fluency GPT trains ``flu_steps`` steps at ``flu_lr`` with the
            same batch and schedule.
    """

    n_seeds: int = Field(3, ge=1, le=100, description="training seeds of the steers W")
    threads: int = Field(1, ge=0)
    # corpus and language models
    vocab_size: int = Field(1024, ge=257, le=65536, description="BPE vocabulary")
    seq_len: int = Field(64, ge=16)
    model: GPTSpec = GPTSpec(n_layers=2, n_heads=4, d_model=64)
    train: TrainSpec = TrainSpec(steps=1000, batch_size=16, lr=3e-3, warmup_steps=100)
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
        "smoke": {"n_seeds": 2, "vocab_size": 1024, "lines_per_play": 60, "seq_len": 32, "model.d_model": 16,
                  "model.n_layers": 1, "model.n_heads": 2, "train.steps": 4, "train.batch_size": 4,
                  "train.warmup_steps": 0, "flu_d_model": 16, "flu_n_layers": 1, "flu_n_heads": 2, "flu_steps": 4,
                  "eval_tokens": 200, "n_train_lines": 16, "steer_steps": 3, "steer_batch": 8, "n_prompts": 4,
                  "n_samples": 2, "gen_tokens": 4, "prompt_tokens": 3, "steer_grid": [-5.0, 0.0, 5.0],
                  "n_highlight_lines": 3, "random_draws": 2, "probe_dims": 1, "probe_top": 5,
                  "baseline_grid": [1.0, 2.0]},
        "quick": {},
        "gpu": {"threads": 0, "vocab_size": 4096, "seq_len": 128, "model.d_model": 256, "model.n_layers": 4,
                "model.n_heads": 8, "train.steps": 4000, "train.batch_size": 32, "flu_d_model": 512, "flu_n_layers": 8,
                "flu_n_heads": 8, "flu_steps": 4000, "n_train_lines": 2000, "steer_steps": 1000, "n_prompts": 100,
                "n_samples": 25, "n_highlight_lines": 300, "probe_dims": 5},
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
                     "gpu": "~7 min on one H100, estimated, not measured (no GPU in S52; the old ~25 min had no "
                            "derivation): the GPTs A (4 x 256) and F (8 x 512), 4,000 steps each, 160 s by "
                            "lmsci.train.estimate; per seed of W ~65 generation-and-scoring passes of 100 prompts x 25 "
                            "samples at ~0.6 s (VADER + classifier + Dist 0.43 s per 2,500 texts in a CPU pilot, "
                            "decoding, GPU generation and perplexity), 4 steers x 1,000 steps at ~5 ms and two "
                            "highlighting passes, ~75 s; x 3 seeds + ~40 s of data and BPE start-up",
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
            null_can_meet=NULL_CAN_MEET["steering"],
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
            null_can_meet=NULL_CAN_MEET["continuous"],
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
            null_can_meet=NULL_CAN_MEET["compositional"],
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
            null_can_meet=NULL_CAN_MEET["transfer"],
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
            null_can_meet=NULL_CAN_MEET["highlighting"],
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
            null_can_meet=NULL_CAN_MEET["probe"],
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
            null_can_meet=NULL_CAN_MEET["detox"],
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
            null_can_meet=NULL_CAN_MEET["detox-tradeoff"],
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
        if cfg.flu_d_model % cfg.flu_n_heads:
            raise ConfigError("flu_d_model", cfg.flu_d_model, f"a multiple of flu_n_heads={cfg.flu_n_heads}")
        if cfg.rank is not None and cfg.rank > cfg.model.d_model:
            raise ConfigError("rank", cfg.rank, f"at most model.d_model={cfg.model.d_model}")
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
        if cfg.preset == "paper":  # the detoxification setting: its random-W null arm is in null_* columns
            return [Point("steer", {})]
        return cross_arms([Point("steer", {})], ("real", "null"))  # the trained steers / random W of the same norm

    def groups(self, cfg: LMSteerConfig, points: list[Point]) -> list[list[Point]]:
        return [points] if points else []  # the language models are trained once for all seeds of W and both arms

    # ------------------------------------------------------------------------------------------ run
    def run_group(self, cfg: LMSteerConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        """Train the language models once, prepare the attribute data, then measure every seed of W through the
        phases of :mod:`lmsci.experiments.steering._lm_steer_run` (one pass per seed gives both arms' rows: the
        random W is measured beside the trained steers, with the same prompts and sampling seeds); at the paper
        preset, the detoxification setting (:func:`lm_steer_detox.run`)."""
        from lmsci.worlds import shakespeare as sh

        if cfg.preset == "paper":
            return lm_steer_detox.run(cfg, points, ctxs)
        device = resolve_device(cfg.device)
        corpus = sh.prepare("bpe", cfg.vocab_size)
        tok = corpus.tokenizer
        lms = _lm_steer_run.train_language_models(cfg, corpus, device, ctxs[0].log)
        base = sh.ngram_baselines(corpus.train_ids, corpus.val_ids, corpus.vocab_size)
        data = _lm_steer_run.prepare_data(cfg, tok)
        common = _lm_steer_run.shared_columns(cfg, corpus, lms, base, data)
        by_seed: dict[int, dict[str, tuple[Point, PointContext]]] = {}
        for point, ctx in zip(points, ctxs):
            by_seed.setdefault(point.seed_index, {})[point.arm] = (point, ctx)
        rows: dict[tuple[int, str], dict] = {}
        for k, arms in by_seed.items():
            point, ctx = arms.get("real", arms.get("null"))
            row = _lm_steer_run.run_seed(cfg, point, ctx, lms, data, common, tok, corpus.vocab_size)
            rows[(k, "real")] = {k_: v for k_, v in row.items() if not k_.startswith("null_")}
            rows[(k, "null")] = {**common, **{k_[len("null_"):]: v for k_, v in row.items() if k_.startswith("null_")}}
        return [rows[(p.seed_index, p.arm)] for p in points]

    # ------------------------------------------------------------------------------------------ verdicts
    def hand_verdicts(self, cfg: LMSteerConfig, results: pd.DataFrame, run: RunDir | None) -> list[Verdict]:
        """Every claim's verdict in claim order, by hand (the module docstring says why): the Shakespeare claims
        (:mod:`lmsci.experiments.steering._lm_steer_verdicts`, on the real and the null arm's rows; not measured at
        the paper preset) and the detoxification claims (:func:`lm_steer_detox.verdicts`, not measured outside it)."""
        res = results.sort_values("seed_index") if "seed_index" in results else results
        detox = lm_steer_detox.verdicts(self, cfg, res)
        real, null = arm_rows(res, "real"), arm_rows(res, "null")
        if "curves" not in real or real.empty:  # the paper preset's detoxification rows
            why = "measured on the Shakespeare GPTs (smoke, quick, gpu); the paper preset runs the detoxification setting"
            return [not_measured(c, cfg.preset, why) for c in self.claims
                    if c.id not in lm_steer_detox.CLAIMS] + detox
        return shakespeare_verdicts(self, cfg, real, null) + detox

    # ------------------------------------------------------------------------------------------ report
    def figures(self, cfg: LMSteerConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        """The trade-off figure (see :mod:`lmsci.experiments.steering._lm_steer_figures`)."""
        return _lm_steer_figures.figures(cfg, results, run)

    def report_sections(self, cfg: LMSteerConfig, results: pd.DataFrame, run: RunDir) -> str:
        """Measurements, baselines, highlighting and probe (see ``_lm_steer_figures.report_sections``)."""
        return _lm_steer_figures.report_sections(cfg, results, run)
