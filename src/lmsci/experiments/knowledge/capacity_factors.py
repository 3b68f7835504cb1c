"""``capacity-factors``: what changes how many bits of bioS knowledge a GPT stores per parameter.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 3.3, Knowledge Capacity Scaling Laws", arXiv 2404.05405
(the abstract: "2 bits of knowledge per parameter, even when quantized to int8"; GatedMLP "less stable and harder to
train"; domain names prepended to the data "significantly increase" capacity). The factor sizes below (int4 to
about 0.7 bits/param; GatedMLP 1.3x lower at 100 exposures; MoE with 32 experts 1.3x lower; junk 1:7 costs 20x,
the domain token brings it to 2x) come from a third-party summary of the paper and were NOT checked against its
PDF (``/work/notes/capacity_paper_numbers.md``); the bands registered are wide enough to hold the summary's
number and the issue's wording both. Seed 001 ("Factors in Knowledge Storage") lists the same factors.

Protocol: the bioS capacity protocol of ``knowledge-capacity`` (one world of N people, ``exposures`` fresh
renderings per person in new templates and sentence order, GPT2-l-h with rotary positions and tied embeddings,
AdamW with warmup and cosine decay, the Part 3.3 bit lower bound with the He/She bit,
:func:`lmsci.measure.knowledge.measure_bits`, scored on one canonical evaluation biography per person), with every
factor an *arm* trained on the same world, the same useful biographies and the same seed:

* ``base``: the standard GPT-2 MLP (GELU, width 4 d_model); ``base2``: the same at another init seed, the null
  arm of every ratio claim (two seeds of the standard arm compared by the same statistic).
* ``int8`` / ``int4`` / ``int2``: the base model of the same seed, post-training fake-quantized
  (:func:`lmsci.models.quantize.fake_quantize`: symmetric round-to-nearest per output channel, every weight matrix
  including the tied embedding; biases and norms kept). The paper's quantizer is not verified; round-to-nearest
  loses more than GPTQ at 4 bits, so the int4 ratio here is a lower bound on the paper's. The base arm keeps its
  trained weights in its point folder and a quantized arm reads them from there (the same weights it would get by
  retraining: same seed, same data, the same deterministic trainer); with no such file it retrains.
* ``junk``: junk biographies (a separate bioS population, :mod:`lmsci.worlds.bios_junk`, each junk person shown
  ``junk.exposures`` times) make up ``junk.share`` of the training tokens, on top of the useful biographies (the
  useful exposures stay the same, as in the paper); ``junk2`` is the junk arm at another init seed (the null of the
  domain-token claim); ``junk_domain``: the same junk with the domain token after ``<bos>`` of every useful
  biography (the bit count puts it there too, ``measure_bits(..., prefix=...)``).
* ``gated``: SwiGLU MLP; ``moe``: a Switch (top-1) mixture of ``moe_experts`` GELU experts with the Switch
  load-balancing loss; ``no_mlp``: attention only. Parameters are matched to the base model's total (all
  parameters, tied embedding once; :func:`lmsci.models.sizing.count_params`): the gated MLP's width and each
  expert's width are chosen so that the total is nearest the base total (SwiGLU: about 8/3 d_model; MoE:
  about 4 d_model / experts, so the MoE has the dense model's total and about 1/experts of its MLP active per
  token); the attention-only model gets the number of layers whose total is nearest (about 3x the layers: an
  attention block has 4 d_model^2 weights, an MLP block 8 d_model^2). This is the "matched total parameters"
  reading; the paper's own normalisation is bits per (total) parameter, which the statistic also uses.

Statistic per seed: stored bits per parameter (all parameters) of the arm, divided by the base arm's value of the
same seed (for ``junk_domain``, by the junk arm's). The null arm of each "a factor moves capacity" claim is
``base2`` over ``base`` (``junk2`` over ``junk`` for the domain token), by the same rule: it meets the rule only
through seed-to-seed differences. The two "a factor keeps capacity" claims (a band around 1) take as null a
factor that removes capacity, by the same band: ``int2`` (the same quantizer at 2 bits) for int8, ``no_mlp`` for
the MoE; they meet the band only if the statistic cannot see that damage. (Until 2026-12-06 those two nulls were
``base2`` over ``base`` too, which meets a band around 1 whenever two seeds agree, so the claims could never be
decided; see CLAIMS.md.) The claims are decided at the paper preset only (as ``knowledge-capacity``: the paper's
50,000-step minimum and a world large enough to fill the model are gates; 8 trained arms x 3 seeds at that scale
take ~67 min of one H100 at the smallest world, past the gpu preset's 10 minutes); the gpu preset (6.7 min
estimated) and the quick preset report the values: the quick model is far below capacity (it stores a few
hundredths of a bit per parameter), so its ratios measure how fast each arm learns a small world, not its
capacity.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, ci_below, ci_inside, every_at_least
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms, save_figure
from lmsci.errors import ConfigError
from lmsci.experiments.knowledge._estimates import h100_seconds, mean_tokens, vocab_size
from lmsci.experiments.knowledge._specs import PhaseSpec
from lmsci.experiments.registry import register
from lmsci.measure.knowledge import bits_per_param, measure_bits
from lmsci.models.gpt import GPT, GPTSpec
from lmsci.models.quantize import fake_quantize
from lmsci.models.sizing import count_params
from lmsci.report.figures import arm_points
from lmsci.runs import RunDir, derive_seed
from lmsci.train.adaptor import train_point
from lmsci.train.trainer import TrainSpec
from lmsci.worlds.bios import ATTRS, BiosWorld
from lmsci.worlds.bios_junk import JunkSpec, junk_stream

ARMS = ("base", "base2", "int8", "int4", "int2", "junk", "junk2", "junk_domain", "moe", "gated", "no_mlp")
QUANT_BITS = {"int8": 8, "int4": 4, "int2": 2}
JUNK_ARMS = ("junk", "junk2", "junk_domain")
SECOND_SEED = ("base2", "junk2")
PAPER_MIN_STEPS = 50_000
SUFFICIENT = 1.25  # ideal bits of bioS(N) >= 1.25 x (1 bit/param at 100 exposures) x params
INT8_BAND = (0.9, 1.1)
INT4_BAND = (0.25, 0.7)
MOE_BAND = (0.6, 1.1)


def gpt2(n_layers: int, n_heads: int) -> dict:
    """Part 3.3's GPT2-l-h as GPTSpec fields: d_model = 64 n_heads, rotary positions, tied embeddings."""
    return {"n_layers": n_layers, "n_heads": n_heads, "d_model": 64 * n_heads, "pos": "rope", "tie_embeddings": True}


