"""The fact prompts and ROME edits of :mod:`lmsci.experiments.knowledge.causal_tracing`.

Source: Meng, Bau, Andonian, Belinkov, "Locating and Editing Factual Associations in GPT", NeurIPS 2022,
arXiv 2202.05262: Section 3 (ROME, eq. 2-4) and Section 3.3 / Table 4 (CounterFact's efficacy, paraphrase and
neighbourhood scores). ROME itself is :mod:`lmsci.methods.rome`; here the requests are built from bioS facts and
the edits scored. The edit acts at one token of the subject: the last one (the paper's and the registered arm's
choice) or, for the traced-site arm of issue 30 item 3, the subject token where the seed's causal trace puts the
fact (:func:`traced_site`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lmsci.measure.grad_overlap import span_logprobs
from lmsci.methods.rome import RomeHParams, compute_rome, edited, key_second_moment
from lmsci.worlds.bios import ATTRS, BiosWorld
from lmsci.worlds.bios_templates import TEMPLATES


def fact_prompt(world: BiosWorld, i: int, attr: str, template: int) -> dict[str, Any]:
    """``<bos> NAME <template prefix>`` of person ``i``'s ``attr`` sentence in template ``template``: the prompt
    ids, the subject (name) range, the value's tokens.

    Raises:
        UnknownNameError: an attribute not in bioS. ConfigError: a person not in the world or a template out of range.
    """
    from lmsci.errors import ConfigError, UnknownNameError

    if attr not in ATTRS:
        raise UnknownNameError("attribute", attr, ATTRS)
    if not 0 <= int(i) < world.n:
        raise ConfigError("person", i, f"an index in [0, {world.n})")
    if not 0 <= int(template) < len(TEMPLATES[attr]):
        raise ConfigError("template", template, f"an index in [0, {len(TEMPLATES[attr])})")
    j = ATTRS.index(attr)
    order = [j] + [k for k in range(len(ATTRS)) if k != j]
    doc = world.bio(int(i), templates=[template if k == j else 0 for k in range(len(ATTRS))], order=order,
                    fullname=True)
    vs, ve = doc.spans[attr][0]
    return {"prompt": doc.ids[:vs], "subject": tuple(doc.spans["name"][0]), "value": doc.ids[vs:ve],
            "person": int(i), "attr": attr, "template": int(template)}


def greedy_first(model: Any, prompts: list[list[int]], device: str) -> np.ndarray:
    """``[len(prompts)]`` the greedy next token after each prompt (token ids)."""
    import torch

    out = []
    with torch.no_grad():
        for p in prompts:
            out.append(int(model(torch.as_tensor(p, device=device)[None])[0, -1].argmax()))
    return np.asarray(out)


def traced_site(sub_aie: np.ndarray) -> tuple[int, int]:
    """``(subject token offset, layer)`` of the largest entry of a per-subject-token MLP AIE map
    ``[max subject length, n_layers]`` (:func:`lmsci.measure.causal_tracing.subject_token_aie`; offset 0 = the
    first subject token; NaN cells ignored; ties: the first in row-major order).

    Raises:
        ValueError: the map has no finite entry.
    """
    a = np.asarray(sub_aie, dtype=float)
    if not np.isfinite(a).any():
        raise ValueError("subject AIE map without a finite entry: no traced subject token")
    k = int(np.nanargmax(np.where(np.isfinite(a), a, -np.inf)))
    return divmod(k, a.shape[1])


def _key_windows(cfg: Any, stream: Any, ctx: Any):
    import torch

    if hasattr(stream, "input_ids"):
        return stream.input_ids[:cfg.cov_windows]
    fn, g = stream.get_batch_fn(), torch.Generator().manual_seed(ctx.seed)  # a streaming pipeline: its first batches
    return torch.cat([fn(k, g)[0] for k in range(-(-cfg.cov_windows // cfg.pretrain.batch_size))])


def _pick_edits(pool: list[dict], n_edits: int) -> list[dict]:
    seen: set[int] = set()
    edits = []
    for c in pool:
        if c["person"] not in seen:
            seen.add(c["person"])
            edits.append(c)
        if len(edits) >= n_edits:
            break
    return edits


def _prefers(model: Any, prompts: list[list[int]], a_vals: list[list[int]], b_vals: list[list[int]]) -> np.ndarray:
    """``[len(prompts)]`` bool: log P(a | prompt) > log P(b | prompt) (summed over the value's tokens)."""
    la = span_logprobs(model, [p + v for p, v in zip(prompts, a_vals)],
                       [(len(p), len(p) + len(v)) for p, v in zip(prompts, a_vals)])
    lb = span_logprobs(model, [p + v for p, v in zip(prompts, b_vals)],
                       [(len(p), len(p) + len(v)) for p, v in zip(prompts, b_vals)])
    return la > lb


def rome_edits(cfg: Any, world: BiosWorld, model: Any, stream: Any, pool: list[dict], layer: int, ctx: Any,
               rng: np.random.Generator, offset: int | None = None) -> dict[str, Any]:
    """ROME edits of ``cfg.n_edits`` facts of ``pool`` (distinct people) at layer ``layer``, each applied alone,
    scored and reverted (Meng et al. 2022, Section 3.3's CounterFact scores on bioS).

    Each fact is rewritten to another person's value of its attribute (first token different), with the key
    averaged over the prompt and ``cfg.n_prefixes`` prompts prefixed by other people's first biography sentence
    and the KL term at ``<bos> NAME`` (and one prefixed copy). ``offset``: the subject token the edit acts at
    (its key, its ``v*`` and the KL position), ``None`` = the last subject token (the paper's and the registered
    arm's); an int = that token of the subject (0 = the first; clipped to a shorter subject's last token).
    ``rng`` draws the new objects, prefixes, paraphrases and neighbours: two calls with copies of one generator
    edit the same facts the same way.

    Returns:
        ``n_edits``; ``efficacy`` (share with log P(new) > log P(old) on the edit prompt), ``paraphrase`` (the same
        on up to 3 other templates), ``specificity`` (share of ``cfg.n_neighbours`` other people's facts with
        log P(true) > log P(new) after the edit; ``specificity_before``: before it), ``edit_top1`` (the new
        object's first token is the greedy next token), ``v_nll_end`` (the new object's NLL, nats/token, at the
        end of ``v*``'s optimisation); means over edits (NaN when no edit).
    """
    import torch

    x = _key_windows(cfg, stream, ctx)
    C = key_second_moment(model, layer, x, x != world.vocab.pad_id)
    hp = RomeHParams(v_lr=cfg.v_lr, v_steps=cfg.v_steps, kl_factor=cfg.kl_factor,
                     weight_decay=cfg.v_weight_decay, clamp_norm_factor=cfg.clamp_norm_factor)
    eff, para, spec, spec0, gen, nll = [], [], [], [], [], []
    bos = world.vocab.bos_id
    for c in _pick_edits(pool, cfg.n_edits):
        a, i = c["attr"], c["person"]
        others = [j for j in range(cfg.n_people) if j != i]
        # the new object: another person's value of the attribute whose first token differs
        new = None
        for j in rng.permutation(others):
            v = fact_prompt(world, int(j), a, 0)["value"]
            if v[0] != c["value"][0]:
                new = v
                break
        if new is None:
            continue
        prefixes = []
        for j in rng.permutation(others)[:cfg.n_prefixes]:
            d = world.bio(int(j), rng, fullname=True)
            cut = next(k for k in range(2, len(d.ids)) if world.vocab.itos[d.ids[k - 1]] == ".")
            prefixes.append(d.ids[1:cut])
        s, e = c["subject"]
        o = e - s - 1 if offset is None else min(int(offset), e - s - 1)  # the edited token, from the subject start
        prompts = [c["prompt"]] + [[bos] + p + c["prompt"][1:] for p in prefixes]
        at = [s + o] + [s + o + len(p) for p in prefixes]
        name = c["prompt"][s:e]
        kl_prompts = [[bos] + name] + [[bos] + p + name for p in prefixes[:1]]
        kl_pos = [len(q) - len(name) + o for q in kl_prompts]
        edit = compute_rome(model, layer, prompts=prompts, subject_last=at, target=new, cov=C,
                            kl_prompts=kl_prompts, kl_positions=kl_pos, hparams=hp)
        nll.append(edit.info["nll_end"])
        paras = [fact_prompt(world, i, a, t) for t in range(len(TEMPLATES[a])) if t != c["template"]]
        paras = [paras[k] for k in rng.permutation(len(paras))[:3]]
        neigh = [fact_prompt(world, int(j), a, c["template"]) for j in rng.permutation(others)[:cfg.n_neighbours]]
        neigh = [n for n in neigh if n["value"] != new]
        spec0.append(float(np.mean(_prefers(model, [n["prompt"] for n in neigh], [n["value"] for n in neigh],
                                            [new] * len(neigh)))) if neigh else np.nan)
        with edited(model, edit):
            eff.append(float(_prefers(model, [c["prompt"]], [new], [c["value"]])[0]))
            para.append(float(np.mean(_prefers(model, [p["prompt"] for p in paras], [new] * len(paras),
                                               [p["value"] for p in paras]))) if paras else np.nan)
            spec.append(float(np.mean(_prefers(model, [n["prompt"] for n in neigh], [n["value"] for n in neigh],
                                               [new] * len(neigh)))) if neigh else np.nan)
            with torch.no_grad():
                out = model(torch.as_tensor(c["prompt"], device=ctx.device)[None])[0, -1].argmax()
            gen.append(float(int(out) == new[0]))
    return {"n_edits": len(eff), "efficacy": float(np.mean(eff)) if eff else np.nan,
            "paraphrase": float(np.nanmean(para)) if para else np.nan,
            "specificity": float(np.nanmean(spec)) if spec else np.nan,
            "specificity_before": float(np.nanmean(spec0)) if spec0 else np.nan,
            "edit_top1": float(np.mean(gen)) if gen else np.nan,
            "v_nll_end": float(np.mean(nll)) if nll else np.nan}


def other_layer(n_layers: int, peak: int, seed: int) -> int | None:
    """A layer drawn uniformly among the ``n_layers - 1`` layers that are not ``peak`` (the causal-tracing peak
    that the registered edit uses), seeded by ``seed``; ``None`` for a one-layer model."""
    layers = [k for k in range(int(n_layers)) if k != int(peak)]
    return layers[int(np.random.default_rng(seed).integers(len(layers)))] if layers else None


def other_layer_edits(cfg: Any, world: BiosWorld, model: Any, stream: Any, pool: list[dict], peak: int, ctx: Any,
                      rng: np.random.Generator, seed: int) -> dict[str, Any]:
    """The null arm of ``rome-edit`` (since 2026-12-06, issue 44 item 4): the same ROME edits (``rng``: a copy of
    the registered edits' generator, so the same facts, new objects, prefixes and neighbours) on the same trained
    model at a layer drawn by :func:`other_layer` instead of the tracing peak ``peak``. Hase et al. 2023, arXiv
    2301.04213: editing success is not tied to the layer causal tracing localises. Columns ``other_layer`` and
    ``other_<score>`` for each score of :func:`rome_edits` (NaN scores for a one-layer model)."""
    layer = other_layer(cfg.model.n_layers, peak, seed)
    scores = rome_edits(cfg, world, model, stream, pool, layer, ctx, rng) if layer is not None else {
        k: np.nan for k in ("efficacy", "paraphrase", "specificity", "specificity_before", "edit_top1", "v_nll_end")}
    return {"other_layer": layer, **{"other_" + k: v for k, v in scores.items()}}
