"""Experiment ``ioi-circuit-lm``: the indirect-object-identification circuit (Wang et al.) in a real pretrained LM
(SmolLM2-135M by default): the logit difference, name-mover heads (direct effect, copy score), S-inhibition heads
(through the name movers' queries) and the faithfulness of the found circuit under mean-ablation of the rest.

Source: Wang, Variengien, Conmy, Shlegeris, Steinhardt 2022, "Interpretability in the Wild: a Circuit for Indirect
Object Identification in GPT-2 small", arXiv 2211.00593: sec. 2 (p_IOI, the ABC distribution, logit difference
3.56 nats), 3.1 (name movers 9.9, 9.6, 10.0: direct effect, copy score > 95%), 3.2 (S-inhibition heads 7.3, 7.9,
8.6, 8.10 found by path patching to the name movers' queries), sec. 4 (faithfulness: the 26-head circuit with
every other head mean-ablated over p_ABC keeps 87% of the logit difference).

Prompts: the 15 BABA templates of ``lmsci.worlds.ioi`` (the paper's, from the official ``ioi_dataset.py``) with
their ABBA twins, in natural spacing, filled with the names, places and objects of ``worlds.ioi`` that are ONE
token (with a leading space) in the model's tokenizer (registered filter); ABBA and BABA alternate. A seed is one
prompt sample, ``derive_seed(seed, "sample", seed_index)`` (both arms see the same prompts), of two halves of
``n_per_template`` prompts per template: half A selects the heads, half B measures them (no selection on the
measured prompts). Each prompt has its ABC twin (IO, S1, S2 replaced by three other names, same positions).

Head selection on half A (one ABC forward, one clean forward and backward): name movers = the ``n_nm`` heads whose
END output, moved clean -> ABC on its direct path to the logits (path patching head -> logits, final-norm scale
frozen), lowers the logit difference most; S-inhibition heads = the ``n_si`` heads (below the name movers) whose
END output, added to the residual read by the name movers' queries, lowers it most (path patching sender ->
receivers' queries, linearised by attribution patching: LD gradients at the name movers' query projections;
Syed et al. 2023, arXiv 2310.10348); circuit = the ``n_circuit`` heads with the largest |attribution-patching
effect| (all positions) together with the name movers and S-inhibition heads. The linearised scans replace the
paper's one-forward-per-head path patching to fit 2 CPU cores; the measures on half B are exact.

Measures on half B: ``ld`` mean logit difference IO - S at END (nats); ``nm_share``: 1 - LD after moving the name
movers' END outputs to ABC on their direct path only (final norm recomputed) / clean LD; ``copy``: Wang's copy score
(residual after layer 0 at the IO and S1 positions through the head's OV, the final norm and the unembedding: the
name in the top 5), mean over the name movers; ``si_share``: 1 - LD after exact path patching of the S-inhibition
heads' ABC outputs into the name movers' END queries / clean LD; ``faith``: LD with every head outside the circuit
mean-ablated (per-template, per-position means over the half's ABC prompts) / clean LD.

Null arm (the same ``run_point`` on arm ``null``): ``ld`` is the clean IO - S logit difference on the ABC prompts
(IO and S absent); name movers, S-inhibition senders and the circuit are replaced by random head sets of equal size:
``n_nm`` heads uniform over the heads that are not name movers, ``n_si`` senders uniform over the heads below the
last name mover that are not S-inhibition heads (into the same name movers' queries), and a circuit of the same size
uniform over all heads. Gate ``does-ioi``: the real arm's clean LD >= ``LD_GATE`` in every sample.

The smoke preset runs a tiny random Llama with a word-level tokenizer (``model="tiny-random-llama"``).

What the quick runs found (SmolLM2-135M-Instruct dequantised from Q4_1, master seeds 0 and 1, 3 prompt samples of
30 + 30 prompts each, 2026-12-06; wall 950 s and 890 s on the shared 2-core machine at one thread, load average
12-15): logit difference 4.97 [4.50, 5.44] and 4.89 [3.39, 6.39] nats (null on ABC prompts 0.12, -0.11),
IO > S in 97-100% of prompts: reproduced. The same three name movers in every sample, 23.0, 23.3 and 29.1; moving
their END outputs to ABC on the direct path removes 81% [68, 94] and 89% [72, 106] of the logit difference
(three random heads: 0%): reproduced. Their mean copy score is 0.33 (one of the three puts the name in its top 5;
paper > 95% each): not reproduced at both seeds. S-inhibition: the four heads the linearised scan finds (18.7, 19.4,
19.5, 19.6) remove only 2.5% [2.1, 3.0] and 2.2% [1.0, 3.4] of the logit difference when path-patched exactly into
the name movers' queries (random senders 0.1-0.4%): not reproduced (a small effect, 10x the null, far below the
rule's 20%). Faithfulness: the 30-head circuit (top 26 by |attribution| with the name movers and S-inhibition
heads) with the other 240 heads mean-ablated keeps 7% [-7, 22] and -4% [-30, 22] of the logit difference
(random 30-head sets: -10%, -7%): not reproduced. So on this model the name movers' direct paths carry most of the
logit difference as in GPT-2 small, but the rest of the paper's circuit (S-inhibition through the queries; a
26-head circuit that alone keeps 87%) is not found by these scans at this size: what feeds the name movers here
(keys or values, MLPs, far more heads) is open.
A look after the runs (descriptive, post hoc, not a claim; 30 prompts at a seed no verdict uses): the copy scores
of the three name movers are 0.98 (23.0), 0.00 (23.3) and 0.00 (29.1): 23.0 copies names as the paper's name
movers do; the other two carry direct effect without copying through the direct-path OV measure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, every_at_least
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms, save_figure
from lmsci.errors import ConfigError
from lmsci.experiments.registry import register
from lmsci.experiments.syntax import _ioi_lm_measures as M
from lmsci.experiments.syntax._lm_common import (check_model, heads_str, load_lm, random_heads, sample_seed,
                                                 toy_comparison)
from lmsci.measure import hf_heads as H
from lmsci.report.figures import arm_points
from lmsci.runs import RunDir

N_NM, N_SI, N_CIRCUIT = 3, 4, 26   # registered: the paper's 3 name movers, 4 S-inhibition heads, 26-head circuit
LD_MIN = 1.0       # rule: mean logit difference, CI lower end above 1 nat
LD_GATE = 1.0      # gate: every sample's clean LD >= 1 nat
SHARE_MIN = 0.2    # rules: name movers' direct path / S-inhibition into their queries carry >= 20% of the LD
COPY_MIN = 0.5     # rule: name-mover copy score above 50% (paper: > 95%; an average head < 20%)
FAITH_MIN = 0.5    # rule: the circuit keeps more than half of the LD (paper: 87%)


class IOILMConfig(ExperimentConfig):
    """Configuration of ``ioi-circuit-lm`` (defaults = the quick preset).

    Attributes:
        model: a zoo name (``smollm2-135m``), a local HF directory, a ``.gguf`` file, or ``tiny-random-llama``.
        n_per_template: prompts per template in each half (selection half A, measurement half B).
        n_templates: how many of the 15 templates (each with ABBA and BABA prompts).
        n_nm, n_si, n_circuit: head-set sizes (registered: 3, 4, 26).
    """

    model: str = Field("smollm2-135m", description="zoo name, HF directory, .gguf file, or tiny-random-llama")
    n_per_template: int = Field(2, ge=1)
    n_templates: int = Field(15, ge=1, le=15)
    n_nm: int = Field(N_NM, ge=1)
    n_si: int = Field(N_SI, ge=1)
    n_circuit: int = Field(N_CIRCUIT, ge=1)
    n_seeds: int = Field(3, ge=1, le=100)
    threads: int = Field(1, ge=0)

    PRESETS = {
        "smoke": {"model": "tiny-random-llama", "n_per_template": 2, "n_templates": 3, "n_nm": 1, "n_si": 1,
                  "n_circuit": 2, "n_seeds": 2},
        "quick": {},
        "gpu": {"n_per_template": 8, "n_seeds": 5, "threads": 0},
        "paper": {"n_per_template": 16, "n_seeds": 10, "threads": 0},
    }


_SRC = "Wang et al. 2022, arXiv 2211.00593"
_GATE = (Gate("does-ioi", every_at_least(LD_GATE), arm="real",
              stat=Stat("ld_clean", words="mean clean logit difference IO - S on half B, nats (real arm)")),)


@register("ioi-circuit-lm")
class IOICircuitLM(Experiment):
    """The IOI circuit (Wang et al.) in a real pretrained LM: name movers, S-inhibition, faithfulness."""

    claim = "A pretrained LM solves IOI with a sparse circuit of name-mover and S-inhibition heads (Wang et al.)."
    source = _SRC
    Config = IOILMConfig
    time_estimate = {"smoke": "~5 s",
                     "quick": "15.3 min measured (890-950 s wall; 2 shared cores, load 12-15, one thread, 2026-12-06)",
                     "gpu": "~1 min on one H100 (estimated)", "paper": "~3 min on one H100 (estimated)"}
    claims = [
        Claim("logit-diff", f"The model prefers IO over S: mean logit difference above {LD_MIN} nat.",
              f"{_SRC}, sec. 2", "3.56 nats on GPT-2 small (IO probability 0.49)",
              statistic=Stat("ld", words="mean logit(IO) - logit(S) at END over half B of a prompt sample, nats"),
              rule=ci_above(LD_MIN),
              null="the same logit difference (the clean prompt's IO and S tokens) on the ABC prompts, where "
                   "neither name occurs",
              null_can_meet="a model preferring the IO token for reasons outside the context (name frequency, "
                            "ABBA/BABA position biases interacting with the sampled names) would score on ABC too"),
        Claim("name-mover-direct", f"The {N_NM} name movers' direct paths carry at least {SHARE_MIN:.0%} of the "
              "logit difference.", f"{_SRC}, sec. 3.1 (path patching to the logits)",
              "name movers 9.9, 9.6, 10.0 have the largest direct effects on the logit difference",
              statistic=Stat("nm_share", words="1 - LD with the heads' END outputs moved to ABC on their direct path "
                                               "/ clean LD, on half B (heads selected on half A)"),
              rule=ci_above(SHARE_MIN), gates=_GATE,
              null="the same share for n_nm heads drawn uniformly from the heads that are not name movers",
              null_can_meet="if the logit difference were spread over many heads' direct paths, or written mostly "
                            "by late layers any of which could be drawn, random heads would carry a share too"),
        Claim("name-mover-copy", f"Name movers copy names: their copy score is above {COPY_MIN:.0%}.",
              f"{_SRC}, sec. 3.1 (copy score)", "copy score > 95% for 9.9, 9.6, 10.0 (< 20% for an average head)",
              statistic=Stat("copy", words="share of name positions (IO, S1) whose name is in the top 5 logits "
                                           "through the head's OV circuit, mean over the heads, half B"),
              rule=ci_above(COPY_MIN), gates=_GATE,
              null="the same copy score of n_nm heads drawn uniformly from the heads that are not name movers",
              null_can_meet="if the embedding of a name survived most heads' OV circuits (an identity-like OV in "
                            "many heads), random heads would copy too"),
        Claim("s-inhibition", f"The {N_SI} S-inhibition heads, patched from ABC into the name movers' queries, "
              f"remove at least {SHARE_MIN:.0%} of the logit difference.", f"{_SRC}, sec. 3.2",
              "S-inhibition heads 7.3, 7.9, 8.6, 8.10: patching them into the name movers' queries lowers the LD",
              statistic=Stat("si_share", words="1 - LD after path patching senders -> name movers' END queries / "
                                               "clean LD, half B"),
              rule=ci_above(SHARE_MIN), gates=_GATE,
              null="the same path patching from n_si senders drawn uniformly from the heads below the last name "
                   "mover that are not S-inhibition heads, into the same name movers",
              null_can_meet="if the name movers' queries were sensitive to any change of the residual at END, "
                            "random senders would lower the logit difference as much"),
        Claim("faithfulness", f"The found circuit (the {N_CIRCUIT} heads of largest effect with the name movers "
              f"and S-inhibition heads) keeps more than {FAITH_MIN:.0%} of the logit difference with every other "
              "head mean-ablated.", f"{_SRC}, sec. 4", "26 of 144 heads; circuit 3.10 vs model 3.56 nats (87%)",
              statistic=Stat("faith", words="LD with every head outside the set mean-ablated over ABC / clean LD, "
                                            "half B"),
              rule=ci_above(FAITH_MIN), gates=_GATE,
              null="the same with a head set of equal size drawn uniformly from all heads",
              null_can_meet="if the MLPs (never ablated) computed the answer, or mean-ablating heads hardly "
                            "mattered, any head set would keep the logit difference"),
    ]

    def validate(self, cfg: IOILMConfig) -> None:
        check_model(cfg.model)

    def points(self, cfg: IOILMConfig) -> list[Point]:
        return cross_arms([Point("ioi")], ("real", "null"))

    def run_point(self, cfg: IOILMConfig, point: Point, ctx: PointContext) -> dict:
        lm = load_lm(cfg.model, ctx.device)
        ctx.run.record_model(lm.provenance)
        sh = H.head_shape(lm)
        if cfg.n_circuit + cfg.n_nm + cfg.n_si > sh.n_layers * sh.n_heads:
            raise ConfigError("n_circuit", cfg.n_circuit, f"n_circuit + n_nm + n_si <= {sh.n_layers * sh.n_heads}")
        rng = np.random.default_rng(sample_seed(cfg, point, "prompts"))
        pa, pb = (M.make_prompts(lm.tokenizer, cfg.n_per_template, cfg.n_templates, rng).to(ctx.device)
                  for _ in range(2))
        nm, si, circuit, sel = _select(lm, pa, cfg)
        null = point.arm == "null"
        if null:
            gen = torch.Generator().manual_seed(sample_seed(cfg, point, "heads"))
            nm_last = max(l for l, _ in nm)
            nm_x = random_heads(sh.n_layers, sh.n_heads, cfg.n_nm, nm, gen)
            si_x = random_heads(nm_last, sh.n_heads, cfg.n_si, si, gen) if nm_last > 0 else []
            circ_x = random_heads(sh.n_layers, sh.n_heads, len(circuit), [], gen)
        else:
            nm_x, si_x, circ_x = nm, si, circuit
        clean, abc = M.forward(lm, pb.clean, pb), M.forward(lm, pb.abc, pb)
        _, dO = M.direct_effects(lm, clean, abc, pb)
        ld = float(clean.ld.mean())
        ld_nm = float(M.direct_ld(lm, clean, dO, pb, nm_x).mean())
        ld_si = float(M.query_patched_ld(lm, pb, dO, si_x, nm).mean())
        means = M.template_means(abc.z, pb.template)
        ld_circ = float(M.forward(lm, pb.clean, pb, edit=M.ablate_except(circ_x, means, sh.n_heads)).ld.mean())
        resid, names = M.name_positions(clean, pb)
        copy = float(H.copy_score(lm, resid, names, nm_x).mean())
        return {"ld": float(abc.ld.mean()) if null else ld, "ld_clean": ld, "ld_abc": float(abc.ld.mean()),
                "ld_pos_frac": float((clean.ld > 0).float().mean()), "nm_share": 1 - ld_nm / ld,
                "si_share": 1 - ld_si / ld, "faith": ld_circ / ld, "copy": copy, "circuit_size": len(circuit),
                "name_movers": heads_str(nm), "s_inhibition": heads_str(si), "circuit": heads_str(circuit),
                "heads_nm": heads_str(nm_x), "heads_si": heads_str(si_x), "n_prompts": int(len(pb.end)),
                **sel}

    def figures(self, cfg: IOILMConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        figs = []
        for col, cid, label, line in (("nm_share", "name-mover-direct", "share of LD on the heads' direct paths",
                                       SHARE_MIN),
                                      ("si_share", "s-inhibition", "share of LD via the name movers' queries",
                                       SHARE_MIN),
                                      ("faith", "faithfulness", "LD kept by the head set / clean LD", FAITH_MIN),
                                      ("copy", "name-mover-copy", "copy score (name in top 5)", COPY_MIN),
                                      ("ld", "logit-diff", "logit difference IO - S (nats)", LD_MIN)):
            if col in results and "arm" in results:
                fig = arm_points({a: sub[col] for a, sub in results.groupby("arm")}, ylabel=label,
                                 hlines={"rule": line})
                figs.append(save_figure(fig, run, f"{col}.png", f"{label}, per arm and prompt sample", claims=(cid,)))
        return figs

    def report_sections(self, cfg: IOILMConfig, results: pd.DataFrame, run: RunDir) -> str:
        lines = [toy_comparison(self.verdicts(cfg, results, run), "ioi-circuit", TOY_PAIRS),
                 "\n## Heads found (real arm, per prompt sample)\n",
                 "| seed | name movers | S-inhibition | circuit size |", "|---|---|---|---|"]
        real = results[results["arm"] == "real"] if "arm" in results else results[:0]
        for _, r in real.iterrows():
            lines.append(f"| {r.get('seed_index', '')} | {r.get('name_movers', '')} | {r.get('s_inhibition', '')} | "
                         f"{r.get('circuit_size', '')} |")
        return "\n".join(lines) + "\n"


def _select(lm, pa: M.Prompts, cfg: IOILMConfig) -> tuple[list, list, list, dict]:
    """Half A: name movers, S-inhibition heads and the circuit (see the module doc), with summary columns."""
    sh = H.head_shape(lm)
    abc = M.forward(lm, pa.abc, pa)
    clean = M.forward(lm, pa.clean, pa, grad=True)
    direct, dO = M.direct_effects(lm, clean, abc, pa)
    nm = M.bottom(direct, cfg.n_nm)
    q_eff = M.query_effects(lm, clean, dO, nm)
    allowed = torch.zeros(sh.n_layers, sh.n_heads, dtype=torch.bool)
    allowed[:max(l for l, _ in nm)] = True
    for l, h in nm:
        allowed[l, h] = False
    si = M.bottom(q_eff, cfg.n_si, allowed) if bool(allowed.any()) else []
    attr = M.attribution(clean, abc)
    top = M.bottom(-attr.abs(), cfg.n_circuit)
    circuit = sorted(set(top) | set(nm) | set(si))
    return nm, si, circuit, {"direct_min": float(direct.min()), "qeff_min": float(q_eff.min()),
                             "ld_select": float(clean.ld.mean())}


#: our claim -> (the toy ``ioi-circuit`` claim beside it, what differs between the two statistics)
TOY_PAIRS = {
    "logit-diff": ("logit-diff", "the same measure; toy: a GPT trained on a word-level IOI world (rule: mean >= 2)"),
    "name-mover-direct": ("", "no toy counterpart"),
    "name-mover-copy": ("name-mover-copy", "toy: name movers = circuit heads attending END -> IO, IO copy only; "
                        "here: the 3 heads of largest direct effect, IO and S1 positions"),
    "s-inhibition": ("s-inhibition", "toy: largest change of the name movers' attention to S; here: share of the "
                     "logit difference removed through their queries by 4 heads"),
    "faithfulness": ("circuit-concentration", "toy: share of the LD removed by patching the top quarter of heads; "
                     "here: LD kept by the circuit with every other head mean-ablated"),
}