class CapacityFactorsConfig(ExperimentConfig):
    """Configuration of ``capacity-factors`` (defaults = quick preset).

    Attributes:
        model: the base GPT (GELU MLP); the other arms derive from it (module docstring).
        n_people: N people of the bioS world; exposures: fresh biographies per useful person.
        seq_len: window length in tokens; permute: a new sentence order per rendering (Part 3.3's bioS).
        pretrain: AdamW settings (:class:`PhaseSpec`); ``batch_size`` is the largest batch (see ``min_steps``).
        min_steps: when > 0 the batch shrinks (to 1 window at least) so that a point trains this many steps.
        junk: the junk arms' junk (share of training tokens, exposures per junk person); ``domain_token`` is set by
            the arm, not here.
        moe_experts: experts of the moe arm (top-1 Switch routing).
        quant_group_size: None (per output channel) or the group width of the quantized arms.
        eval_people: at most this many people are scored (the losses are extrapolated to all N).
        arms: the arms run (the claims need every arm they name).
    """

    model: GPTSpec = GPTSpec(**gpt2(2, 1))
    n_people: int = Field(20, ge=2)
    exposures: int = Field(100, ge=1)
    seq_len: int = Field(128, ge=64)
    permute: bool = True
    pretrain: PhaseSpec = PhaseSpec(lr=3e-3, batch_size=8, weight_decay=0.01)
    min_steps: int = Field(0, ge=0)
    junk: JunkSpec = JunkSpec(share=0.5, exposures=1)
    moe_experts: int = Field(4, ge=2)
    quant_group_size: int | None = Field(None, ge=1)
    eval_people: int = Field(20_000, ge=1)
    arms: list[str] = list(ARMS)
    threads: int = Field(1, ge=0, description="torch threads (0 = torch's default)")
    n_seeds: int = Field(3, ge=1, le=100, description="training seeds per point (the claims need 3)")

    PRECISIONS = ("fp32", "bf16")

    PRESETS = {
        "smoke": {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "pos": "rope", "tie_embeddings": True},
                  "n_people": 6, "exposures": 2, "n_seeds": 2, "moe_experts": 2},
        "quick": {},
        # within 10 minutes of one H100 (estimate_h100_seconds: 6.7 min): GPT2-2-2 on N = 2k people, >= 5k steps
        # per trained arm, the paper's 1:7 junk; reports the values (the claims are decided at paper only: 8
        # trained arms x 3 seeds x the paper's 50k steps on N = 20k come to ~67 min, past the gpu budget)
        "gpu": {"model": gpt2(2, 2), "n_people": 2_000, "seq_len": 512, "threads": 0,
                "pretrain": {"lr": 1e-3, "batch_size": 96, "weight_decay": 0.1}, "min_steps": 5_000,
                "junk": {"share": 0.875, "exposures": 1}, "moe_experts": 8, "precision": "bf16"},
        "paper": {"model": gpt2(4, 4), "n_people": 100_000, "seq_len": 512, "threads": 0,
                  "pretrain": {"lr": 1e-3, "batch_size": 96, "weight_decay": 0.1}, "min_steps": PAPER_MIN_STEPS,
                  "junk": {"share": 0.875, "exposures": 1}, "moe_experts": 32, "n_seeds": 3},
    }


