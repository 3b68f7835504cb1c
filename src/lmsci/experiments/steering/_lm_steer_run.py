"""The measurement phases of :mod:`lmsci.experiments.steering.lm_steer` on the Shakespeare GPTs.

``LMSteerExperiment.run_group`` composes them: train the language models once (:func:`train_language_models`),
prepare the attribute data (:func:`prepare_data`), then per seed of W (:func:`run_seed`): train the steers, sweep
the steer grid (real and null arm), compose, transfer, highlight and probe, train the baselines. Every generation
goes through one :class:`Evaluator` per seed (the same sampling seed for every steer value: common random
numbers), which also writes the flat result columns. The column names are the ones the verdicts
(:mod:`lmsci.experiments.steering._lm_steer_verdicts`) read.

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798, sec. 3.3-5,
App. F-G; Turner et al. 2023, arXiv 2308.10248 (activation addition).
"""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np
import torch

from lmsci.errors import ConfigError
from lmsci.experiments.steering._lm_steer_lines import play_lines
from lmsci.experiments.steering._lm_steer_verdicts import ATTRS
from lmsci.experiments.steering.lm_steer_detox import nan_stat, random_like
from lmsci.measure import text_scores as ts
from lmsci.runs import derive_seed
from lmsci.stats import wilson_interval


