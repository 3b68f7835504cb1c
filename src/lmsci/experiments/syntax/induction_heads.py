"""Experiment ``induction-heads``: a 2-layer attention-only transformer trained on sequences with a repeated
random segment forms a layer-2 head with a high prefix-matching score that copies, and the in-context loss drops
at the same time (the phase change); the same model trained without repeats does not form one.

Sources: Olsson et al. 2022, "In-context Learning and Induction Heads", arXiv 2209.11895 (prefix-matching and
copying as the definition of an induction head, sec. "Key concepts"; in-context loss = loss late in the context
minus loss early, sec. "In-context learning"; Argument 1: induction heads form in a phase change at the same
point as the in-context-learning improvement; the 1-layer attention-only model has no induction heads and no
phase change); Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits" (2-layer attention-only
models; OV-circuit eigenvalue copying score).

Protocol. World :class:`lmsci.worlds.repeated_segments.RepeatedSegments` (``[BOS, s, s, filler]``, segment
length ``m`` uniform in ``[seg_min, seg_max]``, so no fixed offset predicts the copy). Models: lmsci GPT with
``mlp="none"`` (attention-only), pre-LayerNorm (folded into the OV circuit ``W_E W_V W_O W_U`` as
:func:`lmsci.measure.heads.gpt_head_weights` describes), learned positions; ``n_layers = 2``. Every ``eval_every`` steps, on a fixed
evaluation batch: every head's prefix-matching score (mean attention from each second-copy token to the token
after its previous occurrence) and the in-context loss (mean NLL on the second copy minus on the first copy,
nats/token). Events: ``t_pm`` = first evaluation at which the best layer-2 head's prefix-matching score reaches
``PM_MIN``; ``t_icl`` = first evaluation at which the in-context loss is <= ``-ICL_FRAC * ln(n_tokens)``. The
copying score of the final best prefix-matching head is Elhage et al.'s ``sum(lambda)/sum(|lambda|)``.

Second world (issue 34): Shakespeare (``worlds`` holds ``synthetic`` and/or ``shakespeare``). The same models are
trained on BPE tokens of the Shakespeare training works and measured on repeated random tokens, on held-out text
with a repeated passage and on plain held-out windows; protocol, claims and verdicts in
:mod:`lmsci.experiments.syntax._induction_shakespeare` (claims ``shakespeare-*``, thresholds the synthetic claims'
registered values; gate: the 2-layer model's held-out NLL beats the bigram baseline).

Null arms (issue 44 item 4, 2026-12-06; they replace the 1-layer model, whose keys cannot see the previous token,
so it could never prefix-match: it is no longer trained). Arms: ``real`` (points ``attn2``, ``shakespeare_attn2``);
``null`` (points ``null-attn2``, ``null-shakespeare_attn2``: the same 2-layer model, seed and steps trained without
repeats -- synthetic: ``[BOS, s, s', filler]`` with the second copy replaced by fresh random tokens; Shakespeare:
each training window's tokens shuffled within the window -- measured on the same repeated evaluation batches: the
prefix-matching claims' null, and with the init arm shakespeare-repeat-icl's); ``init`` (``init-attn2``,
``init-shakespeare_attn2``: the real model at step 0, same instruments: shakespeare-repeat-icl's null and a reported
contrast); ``otherhead`` (``otherhead-attn2``, ``otherhead-shakespeare_attn2``: the OV copying score of a layer-2
head of the trained real model drawn at random, ``derive_seed(seed, "other-head")``, among its heads other than the
best prefix-matching one: the copying claims' null). init and otherhead rows come from the real point's training
(one group, :meth:`InductionHeads.groups`, trained once). The phase-change claims' null comes from the real rows:
each seed's ``t_pm`` paired with the next seed's ``t_icl`` (cyclic shift over the seeds,
:func:`lmsci.experiments.syntax._induction_shakespeare.cross_seed`). The claims engine judges ``copying`` and
``shakespeare-copying`` (arm real against arm otherhead; the ``learned`` / ``learned-language`` gates are measured by
:meth:`InductionHeads.measured_gates`: the first's threshold depends on ``n_tokens``). Escape hatches
(``hand_verdicts``): ``prefix-matching-head``, ``shakespeare-prefix-matching-head`` and ``shakespeare-repeat-icl``,
whose registered null is the extreme over seeds ("any seed meets the threshold", for repeat-icl also over the null
and init arms) while the real arm's rule is "every seed does"; ``phase-change`` and ``shakespeare-phase-change``,
where a seed with an event missing has no value but fails the rule (the engine drops non-finite per-seed values) and
the null pairs events across seeds. The null arm's curves (only drawn in the figure now) are evaluated about 10
times per training (:func:`~lmsci.experiments.syntax._induction_shakespeare.eval_cadence`); its final measures are
taken after the last step, as the real arm's.

What the quick runs found (master seeds 0 and 1, 2026-11-27, with the 1-layer null of then): the 2-layer model learns the second copy (NLL ~0.2
nats) without a layer-2 prefix-matching head (best <= 0.13); its layer-2 heads attend to the current and previous
token with OV copying scores near -1 (they suppress the recent tokens), and a look at one pilot-seed model showed
layer-1 heads attending around the earlier copy (argmax within one position of the induction target) with copying
scores near +1. The 1-layer null reaches ~1.6 nats on the second copy the same way. At this small vocabulary (32
tokens) the task has a non-induction solution; a larger vocabulary (the gpu/paper presets, and the Shakespeare
world's 1024 BPE tokens) is the test. On Shakespeare (quick, master seeds 0 and 1, 2026-11-27; 2000 steps of
16 x 128 tokens, ~4M tokens per model) the 2-layer and 1-layer models beat the bigram baseline (held-out NLL ~3.87
vs 4.07 nats) without using the context at all: best layer-2 prefix-matching score 0.014-0.019, second/first-copy
NLL ratio on repeated held-out text ~1.00, Olsson's late-minus-early loss ~0; every Shakespeare claim is "not
reproduced" at quick, with nulls measured and not meeting the rules. The gpu preset (4000 steps of 32 x 256
tokens, ~33M tokens per model) is the next test.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, Verdict, mean_at_least
from lmsci.claims.engine import finished
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.registry import register
from lmsci.experiments.syntax import _induction_shakespeare as sh_mod
from lmsci.experiments.syntax._induction_shakespeare import (CLAIMS as SHAKESPEARE_CLAIMS, COPY_CAN_MEET, COPY_MIN,
                                                              COPY_NULL, ICL_FRAC, LEARNED_FRAC, PHASE_CAN_MEET,
                                                              PHASE_NULL, PM_CAN_MEET, PM_MIN, WINDOW_FRAC,
                                                              cross_seed_window, evaluate, first,
                                                              learned_language_gate, other_head,
                                                              prefix_matching_verdict, run_shakespeare,
                                                              shakespeare_figure, shakespeare_verdicts, window)
from lmsci.measure.heads import attention_patterns, gpt_head_weights, ov_copying_scores
from lmsci.models.gpt import GPT, GPTSpec
from lmsci.runs import RunDir, derive_seed
from lmsci.train.adaptor import numpy_rng, train_lm
from lmsci.train.trainer import TrainSpec
from lmsci.worlds.repeated_segments import RepeatedSegments

WORLDS = ("synthetic", "shakespeare")
#: the step-0 measures of a trained row and their columns in the init arm's row
INIT_COLUMNS = {"init_pm_best": "pm_best", "init_copy_best": "copy_best", "init_icl": "icl_final",
                "init_ratio_nat": "ratio_nat", "init_icl_plain": "icl_plain"}
#: a random non-best layer-2 head of a trained row and its columns in the otherhead arm's row (the copying null)
OTHER_COLUMNS = {"other_head": "best_head", "copy_other": "copy_best"}


class InductionHeadsConfig(ExperimentConfig):
    """Configuration of ``induction-heads`` (defaults = the quick preset).

    Attributes:
        n_tokens, seq_len, seg_min, seg_max: the repeated-segment world (:class:`RepeatedSegments`).
        model: the attention-only GPT trained (GPTSpec, ``mlp="none"``, ``n_layers >= 2``, ``n_heads >= 2``); the
            null arm trains the same spec on data without repeats.
        train: its optimizer and schedule (TrainSpec).
        eval_every, n_eval: evaluation cadence (steps) and evaluation sequences (synthetic world).
        worlds: which worlds get points: ``synthetic`` (the repeated-segment world) and/or ``shakespeare``.
        shakespeare_tokenizer, shakespeare_vocab_size: the Shakespeare tokens (``char`` or ``bpe``; BPE vocabulary
            size), :func:`lmsci.worlds.shakespeare.prepare`.
        shakespeare_seq_len: training window and evaluation sequence length (tokens).
        shakespeare_seg_min, shakespeare_seg_max: repeated-passage lengths of the evaluation sequences (tokens).
        shakespeare_n_eval: evaluation sequences per set (the final NLL uses 4x as many plain windows).
        shakespeare_train: optimizer and schedule on Shakespeare (TrainSpec).
    """

    n_tokens: int = Field(32, ge=2)
    seq_len: int = Field(32, ge=8)
    seg_min: int = Field(4, ge=2)
    seg_max: int = Field(12, ge=2)
    model: GPTSpec = GPTSpec(n_layers=2, n_heads=4, d_model=64, pos="learned", mlp="none", norm="layernorm")
    train: TrainSpec = TrainSpec(steps=3000, batch_size=64, lr=3e-3, warmup_steps=100)
    eval_every: int = Field(50, ge=1)
    n_eval: int = Field(256, ge=2)
    worlds: list[Literal["synthetic", "shakespeare"]] = Field(["synthetic", "shakespeare"], min_length=1)
    shakespeare_tokenizer: Literal["char", "bpe"] = "bpe"
    shakespeare_vocab_size: int = Field(1024, ge=257, le=65536, description="BPE vocabulary size (ignored for char)")
    shakespeare_seq_len: int = Field(128, ge=8)
    shakespeare_seg_min: int = Field(16, ge=2)
    shakespeare_seg_max: int = Field(48, ge=2)
    shakespeare_n_eval: int = Field(64, ge=2)
    shakespeare_train: TrainSpec = TrainSpec(steps=2000, batch_size=16, lr=3e-3, warmup_steps=100)
    threads: int = Field(1, ge=0)
    n_seeds: int = Field(3, ge=1, le=100)

    PRESETS = {
        "smoke": {"train.steps": 6, "train.warmup_steps": 6, "train.batch_size": 8, "model.d_model": 16,
                  "model.n_heads": 2, "eval_every": 2, "n_eval": 8, "seq_len": 24, "seg_min": 4, "seg_max": 8,
                  "n_tokens": 16, "n_seeds": 1, "shakespeare_tokenizer": "char", "shakespeare_seq_len": 24,
                  "shakespeare_seg_min": 4, "shakespeare_seg_max": 8, "shakespeare_n_eval": 8,
                  "shakespeare_train.steps": 6, "shakespeare_train.warmup_steps": 6, "shakespeare_train.batch_size": 8},
        "quick": {},
        "gpu": {"train.steps": 6000, "model.d_model": 128, "model.n_heads": 8, "n_eval": 1024, "seq_len": 128,
                "seg_max": 48, "n_tokens": 256, "eval_every": 100, "threads": 0, "shakespeare_seq_len": 256,
                "shakespeare_seg_max": 96, "shakespeare_n_eval": 256, "shakespeare_train.steps": 4000,
                "shakespeare_train.batch_size": 32},
        "paper": {"train.steps": 20000, "model.d_model": 256, "model.n_heads": 8, "n_eval": 2048, "seq_len": 256,
                  "seg_max": 96, "n_tokens": 1024, "eval_every": 200, "threads": 0, "shakespeare_vocab_size": 4096,
                  "shakespeare_seq_len": 512, "shakespeare_seg_max": 200, "shakespeare_n_eval": 512,
                  "shakespeare_train.steps": 20000, "shakespeare_train.batch_size": 64},
    }


@register("induction-heads")
class InductionHeads(Experiment):
    """Induction heads and the in-context-learning phase change in 2-layer attention-only models."""

    claim = ("A 2-layer attention-only transformer forms a layer-2 head with prefix-matching score >= 0.5 that "
             "copies (OV eigenvalue score >= 0.5), at the same time as its in-context loss drops, on sequences with "
             "repeated random segments and on Shakespeare; the same model trained without repeats does not.")
    source = "Olsson et al. 2022, arXiv 2209.11895; Elhage et al. 2021 (transformer-circuits.pub/2021/framework)"
    Config = InductionHeadsConfig
    time_estimate = {"smoke": "~15 s", "quick": "8.7-9.2 CPU-min measured at threads=1 with the 1-layer null (seeds 0 "
                     "and 1: 10.8 and 16.6 min wall on the shared 2-core machine at load ~2-5); Shakespeare world ~2/3 "
                     "of it; the 2-layer no-repeat null (2026-12-06) adds ~26 CPU s per training seed (estimated from "
                     "1/4 of the steps: ~+1.3 min per master seed)",
                     "gpu": "~3-9 min estimated on one H100, not measured (no GPU in S52): 6 synthetic models x 6000 "
                     "steps and 6 Shakespeare models x 4000 steps take ~2 min by lmsci.train.estimate (1.5 ms a step "
                     "for 2 layers, MLP FLOPs counted: an upper bound for attention-only models) plus ~100 evaluations "
                     "per model pair; ~9 min at the older assumption of ~80 steps/s for the Shakespeare models "
                     "(synthetic ~4 min); within 10 minutes either way",
                     "paper": "~45 min on one GPU (estimated)"}

    _SRC = "Olsson et al. 2022, arXiv 2209.11895, sec. 'Key concepts' and Argument 1"
    _LEARN = Gate("learned", f"in every seed, the 2-layer model's final mean NLL on the second copy <= "
                  f"{LEARNED_FRAC} ln(n_tokens) (it learned to use the context)")
    claims = [
        Claim("prefix-matching-head",
              "A layer-2 head of the 2-layer attention-only model has a prefix-matching score >= 0.5 at the end of "
              "training.",
              _SRC, "induction heads with high prefix-matching scores in every 2-layer+ model (Olsson Fig. 'prefix "
              "matching'); a 1-layer model has none",
              "per training seed, the largest layer-2 prefix-matching score (mean attention from each second-copy "
              "token to the token after its previous occurrence) on the evaluation batch after training; mean over "
              "seeds with a 95% Student-t CI",
              f"in every seed (at least 3) >= {PM_MIN}", gates=(_LEARN,),
              null="the same score for the 2-layer model (same architecture, seed and steps) trained on the same layout "
                   "with the second copy replaced by fresh random tokens ([BOS, s, s', filler]: no repeats), measured on "
                   "the same repeated evaluation batch: its largest layer-2 score, max over seeds; meets the rule when "
                   ">= 0.5",
              null_can_meet=PM_CAN_MEET),
        Claim("phase-change",
              "The best layer-2 head's prefix-matching score crosses 0.5 within a window of 10% of the training "
              "steps of the step where the in-context loss first falls to -0.5 ln(n_tokens).",
              _SRC + " (induction heads form at the same point as the in-context-learning improvement)",
              "the phase change; the two coincide within the resolution of the training curves",
              "per training seed, |t_pm - t_icl| / steps, with t_pm the first evaluation at which the best layer-2 "
              "prefix-matching score >= 0.5 and t_icl the first at which the in-context loss (second-copy minus "
              "first-copy NLL) <= -0.5 ln(n_tokens); the max over seeds is reported",
              f"in every seed (at least 3) both events occur and |t_pm - t_icl| <= {WINDOW_FRAC} x steps",
              gates=(_LEARN,), null=PHASE_NULL, null_can_meet=PHASE_CAN_MEET),
        Claim("copying",
              "The best prefix-matching head of the 2-layer model copies: its direct-path OV circuit has mostly "
              "positive eigenvalues.",
              "Olsson et al. 2022, arXiv 2209.11895 (copying); Elhage et al. 2021 (OV eigenvalue copying score)",
              "induction heads have positive copying scores (qualitative)",
              statistic=Stat("copy_best", where={"world": "synthetic"},
                             words="sum(lambda)/sum(|lambda|) of W_E W_V^h W_O^h W_U for the final best layer-2 "
                                   "prefix-matching head"),
              rule=mean_at_least(COPY_MIN), gates=(_LEARN,), arms=("real", "otherhead"),
              null=COPY_NULL, null_can_meet=COPY_CAN_MEET),
    ] + SHAKESPEARE_CLAIMS

    def validate(self, cfg: InductionHeadsConfig) -> None:
        from lmsci.errors import ConfigError

        RepeatedSegments(cfg.n_tokens, cfg.seq_len, cfg.seg_min, cfg.seg_max)
        if cfg.model.n_layers < 2:
            raise ConfigError("model.n_layers", cfg.model.n_layers, "an integer >= 2 (layer 2 holds induction heads)")
        if cfg.model.n_heads < 2:
            raise ConfigError("model.n_heads", cfg.model.n_heads, "an integer >= 2 (the copying null is another head)")
        if cfg.model.mlp != "none":
            raise ConfigError("model.mlp", cfg.model.mlp, "'none' (the models are attention-only)")
        if "shakespeare" in cfg.worlds:
            if not 2 <= cfg.shakespeare_seg_min <= cfg.shakespeare_seg_max:
                raise ConfigError("shakespeare_seg_min", cfg.shakespeare_seg_min,
                                  f"an integer in [2, shakespeare_seg_max={cfg.shakespeare_seg_max}]")
            if 1 + 2 * cfg.shakespeare_seg_max > cfg.shakespeare_seq_len:
                raise ConfigError("shakespeare_seq_len", cfg.shakespeare_seq_len,
                                  f">= 1 + 2 * shakespeare_seg_max = {1 + 2 * cfg.shakespeare_seg_max}")
            from lmsci.worlds.shakespeare import find_texts_dir

            find_texts_dir()  # DataError with the install command when the corpus is missing

    def points(self, cfg: InductionHeadsConfig) -> list[Point]:
        L = cfg.model.n_layers
        out = []
        for w, pre in (("synthetic", ""), ("shakespeare", "shakespeare_")):
            if w in cfg.worlds:
                prm = {"world": w, "n_layers": L} if w == "shakespeare" else {"n_layers": L}
                out += [Point(f"{pre}attn{L}", prm, arm="real"),
                        Point(f"null-{pre}attn{L}", {**prm, "repeats": False}, arm="null"),  # no repeats to learn
                        Point(f"init-{pre}attn{L}", prm, arm="init"),  # step 0 of the real run
                        Point(f"otherhead-{pre}attn{L}", prm, arm="otherhead")]  # a non-best head of the real run
        return out

    def groups(self, cfg: InductionHeadsConfig, points: list[Point]) -> list[list[Point]]:
        """A real point, its step-0 measures (arm init) and its random other head (arm otherhead) of one world and
        seed are one group: trained once; the null point is a group of its own."""
        by: dict[tuple, list[Point]] = {}
        for p in points:
            key = (p.params.get("world", "synthetic"), p.params.get("repeats", True), p.seed_index)
            by.setdefault(key, []).append(p)
        return list(by.values())

    def run_point(self, cfg: InductionHeadsConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        return self.run_group(cfg, [point], [ctx])[0]

    def run_group(self, cfg: InductionHeadsConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        """One training (real or null arm) and its rows: the trained model's; the step-0 measures for arm init; the
        random non-best head's copying score for arm otherhead."""
        ctx = next((c for p, c in zip(points, ctxs) if p.arm in ("real", "null")), ctxs[0])
        L, w = int(points[0].params["n_layers"]), points[0].params.get("world", "synthetic")
        rep = bool(points[0].params.get("repeats", True))
        row = run_shakespeare(cfg, L, ctx, rep) if w == "shakespeare" else self._synthetic_row(cfg, L, ctx, rep)
        derived = {a: {"world": w, "n_layers": L, **{v: row[k] for k, v in cols.items() if k in row}}
                   for a, cols in (("init", INIT_COLUMNS), ("otherhead", OTHER_COLUMNS))}
        trained = {k: v for k, v in row.items() if k not in INIT_COLUMNS}
        return [derived.get(p.arm, trained) for p in points]

    def _synthetic_row(self, cfg: InductionHeadsConfig, L: int, ctx: PointContext, repeats: bool = True) -> dict[str, Any]:
        """Train the ``L``-layer attention-only model on the repeated-segment world (``repeats=False``: the second
        copy replaced by fresh random tokens, the null arm) and measure it on the repeated evaluation batch (its
        step-0 measures in the ``init_*`` columns)."""
        world = RepeatedSegments(cfg.n_tokens, cfg.seq_len, cfg.seg_min, cfg.seg_max)
        model = GPT(cfg.model.gpt_config(world.vocab_size, cfg.seq_len, n_layers=L),
                    seed=derive_seed(ctx.seed, "init")).to(ctx.device)
        rng = np.random.default_rng(derive_seed(ctx.seed, "eval"))
        xe, m = world.sample(cfg.n_eval, rng)
        early, late = world.copy_masks(m)
        dev = ctx.device
        x, ind = torch.from_numpy(xe).to(dev), torch.from_numpy(world.induction_targets(m)).to(dev)
        early_t, late_t = torch.from_numpy(early).to(dev), torch.from_numpy(late).to(dev)
        hist: list[dict[str, Any]] = []

        def record(step: int, mdl: GPT) -> dict[str, float]:
            r = evaluate(mdl, x, ind, early_t, late_t)
            hist.append({"step": step, **r})
            return {"icl": r["icl"], "late": r["late"], "pm_last_layer_max": float(r["pm"][-1].max())}

        model.eval()
        init = evaluate(model, x, ind, early_t, late_t)
        init_copy = ov_copying_scores(**gpt_head_weights(model, L - 1)).numpy()
        hi0 = int(init["pm"][-1].argmax())

        def sequences(n: int, gen: torch.Generator) -> torch.Tensor:
            r = numpy_rng(gen)
            xs, ms = world.sample(n, r)
            if not repeats:  # [BOS, s, s', filler]: the second copy's positions get fresh tokens
                j = np.arange(cfg.seq_len)[None, :]
                fresh = r.integers(1, cfg.n_tokens + 1, size=xs.shape)
                xs = np.where((j >= 1 + ms[:, None]) & (j <= 2 * ms[:, None]), fresh, xs)
            return torch.from_numpy(xs)

        res = train_lm(model, sequences, cfg.train, ctx, seed=derive_seed(ctx.seed, "data"),
                       desc=f"train attn-only L{L}", eval_fn=lambda mdl: record(-1, mdl), precision=cfg.precision,
                       eval_every=sh_mod.eval_cadence(cfg.eval_every, cfg.train.steps, repeats))
        steps = [r["step"] for r in res.history if "icl" in r]
        for h, s in zip(hist, steps):
            h["step"] = s
        model.eval()
        fin = hist[-1]
        pm_last = fin["pm"][-1]
        hi = int(pm_last.argmax())
        copy = ov_copying_scores(**gpt_head_weights(model, L - 1)).numpy()
        oh = other_head(derive_seed(ctx.seed, "other-head"), len(copy), hi)
        st = [h["step"] for h in hist]
        t_pm = first(st, [float(h["pm"][-1].max()) >= PM_MIN for h in hist])
        t_icl = first(st, [h["icl"] <= -ICL_FRAC * math.log(cfg.n_tokens) for h in hist])
        pat = attention_patterns(model, x[:1])[L - 1, 0, hi].cpu().numpy()
        np.savez(ctx.artifact_dir / "curves.npz", steps=np.array(st), icl=np.array([h["icl"] for h in hist]),
                 pm=np.stack([h["pm"] for h in hist]), pattern=pat, m0=int(m[0]))
        return {"world": "synthetic", "n_layers": L, "best_head": hi, "pm_best": float(pm_last[hi]), "pm_max_any_layer": float(fin["pm"].max()),
                "copy_best": float(copy[hi]), "other_head": oh, "copy_other": float(copy[oh]), "icl_final": fin["icl"], "early_final": fin["early"],
                "late_final": fin["late"], "t_pm": t_pm, "t_icl": t_icl, "steps": cfg.train.steps,
                "init_pm_best": float(init["pm"][-1].max()), "init_copy_best": float(init_copy[hi0]),
                "init_icl": init["icl"], "train_seconds": res.seconds}

    # -- verdicts: the engine judges the copying claims; the others by hand (module docstring) -----------------
    @staticmethod
    def _arm(results: pd.DataFrame, arm: str, world: str) -> pd.DataFrame:
        ok = finished(results)
        if "arm" not in ok:
            return ok.iloc[0:0]
        w = ok["world"].fillna("synthetic") if "world" in ok else pd.Series("synthetic", index=ok.index)
        return ok[(ok["arm"] == arm) & (w == world)]

    def measured_gates(self, cfg: InductionHeadsConfig, results: pd.DataFrame) -> dict[str, tuple[Any, bool]]:
        """``learned`` (threshold LEARNED_FRAC ln(n_tokens)) and ``learned-language`` on the 2-layer rows."""
        out = {}
        two = self._arm(results, "real", "synthetic")
        if len(two):
            lrn = float(two["late_final"].max())
            out["learned"] = (lrn, lrn <= LEARNED_FRAC * math.log(cfg.n_tokens))
        g = learned_language_gate(self._arm(results, "real", "shakespeare"))
        if g is not None:
            out["learned-language"] = g
        return out

    def hand_verdicts(self, cfg: InductionHeadsConfig, results: pd.DataFrame, run: RunDir | None) -> list[Verdict]:
        arms = {w: [self._arm(results, a, w) for a in ("real", "null", "init")] for w in WORLDS}
        return (self._synthetic_verdicts(cfg, *arms["synthetic"], self.measured_gates(cfg, results))
                + shakespeare_verdicts(lambda cid, **kw: self.judge(cfg, cid, **kw), *arms["shakespeare"]))

    def _synthetic_verdicts(self, cfg: InductionHeadsConfig, two: pd.DataFrame, one: pd.DataFrame,
                            init: pd.DataFrame, measured: dict[str, tuple[Any, bool]]) -> list[Verdict]:
        if two.empty:
            return [self.judge(cfg, c, value=None, passed=None, why_not_computed="the 2-layer model was not "
                               "trained on the synthetic world") for c in ("prefix-matching-head", "phase-change")]
        gates = {"learned": measured["learned"]}

        def judge(cid: str, **kw: Any) -> Verdict:
            return self.judge(cfg, cid, **kw)

        out = [prefix_matching_verdict(judge, "prefix-matching-head", two, one, init, gates)]
        g2, p2 = window(two)
        out.append(self.judge(cfg, "phase-change", value=g2, passed=p2, n_seeds=len(two), gates=gates,
                              null=cross_seed_window(two), ci_kind="max over seeds",
                              details={"t_pm": [None if pd.isna(v) else int(v) for v in two["t_pm"]],
                                       "t_icl": [None if pd.isna(v) else int(v) for v in two["t_icl"]],
                                       "icl_final": float(two["icl_final"].mean()),
                                       "no_repeats_icl_final": None if one.empty else float(one["icl_final"].mean())}))
        return out

    def figures(self, cfg: InductionHeadsConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        ok = finished(results)
        ok = ok[~ok["arm"].isin(["init", "otherhead"])] if "arm" in ok else ok  # derived rows have no curves
        out = []
        fsh = shakespeare_figure(ok, run.point_dir)
        if fsh is not None:
            out.append(save_figure(fsh, run, "induction_heads_shakespeare.png", "Shakespeare world: prefix-matching "
                                   "score of the best last-layer head and second/first-copy NLL ratio on repeated "
                                   "held-out text over training (left); the best 2-layer head's attention on a "
                                   "repeated random-token sequence (middle) and on held-out text with a repeated "
                                   "passage (right): an induction head shows the off-diagonal stripe",
                                   claims=("shakespeare-prefix-matching-head", "shakespeare-phase-change")))
        if "world" in ok:
            ok = ok[ok["world"] != "shakespeare"]
        if ok.empty:
            return out
        fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 4.2))
        a0b = a0.twinx()
        pat, title = None, ""
        for k, (_, r) in enumerate(ok.iterrows()):
            f = run.point_dir(str(r["point"])) / "curves.npz"
            if not f.exists():
                continue
            d = np.load(f)
            ls = ":" if r.get("arm") == "null" else "-"
            a0.plot(d["steps"], d["pm"][:, -1].max(-1), ls, color=f"C{k}", label=f"{r['point']} best-head PM")
            a0b.plot(d["steps"], d["icl"], ls, color=f"C{k}", alpha=0.45)
            if pat is None and r.get("arm") != "null":
                pat, title = d["pattern"], f"{r['point']} L{int(r['n_layers']) - 1}H{int(r['best_head'])}, m = {int(d['m0'])}"
        a0.axhline(PM_MIN, color="grey", lw=0.6)
        a0.set_xlabel("step")
        a0.set_ylabel("prefix-matching score (solid: real, dotted: no-repeat null)")
        a0b.set_ylabel("in-context loss, nats (faint)")
        a0.legend(fontsize=6)
        if pat is not None:
            a1.imshow(pat, cmap="Blues", vmin=0, vmax=1)
            a1.set_title("attention of the best induction head: " + title, fontsize=8)
            a1.set_xlabel("key")
            a1.set_ylabel("query")
        return out + [save_figure(fig, run, "induction_heads.png", "Synthetic world: prefix-matching score of the best last-layer head and "
                            "in-context loss over training (left); the best 2-layer head's attention on one "
                            "evaluation sequence: the off-diagonal stripe is the induction pattern (right)",
                            claims=("prefix-matching-head", "phase-change"))]

    def report_sections(self, cfg: InductionHeadsConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        cols = [c for c in ("point", "arm", "world", "n_layers", "best_head", "pm_best", "pm_nat_best", "copy_best",
                            "copy_other", "icl_final", "late_final", "ratio_nat", "val_nll", "bigram_nll", "icl_plain", "t_pm",
                            "t_icl", "train_seconds")
                if c in results]
        st = cfg.shakespeare_train
        sh = (f"Shakespeare world: {cfg.shakespeare_tokenizer} tokens (vocabulary {cfg.shakespeare_vocab_size} for "
              f"BPE), windows of {cfg.shakespeare_seq_len}; {st.steps} steps of batch {st.batch_size}, lr {st.lr}; "
              f"evaluation on {cfg.shakespeare_n_eval} repeated random-token sequences, {cfg.shakespeare_n_eval} "
              f"held-out passages written twice (m in [{cfg.shakespeare_seg_min}, {cfg.shakespeare_seg_max}]) and "
              f"plain held-out windows. ") if "shakespeare" in cfg.worlds else ""
        return ("## Setup\n\n"
                f"[BOS, s, s, filler], m in [{cfg.seg_min}, {cfg.seg_max}], {cfg.n_tokens} tokens, seq_len "
                f"{cfg.seq_len}; attention-only GPT (no MLP, {cfg.model.norm}), d_model {cfg.model.d_model}, "
                f"{cfg.model.n_heads} heads, {cfg.model.n_layers} layers (the null: the same model trained without repeats); "
                f"{cfg.train.steps} steps of batch {cfg.train.batch_size}, evaluation every {cfg.eval_every} steps on "
                f"{cfg.n_eval} sequences. " + sh + "\n\n## Per model and seed\n\n" + markdown_table(results[cols]))
