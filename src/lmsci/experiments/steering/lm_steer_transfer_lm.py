"""Experiment ``lm-steer-transfer-lm``: an LM-Steer sentiment steer trained on a real LM (SmolLM2-135M), carried to a
toy Shakespeare GPT.

A sentiment steer trained on SmolLM2-135M, carried to a toy Shakespeare GPT, steers the toy's continuations.

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798 (Sec. 3.3 the
steer ``e_v <- (I + eps W) e_v``; v1 App. F transfer between LMs through a map of their output embeddings fitted on
shared tokens; Sec. 4 perplexity of steered text under another LM). Issue 45, item 2 (the transfer and the
perplexity under an lmsci Shakespeare GPT). The real-model steering claims are ``lm-steer-lm``; the transfer between
toy GPTs is the toy ``lm-steer``'s ``transfer`` claim, whose published quick row is shown beside this report's.

**Source model** (as ``lm-steer-lm``): a pretrained causal LM from the zoo, frozen (default ``smollm2-135m``,
SmolLM2-135M-Instruct, d_model 576, vocabulary 49,152; any zoo name, local Hugging Face directory or ``.gguf``
file via ``model=PATH``; ``tiny-llama``, a random 2-layer Llama with a word-level tokenizer, at the smoke preset).

**Target model**: a toy GPT (``toy_model``, 2 layers, d_model 64 at quick) trained from scratch by ``toy_train`` on
the Shakespeare BPE corpus (byte-level BPE of ``toy_vocab_size`` tokens trained on the training works; the toy
``lm-steer``'s recipe, :func:`lmsci.train.corpus_lm.train_corpus_gpt`), once per run; it is also the perplexity judge.

**Data and steer training** (``lm-steer-lm``'s recipe and code): VADER-labelled dialogue lines of the steer plays
(:func:`~lmsci.experiments.steering._lm_steer_lm_data.build_data`), ``n_train_lines`` positive (+1) and as many
negative (-1); their final hidden states are cached once and a full-rank steer is trained per seed with
:func:`~lmsci.methods.lm_steer_cached.train_steer_cached` (eps0 = 1e-3, Adam ``steer_lr``, ``steer_steps`` steps of
``steer_batch`` lines, seed ``derive_seed(seed, "steer")``).

**Transfer** (App. F; :func:`~lmsci.methods.lm_steer_transfer.shared_tokens`,
:func:`~lmsci.methods.lm_steer_transfer.fit_embedding_map`,
:meth:`~lmsci.methods.lm_steer_transfer.EmbeddingMap.map_steer`). The tokens whose strings both vocabularies hold
(both are byte-level BPEs with GPT-2's space mark) give the rows of the two output-embedding matrices; a least-squares map
(``map_method``; ``map_holdout`` of the shared tokens held out to measure its error) is fitted once per run and
carries every seed's steer to the toy: ``W' = B^T W A^T``. On the toy GPT, ``n_samples`` continuations of
``gen_tokens`` tokens of each of ``n_prompts`` prompts (the first ``toy_prompt_tokens`` toy tokens of VADER-neutral
lines of the held-out plays, drawn per seed) are sampled (top-``toy_top_k``, one generator seed for every steer
value and both arms: common random numbers) with the transferred steer at ``+steer_value`` and ``-steer_value``
eps0 (and 0); ``toy_spread`` = mean VADER compound at + minus at -.

**Perplexity under the toy** (the ablation ``ppl-under-toy``, real arm only). SmolLM2 itself generates with its
steer at +S, 0 and -S (nucleus ``top_p``, ``prompt_tokens``-token prompts of the same held-out lines, per seed:
:func:`~lmsci.experiments.steering._lm_steer_lm_data.evaluate`, which also gives its sentiment and its perplexity
under the unsteered SmolLM2); each continuation is decoded and re-tokenised by the toy's BPE and scored by the toy
GPT given its decoded prompt (:func:`~lmsci.experiments.steering._lm_steer_transfer_lm_run.toy_perplexity`).
``toy_ppl_cost`` = the mean toy perplexity at +-S minus at 0. ``source_spread`` (SmolLM2's own spread) and
``transfer_retention`` = ``toy_spread / source_spread`` are reported.

**Null arm** (``cross_arms``): the same run with the lines' +-1 labels shuffled among them (a seed-specific
permutation; ``lm-steer-lm``'s null), the same initialisation, batches, map, prompts and sampling seeds: the
transferred steer of a W that learned the domain but no sentiment direction.

**Gates**: ``steer-fits`` (the trained steer lowers its training lines' NLL on SmolLM2 by >= 0.01 nats/token),
``pretrained`` (the source's NLL of those lines >= 2 nats/token below ``ln V``) and ``toy-learned`` (the toy GPT's
held-out NLL below the unigram NLL of the same split).

**Timing** (2026-12-06; timing pilot at master seed 1000001, one thread at nice 10 on the 2-core machine shared with
the publication runs (load average ~3): pessimistic rates). Source model load 32 s; hidden states 38 ms/token (378
tokens in 14-15 s); toy GPT 0.25 s per training step at d_model 64, batch 16 x 64 tokens (100 steps in 28 s with the
cached corpus, the validation NLL and the n-gram baselines); cached steer training 2.4 s/step at batch 8; the map
0.7 s (973 shared tokens with the 1,024-token toy BPE, 778 fitted); a toy steer value (24 continuations of 16 tokens)
0.46 s. The source's generate call was not timed by this pilot; ``lm-steer-lm``'s pilot measured ~7 s per call of 12
x 16 tokens on a quieter thread. The same day's quieter measurements (``lm-steer-lm``: 8.3 ms/token, 0.43 s/step) are
~5x faster than this pilot's. Quick (3 seeds x 2 arms: 300 cached lines of ~12 tokens, a 600-step toy GPT, 6 x 60 steer
steps, 6 x 3 toy steer values, 3 x 3 source generate calls of 24 continuations) then costs ~5 min per master seed on
a quiet thread (6 s load, 30 s hidden states, ~35 s toy, ~155 s steers, ~90 s source generation, ~10 s toy) and up
to ~25 min at this pilot's loaded rates; the lead's quick run will measure it.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, every_at_least, mean_at_least
from lmsci.contract import Experiment, Point, PointContext, cross_arms
from lmsci.errors import ConfigError
from lmsci.experiments.registry import register
from lmsci.experiments.steering import _lm_steer_lm_data as data_mod
from lmsci.experiments.steering import _lm_steer_transfer_lm_run as toy_mod
from lmsci.experiments.steering._lm_steer_lm_common import (LMSteerSourceConfig, cache_source, check_source,
                                                             train_point_steer)
from lmsci.models.gpt import GPTSpec
from lmsci.report.published import toy_rows_section
from lmsci.runs import RunDir, resolve_device
from lmsci.train.trainer import TrainSpec

SRC = "Han et al., 'Word Embeddings Are Steers for Language Models', ACL 2024, arXiv 2305.12798"
LOSS_DROP_MIN = 0.01   # registered gate: the trained steer lowers its training lines' NLL by >= 0.01 nats/token
PRETRAINED_MIN = 2.0   # registered gate: the source's unsteered NLL of the lines is >= 2 nats/token below ln V


class LMSteerTransferLMConfig(LMSteerSourceConfig):
    """Configuration of ``lm-steer-transfer-lm`` (field defaults = the quick preset): ``lm-steer-lm``'s source fields
    (:class:`~lmsci.experiments.steering._lm_steer_lm_common.LMSteerSourceConfig`), then the toy GPT and the map.

    Attributes:
        toy_model: the toy GPT (:class:`~lmsci.models.gpt.GPTSpec`). toy_train: its optimisation
            (:class:`~lmsci.train.trainer.TrainSpec`; ``batch_size`` windows of ``toy_seq_len`` BPE tokens per step).
    """

    # the source LM's data, cached steer training and sampling: lm-steer-lm's fields (LMSteerSourceConfig), fewer
    # training lines and steps, more samples per prompt
    n_train_lines: int = Field(150, ge=2, description="training lines per class (positive, negative)")
    steer_steps: int = Field(60, ge=1)
    n_samples: int = Field(2, ge=1, description="continuations per prompt")
    # the toy GPT (the toy lm-steer's quick steered GPT)
    toy_vocab_size: int = Field(1024, ge=257, le=65536,
                                description="BPE vocabulary of the toy corpus (the toy lm-steer's)")
    toy_seq_len: int = Field(64, ge=16)
    toy_model: GPTSpec = GPTSpec(n_layers=2, n_heads=4, d_model=64)
    toy_train: TrainSpec = TrainSpec(steps=600, batch_size=16, lr=3e-3, warmup_steps=60)
    toy_eval_tokens: int = Field(20000, ge=100, description="held-out targets of the toy's validation NLL")
    map_method: str = Field("lstsq", pattern="^(lstsq|procrustes)$", description="the embedding map (App. F)")
    map_holdout: float = Field(0.2, ge=0, lt=1, description="shared tokens held out to measure the map's error")
    # generation on the toy
    toy_prompt_tokens: int = Field(6, ge=1, description="toy tokens of a toy prompt (the newline included)")
    toy_top_k: int | None = Field(50, ge=1, description="top-k sampling on the toy GPT (GPT.generate)")

    PRESETS = {
        "smoke": {"model": data_mod.TINY, "n_seeds": 2, "lines_per_play": 40, "n_train_lines": 12,
                  "steer_steps": 4, "steer_batch": 4, "n_loss_lines": 8, "toy_vocab_size": 1024, "toy_seq_len": 32,
                  "toy_model.d_model": 16, "toy_model.n_layers": 1, "toy_model.n_heads": 2, "toy_train.steps": 4,
                  "toy_train.batch_size": 4, "toy_train.warmup_steps": 0, "toy_eval_tokens": 200, "n_prompts": 3,
                  "n_samples": 1, "gen_tokens": 3, "prompt_tokens": 3, "toy_prompt_tokens": 3, "gen_batch": 2},
        "quick": {},
        "gpu": {"threads": 0, "n_seeds": 5, "lines_per_play": None, "n_train_lines": 1000, "steer_steps": 1000,
                "steer_batch": 32, "n_loss_lines": 256, "toy_vocab_size": 4096, "toy_seq_len": 128,
                "toy_model.d_model": 256, "toy_model.n_layers": 4, "toy_model.n_heads": 8, "toy_train.steps": 4000,
                "toy_train.batch_size": 32, "n_prompts": 200, "n_samples": 5, "gen_tokens": 20, "gen_batch": 500},
        "paper": {"threads": 0, "n_seeds": 3, "lines_per_play": None, "n_train_lines": 2000, "max_words": 30,
                  "max_length": 64, "steer_steps": 1000, "steer_batch": 32, "n_loss_lines": 512,
                  "toy_vocab_size": 4096, "toy_seq_len": 128, "toy_model.d_model": 256, "toy_model.n_layers": 4,
                  "toy_model.n_heads": 8, "toy_train.steps": 4000, "toy_train.batch_size": 32, "n_prompts": 2500,
                  "n_samples": 25, "gen_tokens": 20, "gen_batch": 500},
    }


_WORDS = ("per seed (a training seed of W on the source LM, with its own sample of n_prompts held-out neutral "
          "prompts, n_samples continuations of gen_tokens tokens each, the same sampling seed at every steer value "
          "and arm; the source LM and the toy GPT fixed for the run)")
_GATES = (
    Gate("steer-fits", every_at_least(LOSS_DROP_MIN), arm="real",
         stat=Stat("loss_drop", words="NLL on the source LM of the first n_loss_lines training lines unsteered minus "
                                      "with the trained steer at their labels (dummy at 1), nats/token")),
    Gate("pretrained", every_at_least(PRETRAINED_MIN), arm="real",
         stat=Stat("nll_below_uniform", words="ln(source vocabulary size) minus the source's unsteered NLL of those "
                                              "lines, nats/token (a pretrained model, not random weights)")),
    Gate("toy-learned", every_at_least(0.0), arm="real",
         stat=Stat("toy_below_unigram", words="the unigram NLL of the held-out works minus the toy GPT's held-out "
                                              "NLL, nats/token (the toy GPT learned more than token frequencies)")),
)
_NULL = ("the same training on the same lines with their positive/negative labels shuffled among them (a "
         "seed-specific permutation), the same initialisation, batches, embedding map, prompts and sampling seeds, "
         "carried to the toy GPT and measured by the same statistic")


@register("lm-steer-transfer-lm")
class LMSteerTransferLM(Experiment):
    """LM-Steer transfer from a real LM (SmolLM2-135M) to a toy Shakespeare GPT, and the toy's perplexity of the
    real LM's steered text."""

    claim = ("A sentiment steer trained on a real pretrained LM (SmolLM2-135M) and carried to a toy Shakespeare GPT by "
             "a linear map of their output embeddings on shared tokens steers the sentiment of the toy's "
             "continuations.")
    source = SRC + ", v1 App. F (transfer), Sec. 4 (perplexity under another LM)"
    Config = LMSteerTransferLMConfig
    time_estimate = {"smoke": "~30 s (a tiny random Llama and a 1-layer toy GPT)",
                     "quick": "~5 min per master seed on a quiet thread (estimated from a timing pilot at nice 10 on "
                              "the loaded 2-core machine, whose rates are ~5x slower: up to ~25 min there; module "
                              "docstring)",
                     "gpu": "~10 min on one H100 (estimated, not measured: a 4-layer d 256 toy GPT of 4,000 steps, "
                            "10 points x 1,000 cached steps, 1,000 continuations per steer value)",
                     "paper": "~1 h on one H100 (estimated, not measured: 6 points x 62,500 continuations per steer "
                              "value on the toy and (real arm) on the source, VADER on the CPU)"}
    claims = [
        Claim(
            id="transfer",
            statement="A sentiment steer trained on SmolLM2-135M, carried to a toy Shakespeare GPT by a least-squares "
                      "map between their output-embedding spaces fitted on shared tokens, steers the toy's "
                      "continuations: their VADER sentiment at +5 eps0 exceeds that at -5 eps0.",
            source=SRC + ", v1 App. F (GPT2-Large -> GPT2 / GPT2-medium)",
            paper_value="transferred steers keep steering (App. F, qualitative and a table of transferred "
                        "detoxification/sentiment scores)",
            statistic=Stat("toy_spread", words=_WORDS + ": on the toy GPT, the mean VADER compound of the "
                           "continuations with the transferred steer at +steer_value eps0 minus at -steer_value eps0 "
                           "(dummy at 1), VADER compound units"),
            rule=ci_above(0.0), gates=_GATES, null=_NULL,
            null_can_meet="the shuffled-label steer is still a large learned W (the dummy and W fit the domain); "
                          "carried to the toy it shifts the toy's output distribution in opposite directions at +-S, "
                          "and if that shift happens to move VADER words (the domain's frequent words include "
                          "'good', 'love', 'death') its spread is above 0 on every seed"),
        Claim(
            id="ppl-under-toy",
            statement="SmolLM2's steered continuations (+-5 eps0) are less likely under a toy Shakespeare GPT than its "
                      "unsteered ones (an ablation: reported, decides nothing).",
            source=SRC + ", Sec. 4 (perplexity of steered text under another LM)",
            paper_value="steering raises perplexity under GPT2-XL (Tables 1-2)",
            statistic=Stat("toy_ppl_cost", words=_WORDS + ": the mean perplexity under the toy GPT (text decoded and "
                           "re-tokenised by the toy's BPE, conditioned on the decoded prompt) of the source's "
                           "continuations at +-steer_value eps0 minus at 0 (perplexity units); real arm only"),
            rule=mean_at_least(0.0), gates=_GATES, ablation=True),
    ]

    # ------------------------------------------------------------------------------------------ config
    def validate(self, cfg: LMSteerTransferLMConfig) -> None:
        check_source(cfg)
        if cfg.toy_model.d_model % cfg.toy_model.n_heads:
            raise ConfigError("toy_model.n_heads", cfg.toy_model.n_heads,
                              f"a divisor of toy_model.d_model={cfg.toy_model.d_model}")
        if cfg.toy_prompt_tokens + cfg.gen_tokens > cfg.toy_seq_len:
            raise ConfigError("gen_tokens", cfg.gen_tokens, f"<= toy_seq_len - toy_prompt_tokens = "
                              f"{cfg.toy_seq_len - cfg.toy_prompt_tokens} (the toy GPT's context)")

    def points(self, cfg: LMSteerTransferLMConfig) -> list[Point]:
        return cross_arms([Point("transfer")], ("real", "null"))  # trained on the true / the shuffled labels

    def groups(self, cfg: LMSteerTransferLMConfig, points: list[Point]) -> list[list[Point]]:
        return [points] if points else []  # both models, the lines, the cache and the map once for every point

    # ------------------------------------------------------------------------------------------ run
    def run_group(self, cfg: LMSteerTransferLMConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        """Load the source LM, build the lines and cache their hidden states, train the toy GPT, fit the map; then
        train, transfer and measure each point's steer."""
        device = str(resolve_device(cfg.device))
        data = data_mod.build_data(cfg)
        hf = data_mod.get_model(cfg.model, device, data["texts"] + data["neutral"])
        ctxs[0].run.record_model(getattr(hf, "provenance", {"source": cfg.model}))
        src = cache_source(cfg, hf, data)
        toy = toy_mod.train_toy(cfg, device, ctxs[0].log)
        emap = toy_mod.fit_map(cfg, hf, toy)
        common = {**src["columns"], "toy_vocab_size": int(toy["tok"].vocab_size),
                  "toy_val_nll": toy["val_nll"], "toy_unigram_nll": toy["unigram_nll"],
                  "toy_bigram_nll": toy["bigram_nll"], "toy_below_unigram": toy["unigram_nll"] - toy["val_nll"],
                  "toy_seconds": toy["toy_seconds"], "n_shared_tokens": emap.n_shared, "map_n_fit": emap.n_fit,
                  "map_fit_error": emap.fit_error, "map_heldout_error": emap.heldout_error}
        rows = []
        for point, ctx in zip(points, ctxs):
            row = dict(common)
            row.update(self._run_one(cfg, point, ctx, hf, toy, emap, data, src))
            rows.append(row)
        return rows

    def _run_one(self, cfg, point, ctx, hf, toy, emap, data, src) -> dict[str, Any]:
        from lmsci.runs import derive_seed

        steer, row = train_point_steer(cfg, point.arm, ctx.seed, hf, data, src)
        moved = emap.map_steer(steer)
        row["w_norm_toy"] = float(moved.matrix("attr").norm())
        S = cfg.steer_value
        tprompts = toy_mod.toy_prompts(cfg, toy["tok"], data["neutral"], derive_seed(ctx.seed, "toy-prompts"))
        gen_seed = derive_seed(ctx.seed, "gen")
        texts: dict[str, list[str]] = {}
        at = {}
        for v in (S, 0.0, -S):
            r = toy_mod.toy_evaluate(cfg, toy, moved, v, tprompts, gen_seed)
            texts[f"toy{v:+g}"] = r.pop("_texts")
            at[v] = r
            ctx.log(arm=point.arm, where="toy", steer_value=v, **r)
        row.update({"toy_sentiment_pos": at[S]["sentiment"], "toy_sentiment_neg": at[-S]["sentiment"],
                    "toy_sentiment_zero": at[0.0]["sentiment"], "toy_spread": at[S]["sentiment"] - at[-S]["sentiment"],
                    "toy_self_ppl_pos": at[S]["ppl"], "toy_self_ppl_neg": at[-S]["ppl"],
                    "toy_self_ppl_zero": at[0.0]["ppl"]})
        if point.arm == "real":  # the ablation and the source's own spread: no null arm
            row.update(self._source_side(cfg, ctx, hf, toy, steer, data, gen_seed, texts))
            sp = row["source_spread"]
            row["transfer_retention"] = row["toy_spread"] / sp if sp > 0 else float("nan")
        (ctx.artifact_dir / "generations.json").write_text(json.dumps({k: v[:8] for k, v in texts.items()}, indent=1))
        return row

    def _source_side(self, cfg, ctx, hf, toy, steer, data, gen_seed, texts) -> dict[str, Any]:
        """SmolLM2's continuations at +S, 0, -S: its sentiment, its own perplexity and the toy's perplexity."""
        from lmsci.runs import derive_seed

        S = cfg.steer_value
        prompts = data_mod.sample_prompts(cfg, hf.tokenizer, data["neutral"], derive_seed(ctx.seed, "prompts"))
        ptexts = hf.tokenizer.batch_decode(prompts.repeat_interleave(cfg.n_samples, 0).tolist(),
                                           skip_special_tokens=True)
        out: dict[str, Any] = {}
        for v, tag in ((S, "pos"), (0.0, "zero"), (-S, "neg")):
            r = data_mod.evaluate(cfg, hf, steer, v, prompts, gen_seed)
            t = r.pop("_texts")
            texts[f"source{v:+g}"] = t
            out[f"source_sentiment_{tag}"] = r["sentiment"]
            out[f"source_ppl_{tag}"] = r["ppl"]
            out[f"toy_ppl_{tag}"] = toy_mod.toy_perplexity(cfg, toy, ptexts, t)
            ctx.log(arm="real", where="source", steer_value=v, **r, toy_ppl=out[f"toy_ppl_{tag}"])
        out["source_spread"] = out["source_sentiment_pos"] - out["source_sentiment_neg"]
        out["source_ppl_cost"] = (out["source_ppl_pos"] + out["source_ppl_neg"]) / 2 - out["source_ppl_zero"]
        out["toy_ppl_cost"] = (out["toy_ppl_pos"] + out["toy_ppl_neg"]) / 2 - out["toy_ppl_zero"]
        return out

    # ------------------------------------------------------------------------------------------ report
    def report_sections(self, cfg: LMSteerTransferLMConfig, results: pd.DataFrame, run: RunDir) -> str:
        """The mean sentiment and perplexities by steer value per arm, the map, then the toy's published rows."""
        return summary_section(results) + toy_rows_section("lm-steer")


_SUMMARY_COLS = (("toy_sentiment_neg", "toy sentiment at -S"), ("toy_sentiment_zero", "toy sentiment at 0"),
                 ("toy_sentiment_pos", "toy sentiment at +S"), ("toy_spread", "toy spread"),
                 ("toy_self_ppl_zero", "toy self-perplexity at 0"), ("toy_self_ppl_pos", "toy self-perplexity at +S"),
                 ("source_spread", "source spread"), ("transfer_retention", "retention (toy / source spread)"),
                 ("source_ppl_zero", "source perplexity at 0 (under itself)"),
                 ("source_ppl_pos", "source perplexity at +S (under itself)"),
                 ("toy_ppl_neg", "source text at -S: toy perplexity"), ("toy_ppl_zero", "source text at 0: toy "
                                                                                       "perplexity"),
                 ("toy_ppl_pos", "source text at +S: toy perplexity"), ("map_heldout_error", "map held-out error"),
                 ("n_shared_tokens", "shared tokens"), ("toy_val_nll", "toy validation NLL (nats/token)"))


def summary_section(results: pd.DataFrame) -> str:
    """A markdown table: per arm, the mean over seeds of the transfer's and the perplexity ablation's columns."""
    if results.empty or "toy_spread" not in results:
        return ""
    arms = [a for a in ("real", "null") if a in set(results["arm"])]
    lines = ["\n## Transfer and perplexity under the toy (mean over seeds)\n", "| quantity | " + " | ".join(arms)
             + " |", "|---|" + "---|" * len(arms)]
    for col, name in _SUMMARY_COLS:
        if col not in results:
            continue
        vals = [pd.to_numeric(results.loc[results["arm"] == a, col], errors="coerce").mean() for a in arms]
        lines.append(f"| {name} | " + " | ".join("" if not np.isfinite(v) else f"{v:.4g}" for v in vals) + " |")
    return "\n".join(lines) + "\n"
