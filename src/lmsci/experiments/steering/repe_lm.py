"""Experiment ``repe-lm``: representation reading (RepE, LAT) of sentiment on a real LM, as a read-out and a steer.

A reading vector from contrast pairs of positive and negative lines reads held-out pairs and steers continuations.

Source: Zou et al. 2023, "Representation Engineering: A Top-Down Approach to AI Transparency", arXiv 2310.01405,
sec. 3.1 (Linear Artificial Tomography: stimuli in a task template, the representation at the last token, the
reading vector = first principal component of paired differences, pairwise accuracy) and sec. 3.2 (control by adding
the reading vector to the residual stream). Issue 40, item 3. The library pieces are
:mod:`lmsci.methods.rep_reading` (reading vector, read-out, ``as_steer``) and :mod:`lmsci.methods.steering`
(activation addition, generation); the published quick rows of ``lm-steer-lm`` (LM-Steer on the same model, with
an activation-addition baseline) and of its toy ``lm-steer`` are shown beside this report's (there is no
activation-addition experiment of its own in the catalog).

**Model.** A pretrained causal LM from the model zoo, frozen (default ``smollm2-135m``: SmolLM2-135M-Instruct,
d_model 576, 30 blocks; any zoo name, local Hugging Face directory or ``.gguf`` file via ``model=PATH``;
``tiny-llama``, a random 2-block Llama with a word-level tokenizer, for the smoke preset and the tests).

**Stimuli** (:func:`~lmsci.experiments.steering._repe_lm_data.build_pools`). Dialogue lines of ``min_words..max_words``
words (``lines_per_play`` sampled per play) of the First Folio's comedies and tragedies, split per genre into *fit
plays* and *held-out plays* (:func:`lmsci.worlds.shakespeare.split_plays_by_genre`, ``scorer_fraction`` held
out), labelled by VADER (``vaderSentiment``): compound >= ``vader_threshold`` positive, <= -threshold negative, exactly
0 neutral. Each seed draws ``n_train_pairs`` contrast pairs (a positive and a negative line matched at random) from
the fit plays and ``n_test_pairs`` from the held-out plays, and ``n_prompts`` prompts (the first ``prompt_tokens``
tokens of neutral lines) from the held-out plays. Each line is put in the LAT task template (``template``, RepE
sec. 3.1 step 1: "Consider the sentiment of the following line: ... The sentiment of this line is") and read at its
last token, at the residual stream leaving each block of ``layers`` (all by default), one forward per batch.

**Reading** (real arm). The reading vector (:func:`~lmsci.methods.rep_reading.reading_vector`, ``"pca"``: the first
principal component of the sign-randomised, centred differences; sign so that the positive member projects higher in
most pairs) is fitted at each candidate layer; the layer is chosen by 2-fold cross-validation on the training pairs
only (mean pairwise accuracy of the vector fitted on one half on the other half; the first layer on ties); the vector
is refitted on all training pairs at that layer; ``pair_acc`` = the share of held-out pairs (other plays) whose
positive line projects higher (chance 0.5). The mean difference of the classes (``method="mean_diff"``, the
direction of activation addition from a contrast) goes through the same pipeline (``pair_acc_md``, reported).

**Steering** (real arm). The reading vector, scaled to the norm ``alpha = steer_scale x`` the median residual-stream
norm at the chosen layer over the seed's prompt tokens, is added at that layer at every position
(:func:`~lmsci.methods.rep_reading.as_steer`, an ActAdd) with steer value +1 and -1; ``n_samples`` continuations of
exactly ``gen_tokens`` tokens per prompt (nucleus ``top_p`` at ``temperature``, the same sampling seed for every
direction, sign and arm: common random numbers). ``spread`` = mean VADER compound of the continuations at +alpha
minus at -alpha. The mean-difference direction at the same layer and norm gives ``spread_md`` (reported); the
unsteered model's continuations give ``sentiment_zero``; perplexities are under the unsteered model itself.

**Null arm** (the same pipeline, ``cross_arms``): the direction estimator replaced by a random unit direction per
layer (Gaussian, drawn per seed), its sign fitted on the training pairs by the same rule; the layer chosen by the
same cross-validation; ``pair_acc`` on the same held-out pairs. Its ``spread``: a random direction with fitted sign at
the *real arm's* layer, of the same norm ``alpha``, on the same prompts and sampling seeds.

**Gate** ``pretrained``: ln V minus the unsteered NLL of ``n_nll_lines`` neutral held-out lines >= 2 nats/token.

**Timing** (2026-12-06, one thread at nice 10 on the 2-core machine shared with the publication runs: pessimistic).
The pilot (master seed 1000001, the quick
preset's pieces, capped at 3 minutes, load average ~5 on the 2 cores): model load 34 s, line pools (VADER) 4.7 s,
stimulus activations at all 30 blocks in one forward 1.02 s per stimulus (37.5 ms/token, ~27 tokens with the
template), one ``evaluate`` call (16 prompts x 16 new tokens, nucleus sampling, perplexity pass) 50 s. The same
machine measured 8.3 ms/token for SmolLM2-135M's forward on a quieter thread (``lm-steer-lm``'s first pilot), ~4.5x
faster. The quick preset per seed: 2 x (32 + 64) = 192 stimuli and 7 generate calls (the reading vector, the mean
difference and, in the null arm, the random direction at +-alpha; the unsteered model once): at the pilot's loaded
rates ~550 s per seed, ~28 min per master seed of 3 seeds; at the quiet rate (/4.5) ~2 min per seed, **~6.5 min per
master seed** on one quiet thread (load and pools included). The reading itself (2-fold cross-validation at 30
layers) takes well under a second.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, every_at_least
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms
from lmsci.errors import ConfigError
from lmsci.experiments.registry import register
from lmsci.experiments.steering import _lm_steer_lm_data as lmd
from lmsci.experiments.steering import _repe_lm_data as rd
from lmsci.experiments.steering import _repe_lm_report as rep
from lmsci.runs import RunDir, derive_seed, resolve_device

SRC = "Zou et al., 'Representation Engineering: A Top-Down Approach to AI Transparency', arXiv 2310.01405"
READ_MIN = 0.65        # registered rule: held-out pairwise accuracy, 95% CI lower end above 0.65
PRETRAINED_MIN = 2.0   # registered gate: ln V minus the NLL of neutral held-out lines >= 2 nats/token
TEMPLATE = "Consider the sentiment of the following line:\n{line}\nThe sentiment of this line is"


class RepELMConfig(ExperimentConfig):
    """Configuration of ``repe-lm`` (field defaults = the quick preset)."""

    model: str = Field("smollm2-135m", description="a zoo name, a local Hugging Face directory or .gguf file with a "
                                                   "tokenizer, or tiny-llama (tests)")
    n_seeds: int = Field(3, ge=1, le=100, description="independent samples of pairs and prompts (the model fixed)")
    threads: int = Field(1, ge=0)
    scorer_fraction: float = Field(0.5, gt=0, lt=1, description="fraction of each genre's plays held out")
    play_split_seed: int = Field(0, ge=0)
    min_words: int = Field(4, ge=1)
    max_words: int = Field(12, ge=1)
    lines_per_play: int | None = Field(300, ge=10, description="dialogue lines sampled per play (None: all)")
    vader_threshold: float = Field(0.5, gt=0, lt=1)
    template: str = Field(TEMPLATE, description="LAT task template with one {line}")
    max_length: int = Field(64, ge=4, description="tokens kept of a stimulus (its end: the read-out token)")
    layers: list[int] | None = Field(None, description="candidate blocks of the reading (None: every block)")
    n_train_pairs: int = Field(32, ge=4, description="contrast pairs per seed from the fit plays")
    n_test_pairs: int = Field(64, ge=2, description="contrast pairs per seed from the held-out plays")
    act_batch: int = Field(32, ge=1, description="stimuli per forward pass")
    steer_scale: float = Field(0.5, gt=0, description="steering norm alpha in units of the median residual norm")
    n_prompts: int = Field(16, ge=2, description="neutral held-out prompts per seed")
    n_samples: int = Field(1, ge=1, description="continuations per prompt")
    prompt_tokens: int = Field(5, ge=1, description="tokens of a prompt (the newline included)")
    gen_tokens: int = Field(16, ge=2, description="new tokens per continuation")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(0.9, gt=0, le=1)
    gen_batch: int = Field(32, ge=1, description="continuations per generate call")
    n_nll_lines: int = Field(32, ge=2, description="neutral held-out lines of the pretrained gate")

    PRESETS = {
        "smoke": {"model": lmd.TINY, "n_seeds": 2, "lines_per_play": 30, "n_train_pairs": 8, "n_test_pairs": 6,
                  "n_prompts": 3, "prompt_tokens": 3, "gen_tokens": 3, "gen_batch": 2, "n_nll_lines": 8,
                  "act_batch": 8},
        "quick": {},
        "gpu": {"threads": 0, "n_seeds": 5, "lines_per_play": None, "n_train_pairs": 256, "n_test_pairs": 512,
                "n_prompts": 200, "n_samples": 5, "gen_tokens": 20, "gen_batch": 500, "act_batch": 256,
                "n_nll_lines": 256},
        "paper": {"threads": 0, "n_seeds": 5, "lines_per_play": None, "n_train_pairs": 1024, "n_test_pairs": 1024,
                  "n_prompts": 1000, "n_samples": 10, "gen_tokens": 20, "gen_batch": 500, "act_batch": 256,
                  "n_nll_lines": 512},
    }


_SEED = ("per seed (an independent sample of n_train_pairs contrast pairs of the fit plays, n_test_pairs of the "
         "held-out plays and n_prompts neutral prompts of the held-out plays; the model fixed)")
_GATES = (Gate("pretrained", every_at_least(PRETRAINED_MIN), arm="real",
               stat=Stat("nll_below_uniform", words="ln(vocabulary size) minus the unsteered NLL of n_nll_lines "
                                                    "neutral held-out lines, nats/token (a pretrained model)")),)
_NULL_READ = ("the same pipeline on the same activations with the direction estimator replaced by a random unit "
              "direction per layer (Gaussian, drawn per seed) whose sign is fitted on the training pairs by the "
              "same rule, the layer chosen by the same 2-fold cross-validation; the same held-out pairs")
_NULL_STEER = ("a random unit direction (drawn per seed) at the real arm's layer, its sign fitted on the training "
               "pairs by the same rule, scaled to the same norm alpha and added the same way, on the same prompts "
               "with the same sampling seeds; the same statistic")


@register("repe-lm")
class RepELM(Experiment):
    """Representation reading (RepE LAT) of sentiment on SmolLM2-135M: read-out accuracy and steering."""

    claim = ("A reading vector (first principal component of the activation differences of contrast pairs, RepE "
             "LAT) reads the sentiment of held-out lines of a real pretrained LM (SmolLM2-135M) and, added to its "
             "residual stream, moves the sentiment of its continuations.")
    source = SRC + ", sec. 3.1-3.2"
    Config = RepELMConfig
    time_estimate = {"smoke": "~20 s (a tiny random Llama)",
                     "quick": "~6.5 min per master seed on one quiet thread (estimated from a timing pilot, 2026-12-06, "
                              "at nice 10 under load ~5 on 2 cores: 1.02 s per stimulus and 50 s per generate call "
                              "there, ~28 min; /4.5 for the quiet rate this machine measured for the same model; 3 "
                              "seeds x (192 stimuli + 7 generate calls of 16 x 16 tokens); module docstring)",
                     "gpu": "~3 min on one H100 (estimated, not measured: 5 seeds x 1,536 stimuli read at 30 "
                            "layers in one forward each, 7 generate calls of 1,000 continuations of 20 tokens, "
                            "VADER on the CPU)",
                     "paper": "~10 min on one H100 (estimated, not measured: 5 seeds x 4,096 stimuli, 7 generate "
                              "calls of 10,000 continuations of 20 tokens, VADER on the CPU)"}
    claims = [
        Claim(
            id="reading",
            statement=f"The reading vector, fitted on contrast pairs of one set of plays at a layer chosen on them, "
                      f"reads held-out pairs of other plays: pairwise accuracy above {READ_MIN:g}.",
            source=SRC + ", sec. 3.1 (LAT, pairwise accuracy), sec. 6.1 (emotions)",
            paper_value="LAT reading vectors of LLaMA-2-Chat classify held-out stimuli of concepts such as emotions "
                        "and utility well above chance from the middle layers on (sec. 4-6; no sentiment number "
                        "for a 135M model)",
            statistic=Stat("pair_acc", words=_SEED + ": share of held-out pairs whose positive line projects higher "
                           "on the reading vector than its negative line (chance 0.5), at the layer chosen by 2-fold "
                           "cross-validation on the training pairs"),
            rule=ci_above(READ_MIN), gates=_GATES, null=_NULL_READ,
            null_can_meet="a random direction with a fitted sign reads pairs above chance wherever sentiment is "
                          "spread over many dimensions of the last-token state (or one large dimension carries it), "
                          "and the best of the candidate layers by cross-validation can exceed the threshold on "
                          "held-out pairs too"),
        Claim(
            id="steering",
            statement="Added to the residual stream at its layer (norm alpha, every position), the reading vector "
                      "makes continuations of held-out neutral prompts more positive at +alpha than at -alpha.",
            source=SRC + ", sec. 3.2 (representation control by the reading vector), sec. 6.1 (emotion control)",
            paper_value="adding emotion reading vectors to LLaMA-2-Chat changes the emotional tone of its outputs "
                        "(sec. 6.1, qualitative examples); no sentiment number for a 135M model",
            statistic=Stat("spread", words=_SEED + ": mean VADER compound of the continuations (n_samples per "
                           "prompt, gen_tokens tokens, the same sampling seed at both signs and arms) with the "
                           "direction added at +alpha minus at -alpha, alpha = steer_scale x the median residual norm "
                           "at the layer (VADER compound units)"),
            rule=ci_above(0.0), gates=_GATES, null=_NULL_STEER,
            null_can_meet="a random direction of the same norm whose sign was fitted on the sentiment pairs leans "
                          "toward the sentiment axis through that fitted sign; pushed at alpha at every position it "
                          "moves what the model writes, and VADER can follow it on every seed"),
        Claim(
            id="mean-diff-reading",
            statement="The mean-difference direction, through the same pipeline, reads held-out pairs above "
                      f"{READ_MIN:g} (a baseline: reported, decides nothing).",
            source=SRC + ", sec. 3.1 (mean difference as a baseline of PCA)",
            paper_value="RepE compares PCA with the mean difference and other directions (sec. 3.1, App.)",
            statistic=Stat("pair_acc_md", words=_SEED + ": held-out pairwise accuracy of the class-mean difference "
                           "at its own cross-validated layer"),
            rule=ci_above(READ_MIN), gates=_GATES, ablation=True),
        Claim(
            id="mean-diff-steering",
            statement="The mean-difference direction (activation addition from a contrast) at the reading vector's "
                      "layer and norm moves the continuations' sentiment too (a baseline: reported, decides nothing).",
            source=SRC + ", sec. 3.2; Turner et al. 2023, arXiv 2308.10248 (activation addition)",
            paper_value="ActAdd steers GPT-2-XL's sentiment with a 'Love' - 'Hate' contrast (Turner et al., sec. 3)",
            statistic=Stat("spread_md", words=_SEED + ": mean VADER compound at +alpha minus at -alpha of the "
                           "mean-difference direction at the reading vector's layer, norm alpha"),
            rule=ci_above(0.0), gates=_GATES, ablation=True),
    ]

    # ------------------------------------------------------------------------------------------ config
    def validate(self, cfg: RepELMConfig) -> None:
        lmd.check_model_name(cfg.model)
        if cfg.max_words < cfg.min_words:
            raise ConfigError("max_words", cfg.max_words, f">= min_words={cfg.min_words}")
        if cfg.template.count("{line}") != 1 or not cfg.template.strip():
            raise ConfigError("template", cfg.template, "a template with exactly one {line}")
        try:
            cfg.template.format(line="x")
        except (KeyError, IndexError, ValueError) as e:
            raise ConfigError("template", cfg.template, f"a str.format template whose only field is {{line}} ({e})")
        if cfg.layers is not None and (not cfg.layers or min(cfg.layers) < 0 or len(set(cfg.layers)) != len(cfg.layers)):
            raise ConfigError("layers", cfg.layers, "None or distinct block indices >= 0")

    def points(self, cfg: RepELMConfig) -> list[Point]:
        return cross_arms([Point("repe")], ("real", "null"))  # the reading vector / a random direction

    def groups(self, cfg: RepELMConfig, points: list[Point]) -> list[list[Point]]:
        """The two arms of a seed share its activations (and the null steers at the real arm's layer)."""
        by_seed: dict[int, list[Point]] = {}
        for p in points:
            by_seed.setdefault(p.seed_index, []).append(p)
        return list(by_seed.values())

    # ------------------------------------------------------------------------------------------ run
    def run_group(self, cfg: RepELMConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        """One seed: its pairs' activations at every candidate layer, then each arm's reading and steering."""
        device = str(resolve_device(cfg.device))
        pools = rd.build_pools(cfg)
        lines = sorted({s for v in pools.values() for s in v}) + [cfg.template.format(line="")]
        hf = lmd.get_model(cfg.model, device, lines)
        ctxs[0].run.record_model(getattr(hf, "provenance", {"source": cfg.model}))
        tok = hf.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        from lmsci.methods.steerable import n_layers, vocab_size

        L = n_layers(hf)
        layers = list(range(L)) if cfg.layers is None else list(cfg.layers)
        if max(layers) >= L:
            raise ConfigError("layers", cfg.layers, f"block indices in 0..{L - 1}")
        seed = ctxs[0].seed  # the arms of a seed share it (point_seed)
        acts = {}
        for split, n in (("fit", cfg.n_train_pairs), ("test", cfg.n_test_pairs)):
            pos, neg = rd.sample_pairs(pools, split, n, derive_seed(seed, "pairs", split))
            a = [rd.layer_activations(hf, rd.stimulus_ids(tok, cfg.template, s, cfg.max_length), layers, pad,
                                      cfg.act_batch) for s in (pos, neg)]
            acts[split] = {l: (a[0][l], a[1][l]) for l in layers}
        prompts = lmd.sample_prompts(cfg, tok, pools["neutral"], derive_seed(seed, "prompts"))
        V = vocab_size(hf)
        nll_lines = [lmd.encode(tok, s) for s in pools["neutral"][: cfg.n_nll_lines]]
        base_nll = rd.lines_nll(hf, nll_lines, pad)
        common = {"model": cfg.model, "vocab_size": V, "n_blocks": L, "base_nll": base_nll,
                  "nll_below_uniform": math.log(V) - base_nll,
                  **{f"n_{k}": len(v) for k, v in pools.items()}}
        real = rd.select_layer("pca", acts["fit"], acts["test"], seed)
        layer = real["layer"]
        norm = rd.median_norm(hf, prompts, layer)
        alpha = cfg.steer_scale * norm
        gen_seed = derive_seed(seed, "gen")
        rows = []
        for point, ctx in zip(points, ctxs):
            row = {**common, "steer_layer": layer, "resid_norm": norm, "alpha": alpha}
            if point.arm == "null":
                row.update(self._null_arm(cfg, hf, acts, seed, layer, alpha, prompts, gen_seed, ctx))
            else:
                row.update(self._real_arm(cfg, hf, acts, seed, real, alpha, prompts, gen_seed, ctx))
            rows.append(row)
        return rows

    def _steer(self, cfg, hf, rv, layer, alpha, prompts, gen_seed, ctx, key, texts) -> dict[str, float]:
        """Continuations with ``rv`` at ``+alpha`` and ``-alpha`` (layer ``layer``): sentiment and perplexity."""
        from lmsci.methods.rep_reading import as_steer

        steer = as_steer(rv, layer, alpha, name="attr").to(hf.device)
        out = {}
        for sign, tag in ((1.0, "pos"), (-1.0, "neg")):
            r = lmd.evaluate(cfg, hf, steer, sign, prompts, gen_seed)
            texts[f"{key}{sign:+g}"] = r.pop("_texts")[:8]
            out.update({f"sentiment_{tag}": r["sentiment"], f"ppl_{tag}": r["ppl"]})
            ctx.log(direction=key, sign=sign, **r)
        out["spread"] = out["sentiment_pos"] - out["sentiment_neg"]
        return out

    def _real_arm(self, cfg, hf, acts, seed, real, alpha, prompts, gen_seed, ctx) -> dict[str, Any]:
        layer, texts = real["layer"], {}
        md = rd.select_layer("mean_diff", acts["fit"], acts["test"], seed)
        P, N = acts["fit"][layer]
        md_here = rd.fit_direction("mean_diff", P, N, seed, layer)
        row: dict[str, Any] = {"layer": layer, "pair_acc": real["test"]["pair_acc"], "acc": real["test"]["acc"],
                               "separation": real["test"]["separation"], "cv_acc": real["cv"][layer],
                               "explained_variance": real["vector"].explained_variance,
                               "test_by_layer": json.dumps(real["test_by_layer"]), "layer_md": md["layer"],
                               "pair_acc_md": md["test"]["pair_acc"], "test_by_layer_md": json.dumps(md["test_by_layer"]),
                               "cos_pca_md": float(real["vector"].direction @ md_here.direction)}
        row.update(self._steer(cfg, hf, real["vector"], layer, alpha, prompts, gen_seed, ctx, "pca", texts))
        m = self._steer(cfg, hf, md_here, layer, alpha, prompts, gen_seed, ctx, "mean_diff", texts)
        row.update({f"{k}_md" if k == "spread" else k.replace("sentiment", "sentiment_md").replace("ppl", "ppl_md"): v
                    for k, v in m.items()})
        z = lmd.evaluate(cfg, hf, None, 0.0, prompts, gen_seed)
        texts["none"] = z.pop("_texts")[:8]
        row.update({"sentiment_zero": z["sentiment"], "ppl_zero": z["ppl"]})
        (ctx.artifact_dir / "generations.json").write_text(json.dumps(texts, indent=1))
        return row

    def _null_arm(self, cfg, hf, acts, seed, layer, alpha, prompts, gen_seed, ctx) -> dict[str, Any]:
        null = rd.select_layer("random", acts["fit"], acts["test"], seed)
        P, N = acts["fit"][layer]
        rand = rd.random_direction(P.shape[1], derive_seed(seed, "random", layer), P.device)
        rv = rd.fit_direction("random", P, N, seed, layer, rand)
        texts: dict[str, list[str]] = {}
        row: dict[str, Any] = {"layer": null["layer"], "pair_acc": null["test"]["pair_acc"],
                               "acc": null["test"]["acc"], "separation": null["test"]["separation"],
                               "cv_acc": null["cv"][null["layer"]], "test_by_layer": json.dumps(null["test_by_layer"])}
        row.update(self._steer(cfg, hf, rv, layer, alpha, prompts, gen_seed, ctx, "random", texts))
        (ctx.artifact_dir / "generations.json").write_text(json.dumps(texts, indent=1))
        return row

    # ------------------------------------------------------------------------------------------ report
    def figures(self, cfg: RepELMConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        """Held-out accuracy by layer (PCA, mean difference, random) and sentiment at -alpha / 0 / +alpha."""
        return rep.figures(cfg, results, run)

    def report_sections(self, cfg: RepELMConfig, results: pd.DataFrame, run: RunDir) -> str:
        """The per-arm means, then the published quick rows of lm-steer-lm and lm-steer."""
        return rep.sections(results)


__all__ = ["RepELMConfig", "RepELM", "READ_MIN", "PRETRAINED_MIN", "TEMPLATE"]
