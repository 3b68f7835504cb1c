"""ROME edits of real facts for :mod:`lmsci.experiments.knowledge.causal_tracing_lm`.

Source: Meng, Bau, Andonian, Belinkov, "Locating and Editing Factual Associations in GPT", NeurIPS 2022,
arXiv 2202.05262, Section 3 (ROME, eq. 2-4) and Section 3.3 / Table 4 (CounterFact's scores). ROME itself is
:mod:`lmsci.methods.rome`; here each request rewrites a known fact ``(s, r, o)`` to ``o*``, the object of
another known fact of the same relation whose first token differs (CounterFact draws ``o*`` from the same
relation), and scores it as CounterFact does:

* efficacy: ``log P(o* | prompt) > log P(o | prompt)`` on the edited prompt (object tokens summed);
* paraphrase: the same on the relation's paraphrase prompts;
* specificity (neighbourhood score): on other known facts of the same relation, ``log P(their o) > log P(o*)``
  after the edit (``specificity_before``: before it).

Deviations (stated in the report): ``C = E[k k^T]`` is estimated on the fact set's own statements, not on
Wikipedia; the key is averaged over the unprefixed prompt and ``n_prefixes`` prompts prefixed by other facts'
statements (ROME prefixes generated text); the essence (KL) prompt is ``"{subject} is a"`` (ROME's).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from lmsci.experiments.knowledge._causal_tracing_lm_model import FactPrompt, encode_fact
from lmsci.measure.grad_overlap import span_logprobs
from lmsci.methods.rome import RomeHParams, compute_rome, edited, key_second_moment
from lmsci.worlds.facts import Fact, FactSet


def statement_windows(tok: Any, facts: FactSet, prefix: list[int], n: int, length: int, seed: int) -> torch.Tensor:
    """``[n, length]`` token ids: the fact set's statements in a random order (``seed``), each after ``prefix``,
    packed end to end (the text ROME's ``C`` is estimated on here)."""
    rng = np.random.default_rng(seed)
    need, ids = n * length, []
    while len(ids) < need:
        for k in rng.permutation(len(facts.facts)):
            ids += prefix + list(tok(facts.statement(facts.facts[int(k)]), add_special_tokens=False)["input_ids"])
            if len(ids) >= need:
                break
    return torch.as_tensor(ids[:need], dtype=torch.long).view(n, length)


def _logp(model: Any, prompts: list[list[int]], objs: list[list[int]]) -> np.ndarray:
    return span_logprobs(model, [p + o for p, o in zip(prompts, objs)],
                         [(len(p), len(p) + len(o)) for p, o in zip(prompts, objs)])


def plan_edits(facts: FactSet, tok: Any, prefix: list[int], edited_facts: list[Fact], known: list[Fact],
               cfg: Any, rng: np.random.Generator) -> list[dict[str, Any]]:
    """The requests (the same for both arms when ``rng`` is a copy of one generator): per fact its prompt, new
    object, prefixed rewriting prompts, essence prompt, paraphrases and neighbours (token ids). Facts whose
    relation has no other known object with a different first token are skipped."""
    plans = []
    for f in edited_facts:
        main = encode_fact(tok, facts, f, prefix)
        same = [g for g in known if g.relation == f.relation and g.subject != f.subject]
        objs = sorted({g.object for g in same if g.object != f.object})
        objs = [o for o in objs if encode_fact(tok, facts, f, prefix, obj=o).object[0] != main.object[0]]
        if not objs:
            continue
        new = objs[int(rng.integers(len(objs)))]
        target = encode_fact(tok, facts, f, prefix, obj=new).object
        others = [g for g in known if g.subject != f.subject]
        ctx = [facts.statement(others[int(k)]) for k in rng.permutation(len(others))[:cfg.n_prefixes]]
        rewrite = [main] + [encode_fact(tok, facts, f, prefix, context=c) for c in ctx]
        essence = encode_fact(tok, facts, f, prefix, template="{} is a")
        n_para = len(facts.relations[f.relation].paraphrases)
        paras = [encode_fact(tok, facts, f, prefix, paraphrase=int(k)) for k in rng.permutation(n_para)[:cfg.n_paraphrases]]
        neigh = [encode_fact(tok, facts, same[int(k)], prefix) for k in rng.permutation(len(same))]
        neigh = [n for n in neigh if n.object[0] != target[0]][:cfg.n_neighbours]
        plans.append({"fact": f, "main": main, "new": new, "target": target, "rewrite": rewrite,
                      "essence": essence, "paraphrases": paras, "neighbours": neigh})
    return plans


def _share(model: Any, a_prompts: list[FactPrompt], a_objs: list[list[int]], b_objs: list[list[int]]) -> float:
    if not a_prompts:
        return float("nan")
    p = [q.ids for q in a_prompts]
    return float(np.mean(_logp(model, p, a_objs) > _logp(model, p, b_objs)))


def rome_scores(model: Any, plans: list[dict[str, Any]], layer: int, cov_windows: torch.Tensor, cfg: Any) -> dict:
    """ROME at MLP layer ``layer`` for each planned request, applied alone, scored and reverted.

    Returns:
        ``n_edits``, ``efficacy``, ``paraphrase``, ``specificity``, ``specificity_before``, ``edit_top1`` (the new
        object's first token is the greedy next token after the edit), ``v_nll_end`` (nats/token at the end of
        ``v*``'s optimisation): means over edits (NaN when none).
    """
    C = key_second_moment(model, layer, cov_windows)
    hp = RomeHParams(v_lr=cfg.v_lr, v_steps=cfg.v_steps, kl_factor=cfg.kl_factor,
                     weight_decay=cfg.v_weight_decay, clamp_norm_factor=cfg.clamp_norm_factor)
    rows: dict[str, list[float]] = {k: [] for k in ("efficacy", "paraphrase", "specificity", "specificity_before",
                                                    "edit_top1", "v_nll_end")}
    dev = next(iter(model.parameters())).device
    for pl in plans:
        main, tgt, neigh = pl["main"], pl["target"], pl["neighbours"]
        edit = compute_rome(model, layer, prompts=[q.ids for q in pl["rewrite"]],
                            subject_last=[q.subject[1] - 1 for q in pl["rewrite"]], target=tgt, cov=C,
                            kl_prompts=[pl["essence"].ids], kl_positions=[pl["essence"].subject[1] - 1], hparams=hp)
        rows["v_nll_end"].append(edit.info["nll_end"])
        rows["specificity_before"].append(_share(model, neigh, [n.object for n in neigh], [tgt] * len(neigh)))
        with edited(model, edit):
            rows["efficacy"].append(_share(model, [main], [tgt], [main.object]))
            paras = pl["paraphrases"]
            rows["paraphrase"].append(_share(model, paras, [tgt] * len(paras), [p.object for p in paras]))
            rows["specificity"].append(_share(model, neigh, [n.object for n in neigh], [tgt] * len(neigh)))
            with torch.no_grad():
                top = int(model(torch.as_tensor([main.ids], device=dev))[0, -1].argmax())
            rows["edit_top1"].append(float(top == tgt[0]))
    out: dict[str, Any] = {"n_edits": len(plans)}
    for k, v in rows.items():
        out[k] = float(np.nanmean(v)) if v and np.isfinite(v).any() else float("nan")
    return out