def _ratio(arm: str = "base") -> Stat:
    return Stat("bits_per_param", over=Stat("bits_per_param", arm=arm),
                words=f"per seed: stored bits per parameter (Part 3.3 lower bound with the He/She bit, all parameters) "
                      f"of the arm over that of the {arm} arm of the same seed (a ratio, 1 = no effect)")


_SRC = "Allen-Zhu & Li, Physics of LMs Part 3.3, arXiv 2404.05405 (abstract; factor results, numbers unverified)"
_GATES = (Gate("training-steps", every_at_least(PAPER_MIN_STEPS), arm="base",
               stat=Stat("steps", agg="min", words="optimizer steps of the base arm")),
          Gate("data-sufficient", every_at_least(SUFFICIENT), arm="base",
               stat=Stat("ideal_bits_per_param", words="ideal bits of bioS(N) (pronoun bit included) per base-model "
                                                       "parameter: a world that could fill 1.25x the 100-exposure "
                                                       "capacity")))
_NULL = ("base2 over base: the standard arm at another init seed over the standard arm, same world, data and "
         "statistic (no factor changed)")


def _claim(cid: str, statement: str, paper: str, rule, real: str, can_meet: str, *, over: str = "base",
           null_arm: str = "base2", null: str = _NULL) -> Claim:
    return Claim(cid, statement, _SRC, paper, statistic=_ratio(over), rule=rule, gates=_GATES,
                 presets=("paper",), null=null, null_can_meet=can_meet, arms=(real, null_arm))


