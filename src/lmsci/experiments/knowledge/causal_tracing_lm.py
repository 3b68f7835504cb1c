"""``causal-tracing-lm``: causal tracing and ROME on a real pretrained language model (SmolLM2-135M).

Source: Meng, Bau, Andonian, Belinkov, "Locating and Editing Factual Associations in GPT", NeurIPS 2022,
arXiv 2202.05262: Section 2.1 (causal tracing; Figure 1 per fact, Figure 2 averaged: the indirect effect of MLP
outputs peaks at the last subject token in the early-middle layers, the "early site"; attention at the last token
in late layers), Section 3 (ROME) and Table 4 (CounterFact; GPT-2 XL ROME: efficacy 100%, paraphrase 96.4%,
neighbourhood 75.4%). Issue 43: the same claims on a real model, beside the toy ``causal-tracing`` experiment.

The model is fixed (``model``: a zoo name such as ``smollm2-135m``, the Q4_1 GGUF of SmolLM2-135M-Instruct
dequantised to float32: 30 layers, d_model 576; a local Hugging Face directory; a ``.gguf`` file; or
``tiny-llama``, a random 4-layer Llama for the smoke preset). The facts are lmsci's fact set
(:mod:`lmsci.worlds.facts`, 527 facts of 13 relations written for this project). Every prompt starts with the
one token ``prefix`` (``<|endoftext|>``, SmolLM2's document separator: the prompt is a document start and the
first word, sometimes the subject, is not the attention sink). A fact is *known* when the model's greedy next
token is the object's first token (Meng et al. traced only facts GPT-2 XL predicts); the gate ``known`` needs at
least 40 known facts. Each seed is an independent random sample of ``n_trace`` known facts (the model is fixed):
``seed_index`` k draws its facts, decoys, noise, ROME requests and random layer from ``derive_seed(seed, ..., k)``,
the same in both arms.

Causal tracing (:func:`lmsci.measure.causal_tracing.causal_trace`): Gaussian noise of standard deviation
``nu = 3 x`` the empirical std of the traced subjects' token embeddings (the paper's) is added to the corrupted
tokens' embeddings (``samples`` draws); one MLP or attention output is then restored to its clean value in a
window of ``window`` layers around each centre (the paper's 10 of GPT-2 XL's 48 layers, scaled to 30 layers:
6), at each restored token; the indirect effect is ``P(o | corrupted, restored) - P(o | corrupted)`` of the
object's first token. Maps are averaged per token category (first / middle / last subject, first subsequent,
further, last) over the seed's facts. To fit the quick preset on a CPU, quick restores at the key tokens only
(the corrupted span's first and last tokens, the token after it, the prompt's last token) and at every third
layer centre (1, 4, ..., 28), with 2 noise draws and the MLP and attention kinds; the gpu and paper presets
restore every (token, layer) with 10 draws and the hidden states too.

Measured cost (issue 43 item 4), before sizing quick: on one thread of a 2-core machine shared with ~5 other jobs,
SmolLM2-135M's forward costs 11-13 ms per token; one fact of ~11 tokens at the quick grid (2 kinds x 4 tokens x 10
centres x 2 draws = 160 forwards) is then ~25 s (the full paper grid, 3 kinds x every token x 30 layers x 10 draws,
would be ~20 min per fact), the screening of the 527 prompts took 79 s, and a ROME edit with 10 v* steps on 2
rewriting prompts ~20 s (estimated from the same rate). Quick was sized from that rate to about 15 minutes: 3 fact
samples x 2 arms, each 4 traced facts and 2 edits. Each run's report gives the cost it measured. The first quick
runs (master seeds 0 and 1, run side by side on 2 cores under a load average of ~14) took 40.6 and 39.2 min wall
for about 4 min of CPU each (ps: 2 min 50 s of CPU after 33 min, 4 of 6 points done): 28-76 s wall per traced fact,
50-163 s wall per ROME edit, 145 s wall to screen the prompts; on an idle 2-core machine quick is ~5 min.

Null arm (``arm = null``): the same run_point with the noise added to a *decoy*: a span of non-subject tokens of
the same prompt (as long as the subject where the prompt allows; never the prefix or the last token), drawn at
random, with the token categories taken relative to the decoy. If the early-site peak only reflects "restoring
the corrupted tokens' own MLP outputs repairs the noise", or the late attention peak "the last token reads
whatever was corrupted", the decoy shows the same peaks. ROME's null arm edits the same facts, with the same
requests, at a layer drawn uniformly at random instead of the traced layer.

ROME (:mod:`lmsci.methods.rome`, requests and scores in ``_causal_tracing_lm_rome``): the first ``n_edits``
traced facts are rewritten to another known object of the same relation, at the layer where the seed's MLP AIE
at the last subject token peaks (locate, then edit), each edit applied alone and reverted; efficacy, paraphrase
and neighbourhood specificity as CounterFact's ES, PS, NS (probability comparisons, object tokens summed). ``C``
is estimated on the fact set's statements (ROME: Wikipedia).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, every_at_least
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms
from lmsci.errors import ConfigError, UnknownNameError
from lmsci.experiments.knowledge._causal_tracing_lm_model import (
    encode_fact, check_model_name, get_model, known_facts, prefix_ids,
)
from lmsci.experiments.knowledge._causal_tracing_lm_report import lm_figures, lm_report
from lmsci.experiments.knowledge._causal_tracing_lm_rome import plan_edits, rome_scores, statement_windows
from lmsci.experiments.registry import register
from lmsci.measure.causal_tracing import (
    CATEGORIES, KINDS, NOISE_FACTOR, average_by_category, causal_trace, embedding_std, n_layers_of, site_margin,
)
from lmsci.runs import RunDir, derive_seed
from lmsci.worlds.facts import load_facts

KNOWN_MIN = 40      # registered gate: at least this many facts known (greedy next token = object's first token)
TE_MIN = 0.05       # registered gate: mean total effect P(o) - P*(o) of the real arm's traced facts, every seed
EARLY_MIDDLE = (0.1, 0.5)   # registered band of the MLP site: layers [round(0.1 L), round(0.5 L)): 3-14 of 30
LATE = (0.5, 1.0)           # registered band of the attention site: layers [round(0.5 L), L): 15-29 of 30
EFFICACY, PARAPHRASE, SPECIFICITY = 0.9, 0.75, 0.7   # registered ROME thresholds (95% CI lower ends)


def band(n_layers: int, frac: tuple[float, float]) -> list[int]:
    """Layers ``[round(frac[0] L), round(frac[1] L))`` of an ``L``-layer model."""
    return list(range(round(frac[0] * n_layers), round(frac[1] * n_layers)))


def layer_centres(n_layers: int, stride: int) -> list[int]:
    """Window centres restored: every ``stride``-th layer from ``stride // 2`` (stride 3 on 30 layers: 1, 4, ..., 28)."""
    return list(range(min(stride // 2, n_layers - 1), n_layers, stride))


def key_tokens(n_tokens: int, span: tuple[int, int]) -> list[int]:
    """The corrupted span's first and last tokens, the token after it and the prompt's last token."""
    s, e = span
    return sorted({s, e - 1, min(e, n_tokens - 1), n_tokens - 1})


def decoy_span(n_tokens: int, subject: tuple[int, int], first: int, rng: np.random.Generator) -> tuple[int, int]:
    """A random span of non-subject tokens in ``[first, n_tokens - 1)`` (never the prefix or the last token), as
    long as the subject where a run of free tokens allows (else the longest run's length).

    Raises:
        ConfigError: the prompt has no free token.
    """
    s, e = subject
    free = [t for t in range(first, n_tokens - 1) if not s <= t < e]
    runs, cur = [], []
    for t in free:
        if cur and t != cur[-1] + 1:
            runs.append(cur)
            cur = []
        cur.append(t)
    if cur:
        runs.append(cur)
    if not runs:
        raise ConfigError("prompt", n_tokens, "a prompt with a token besides the prefix, the subject and the last")
    m = min(e - s, max(len(r) for r in runs))
    starts = [r[i] for r in runs for i in range(len(r) - m + 1)]
    a = starts[int(rng.integers(len(starts)))]
    return a, a + m


class CausalTracingLMConfig(ExperimentConfig):
    """Configuration of ``causal-tracing-lm`` (defaults = the quick preset).

    Attributes:
        model: a zoo name (``lmsci models``), a local Hugging Face directory, a ``.gguf`` file, or ``tiny-llama``.
        prefix: one token prepended to every prompt (``""``: none).
        relations: the fact set's relations used (None: all 13).
        n_trace: known facts traced per seed. samples: noise draws per fact. noise_factor: nu = factor x std.
        window: layers restored around each centre for MLP and attention (hidden states: 1).
        layer_stride: restore at every ``layer_stride``-th window centre. tokens: ``key`` or ``all`` positions.
        kinds: restored states (``resid``, ``mlp``, ``attn``; ``mlp`` and ``attn`` are required by the claims).
        n_edits: ROME edits per seed (the first traced facts). n_prefixes: prefixed rewriting prompts.
        n_paraphrases, n_neighbours: per edit. cov_windows x cov_len: statement tokens for ROME's C.
        v_steps, v_lr, kl_factor, v_weight_decay, clamp_norm_factor: ROME's v* optimisation.
    """

    model: str = Field("smollm2-135m", description="zoo name, local HF directory, .gguf file, or tiny-llama")
    prefix: str = "<|endoftext|>"
    relations: tuple[str, ...] | None = None
    n_trace: int = Field(4, ge=1)
    samples: int = Field(2, ge=1)
    noise_factor: float = Field(NOISE_FACTOR, gt=0)
    window: int = Field(6, ge=1)
    layer_stride: int = Field(3, ge=1)
    tokens: str = Field("key", pattern="^(key|all)$")
    kinds: tuple[str, ...] = ("mlp", "attn")
    n_edits: int = Field(2, ge=0)
    n_prefixes: int = Field(1, ge=0)
    n_paraphrases: int = Field(2, ge=0)
    n_neighbours: int = Field(4, ge=1)
    cov_windows: int = Field(16, ge=1)
    cov_len: int = Field(64, ge=8)
    v_steps: int = Field(10, ge=1)
    v_lr: float = Field(0.5, gt=0)
    kl_factor: float = Field(0.0625, ge=0)
    v_weight_decay: float = Field(0.5, ge=0)
    clamp_norm_factor: float = Field(4.0, gt=0)
    n_seeds: int = Field(3, ge=1, le=100)
    threads: int = Field(1, ge=0)

    PRESETS = {
        "smoke": {"model": "tiny-llama", "n_trace": 2, "samples": 2, "layer_stride": 1, "window": 2, "n_edits": 1,
                  "n_prefixes": 1, "n_paraphrases": 1, "n_neighbours": 2, "cov_windows": 4, "cov_len": 16,
                  "v_steps": 2, "n_seeds": 2},
        "quick": {},
        # one H100 (estimated from the CPU rate, not measured): 40 facts x 3 kinds x every (token, layer) x 10 draws
        "gpu": {"n_trace": 40, "samples": 10, "layer_stride": 1, "tokens": "all", "kinds": ("resid", "mlp", "attn"),
                "n_edits": 20, "n_prefixes": 4, "n_paraphrases": 3, "n_neighbours": 10, "cov_windows": 256,
                "cov_len": 128, "v_steps": 20, "threads": 0},
        # the paper's protocol at this model's scale: 200 of its known facts per sample, 100 edits
        "paper": {"n_trace": 200, "samples": 10, "layer_stride": 1, "tokens": "all",
                  "kinds": ("resid", "mlp", "attn"), "n_edits": 100, "n_prefixes": 4, "n_paraphrases": 3,
                  "n_neighbours": 10, "cov_windows": 1024, "cov_len": 128, "v_steps": 20, "threads": 0},
    }


_SRC = "Meng et al. 2022, arXiv 2202.05262"
_KNOWN = Gate("known", every_at_least(KNOWN_MIN), arm="real",
              stat=Stat("n_known", words="facts of the set whose greedy next token is the object's first token "
                                         "(the model is fixed: the same count in every seed)"))
_CORRUPT = Gate("corruption", every_at_least(TE_MIN), arm="real",
                stat=Stat("total_effect", words="mean over a sample's traced facts of P(o) - P*(o), the probability "
                                                "of the object's first token lost to the subject's corruption"))
_NULL_TRACE = ("the same trace, noise level, windows and facts with the noise added to a decoy span of non-subject "
               "tokens of the same prompt drawn at random (as long as the subject where the prompt allows, never "
               "the prefix or the last token), token categories taken relative to the decoy, same statistic")


def _margin_words(kind: str, cat: str, frac: tuple[float, float]) -> str:
    return (f"per sample of n_trace known facts: the {kind} AIE map (P(o) with a window of layers restored minus "
            f"P*(o), averaged per token category over the sample's facts); its largest value at ({cat} token, a "
            f"layer in [{frac[0]} L, {frac[1]} L)) minus its largest value at any other restored (category, layer): "
            "probability of the object's first token")


@register("causal-tracing-lm")
class CausalTracingLM(Experiment):
    """Causal tracing and ROME on a real pretrained LM (Meng et al. 2022, arXiv 2202.05262, Sections 2-3)."""

    claim = ("In a real pretrained LM, factual recall is mediated by MLPs at the last subject token in early-middle "
             "layers and attention at the last token in late layers; ROME at the traced layer rewrites a fact.")
    source = "Meng, Bau, Andonian, Belinkov, NeurIPS 2022, arXiv 2202.05262, Sections 2-3, Figure 2, Table 4"
    Config = CausalTracingLMConfig
    time_estimate = {"smoke": "~20 s (tiny random Llama; mostly imports)",
                     "quick": "40 min wall measured under a load average of ~14 on 2 cores (2026-12-06; ~4 min "
                              "of CPU, one thread): ~5 min on an idle 2-core machine",
                     "gpu": "~10 min on one H100 (estimated, not measured)",
                     "paper": "~1.5 h on one H100 (estimated, not measured)"}
    claims = [
        Claim("mlp-early-site",
              "The average indirect effect of restoring MLP outputs peaks at the last subject token in the "
              "early-middle layers (the early site).",
              f"{_SRC}, Section 2.1, Figure 2 (GPT-2 XL, window 10)",
              "MLP AIE peaks at the last subject token around layers 10-20 of 48 (~8.7% of the answer probability)",
              statistic=Stat("mlp_margin", words=_margin_words("MLP", "last subject", EARLY_MIDDLE)),
              rule=ci_above(0.0), gates=(_KNOWN, _CORRUPT), null=_NULL_TRACE,
              null_can_meet="restoring the corrupted tokens' own MLP outputs undoes part of the noise whatever the "
                            "tokens are: if that is all the early site is, the decoy's last token peaks in the same "
                            "layers and the null arm meets the rule"),
        Claim("attn-late-site",
              "The average indirect effect of restoring attention outputs peaks at the last token in late layers.",
              f"{_SRC}, Section 2.1, Figure 2", "attention AIE concentrated at the last token in the upper layers",
              statistic=Stat("attn_margin", words=_margin_words("attention", "last", LATE)),
              rule=ci_above(0.0), gates=(_KNOWN, _CORRUPT), null=_NULL_TRACE,
              null_can_meet="the last token's late attention reads whatever was corrupted: a decoy span's "
                            "corruption can be repaired at the same site, and the null arm then meets the rule"),
        Claim("rome-efficacy", "ROME at the traced layer makes the model prefer the new object on the edited prompt.",
              f"{_SRC}, Section 3.3, Table 4 (CounterFact, GPT-2 XL)", "efficacy score 100%",
              statistic=Stat("efficacy", words="per sample: share of its edits with log P(new object) > log P(old "
                                               "object) after the edit, on the edited prompt"),
              rule=ci_above(EFFICACY), gates=(_KNOWN,),
              null="the same requests (facts, new objects, prompts) edited at a layer drawn uniformly at random",
              null_can_meet="ROME's rank-one update reaches its target at many layers: an edit at a random layer "
                            "can also make the edited prompt prefer the new object"),
        Claim("rome-paraphrase", "The edit at the traced layer generalises to paraphrases of the prompt.",
              f"{_SRC}, Section 3.3, Table 4", "paraphrase score 96.4%",
              statistic=Stat("paraphrase", words="per sample: share of paraphrase prompts (the relation's other "
                                                 "templates) preferring the new object after the edit"),
              rule=ci_above(PARAPHRASE), gates=(_KNOWN,),
              null="the same requests edited at a layer drawn uniformly at random",
              null_can_meet="a random layer near the traced one, or any layer reading the subject, can generalise"),
        Claim("rome-specificity", "The edit at the traced layer leaves other subjects' facts of the relation intact.",
              f"{_SRC}, Section 3.3, Table 4", "neighbourhood score 75.4%",
              statistic=Stat("specificity", words="per sample: share of other known facts of the edited relation "
                                                  "with log P(their object) > log P(new object) after the edit"),
              rule=ci_above(SPECIFICITY), gates=(_KNOWN,),
              null="the same requests edited at a layer drawn uniformly at random",
              null_can_meet="an edit at a random layer may change nothing else (or nothing at all): it is as "
                            "specific as any"),
    ]

    def validate(self, cfg: CausalTracingLMConfig) -> None:
        check_model_name(cfg.model, "model")
        for k in cfg.kinds:
            if k not in KINDS:
                raise UnknownNameError("kinds", k, KINDS)
        for k in ("mlp", "attn"):
            if k not in cfg.kinds:
                raise ConfigError("kinds", cfg.kinds, "kinds including 'mlp' and 'attn' (the claims' maps)")
        load_facts(relations=cfg.relations)  # unknown relation names fail here

    def points(self, cfg: CausalTracingLMConfig) -> list[Point]:
        return cross_arms([Point("facts")], ("real", "null"))

    def run_point(self, cfg: CausalTracingLMConfig, point: Point, ctx: PointContext) -> dict:
        facts = load_facts(relations=cfg.relations)
        model = get_model(cfg.model, facts, ctx.device)
        if getattr(model, "provenance", None):
            ctx.run.record_model(model.provenance)
        tok, k, real = model.tokenizer, point.seed_index, point.arm != "null"
        pre = prefix_ids(tok, cfg.prefix)
        prompts = [encode_fact(tok, facts, f, pre) for f in facts.facts]
        t0 = time.perf_counter()
        known = [p for p, ok in zip(prompts, known_facts(model, cfg.model, prompts)) if ok]
        t_screen = time.perf_counter() - t0
        pool = known if known else prompts  # a random model (smoke) knows nothing: trace any facts
        traced = [pool[int(i)] for i in np.random.default_rng(derive_seed(cfg.seed, "facts", k)).permutation(len(pool))
                  [:cfg.n_trace]]
        L = n_layers_of(model)
        centres = layer_centres(L, cfg.layer_stride)
        nu = cfg.noise_factor * embedding_std(model, [p.ids for p in traced], [p.subject for p in traced])
        drng = np.random.default_rng(derive_seed(cfg.seed, "decoy", k))
        traces, t0, c0 = [], time.perf_counter(), time.process_time()
        for j, p in enumerate(traced):
            span = p.subject if real else decoy_span(len(p.ids), p.subject, len(pre), drng)
            toks = key_tokens(len(p.ids), span) if cfg.tokens == "key" else None
            traces.append(causal_trace(model, p.ids, span, p.object[0], noise=nu, kinds=cfg.kinds,
                                       samples=cfg.samples, window={"resid": 1, "mlp": cfg.window, "attn": cfg.window},
                                       seed=derive_seed(cfg.seed, "noise", k, j), tokens=toks, layers=centres))
        t_trace, c_trace = (time.perf_counter() - t0) / len(traced), (time.process_time() - c0) / len(traced)
        aie = {kd: average_by_category(traces, kd) for kd in cfg.kinds}
        ls = aie["mlp"][CATEGORIES.index("last subject")]
        traced_layer = int(np.nanargmax(np.where(np.isfinite(ls), ls, -np.inf)))
        la = aie["attn"][CATEGORIES.index("last")]
        row: dict[str, Any] = {
            "model": cfg.model, "n_layers": L, "n_candidates": len(prompts), "n_known": len(known),
            "n_traced": len(traced), "noise_std": nu, "window": cfg.window, "n_centres": len(centres),
            "p_clean": float(np.mean([t.high for t in traces])), "p_corrupt": float(np.mean([t.low for t in traces])),
            "total_effect": float(np.mean([t.total_effect for t in traces])),
            "mlp_margin": site_margin(aie["mlp"], "last subject", band(L, EARLY_MIDDLE)),
            "attn_margin": site_margin(aie["attn"], "last", band(L, LATE)),
            "mlp_peak_layer": traced_layer, "mlp_peak_aie": float(ls[traced_layer]),
            "attn_peak_layer": int(np.nanargmax(np.where(np.isfinite(la), la, -np.inf))),
            "sec_screen": t_screen, "sec_per_fact": t_trace, "cpu_per_fact": c_trace, "prompt_tokens": float(np.mean([len(p.ids) for p in traced])),
            "facts": json.dumps([f"{p.fact.subject} | {p.fact.relation} | {p.fact.object}" for p in traced]),
            "aie": json.dumps({kd: np.where(np.isfinite(v), v, None).tolist() for kd, v in aie.items()}),
            "example_trace": json.dumps({"tokens": tok.convert_ids_to_tokens(traced[0].ids),
                                         "categories": traces[0].categories, "low": traces[0].low,
                                         "high": traces[0].high, **{kd: np.where(np.isfinite(traces[0].scores[kd]),
                                                                                 traces[0].scores[kd], None).tolist()
                                                                    for kd in cfg.kinds}}),
        }
        row.update(self._rome(cfg, model, facts, pre, traced, pool, L, traced_layer if real else None, k, ctx))
        return row

    def _rome(self, cfg: CausalTracingLMConfig, model: Any, facts: Any, pre: list[int], traced: list, pool: list,
              L: int, layer: int | None, k: int, ctx: PointContext) -> dict[str, Any]:
        """ROME on the first ``n_edits`` traced facts at ``layer`` (None: a layer drawn at random: the null arm)."""
        if layer is None:
            layer = int(np.random.default_rng(derive_seed(cfg.seed, "rome-layer", k)).integers(L))
        if cfg.n_edits == 0:
            return {"edit_layer": layer, "n_edits": 0}
        plans = plan_edits(facts, model.tokenizer, pre, [p.fact for p in traced[:cfg.n_edits]],
                           [p.fact for p in pool], cfg, np.random.default_rng(derive_seed(cfg.seed, "rome", k)))
        windows = statement_windows(model.tokenizer, facts, pre, cfg.cov_windows, cfg.cov_len,
                                    derive_seed(cfg.seed, "cov")).to(ctx.device)
        t0, c0 = time.perf_counter(), time.process_time()
        out = rome_scores(model, plans, layer, windows, cfg)
        n = max(1, len(plans))
        return {"edit_layer": layer, **out, "sec_per_edit": (time.perf_counter() - t0) / n,
                "cpu_per_edit": (time.process_time() - c0) / n}

    def figures(self, cfg: CausalTracingLMConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        return lm_figures(cfg, results, run)

    def report_sections(self, cfg: CausalTracingLMConfig, results: pd.DataFrame, run: RunDir) -> str:
        if not len(results):
            return ""
        L = int(results["n_layers"].iloc[0])
        return lm_report(cfg, results, run, band(L, EARLY_MIDDLE), band(L, LATE),
                         {"mlp-early-site": 0.0, "attn-late-site": 0.0, "rome-efficacy": EFFICACY})
