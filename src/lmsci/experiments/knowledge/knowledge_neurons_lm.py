"""``knowledge-neurons-lm``: knowledge neurons of a real pretrained language model (SmolLM2-135M).

Source: Dai, Dong, Hao, Sui, Chang, Wei, "Knowledge Neurons in Pretrained Transformers", ACL 2022, arXiv 2104.08696:
Sec. 3.1 (knowledge attribution by integrated gradients, m = 20 Riemann steps, Eq. 2-3), Sec. 3.2 (coarse neurons
above t = 0.2 x the prompt's largest attribution; refined to those shared by more than p of the fact's prompts, p
from 0.7 moved by 0.05 until a fact has 2-5 knowledge neurons on average), Sec. 4 "Knowledge Neurons Affect
Knowledge Expression" (BERT-base on PARAREL: suppressing a fact's knowledge neurons lowers its answer
probability by 29.03% on average, as many random neurons by 1.47%; doubling them raises it by 31.17%), Sec. 5 (case
study "Erasing Relations": the edit's effect on other relations is far smaller than on its own). Issue 43, item 2:
the same claims on a real model, beside the toy ``knowledge-neurons`` experiment (a GPT trained on bioS
biographies; its published quick rows are shown in the report).

The model is fixed (``model``: a zoo name such as ``smollm2-135m``, the Q4_1 GGUF of SmolLM2-135M-Instruct
dequantised to float32: 30 layers, d_mlp 1536, 46,080 MLP neurons; a local Hugging Face directory; a ``.gguf``
file; or ``tiny-llama``, a random 4-layer Llama for the smoke preset). The facts are lmsci's fact set
(:mod:`lmsci.worlds.facts`: 527 facts of 13 relations written for this project); the model and the prompts come
from ``causal-tracing-lm``'s helpers (:mod:`._causal_tracing_lm_model`): every prompt starts with the one token
``prefix`` (``<|endoftext|>``), and a fact is *known* when the model's greedy next token after its template prompt
is the object's first token (gate ``known``: at least 40 known facts). The answer is the object's first token
(the causal-LM counterpart of BERT's ``[MASK]``), predicted at the prompt's last position.

Per seed (an independent random sample of ``n_facts`` known facts, drawn with ``derive_seed(seed, "facts", k)``;
the model is fixed), each fact's prompts are its relation's template and paraphrases (three in the shipped set;
Dai et al. use PARAREL's paraphrased prompts). For every prompt, integrated gradients attribute
``P(answer | prompt)`` to all neurons of all layers (hook ``blocks.{l}.mlp.post``, the down projection's input,
at the last position; ``ig_steps`` = m = 20), computed with the prompt's earlier positions cached
(:mod:`._knowledge_neurons_lm_ig`; the same numbers as :func:`lmsci.measure.attribution.integrated_gradients`,
which the test checks, at a fraction of the cost). Coarse and refined neurons and the adaptive p (per sample,
over its facts) are :mod:`lmsci.measure.attribution`'s. Facts without a knowledge neuron are left out of the means
(as the paper).

Interventions (:class:`~lmsci.measure.attribution.NeuronEdit`, at the last position of each of the fact's prompts):
*suppress* sets the neurons' activations to 0, *amplify* doubles them; the statistic is the relative change
``(p_after - p_before) / p_before`` of the fact's answer probability, ``p`` its mean over the fact's prompts,
then averaged over the sample's facts. A deviation from the paper, which averages the ratio per prompt: the gate
``known`` checks the template prompt only, so a fact's paraphrases may be prompts the model does not answer, with
answer probabilities near 0 whose ratios (a rise from 0.001 to 0.01 is +900%) would dominate a mean of ratios
over a few facts; the ratio of the mean weighs the prompts by their probability. The paper's per-prompt mean is
reported beside (``suppress_per_prompt``, ``amplify_per_prompt``) and decides nothing. ``n_other`` known facts of
OTHER relations (their template prompts and answers) are measured under the same suppression: their mean relative
change is the inter-relation term of ``suppress-specific``.

Arms (``cross_arms``; one attribution per seed serves both rows: :meth:`KnowledgeNeuronsLM.groups`): ``real``
edits each fact's knowledge neurons; ``null`` edits, through the same code, as many random neurons in the same
layers, none of them a knowledge neuron of the fact (:func:`same_layer_random`, the toy's control and the paper's
random-neuron baseline). Both rows carry the same columns, so every claim is the engine's rule on one column.

Rules (registered before the first quick run, on the 95% Student-t interval across samples): ``suppress-erases``
needs the interval below -10% (a third of the paper's -29%, seven times its random-neuron -1.47%),
``amplify-strengthens`` above +10% (a third of +31%), ``suppress-specific`` (own change minus other relations')
below -5 points. The null arm is judged by the same rule; if random neurons of the same count and layers meet it,
the claim is inconclusive (the effect is not the knowledge neurons').

Measured cost (timing pilots, master seed 1000001, 2026-12-06, one thread on the 2-core machine shared with a
publication run, load average 1-3; timing only, no claim statistic computed): SmolLM2-135M loads in ~6 s from the
model cache and screens the 527 prompts in 17-32 s; integrated gradients over all 30 layers of one prompt at
m = 20 (600 scaled single-token rows in one batched forward/backward) cost ~5.8 s of CPU with the cached prefix,
against ~1.1 s per layer (~33 s for 30 layers) through the library's full-prompt function; three facts of three
prompts (10-12 tokens) took 17.3, 16.7 and 18.3 s of CPU (19-34 s wall under that load). The edits of a fact
(suppress and amplify on both arms, the other facts: 8 batched forwards of at most ``n_other`` prompts) add ~2-3 s
(estimated from the measured 0.17 s for a batch of 3 prompts). Quick was sized from that rate: 3 samples x 8 facts
x ~20 s = ~8 min, plus loading and screening (~40 s, once per process): ~9 min per master seed on one quiet
thread. Each run's report gives the cost it measured
(``sec_per_fact``, ``cpu_per_fact``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, ci_below, every_at_least
from lmsci.config import ExperimentConfig
from lmsci.contract import Figure, Point, PointContext, cross_arms
from lmsci.errors import ConfigError
from lmsci.experiments.knowledge._causal_tracing_lm_model import (
    check_model_name, encode_fact, get_model, known_facts, prefix_ids,
)
from lmsci.experiments.knowledge._knowledge_neurons_fields import KnowledgeNeuronFields
from lmsci.experiments.knowledge._knowledge_neurons_lm_ig import cached_integrated_gradients
from lmsci.experiments.knowledge._knowledge_neurons_lm_report import kn_figures, kn_report
from lmsci.experiments.knowledge._seed_arms import SeedArmsExperiment
from lmsci.experiments.registry import register
from lmsci.measure.attribution import NeuronEdit, adaptive_share, answer_probs, coarse_neurons, refine, relative_change
from lmsci.runs import RunDir, derive_seed, resolve_device
from lmsci.worlds.facts import load_facts

KNOWN_MIN = 40        # registered gate: at least this many facts known (greedy next token = object's first token)
FOUND_MIN = 0.5       # registered gate: share of a sample's facts with >= 1 knowledge neuron, every sample
SUPPRESS_MAX = -0.10  # registered rule: the 95% CI of the mean suppressed change lies below -10%
AMPLIFY_MIN = 0.10    # registered rule: the 95% CI of the mean amplified change lies above +10%
SPECIFIC_MAX = -0.05  # registered rule: own change minus other relations' change, 95% CI below -5 points


def same_layer_random(d_mlp: dict[int, int], neurons: list[tuple[int, int]],
                      rng: np.random.Generator) -> list[tuple[int, int]]:
    """As many random neurons as ``neurons`` in each of their layers, none of them one of ``neurons`` (the null
    arm: the same count and layer profile, not chosen by attribution; the toy ``knowledge-neurons``' control).

    Args:
        d_mlp: layer -> its number of MLP neurons. neurons: ``[(layer, neuron), ...]``.
    """
    chosen, out = set(neurons), []
    for l in sorted({l for l, _ in neurons}):
        k = sum(1 for m, _ in neurons if m == l)
        pool = [i for i in range(d_mlp[l]) if (l, i) not in chosen]
        out += [(l, int(pool[j])) for j in rng.choice(len(pool), size=min(k, len(pool)), replace=False)]
    return sorted(out)


class KnowledgeNeuronsLMConfig(ExperimentConfig, KnowledgeNeuronFields):
    """Configuration of ``knowledge-neurons-lm`` (defaults = the quick preset).

    Attributes:
        model: a zoo name (``lmsci models``), a local Hugging Face directory, a ``.gguf`` file, or ``tiny-llama``.
        prefix: one token prepended to every prompt (``""``: none).
        relations: the fact set's relations used (None: all 13).
        n_facts: known facts attributed per sample. n_other: known facts of other relations measured per fact.
        ig_steps, threshold, share_start, share_step, min_neurons, max_neurons, amplify_factor: the attribution
            and the edits (:class:`~lmsci.experiments.knowledge._knowledge_neurons_fields.KnowledgeNeuronFields`).
    """

    model: str = Field("smollm2-135m", description="zoo name, local HF directory, .gguf file, or tiny-llama")
    prefix: str = "<|endoftext|>"
    relations: tuple[str, ...] | None = None
    n_facts: int = Field(8, ge=1)
    n_other: int = Field(10, ge=1)
    n_seeds: int = Field(3, ge=1, le=100)
    threads: int = Field(1, ge=0)

    PRESETS = {
        "smoke": {"model": "tiny-llama", "n_facts": 3, "n_other": 2, "ig_steps": 4, "n_seeds": 2},
        "quick": {},
        # one H100 (estimated from the CPU rate, not measured): 100 facts x 3 prompts x 600 single-token rows
        "gpu": {"n_facts": 100, "n_other": 20, "n_seeds": 5, "threads": 0},
        # the paper's protocol on (almost) every fact this model knows; PARAREL has 27k facts, BERT-base 12 layers
        "paper": {"n_facts": 250, "n_other": 50, "n_seeds": 5, "threads": 0},
    }


_SRC = "Dai et al. 2022, arXiv 2104.08696"
_KNOWN = Gate("known", every_at_least(KNOWN_MIN), arm="real",
              stat=Stat("n_known", words="facts of the set whose greedy next token after the template prompt is the "
                                         "object's first token (the model is fixed: the same count in every sample)"))
_FOUND = Gate("neurons-found", every_at_least(FOUND_MIN), arm="real",
              stat=Stat("frac_with_neurons", words="share of the sample's attributed facts with >= 1 knowledge "
                                                   "neuron (facts without one are left out of the means)"))
_NULL = ("the same statistic, through the same code and facts, with each fact's knowledge neurons replaced by as "
         "many random neurons in the same layers (none of them a knowledge neuron of the fact): the paper's "
         "random-neuron control")


def _words(edit: str) -> str:
    return (f"per sample of n_facts known facts: mean over the facts with >= 1 knowledge neuron of the relative "
            f"change (p_after - p_before) / p_before of p, the answer's first-token probability averaged over the "
            f"fact's prompts (its relation's template and paraphrases: three per fact in the shipped fact set), when "
            f"the arm's neurons are {edit} at the "
            "answer position (fraction)")


@register("knowledge-neurons-lm")
class KnowledgeNeuronsLM(SeedArmsExperiment):
    """Knowledge neurons of a real pretrained LM, suppressed and amplified (Dai et al. 2022, arXiv 2104.08696)."""

    claim = ("In a real pretrained LM, suppressing the MLP neurons that integrated gradients attribute a fact to "
             "lowers its answer probability far more than as many random neurons, and amplifying them raises it.")
    source = "Dai, Dong, Hao, Sui, Chang, Wei, ACL 2022, arXiv 2104.08696, Secs. 3-5"
    Config = KnowledgeNeuronsLMConfig
    time_estimate = {"smoke": "~15 s (tiny random Llama; mostly imports)",
                     "quick": "~9 min (estimated from a measured rate: ~17.5 s of CPU per fact of 3 prompts "
                              "plus ~2.5 s of edits, 24 facts, one thread; timing pilot 2026-12-06)",
                     "gpu": "~5 min on one H100 (estimated, not measured)",
                     "paper": "~15 min on one H100 (estimated, not measured)"}
    claims = [
        Claim("suppress-erases",
              f"Suppressing (zeroing) a fact's knowledge neurons at the answer position lowers its answer probability "
              f"by more than {-SUPPRESS_MAX:.0%} on average, while as many random neurons in the same layers do not.",
              f"{_SRC}, Sec. 4, 'Knowledge Neurons Affect Knowledge Expression' (BERT-base, PARAREL)",
              "answer probability -29.03% on average under suppression (random neurons -1.47%)",
              statistic=Stat("suppress", words=_words("suppressed (set to 0)")),
              rule=ci_below(SUPPRESS_MAX), gates=(_KNOWN, _FOUND), null=_NULL,
              null_can_meet="if the answer's probability were fragile to any few neurons at the answer position "
                            "(massive-activation neurons, a layer whose every neuron matters), zeroing random "
                            "neurons of the same count and layers would also lower it by more than 10%, and the "
                            "null arm would meet the rule"),
        Claim("amplify-strengthens",
              f"Doubling a fact's knowledge neurons at the answer position raises its answer probability by more "
              f"than {AMPLIFY_MIN:.0%} on average, while as many random neurons in the same layers do not.",
              f"{_SRC}, Sec. 4, 'Knowledge Neurons Affect Knowledge Expression'",
              "answer probability +31.17% on average under amplification",
              statistic=Stat("amplify", words=_words("amplified (doubled)")),
              rule=ci_above(AMPLIFY_MIN), gates=(_KNOWN, _FOUND), null=_NULL,
              null_can_meet="doubling random neurons in the layers where knowledge neurons sit pushes the "
                            "residual stream along directions those layers write; if those layers write the "
                            "answer whatever the neuron (or the known answers' probabilities rise under any "
                            "perturbation that sharpens the output), random neurons raise it by more than 10% too"),
        Claim("suppress-specific",
              "Suppressing a fact's knowledge neurons lowers its own answer probability more than it changes the "
              "answers of facts of other relations.",
              f"{_SRC}, intra- vs inter-relation effects of editing knowledge neurons (Sec. 5, case study 'Erasing "
              "Relations': erasing a relation's knowledge neurons raises its perplexity, other relations' far less)",
              "editing a fact's or relation's knowledge neurons changes other relations' facts far less than its own",
              statistic=Stat("specificity", words="per sample of n_facts known facts: mean over the facts with >= 1 "
                             "knowledge neuron of (the fact's own relative change under suppression of the arm's "
                             "neurons, of its answer probability averaged over its prompts) minus (the mean "
                             "relative change of n_other known "
                             "facts of other relations under the same suppression); fraction"),
              rule=ci_below(SPECIFIC_MAX), gates=(_KNOWN, _FOUND), null=_NULL,
              null_can_meet="random neurons in the answer-writing layers may still hurt the fact's own prompts more "
                            "than other relations' (its prompts share the answer-position context the layers were "
                            "drawn for); then the null difference also lies below -5 points"),
    ]

    def validate(self, cfg: KnowledgeNeuronsLMConfig) -> None:
        check_model_name(cfg.model, "model")
        load_facts(relations=cfg.relations)  # unknown relation names fail here
        if cfg.min_neurons > cfg.max_neurons:
            raise ConfigError("min_neurons", cfg.min_neurons, f"<= max_neurons = {cfg.max_neurons}")

    def points(self, cfg: KnowledgeNeuronsLMConfig) -> list[Point]:
        return cross_arms([Point("facts")], ("real", "null"))

    # groups, run_point, run_group: SeedArmsExperiment's (the arms of one sample: one attribution gives both rows)

    def _sample(self, cfg: KnowledgeNeuronsLMConfig, k: int, ctx: PointContext) -> tuple[Any, dict[str, Any]]:
        """The model, the sample's facts (three prompts each) and the other-relation facts."""
        facts = load_facts(relations=cfg.relations)
        model = get_model(cfg.model, facts, str(resolve_device(ctx.device)))
        if getattr(model, "provenance", None):
            ctx.run.record_model(model.provenance)
        tok = model.tokenizer
        pre = prefix_ids(tok, cfg.prefix)
        prompts = [encode_fact(tok, facts, f, pre) for f in facts.facts]
        t0 = time.perf_counter()
        known = [p for p, ok in zip(prompts, known_facts(model, cfg.model, prompts)) if ok]
        t_screen = time.perf_counter() - t0
        pool = known if known else prompts  # a random model (smoke) knows nothing: attribute any facts
        order = np.random.default_rng(derive_seed(cfg.seed, "facts", k)).permutation(len(pool))
        sample = [pool[int(i)] for i in order[:cfg.n_facts]]
        rel = facts.relations
        fact_prompts = [[p.ids] + [encode_fact(tok, facts, p.fact, pre, paraphrase=j).ids
                                   for j in range(len(rel[p.fact.relation].paraphrases))] for p in sample]
        return model, {"facts": facts, "pool": pool, "sample": sample, "prompts": fact_prompts, "n_known": len(known),
                       "n_candidates": len(prompts), "t_screen": t_screen}

    def _measure(self, cfg: KnowledgeNeuronsLMConfig, k: int, ctx: PointContext) -> dict[str, dict]:
        """Attribute the sample's facts once; edit the knowledge neurons (real) and random ones (null)."""
        model, s = self._sample(cfg, k, ctx)
        from lmsci.models.arch import arch_of

        L = arch_of(model).n_layers
        layers = list(range(L))
        d_mlp = {l: int(arch_of(model).mlp_values(l).shape[0]) for l in layers}
        t0, c0 = time.perf_counter(), time.process_time()
        coarse_all = [[coarse_neurons(cached_integrated_gradients(model, q, p.object[0], steps=cfg.ig_steps),
                                      cfg.threshold, layers) for q in qs] for p, qs in zip(s["sample"], s["prompts"])]
        t_fact, c_fact = (time.perf_counter() - t0) / len(coarse_all), (time.process_time() - c0) / len(coarse_all)
        share = adaptive_share(coarse_all, cfg.share_start, cfg.share_step, cfg.min_neurons, cfg.max_neurons)
        rng = np.random.default_rng(derive_seed(cfg.seed, "random-neurons", k))
        orng = np.random.default_rng(derive_seed(cfg.seed, "others", k))
        recs = []
        for p, qs, coarse in zip(s["sample"], s["prompts"], coarse_all):
            neurons = refine(coarse, share)
            ans = [p.object[0]] * len(qs)
            others = [o for o in s["pool"] if o.fact.relation != p.fact.relation]
            others = [others[int(i)] for i in orng.permutation(len(others))[:cfg.n_other]]
            rec: dict[str, Any] = {"fact": f"{p.fact.subject} | {p.fact.relation} | {p.fact.object}",
                                   "n_neurons": len(neurons), "n_coarse": float(np.mean([len(c) for c in coarse])),
                                   "layers": [l for l, _ in neurons]}
            base = answer_probs(model, qs, ans)
            rec["p_before"] = float(base.mean())
            if neurons:
                o_ids, o_ans = [o.ids for o in others], [o.object[0] for o in others]
                o_base = answer_probs(model, o_ids, o_ans) if others else None
                for arm, ns in (("real", neurons), ("null", same_layer_random(d_mlp, neurons, rng))):
                    for mode in ("suppress", "amplify"):
                        after = answer_probs(model, qs, ans, edit=NeuronEdit(tuple(ns), mode, cfg.amplify_factor))
                        rec[f"{arm}_{mode}"] = float(relative_change(base.mean()[None], after.mean()[None])[0])
                        rec[f"{arm}_{mode}_per_prompt"] = float(relative_change(base, after).mean())
                    e = NeuronEdit(tuple(ns), "suppress")
                    rec[f"{arm}_other"] = (float(relative_change(o_base, answer_probs(
                        model, o_ids, o_ans, edit=e)).mean()) if others else float("nan"))
                    rec[f"{arm}_specificity"] = rec[f"{arm}_suppress"] - rec[f"{arm}_other"]
            recs.append(rec)
        pd.DataFrame(recs).to_csv(ctx.artifact_dir / "facts.csv", index=False)
        info = {"model": cfg.model, "n_layers": L, "d_mlp": d_mlp[0], "n_candidates": s["n_candidates"],
                "n_known": s["n_known"], "share": share, "sec_screen": s["t_screen"], "sec_per_fact": t_fact,
                "cpu_per_fact": c_fact, "n_prompts": float(np.mean([len(q) for q in s["prompts"]])),
                "prompt_tokens": float(np.mean([len(q) for qs in s["prompts"] for q in qs]))}
        return arm_rows(info, recs)

    def figures(self, cfg: KnowledgeNeuronsLMConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        return kn_figures(cfg, results, run)

    def report_sections(self, cfg: KnowledgeNeuronsLMConfig, results: pd.DataFrame, run: RunDir) -> str:
        return kn_report(cfg, results, run)


COLUMNS = ("suppress", "amplify", "other", "specificity", "suppress_per_prompt", "amplify_per_prompt")


def arm_rows(info: dict[str, Any], recs: list[dict]) -> dict[str, dict]:
    """The ``real`` and ``null`` rows from the per-fact records: means over the facts with >= 1 knowledge neuron of
    the same columns (:data:`COLUMNS`), on the knowledge neurons (``real``) and on random neurons in their place
    (``null``); per-fact values as JSON lists (``fact_<column>``), the knowledge neurons' layers (``neuron_layers``)."""
    import json

    with_n = [r for r in recs if r["n_neurons"] > 0]
    shared = {**info, "n_facts": len(recs), "n_facts_with_neurons": len(with_n),
              "frac_with_neurons": len(with_n) / max(1, len(recs)),
              "mean_neurons": float(np.mean([r["n_neurons"] for r in recs])) if recs else float("nan"),
              "mean_coarse": float(np.mean([r["n_coarse"] for r in recs])) if recs else float("nan"),
              "p_before": float(np.mean([r["p_before"] for r in with_n])) if with_n else float("nan"),
              "neuron_layers": json.dumps([l for r in with_n for l in r["layers"]]),
              "facts": json.dumps([r["fact"] for r in with_n])}
    out = {}
    for arm in ("real", "null"):
        row = dict(shared)
        for c in COLUMNS:
            vals = [r[f"{arm}_{c}"] for r in with_n if np.isfinite(r[f"{arm}_{c}"])]
            row[c] = float(np.mean(vals)) if vals else float("nan")
            row[f"fact_{c}"] = json.dumps([round(float(r[f"{arm}_{c}"]), 6) for r in with_n])
        out[arm] = row
    return out