CLAIMS = [
    _claim("int8-keeps-capacity", f"Post-training int8 quantization keeps the stored bits: the int8/base ratio's 95% "
           f"CI lies inside [{INT8_BAND[0]}, {INT8_BAND[1]}].", "2 bits/param even when quantized to int8 (abstract)",
           ci_inside(*INT8_BAND), "int8",
           "only if the bit estimator is blind to what 2-bit rounding does to the weights (an insensitive "
           "statistic): then the claim is inconclusive", null_arm="int2",
           null="int2 over base: the same base model of the same seed through the same quantizer at 2 bits, same "
                "statistic (quantization damage present: a ratio inside the band would mean the statistic cannot "
                "see it)"),
    _claim("int4-cuts-capacity", f"Post-training int4 quantization (round-to-nearest) cuts the stored bits to "
           f"roughly half or less: the int4/base ratio's 95% CI lies inside [{INT4_BAND[0]}, {INT4_BAND[1]}].",
           "int4: about 0.7 bits/param against 2 (ratio 0.35; third-party summary, unverified); the issue and seed "
           "001: int4 'halves' capacity (0.5); the band holds both, and room below for round-to-nearest",
           ci_inside(*INT4_BAND), "int4",
           "only if one base seed stored 1.4-4x more than the other (an unstable training)"),
    _claim("junk-lowers-capacity", "Junk biographies in the training tokens lower the bits stored about the useful "
           "people: the junk/base ratio's 95% CI lies below 1.", "useful:junk 1:7 at 100 exposures: 20x less "
           "(summary, unverified)", ci_below(1.0), "junk",
           "yes, if the second seed stored consistently less than the first"),
    _claim("domain-token-recovers", "The domain token on useful biographies recovers capacity lost to junk: the "
           "junk_domain/junk ratio's 95% CI lies above 1.", "the 20x loss becomes 2x (summary, unverified); the "
           "abstract: domain names 'significantly increase' capacity", ci_above(1.0), "junk_domain",
           "yes, if the junk arm's second seed stored consistently more than its first", over="junk",
           null_arm="junk2", null="junk2 over junk: the junk arm at another init seed over the junk arm (no domain "
                                  "token in either), same statistic"),
    _claim("gated-mlp-hurts", "A gated MLP (SwiGLU) at matched total parameters stores fewer bits than the GPT-2 "
           "MLP: the gated/base ratio's 95% CI lies below 1.", "LLaMA/Mistral 1.3x lower than GPT-2 at 100 "
           "exposures, blamed on GatedMLP (summary, unverified)", ci_below(1.0), "gated",
           "yes, if the second base seed stored consistently less than the first"),
    _claim("moe-matters-less", f"A Switch mixture of experts at matched total parameters keeps most of the "
           f"capacity: the moe/base ratio's 95% CI lies inside [{MOE_BAND[0]}, {MOE_BAND[1]}].",
           "32 experts: only 1.3x lower than dense (ratio 0.77; summary, unverified)", ci_inside(*MOE_BAND), "moe",
           "yes, if removing the MLP altogether cost under 40% of the bits at this scale (the paper's summary: "
           "most architectures reach 2 bits/param even without MLP at 1000 exposures): then the band does not "
           "tell a MoE from no MLP and the claim is inconclusive", null_arm="no_mlp",
           null="no_mlp over base: the attention-only model at matched total parameters (the MLP's form changed "
                "as far as it goes), the same ratio and band"),
    _claim("no-mlp-hurts", "Without MLP layers (attention only, parameters matched by depth) a GPT stores fewer bits "
           "per parameter: the no_mlp/base ratio's 95% CI lies below 1.", "seed 001: 'w/o MLP -> hurts' (the "
           "paper's summary says most architectures reach 2 bits/param even without MLP at 1000 exposures)",
           ci_below(1.0), "no_mlp", "yes, if the second base seed stored consistently less than the first"),
]


def _nearest(base: int, candidates, size) -> int:
    return min(candidates, key=lambda c: (abs(size(c) - base), c))


def arm_spec(cfg: CapacityFactorsConfig, arm: str, V: int) -> GPTSpec:
    """The GPTSpec of ``arm``: the base model, or its gated / MoE / attention-only variant at the base model's
    total parameter count (nearest; :func:`lmsci.models.sizing.count_params` with ``V`` tokens)."""
    m, T = cfg.model, cfg.seq_len
    if arm not in ("gated", "moe", "no_mlp"):
        return m
    target = count_params(m, V, T)
    d4 = m.d_mlp or 4 * m.d_model
    if arm == "gated":
        w = _nearest(target, range(1, 2 * d4 + 1), lambda c: count_params(m.model_copy(update={"mlp": "swiglu",
                                                                                                 "d_mlp": c}), V, T))
        return m.model_copy(update={"mlp": "swiglu", "d_mlp": w})
    if arm == "moe":
        upd = {"mlp": "moe", "moe_experts": cfg.moe_experts, "moe_top_k": 1}
        w = _nearest(target, range(1, d4 + 1), lambda c: count_params(m.model_copy(update={**upd, "d_mlp": c}), V, T))
        return GPTSpec(**{**m.model_dump(), **upd, "d_mlp": w})
    L = _nearest(target, range(1, 8 * max(m.n_layers, 1) + 1),
                 lambda c: count_params(m.model_copy(update={"mlp": "none", "n_layers": c}), V, T))
    return m.model_copy(update={"mlp": "none", "n_layers": L})


