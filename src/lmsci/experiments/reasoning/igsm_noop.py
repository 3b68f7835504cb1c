"""Experiment ``igsm-noop``: inserting "no-op" sentences (they mention parameters and numbers but change nothing the
answer needs) into iGSM problems drops a trained GPT's full-solution accuracy (GSM-NoOp); and the accuracy varies
across re-instantiations of the same solution templates (GSM-Symbolic).

Source: Mirzadeh, Alizadeh, Shahrokhi, Tuzel, Bengio, Farajtabar, "GSM-Symbolic: Understanding the Limitations of
Mathematical Reasoning in Large Language Models", arXiv 2410.05229: sec. 4.4 (GSM-NoOp: "seemingly relevant but
ultimately inconsequential" statements; accuracy drops of up to 65% for state-of-the-art models) and sec. 4.1
(performance varies across instantiations of one template: names and numbers changed). Seed lecture 000.

Protocol here: a GPT trained on iGSM (as ``igsm-ood``) is scored (greedy, full-solution checker) on n_eval fresh
test-hash problems, then on the same problems with ``n_noop`` no-op sentences inserted at random places
(:func:`lmsci.worlds.igsm.add_noop`: sentences about a new top-level item, defined from existing parameters and
constants; no existing parameter, the answer or the shortest solution changes). For GSM-Symbolic, each problem is
re-instantiated ``n_instances`` times (:func:`lmsci.worlds.igsm.reinstantiate`: same template and hash, new names
and numbers) and the accuracy per instantiation set is reported (std and range across the sets).
iGSM problems already contain unnecessary parameters (the model is trained to skip them), so an iGSM model may
resist no-ops: the verdict says so when it does.

The claim is registered for the ``paper`` preset only: the quick model stays near 0% accuracy (the sizing pilot in
:mod:`lmsci.experiments.reasoning.igsm_common`), and the scale that could pass the learned gate (3 seeds x 5,000 steps
x 96 x 768 tokens of a 6-layer d384 GPT, ~60 min of one H100) does not fit the 10 minutes of a ``gpu`` preset
(session 52). ``quick`` and ``gpu`` run and report their values but decide nothing; ``gpu`` is a values-only run at
a larger scale than ``quick``, as ``igsm-ood``'s (one seed, 1,500 steps x 32 x 768 tokens, 64 problems a set).
Null arm, measured in the same run: the same "drop" between the original problems and the same problems with
``n_noop`` inserted sentences that REPEAT sentences already in the problem (:func:`lmsci.worlds.igsm.add_repeats`:
the problem grows by as many sentences as with the no-ops, but no new parameter, item or number appears). It meets
the rule if the drop comes from longer or out-of-format problems (a text the model never saw in training) rather
than from irrelevant parameters. Both drops are read on the problems whose original and altered prompts fit the
context. It is an arm of the sweep (point ``null-gpt``, arm ``null``) computed from the same trained model
(``groups``: the arms of a seed form one group, one training), its row holding the same ``drop`` column; the claim
is judged by the claims engine. Until 2026-12-07 the null was a second fresh problem set without no-ops
(exchangeable sets, drop ~0 by construction: it met the rule by sampling noise only).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, mean_at_least
from lmsci.experiments.base import Figure, save_figure
from lmsci.experiments.reasoning._igsm_null_arm import NullOnTrained
from lmsci.experiments.reasoning._igsm_gpu_budget import run_seconds, time_text
from lmsci.experiments.reasoning.igsm_common import (GPU, PAPER, SMOKE, TIME_PAPER, IGSMCommonConfig,
                                           check_all, ok_rows, solve, summarize, test_set)
from lmsci.experiments.registry import register
from lmsci.runs import RunDir, derive_seed
from lmsci.worlds.igsm import add_noop, add_repeats, reinstantiate

DROP_MIN = 0.10      # registered rule: accuracy drop >= 10 points
LEARNED_GATE = 0.5   # registered gate: accuracy on the original problems >= 0.5


class IGSMNoOpConfig(IGSMCommonConfig):
    """Configuration of ``igsm-noop``.

    Attributes:
        n_noop: no-op sentences inserted per problem.
        n_instances: re-instantiations of each test problem (GSM-Symbolic sets; 0 disables).
    """

    n_noop: int = Field(2, ge=1)
    n_instances: int = Field(4, ge=0)

    PRESETS = {
        "smoke": {**SMOKE, "n_instances": 2},
        "quick": {"train.steps": 900, "n_eval": 32},
        # values only (the claim is decided at paper): one seed, 1500 x 32 x 768 tokens (was 3 x 5000 x 96 x 768)
        "gpu": {**GPU, "train.steps": 1500, "train.batch_size": 32, "train.warmup_steps": 150, "n_eval": 64,
                "n_seeds": 1, "n_instances": 8},
        "paper": {**PAPER, "n_eval": 1000, "n_instances": 50},
    }


@register("igsm-noop")
class IGSMNoOp(NullOnTrained):
    """GSM-NoOp and GSM-Symbolic on an iGSM-trained GPT: no-op sentences and re-instantiated templates."""

    claim = ("Inserting no-op sentences (parameters and numbers that change nothing needed) into iGSM problems drops "
             "the trained GPT's full-solution accuracy by at least 10 points.")
    source = ("Mirzadeh et al., GSM-Symbolic, arXiv 2410.05229, sec. 4.4 (GSM-NoOp) and sec. 4.1 (variance across "
              "instantiations); applied to an iGSM model (Physics of LMs Part 2.1, arXiv 2407.20311)")
    Config = IGSMNoOpConfig
    time_estimate = {"smoke": "~5 s", "quick": ("528 s wall, 455 s CPU measured (one seed, 900 steps, igsm-tiny; "
                     "32 problems x (2 + 4 re-instantiations) greedy; one thread beside another run on a loaded "
                     "2-core machine), before the null arm's repeated-sentence set (one more greedy set of 32: ~+20 s, "
                     "estimated)"), "gpu": time_text(6, "1 seed x 1500 steps x 32 x 768 tokens of a 6-layer d384 GPT; 64 problems "
                                                  "decoded greedily in 11 sets (original, no-op, 8 re-instantiations, "
                                                  "the null's repeated-sentence set); was ~60 min of training compute alone"),
                     "paper": TIME_PAPER}

    claims = [
        Claim("noop-drop",
              "No-op sentences drop the full-solution accuracy of a GPT trained on iGSM by at least 10 points.",
              "Mirzadeh et al., arXiv 2410.05229, sec. 4.4 and Fig. 8 (GSM-NoOp)",
              "drops of up to 65% for state-of-the-art LLMs on GSM8K-style problems (not measured on iGSM models; "
              "an iGSM model, trained with unnecessary parameters in every problem, may resist)",
              statistic=Stat("drop", words="greedy full-solution accuracy on n_eval fresh test-hash problems (op from "
                             "the training distribution) minus accuracy on the same problems with n_noop no-op "
                             "sentences inserted"),
              rule=mean_at_least(DROP_MIN),
              gates=(Gate("learned", mean_at_least(LEARNED_GATE), arm="real",
                          stat=Stat("orig_acc", words="the accuracy on the original problems (a drop of 10 points "
                                                      "must be possible)")),),
              presets=("paper",),
              null="the same drop, per seed, between the original problems and the same problems with n_noop "
                   "inserted sentences that repeat sentences already in the problem (as many more sentences, no new "
                   "parameter or number)",
              null_can_meet="yes, if the drop comes from longer problems, or problems unlike the training text (a "
                            "sentence said twice), rather than from the irrelevant parameters the no-ops bring: the "
                            "repeated sentences lengthen the problem as the no-ops do"),
    ]

    null_needs_columns = True  # a trained seed without null columns gives a null row with a status

    def estimate_gpu_seconds(self, cfg: IGSMNoOpConfig) -> dict[str, float]:
        """Estimated seconds of a run of ``cfg`` on one H100 (:func:`~lmsci.experiments.reasoning._igsm_gpu_budget.
        run_seconds`): the trained model decoded greedily on the original set, its no-op version, ``n_instances``
        re-instantiations and the null arm's second set."""
        shapes = [self.shape(cfg, p) for p in self.trained_points(cfg)]
        return run_seconds(cfg, shapes, [(s, 3 + cfg.n_instances, 1) for s in shapes])

    def measure(self, cfg, point, ctx, world, tok, model) -> dict[str, Any]:
        probs = test_set(cfg, world, None, cfg.n_eval, "noop")
        kw = {"batch_size": cfg.eval_batch, "max_new_tokens": cfg.max_new_tokens or None}
        fits = lambda prompts: [len(tok.encode(p)) + 1 < cfg.seq_len for p in prompts]  # noqa: E731
        rnd = random.Random(derive_seed(cfg.seed, "noop"))
        noops = [add_noop(p, rnd, cfg.n_noop) for p in probs]
        keep = [a and b for a, b in zip(fits([p.prompt() for p in probs]), fits([p.prompt() for p in noops]))]
        probs = [p for p, k in zip(probs, keep) if k]
        noops = [p for p, k in zip(noops, keep) if k]
        orig = check_all(probs, solve(model, tok, [p.prompt() for p in probs], **kw))
        noop = check_all(noops, solve(model, tok, [p.prompt() for p in noops], **kw))
        row: dict[str, Any] = {"n_problems": len(probs)}
        row.update({f"orig_{k}": v for k, v in summarize(orig).items()})
        row.update({f"noop_{k}": v for k, v in summarize(noop).items()})
        row["drop"] = row["orig_acc"] - row["noop_acc"]
        row["flipped_to_wrong"] = sum(a.correct and not b.correct for a, b in zip(orig, noop)) / max(len(probs), 1)
        row["flipped_to_right"] = sum(b.correct and not a.correct for a, b in zip(orig, noop)) / max(len(probs), 1)
        # the null arm's row (run_group moves these keys to it): the same problems with n_noop of their own sentences
        # repeated (as many more sentences, nothing new), decoded by the same model; read where both prompts fit
        rq = random.Random(derive_seed(cfg.seed, "noop-repeat"))
        reps = [add_repeats(p, rq, cfg.n_noop) for p in probs]
        fit = fits([p.prompt() for p in reps])
        reps = [p for p, k in zip(reps, fit) if k]
        base = [c for c, k in zip(orig, fit) if k]
        rchk = check_all(reps, solve(model, tok, [p.prompt() for p in reps], **kw))
        orig_acc, rep_acc = summarize(base)["acc"], summarize(rchk)["acc"]
        row.update({"_null_orig_acc": orig_acc, "_null_repeat_acc": rep_acc, "_null_n_problems": len(reps),
                    "_null_drop": orig_acc - rep_acc})
        accs = []
        rr = random.Random(derive_seed(cfg.seed, "symbolic"))
        for r in range(cfg.n_instances):
            inst = [reinstantiate(p, rr) for p in probs]
            accs.append(summarize(check_all(inst, solve(model, tok, [p.prompt() for p in inst], **kw)))["acc"])
            row[f"symbolic_acc_{r}"] = accs[-1]
        if accs:
            row["symbolic_std"] = float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0
            row["symbolic_range"] = float(max(accs) - min(accs))
        return row

    def figures(self, cfg: IGSMNoOpConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        ok = _real(results)
        if ok.empty or "drop" not in ok:
            return []
        sym = [c for c in ok.columns if c.startswith("symbolic_acc_")]
        fig, ax = plt.subplots(figsize=(6.0, 3.6))
        labels = ["original", f"+{cfg.n_noop} no-op"] + [f"inst. {c.rsplit('_', 1)[-1]}" for c in sym]
        vals = [ok["orig_acc"].mean(), ok["noop_acc"].mean()] + [ok[c].mean() for c in sym]
        ax.bar(range(len(vals)), vals, color=["C0", "C3"] + ["C2"] * len(sym))
        ax.set_xticks(range(len(vals)), labels, rotation=30, fontsize=7)
        ax.set_ylabel("full-solution accuracy (greedy)")
        ax.set_ylim(0, 1.02)
        return [save_figure(fig, run, "noop_symbolic.png", "Accuracy on the original test problems, with no-op "
                            "sentences inserted (GSM-NoOp), and on re-instantiations of the same templates "
                            "(GSM-Symbolic; mean over seeds)", claims=("noop-drop",))]

    def report_sections(self, cfg: IGSMNoOpConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        ok = ok_rows(results)
        cols = ["point", "arm", "seed_index", "train_loss", "n_problems", "orig_acc", "noop_acc", "repeat_acc", "drop",
                "flipped_to_wrong", "flipped_to_right", "orig_answer_acc", "noop_answer_acc",
                "noop_unneeded_per_correct",
                "symbolic_std", "symbolic_range"] + [c for c in ok.columns if c.startswith("symbolic_acc_")]
        real = _real(results)
        resists = ""
        if len(real) and "drop" in real and real["orig_acc"].mean() >= LEARNED_GATE and real["drop"].mean() < DROP_MIN:
            resists = ("The iGSM model resists the no-op sentences (its training problems already contain unnecessary "
                       "parameters).\n\n")
        return ("## Results\n\n" + resists + "Arm `null`: `repeat_acc` is the accuracy on the same problems with "
                f"{cfg.n_noop} of their own sentences repeated (no no-op), `drop` the original accuracy minus it "
                "(both on the problems whose prompts fit).\n\n" + markdown_table(ok[[c for c in cols if c in ok]]))


def _real(results: pd.DataFrame) -> pd.DataFrame:
    """The finished rows of the trained model on the real arm (a table without arms is all real)."""
    ok = ok_rows(results)
    return ok[ok["arm"] == "real"] if "arm" in ok else ok