# ---------------------------------------------------------------------------------------------------- data
def prepare_data(cfg: Any, tok: Any) -> dict[str, Any]:
    """The attribute data from the First Folio's comedies and tragedies, split into steer and scorer plays
    (the lines of :func:`lmsci.experiments.steering._lm_steer_lines.play_lines`).

    Returns ``sentiment`` / ``genre`` (``(line, +-1.0)`` training pairs, ``n_train_lines`` per class, steer plays),
    ``clf`` (the genre classifier, trained on the scorer plays) and its accuracy ``clf_acc`` on the ``clf_n``
    steer-play lines, ``prompts`` (``[n_prompts, prompt_tokens]`` long: VADER-neutral scorer-play lines, half
    comedies), ``highlight`` (labelled scorer-play lines) and the play names.

    Raises:
        ConfigError: ``n_train_lines`` above the lines available for a class.
    """
    rng = np.random.default_rng(derive_seed(cfg.seed, "lines"))
    pl = play_lines(cfg, rng)
    steer_lines, scorer_lines = pl.steer, pl.scorer

    def pick(items, n, what):
        if len(items) < n:
            raise ConfigError("n_train_lines", n, f"<= {len(items)} ({what})")
        return [items[i] for i in rng.permutation(len(items))[:n]]

    # sentiment: VADER-labelled lines of the steer plays
    comp = ts.vader_compound([s for s, _, _ in steer_lines])
    pos = [s for (s, _, _), c in zip(steer_lines, comp) if c >= cfg.vader_threshold]
    neg = [s for (s, _, _), c in zip(steer_lines, comp) if c <= -cfg.vader_threshold]
    n = cfg.n_train_lines
    sent = [(s, 1.0) for s in pick(pos, n, "positive lines")] + [(s, -1.0) for s in pick(neg, n, "negative lines")]
    com = [s for s, y, _ in steer_lines if y == 1]
    tra = [s for s, y, _ in steer_lines if y == 0]
    genre = [(s, 1.0) for s in pick(com, n, "comedy lines")] + [(s, -1.0) for s in pick(tra, n, "tragedy lines")]
    # genre classifier on the scorer plays; accuracy on the steer plays (never seen by it)
    clf = ts.fit_text_classifier([s for s, _, _ in scorer_lines], [y for _, y, _ in scorer_lines], C=cfg.clf_C,
                                 seed=cfg.seed)
    acc = ts.classifier_accuracy(clf, [s for s, _, _ in steer_lines], [y for _, y, _ in steer_lines])
    # prompts: neutral lines of the scorer plays, half comedies and half tragedies
    sc_comp = ts.vader_compound([s for s, _, _ in scorer_lines])
    prompts = []
    for y in (1, 0):
        cand = [s for (s, g, _), c in zip(scorer_lines, sc_comp) if g == y and c == 0.0]
        cand = [ids for ids in (tok.encode("\n" + s) for s in (cand[i] for i in rng.permutation(len(cand))))
                if len(ids) > cfg.prompt_tokens][: cfg.n_prompts // 2]
        prompts += [ids[: cfg.prompt_tokens] for ids in cand]
    # highlighting lines: labelled lines of the scorer plays
    hl = []
    for lab, sel in ((1, sc_comp >= cfg.vader_threshold), (-1, sc_comp <= -cfg.vader_threshold)):
        cand = [s for (s, _, _), m in zip(scorer_lines, sel) if m and len(s.split()) >= cfg.highlight_min_words]
        hl += [(s, lab) for s in pick(cand, min(cfg.n_highlight_lines, len(cand)), "highlight lines")]
    return {"sentiment": sent, "genre": genre, "clf": clf, "clf_acc": acc, "clf_n": len(steer_lines),
            "prompts": torch.tensor(prompts, dtype=torch.long), "highlight": hl,
            "steer_plays": [w.name for w in pl.steer_plays], "scorer_plays": [w.name for w in pl.scorer_plays]}


# ---------------------------------------------------------------------------------------------------- models
def train_language_models(cfg: Any, corpus: Any, device: str, log: Callable[..., None]) -> dict[str, Any]:
    """The steered GPT ``A``, the fluency GPT ``F`` and the transfer target ``B`` (``F`` itself unless
    ``transfer_target="seed"``), trained once per run on the BPE corpus: ``{"A": (model, stats), "F": ...,
    "B": ...}``, stats with ``train_loss`` and ``val_nll`` in nats/token. ``A`` and ``B`` are ``cfg.model`` trained
    with ``cfg.train``; ``F`` is ``cfg.model`` with the ``flu_*`` width, depth and heads, trained ``flu_steps``
    steps at ``flu_lr`` (the same batch and schedule otherwise)."""
    from lmsci.train.corpus_lm import train_corpus_gpt
    from lmsci.worlds import shakespeare as sh

    val = sh.eval_batches(corpus.val_ids, cfg.seq_len, cfg.eval_tokens)

    def lm_train(role: str, arch: dict[str, int], **optim: Any) -> tuple[Any, dict[str, float]]:
        get_batch = sh.make_get_batch(corpus.train_ids, cfg.train.batch_size, cfg.seq_len)
        return train_corpus_gpt(get_batch, val, corpus.vocab_size, model=cfg.model.model_copy(update=arch),
                                train_spec=cfg.train.model_copy(update=optim), seq_len=cfg.seq_len, device=device,
                                seed=derive_seed(cfg.seed, "lm", role), log=lambda r: log(model=role, **r))

    flu = {"d_model": cfg.flu_d_model, "n_layers": cfg.flu_n_layers, "n_heads": cfg.flu_n_heads}
    out = {"A": lm_train("A", {}), "F": lm_train("fluency", flu, steps=cfg.flu_steps, lr=cfg.flu_lr)}
    out["B"] = lm_train("B", {}) if cfg.transfer_target == "seed" else out["F"]
    return out


def shared_columns(cfg: Any, corpus: Any, lms: dict[str, Any], base: dict[str, float],
                   data: dict[str, Any]) -> dict[str, Any]:
    """The columns every seed's row shares: validation and n-gram NLLs (nats/token; ``base`` from
    :func:`lmsci.worlds.shakespeare.ngram_baselines`), the genre classifier's accuracy with its Wilson lower
    bound, the prompt count and the play split."""
    return {"val_nll_A": lms["A"][1]["val_nll"], "val_nll_B": lms["B"][1]["val_nll"],
            "transfer_target": cfg.transfer_target, "val_nll_fluency": lms["F"][1]["val_nll"],
            "bigram_nll": base["bigram_nll"], "unigram_nll": base["unigram_nll"],
            "clf_acc": data["clf_acc"], "clf_acc_lo": wilson_interval(data["clf_acc"], data["clf_n"])[0],
            "clf_n": data["clf_n"], "n_prompts": int(data["prompts"].shape[0]),
            "steer_plays": ";".join(data["steer_plays"]), "scorer_plays": ";".join(data["scorer_plays"]),
            "vocab_size": corpus.vocab_size}


# ---------------------------------------------------------------------------------------------------- measuring
def evaluate(cfg: Any, model: Any, steer: Any, values: dict | None, prompts: torch.Tensor, seed: int, tok: Any,
             clf: Any, fluency: Any) -> dict[str, Any]:
    """Generate ``n_samples`` continuations per prompt (``prompts [n_prompts, prompt_tokens]``) with ``steer`` at
    ``values`` and score them: mean VADER compound ``sentiment``, mean classifier P(comedy) ``genre``, mean
    conditional perplexity ``ppl`` under ``fluency``, Dist-1/2/3; ``_texts`` holds the continuations."""
    from lmsci.methods.steering import generate

    dev = next(model.parameters()).device
    x = prompts.to(dev).repeat_interleave(cfg.n_samples, 0)  # [n_prompts * n_samples, P]
    g = torch.Generator(device=dev).manual_seed(seed)
    out = generate(model, x, steer, values, cfg.gen_tokens, temperature=cfg.temperature, top_k=cfg.top_k,
                   generator=g)
    gen = out[:, x.shape[1]:]
    texts = [tok.decode(r) for r in gen.cpu().tolist()]
    ppl = ts.conditional_perplexity(fluency, x, gen)
    per_prompt = [texts[i:i + cfg.n_samples] for i in range(0, len(texts), cfg.n_samples)]
    res = {"sentiment": float(ts.vader_compound(texts).mean()), "genre": float(ts.classifier_score(clf, texts).mean()),
           "ppl": ts.mean_perplexity(ppl), **ts.mean_distinct(per_prompt)}
    res["_texts"] = texts
    return res


class Evaluator:
    """One seed's generation-and-scoring calls (:func:`evaluate`, sampling seed ``gseed`` at every steer value):
    keeps every call's continuations in ``texts`` and writes the scores of the no-steer, +-steer_value and
    composition calls to ``row`` as ``{name}__{score}`` (the rest goes to the curves / baselines JSON columns)."""

    def __init__(self, cfg: Any, row: dict[str, Any], data: dict[str, Any], gseed: int, tok: Any, fluency: Any):
        S = cfg.steer_value
        self.cfg, self.row, self.data, self.gseed, self.tok, self.fluency = cfg, row, data, gseed, tok, fluency
        self.texts: dict[str, list[str]] = {}
        self.flat = {"none", "comp_+", "comp_-"} | {f"{a}_{v:+g}" for a in ATTRS for v in (S, -S)}

    def __call__(self, name: str, model: Any, steer: Any, values: dict | None) -> dict[str, Any]:
        r = evaluate(self.cfg, model, steer, values, self.data["prompts"], self.gseed, self.tok, self.data["clf"],
                     self.fluency)
        self.texts[name] = r.pop("_texts")
        if name in self.flat:  # the rest is kept in the curves / baselines JSON columns
            for k, v in r.items():
                self.row[f"{name}__{k}"] = v
        return r


def highlight_enrichment(cfg: Any, model: Any, steer: Any, lines: list, tok: Any, seed: int) -> dict[str, Any]:
    """Keyword highlighting (:func:`lmsci.methods.lm_steer_analysis.highlight`) on labelled lines ``(text, +-1)``:
    the VADER lexicon fraction of the words in the highlighted spans over that of ``random_draws`` random span sets
    of the same lengths (``highlight_enrichment``), the two fractions, the word count and up to 6 ``_examples``."""
    from lmsci.methods import lm_steer_analysis as lma

    lex = ts.vader_lexicon()
    rng = np.random.default_rng(seed)
    hit_h = n_h = hit_r = n_r = 0
    examples = []
    for line, lab in lines:
        text = "\n" + line  # as the line stands in the corpus, so its first word is predicted too
        ids = tok.encode(text)
        if len(ids) < 3:
            continue
        up, down = {"attr": 1.0}, {"attr": -1.0}
        spans = lma.highlight(model, steer, torch.tensor(ids), up if lab > 0 else down, down if lab > 0 else up,
                              n_spans=cfg.highlight_spans, max_len=cfg.highlight_max_len).spans
        if not spans:
            continue
        starts = [len(tok.decode(ids[:i])) for i in range(len(ids) + 1)]
        cs = [(starts[a], starts[b]) for a, b in spans]
        h, n = ts.lexicon_fraction(ts.span_words(text, cs), lex)
        hit_h, n_h = hit_h + h, n_h + n
        for _ in range(cfg.random_draws):
            rs = ts.random_spans(len(ids) - 1, [b - a for a, b in spans], rng)  # over the scored tokens 1..T-1
            h, n = ts.lexicon_fraction(ts.span_words(text, [(starts[a + 1], starts[b + 1]) for a, b in rs]), lex)
            hit_r, n_r = hit_r + h / cfg.random_draws, n_r + n / cfg.random_draws
        if len(examples) < 6:
            examples.append({"text": line, "label": lab, "spans": [text[a:b].strip() for a, b in cs]})
    return {"highlight_enrichment": ts.enrichment(hit_h, n_h, hit_r, n_r),
            "highlight_frac": hit_h / n_h if n_h else float("nan"),
            "highlight_random_frac": hit_r / n_r if n_r else float("nan"),
            "highlight_words": n_h, "_examples": examples}


def probe_enrichment(cfg: Any, model: Any, steer: Any, tok: Any) -> dict[str, Any]:
    """SVD probe over the whole-word tokens (a leading space, then >= 3 letters: the authors' demo filters to
    English words; sub-word pieces and byte tokens whose embeddings training never moved would otherwise fill
    the extremes); the base rate is the lexicon fraction of the same candidate set."""
    from lmsci.methods import lm_steer as lm
    from lmsci.methods.lm_steer_analysis import svd_probe

    lex = ts.vader_lexicon()
    vocab = [tok.decode([i]) for i in range(tok.vocab_size)]
    cand = [i for i, t in enumerate(vocab) if t.startswith(" ") and t[1:].isalpha() and len(t) >= 4]
    base = ts.token_lexicon_hits([vocab[i] for i in cand], lex)
    E = lm.output_embeddings(model)[torch.tensor(cand, device=lm.output_embeddings(model).device)]
    dirs = svd_probe(steer, E, "attr", k=cfg.probe_dims, n_tokens=cfg.probe_top)
    toks, listing = [], []
    for d in dirs:
        top, bot = [cand[i] for i in d.top_ids], [cand[i] for i in d.bottom_ids]
        toks += top + bot
        listing.append({"sigma": d.singular_value, "top": [vocab[i].strip() for i in top][:10],
                        "bottom": [vocab[i].strip() for i in bot][:10]})
    hits = ts.token_lexicon_hits([vocab[i] for i in toks], lex)
    return {"probe_enrichment": ts.enrichment(float(hits.sum()), len(hits), float(base.sum()), len(base)),
            "probe_frac": float(hits.mean()), "probe_base_rate": float(base.mean()),
            "probe_candidates": len(cand), "_probe": listing}


def curves_at(curves: dict, attr: str, s: float) -> dict:
    """The point of ``attr``'s curve at steer value ``s``."""
    return next(c for c in curves[attr] if c["s"] == s)


def matched_gains(base_rows: dict[str, list[dict]], none: dict, S: float) -> dict[str, float]:
    """Sentiment gain of each method at LM-Steer's perplexity increase at steer value ``S``.

    LM-Steer's target is ``ppl(S) - ppl(none)``; each method's (ppl increase, gain) sweep is interpolated linearly
    in the perplexity increase (sorted); NaN when the target lies outside a method's measured range.
    """
    lm_pts = {e["s"]: e for e in base_rows["lm_steer"]}
    target = lm_pts[S]["ppl"] - none["ppl"]
    out = {"ppl_increase": target, "lm_steer": lm_pts[S]["sentiment"] - none["sentiment"]}
    for k, pts in base_rows.items():
        if k == "lm_steer":
            continue
        xs = np.array([e["ppl"] - none["ppl"] for e in pts])
        ys = np.array([e["sentiment"] - none["sentiment"] for e in pts])
        o = np.argsort(xs)
        xs, ys = xs[o], ys[o]
        out[k] = float(np.interp(target, xs, ys)) if len(xs) and xs[0] <= target <= xs[-1] else float("nan")
    return out


# ---------------------------------------------------------------------------------------------------- phases
def train_steers(cfg: Any, A: Any, data: dict[str, Any], tok: Any, seed: int, row: dict) -> dict[str, Any]:
    """One LM-Steer per attribute on ``A`` (:func:`lmsci.methods.lm_steer.train_steer`), its first and last
    training losses written to ``row``."""
    from lmsci.methods import lm_steer as lm

    steers = {}
    for attr in ATTRS:
        items = data[attr]
        st = lm.train_steer(A, ["\n" + s for s, _ in items], [y for _, y in items], rank=cfg.rank,
                            epsilon=cfg.epsilon, init_std=cfg.init_std, lr=cfg.steer_lr,
                            steps=cfg.steer_steps, batch_size=cfg.steer_batch, l2=cfg.l2,
                            seed=derive_seed(seed, "steer", attr), tokenizer=tok)
        steers[attr] = st
        row[f"{attr}_train_loss_first"] = float(np.mean(st.history[:10]))
        row[f"{attr}_train_loss_last"] = float(np.mean(st.history[-10:]))
    return steers


def steer_curves(cfg: Any, ev: Evaluator, A: Any, steers: dict, none: dict, row: dict) -> dict[str, list[dict]]:
    """Each attribute's curve over ``steer_grid`` (the steering and continuous claims): the gains at
    +-steer_value, the Spearman and the perplexity increase written to ``row``, the curves as JSON."""
    S = cfg.steer_value
    curves = {}
    for attr in ATTRS:
        curve = []
        for v in cfg.steer_grid:
            r = ev(f"{attr}_{v:+g}", A, steers[attr], {"attr": v})
            curve.append({"s": v, **r})
        curves[attr] = curve
        at = {c["s"]: c for c in curve}
        row[f"{attr}_gain_pos"] = at[S][attr] - none[attr]
        row[f"{attr}_gain_neg"] = none[attr] - at[-S][attr]
        row[f"{attr}_spearman"] = ts.spearman([c["s"] for c in curve], [c[attr] for c in curve])
        row[f"{attr}_ppl_increase"] = at[S]["ppl"] - none["ppl"]
    row["curves"] = json.dumps(curves)
    return curves


def null_steer_curves(cfg: Any, ev: Evaluator, A: Any, rsteers: dict, curves: dict, none: dict, row: dict) -> None:
    """The null arm of :func:`steer_curves`: a random W of the same norm per attribute (dummy kept), through the
    same measurements (at steer value 0 only the dummy acts: the real arm's generations, reused)."""
    S = cfg.steer_value
    null_curves = {}
    for attr in ATTRS:
        curve = []
        for v, real in zip(cfg.steer_grid, curves[attr]):
            r = dict(real) if v == 0 else {"s": v, **ev(f"null_{attr}_{v:+g}", A, rsteers[attr], {"attr": v})}
            curve.append(r)
        null_curves[attr] = curve
        at = {c["s"]: c for c in curve}
        row[f"null_{attr}_gain_pos"] = at[S][attr] - none[attr]
        row[f"null_{attr}_gain_neg"] = none[attr] - at[-S][attr]
    row["null_curves"] = json.dumps(null_curves)


def composition(cfg: Any, ev: Evaluator, A: Any, steers: dict, rsteers: dict, curves: dict, none: dict,
                row: dict) -> None:
    """The two steers summed (:meth:`LMSteer.combine`) at (+S, +S) and (-S, -S): each attribute's composed gain
    and its retention (composed / single-steer gain, NaN where the single gain is not positive); the null arm
    replaces the attribute's own steer in the sum by its random W (the other steer kept)."""
    from lmsci.methods import lm_steer as lm

    S = cfg.steer_value
    both = lm.LMSteer.combine([steers["sentiment"], steers["genre"]], prefixes=("sentiment.", "genre."))
    ret = {a: [] for a in ATTRS}
    for sign in (1, -1):
        r = ev(f"comp_{'+' if sign > 0 else '-'}", A, both, {"sentiment.attr": sign * S, "genre.attr": sign * S})
        for a in ATTRS:
            single = sign * (curves_at(curves, a, sign * S)[a] - none[a])
            comp = sign * (r[a] - none[a])
            row[f"comp_{a}_{'pos' if sign > 0 else 'neg'}_gain"] = comp
            ret[a].append(comp / single if single > 0 else float("nan"))
    for a in ATTRS:
        row[f"comp_{a}_retention"] = nan_stat(np.mean, ret[a])
    for a in ATTRS:
        parts = [rsteers[b] if b == a else steers[b] for b in ATTRS]
        both0 = lm.LMSteer.combine(parts, prefixes=tuple(f"{b}." for b in ATTRS))
        rets = []
        for sign in (1, -1):
            r = ev(f"null_comp_{a}_{'+' if sign > 0 else '-'}", A, both0, {f"{b}.attr": sign * S for b in ATTRS})
            single = sign * (curves_at(curves, a, sign * S)[a] - none[a])
            rets.append(sign * (r[a] - none[a]) / single if single > 0 else float("nan"))
        row[f"null_comp_{a}_retention"] = nan_stat(np.mean, rets)


def transfer(cfg: Any, ev: Evaluator, A: Any, B: Any, steers: dict, rsteers: dict, curves: dict, seed: int,
             row: dict) -> None:
    """Each steer mapped from A to B (:func:`lmsci.methods.lm_steer_transfer.transfer_steer`): the spread
    ``score(+S) - score(-S)`` on B over the spread on A (retention), the map's held-out error; the null arm
    carries the random W to B by the same map."""
    from lmsci.methods.lm_steer_transfer import transfer_steer

    S = cfg.steer_value
    for attr in ATTRS:
        moved, emap = transfer_steer(steers[attr], A, B, seed=derive_seed(seed, "map", attr))
        rp = ev(f"transfer_{attr}_+", B, moved, {"attr": S})
        rm = ev(f"transfer_{attr}_-", B, moved, {"attr": -S})
        spread_A = curves_at(curves, attr, S)[attr] - curves_at(curves, attr, -S)[attr]
        row[f"transfer_{attr}_spread_B"] = rp[attr] - rm[attr]
        row[f"transfer_{attr}_spread_A"] = spread_A
        row[f"transfer_{attr}_retention"] = (rp[attr] - rm[attr]) / spread_A if spread_A > 0 else float("nan")
        row[f"transfer_{attr}_map_error"] = float(emap.heldout_error)
        moved0 = emap.map_steer(rsteers[attr])
        rp0 = ev(f"null_transfer_{attr}_+", B, moved0, {"attr": S})
        rm0 = ev(f"null_transfer_{attr}_-", B, moved0, {"attr": -S})
        row[f"null_transfer_{attr}_spread_B"] = rp0[attr] - rm0[attr]
        row[f"null_transfer_{attr}_retention"] = ((rp0[attr] - rm0[attr]) / spread_A if spread_A > 0
                                                  else float("nan"))


def interpret(cfg: Any, A: Any, steers: dict, rsteers: dict, data: dict, tok: Any, seed: int,
              row: dict) -> dict[str, Any]:
    """Highlighting and SVD probe of the sentiment steer and of its random W (columns ``null_*``); returns the
    examples and probe listing of the real steer (``interpret.json``)."""
    hl = highlight_enrichment(cfg, A, steers["sentiment"], data["highlight"], tok, derive_seed(seed, "spans"))
    pr = probe_enrichment(cfg, A, steers["sentiment"], tok)
    row.update({k: v for k, v in {**hl, **pr}.items() if not k.startswith("_")})
    hl0 = highlight_enrichment(cfg, A, rsteers["sentiment"], data["highlight"], tok, derive_seed(seed, "spans"))
    pr0 = probe_enrichment(cfg, A, rsteers["sentiment"], tok)
    row.update({f"null_{k}": v for k, v in {**hl0, **pr0}.items() if not k.startswith("_")})
    return {"highlight": hl["_examples"], "probe": pr["_probe"]}


def baselines(cfg: Any, ev: Evaluator, A: Any, data: dict, tok: Any, vocab_size: int, curves: dict, none: dict,
              seed_index: int, seed: int, row: dict) -> None:
    """The logit offset and activation addition (same loss, same sentiment data) swept over ``baseline_grid`` on
    the first ``baseline_seeds`` seeds of W, and the sentiment gains at LM-Steer's perplexity increase
    (:func:`matched_gains`, columns ``matched_*``)."""
    from lmsci.methods import lm_steer as lm
    from lmsci.methods.steering import ActAdd, LogitOffset

    sent = data["sentiment"]
    base_rows = {"lm_steer": [{"s": c["s"], "ppl": c["ppl"], "sentiment": c["sentiment"]}
                              for c in curves["sentiment"] if c["s"] > 0]}
    n_base = cfg.n_seeds if cfg.baseline_seeds is None else cfg.baseline_seeds
    for b in (cfg.baselines if seed_index < n_base else []):
        st = (LogitOffset(vocab_size, ("attr",)) if b == "logit_offset"
              else ActAdd(cfg.model.d_model, cfg.model.n_layers // 2 if cfg.model.n_layers > 1 else 0, ("attr",)))
        st = lm.train_steer(A, ["\n" + s for s, _ in sent], [y for _, y in sent], steer=st, lr=cfg.steer_lr,
                            steps=cfg.steer_steps, batch_size=cfg.steer_batch, l2=cfg.l2,
                            seed=derive_seed(seed, "steer", b), tokenizer=tok)
        base_rows[b] = []
        for v in cfg.baseline_grid:
            r = ev(f"{b}_{v:+g}", A, st, {"attr": v})
            base_rows[b].append({"s": v, "ppl": r["ppl"], "sentiment": r["sentiment"]})
    row["baselines"] = json.dumps({"none": {"ppl": none["ppl"], "sentiment": none["sentiment"]}, **base_rows})
    matched = matched_gains(base_rows, none, cfg.steer_value)
    row.update({f"matched_{k}": v for k, v in matched.items()})


def run_seed(cfg: Any, point: Any, ctx: Any, lms: dict[str, Any], data: dict[str, Any], common: dict[str, Any],
             tok: Any, vocab_size: int) -> dict[str, Any]:
    """One seed of W (``ctx.seed``): every phase in order, then the artifacts ``generations.json`` (the first
    prompts' continuations of every call) and ``interpret.json``; returns the results row."""
    A, F, B = lms["A"][0], lms["F"][0], lms["B"][0]
    row: dict[str, Any] = dict(common)
    ev = Evaluator(cfg, row, data, derive_seed(ctx.seed, "gen"), tok, F)
    steers = train_steers(cfg, A, data, tok, ctx.seed, row)
    none = ev("none", A, None, None)
    curves = steer_curves(cfg, ev, A, steers, none, row)
    rsteers = {a: random_like(steers[a], derive_seed(ctx.seed, "null", a)) for a in ATTRS}
    null_steer_curves(cfg, ev, A, rsteers, curves, none, row)
    composition(cfg, ev, A, steers, rsteers, curves, none, row)
    transfer(cfg, ev, A, B, steers, rsteers, curves, ctx.seed, row)
    listing = interpret(cfg, A, steers, rsteers, data, tok, ctx.seed, row)
    baselines(cfg, ev, A, data, tok, vocab_size, curves, none, point.seed_index, ctx.seed, row)
    (ctx.artifact_dir / "generations.json").write_text(json.dumps(
        {k: v[: 3 * cfg.n_samples] for k, v in ev.texts.items()}, indent=1))
    (ctx.artifact_dir / "interpret.json").write_text(json.dumps(listing, indent=1))
    return row