def plan_batch(n_windows: int, max_batch: int, min_steps: int) -> tuple[int, int]:
    """``(batch, steps)``: the largest batch <= ``max_batch`` giving at least ``min_steps`` steps over ``n_windows``
    windows (>= 1 window per step), and the steps that follow."""
    b = max_batch if min_steps <= 0 else max(1, min(max_batch, n_windows // min_steps))
    return b, max(1, math.ceil(n_windows / b))


def _vocab(stream) -> int:
    """Token ids a model of ``stream`` needs (the domain token adds one)."""
    return int(getattr(stream, "vocab_size", len(stream.world.vocab)))


def _train(cfg: CapacityFactorsConfig, spec: GPTSpec, stream_of, init_seed: int, ctx: PointContext):
    """Train ``spec`` on the stream ``stream_of(batch)`` (one pass = every exposure); returns (model, result,
    stream)."""
    batch, steps = plan_batch(stream_of(1).count_windows(), cfg.pretrain.batch_size, cfg.min_steps)
    stream = stream_of(batch)
    model = GPT(spec.gpt_config(_vocab(stream), cfg.seq_len), seed=init_seed)
    pre = TrainSpec(steps=steps, batch_size=batch, lr=cfg.pretrain.lr,
                    warmup_steps=int(cfg.pretrain.warmup_frac * steps), min_lr_ratio=0.1,
                    weight_decay=cfg.pretrain.weight_decay, grad_clip=1.0)
    res = train_point(model, stream.get_batch_fn(), pre, ctx, seed=init_seed, desc="pretrain",
                      log_fields={"phase": "pretrain"}, log_every=max(1, steps // 50), precision=cfg.precision)
    return model, res, stream, batch, steps


@register("capacity-factors")
class CapacityFactors(Experiment):
    """Bits stored per parameter under quantization, junk data (and the domain token), MoE, gated MLP and no MLP,
    each against the standard GPT-2 arm of the same seed (Allen-Zhu & Li, arXiv 2404.05405)."""

    claim = ("int8 keeps a GPT's knowledge capacity, int4 cuts it, junk data lowers it and a domain token recovers "
             "it; a gated MLP or no MLP hurts, a mixture of experts matters less.")
    source = _SRC
    Config = CapacityFactorsConfig
    claims = CLAIMS
    time_estimate = {"smoke": "~20 s", "quick": "~4 min CPU (measured 2026-12-06: 6.4 CPU s per 127-step base training, 8 s junk; 30 trainings "
                              "per run, one thread); wall time is several times that on the loaded 2-core machine",
                     "gpu": "~7 min on one H100 (estimated by estimate_h100_seconds: 8 trained arms x 3 seeds, "
                            ">= 5k steps each on N = 2k; not measured: no GPU in the session that sized it)", "paper": "~16 h on one H100 (estimated the same way)"}

    def validate(self, cfg: CapacityFactorsConfig) -> None:
        bad = [a for a in cfg.arms if a not in ARMS]
        if bad or len(set(cfg.arms)) != len(cfg.arms):
            raise ConfigError("arms", cfg.arms, f"distinct names from {ARMS}")
        if cfg.junk.share <= 0.0:
            raise ConfigError("junk.share", cfg.junk.share, "> 0 (the junk arms need junk)")
        if cfg.junk.domain_token:
            raise ConfigError("junk.domain_token", True, "False (the junk_domain arm sets it)")
        if cfg.model.mlp != "gelu":
            raise ConfigError("model.mlp", cfg.model.mlp, "gelu (the base arm is the GPT-2 MLP)")
        if cfg.model.n_layers < 1:
            raise ConfigError("model.n_layers", cfg.model.n_layers, ">= 1")
        need = {"int8": "base", "int4": "base", "junk_domain": "junk", "junk2": "junk"}
        for a, b in need.items():
            if a in cfg.arms and b not in cfg.arms:
                raise ConfigError("arms", cfg.arms, f"{b!r} with {a!r} (its ratio's denominator)")
        if cfg.quant_group_size is not None:
            d = cfg.model.d_model
            if d % cfg.quant_group_size:
                raise ConfigError("quant_group_size", cfg.quant_group_size, f"a divisor of d_model = {d}")
        arms = [a for a in ARMS if a in cfg.arms]
        if arms[:1] != ["base"] and "base" in arms:  # pragma: no cover - ARMS order puts base first
            raise ConfigError("arms", cfg.arms, "base first")

    def points(self, cfg: CapacityFactorsConfig) -> list[Point]:
        return cross_arms([Point(f"N{cfg.n_people}_E{cfg.exposures}")], tuple(a for a in ARMS if a in cfg.arms))

    def run_point(self, cfg: CapacityFactorsConfig, point: Point, ctx: PointContext) -> dict:
        t0, c0 = time.time(), time.process_time()
        arm = point.arm
        world = BiosWorld(cfg.n_people, seed=cfg.seed)
        junk = None
        if arm in JUNK_ARMS:
            junk = cfg.junk.model_copy(update={"domain_token": arm == "junk_domain"})

        def stream_of(batch: int):
            return junk_stream(world, junk, seq_len=cfg.seq_len, batch_size=batch, exposures=cfg.exposures,
                               seed=cfg.seed, permute=cfg.permute, fullname=False, fresh=True, order_seed=ctx.seed)

        init_seed = derive_seed(ctx.seed, "init2" if arm in SECOND_SEED else "init")
        spec = arm_spec(cfg, arm, len(world.vocab))
        model, res, stream, batch, steps, loaded = self._model(cfg, spec, stream_of, init_seed, ctx, arm)
        quant = {}
        if arm in QUANT_BITS:
            model, rep = fake_quantize(model, QUANT_BITS[arm], group_size=cfg.quant_group_size)
            quant = {"quant_rel_rmse": rep["rel_rmse"], "quant_max_abs_error": rep["max_abs_error"],
                     "quant_params": rep["n_quantized"]}
        n_eval = min(cfg.n_people, cfg.eval_people)
        m = measure_bits(model, world, seed=cfg.seed + 1, attrs=ATTRS, pronoun=True, people=range(n_eval),
                         device=ctx.device, prefix=stream.eval_prefix() if hasattr(stream, "eval_prefix") else ())
        bpp = bits_per_param(m["bits"]["total"], model)
        row = {"model": f"L{spec.n_layers}_d{spec.d_model}_{spec.mlp}", "mlp": spec.mlp, "n_layers": spec.n_layers,
               "d_mlp": spec.d_mlp or 4 * spec.d_model, "n_people": cfg.n_people, "exposures": cfg.exposures,
               "batch_size": batch, "steps": steps, "init_seed": init_seed, "weights_reused": loaded,
               "tokens_seen": res.tokens_seen if res else np.nan,
               "final_loss": float(res.final.get("loss", np.nan)) if res else np.nan,
               "junk_token_fraction": float(getattr(stream, "junk_token_fraction", 0.0)),
               "active_params": count_params(spec, _vocab(stream), cfg.seq_len, active=True),
               "bits": m["bits"]["total"], "ideal_bits": m["ideal_bits"],
               "fraction_of_ideal": m["bits"]["total"] / m["ideal_bits"], **bpp,
               "ideal_bits_per_param": m["ideal_bits"] / bpp["params"], **quant,
               "wall_s": time.time() - t0, "cpu_s": time.process_time() - c0}
        for a in ATTRS:
            row[f"bits_{a}"] = m["bits"][a]
        return row

    def _model(self, cfg, spec, stream_of, init_seed, ctx, arm):
        """The trained model of ``arm`` (a quantized arm reuses the base arm's weights of the same seed when the
        base point saved them: the same weights retraining would give); ``(model, result, stream, batch, steps,
        loaded)``."""
        base_file = ctx.run.point_dir("base-" + ctx.point.id.split("-", 1)[1]) / "model.pt"
        if arm in QUANT_BITS and base_file.exists():
            saved = torch.load(base_file, map_location="cpu")
            stream = stream_of(1)
            batch, steps = saved["batch"], saved["steps"]
            model = GPT(spec.gpt_config(_vocab(stream), cfg.seq_len), seed=init_seed)
            model.load_state_dict(saved["state"])
            return model.to(ctx.device), None, stream, batch, steps, True
        model, res, stream, batch, steps = _train(cfg, spec, stream_of, init_seed, ctx)
        if arm == "base":
            ctx.artifact_dir.mkdir(parents=True, exist_ok=True)
            torch.save({"state": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "batch": batch,
                        "steps": steps}, ctx.artifact_dir / "model.pt")
        return model, res, stream, batch, steps, False

    def figures(self, cfg: CapacityFactorsConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        per_arm = {a: g.set_index("seed_index")["bits_per_param"] if "seed_index" in g else g["bits_per_param"]
                   for a, g in results.groupby("arm", sort=False)}
        fig = arm_points(per_arm, ylabel="stored bits / parameter", title="bits per parameter by factor",
                         figsize=(8.5, 3.6))
        out = [save_figure(fig, run, "bits_per_param.png", "Stored bits per parameter (Part 3.3 lower bound, all "
                           "parameters) per arm and seed, with the mean and 95% interval",
                           claims=tuple(c.id for c in CLAIMS))]
        ratios = {}
        if "seed_index" in results:
            base = results[results["arm"] == "base"].set_index("seed_index")["bits_per_param"]
            junk = results[results["arm"] == "junk"].set_index("seed_index")["bits_per_param"]
            for a, g in results.groupby("arm", sort=False):
                if a == "base":
                    continue
                den = junk if a in ("junk_domain", "junk2") else base
                ratios[f"{a}/{'junk' if a in ('junk_domain', 'junk2') else 'base'}"] = \
                    (g.set_index("seed_index")["bits_per_param"] / den).dropna()
        if ratios:
            fig2 = arm_points(ratios, ylabel="ratio of bits / parameter", title="factor / base, paired by seed",
                              hlines={"1 (no effect)": 1.0, "int4 band": INT4_BAND[1]}, figsize=(9, 3.6))
            out.append(save_figure(fig2, run, "ratios.png", "Per-seed ratios of bits per parameter, each arm over "
                                   "the base arm of its seed (junk_domain and junk2 over junk)"))
        return out

    def report_sections(self, cfg: CapacityFactorsConfig, results: pd.DataFrame, run: RunDir) -> str:
        lines = ["## Arms", "", "| arm | model | params | active params | steps | bits (mean) | bits/param (mean) | "
                 "fraction of ideal | junk token share | CPU s (mean) |", "|---|---|---|---|---|---|---|---|---|---|"]
        for a, g in results.groupby("arm", sort=False):
            lines.append(f"| {a} | {g['model'].iloc[0]} | {int(g['params'].iloc[0])} | {int(g['active_params'].iloc[0])}"
                         f" | {int(g['steps'].iloc[0])} | {g['bits'].mean():.0f} | {g['bits_per_param'].mean():.4f} | "
                         f"{g['fraction_of_ideal'].mean():.3f} | {g['junk_token_fraction'].mean():.3f} | "
                         f"{g['cpu_s'].mean():.0f} |")
        return "\n".join(lines)


def estimate_h100_seconds(cfg: CapacityFactorsConfig) -> float:
    """Estimated H100 seconds of a run: every trained arm (all but int8/int4) trains N x exposures biographies (the
    junk arms 1 / (1 - share) times the tokens) in at least ``min_steps`` steps (:func:`knowledge_common.h100_seconds`
    on the base shape)."""
    V, T, b = vocab_size(), cfg.seq_len, mean_tokens("bio")
    total = 0.0
    for a in cfg.arms:
        if a in QUANT_BITS:
            continue
        scale = 1 / (1 - cfg.junk.share) if a in JUNK_ARMS else 1.0
        tokens = cfg.n_people * cfg.exposures * b * scale
        _, steps = plan_batch(int(tokens / T), cfg.pretrain.batch_size, cfg.min_steps)
        total += h100_seconds(cfg.model, V, T, tokens=tokens, steps=steps,
                              eval_tokens=min(cfg.n_people, cfg.eval_people) * 2 * b,
                              host_docs=cfg.n_people * cfg.exposures * scale)
    return total * cfg.n_seeds
