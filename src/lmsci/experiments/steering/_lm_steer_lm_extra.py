"""Composition, baselines and the probe's random-direction reference of :mod:`lmsci.experiments.steering.lm_steer_lm`.

* :func:`build_genre`: the genre steer's lines (comedy +1, tragedy -1, lines of the steer plays) and the genre
  classifier (TF-IDF + logistic regression, trained on the held-out *scorer* plays only, its accuracy measured on
  the steer plays' lines), the toy ``lm-steer``'s recipe: the lines of
  :func:`lmsci.experiments.steering._lm_steer_lines.play_lines`, which both share (``_lm_steer_run.prepare_data``
  builds the pairs and classifier together with its own prompts and a BPE tokenizer, so that selection is repeated
  here).
* :func:`compose`: the sentiment and genre steers summed (:meth:`lmsci.methods.lm_steer.LMSteer.combine`, the exact
  sum of the two edits; paper sec. 5, Thm 3) and the values of the composed grid.
* :func:`baseline_steers`: activation addition (Turner et al. 2023, arXiv 2308.10248: the mean difference of the
  residual stream between positive and negative lines, :meth:`lmsci.methods.steering.ActAdd.from_contrast`) and a
  logit offset (:class:`lmsci.methods.steering.LogitOffset` set in closed form to the add-one-smoothed log-ratio of
  the token frequencies of the positive and negative training lines); neither is trained, so they cost no step.
* :func:`matched_gain`: a baseline's sentiment gain at LM-Steer's perplexity increase (linear interpolation along
  its sweep, anchored at the unsteered model).
* :func:`measure_composition`, :func:`measure_baselines`: a point's composition and baseline rows; the report's
  composition, baselines and probe sections.

Source: Han, Xu, Li, Ji, arXiv 2305.12798 (ACL 2024), sec. 4 (baselines), sec. 5 (composition), App. G.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from lmsci.errors import ConfigError
from lmsci.experiments.steering._lm_steer_lines import play_lines
from lmsci.measure import text_scores as ts
from lmsci.runs import derive_seed
from lmsci.stats import wilson_interval


def build_genre(cfg: Any) -> dict[str, Any]:
    """The genre steer's training lines and the genre classifier (fixed by ``cfg.seed``; shared by every point).

    Returns:
        ``texts`` (``n_genre_lines`` comedy lines then as many tragedy lines, from the steer plays), ``labels``
        (+1 comedy, -1 tragedy), ``clf`` (trained on the scorer plays' lines), ``clf_acc`` on the steer plays'
        lines (plays it never saw), its 95% Wilson lower bound ``clf_acc_lo`` and ``clf_n`` lines.

    Raises:
        ConfigError: ``n_genre_lines`` above the comedy or tragedy lines available.
    """
    rng = np.random.default_rng(derive_seed(cfg.seed, "genre-lines"))
    pl = play_lines(cfg, rng)
    st, sc = [(s, y) for s, y, _ in pl.steer], [(s, y) for s, y, _ in pl.scorer]
    n = cfg.n_genre_lines
    picked = []
    for y, what in ((1, "comedy"), (0, "tragedy")):
        items = [s for s, g in st if g == y]
        if len(items) < n:
            raise ConfigError("n_genre_lines", n, f"<= {len(items)} ({what} lines of the steer plays)")
        picked.append([items[i] for i in rng.permutation(len(items))[:n]])
    clf = ts.fit_text_classifier([s for s, _ in sc], [y for _, y in sc], C=cfg.clf_C, seed=cfg.seed)
    acc = ts.classifier_accuracy(clf, [s for s, _ in st], [y for _, y in st])
    return {"texts": picked[0] + picked[1], "labels": np.array([1.0] * n + [-1.0] * n), "clf": clf,
            "clf_acc": acc, "clf_acc_lo": wilson_interval(acc, len(st))[0], "clf_n": len(st)}


def compose(sentiment: Any, genre: Any) -> Any:
    """The two steers summed: one :class:`~lmsci.methods.lm_steer.LMSteer` with steers ``sentiment.attr``,
    ``sentiment.dummy``, ``genre.attr``, ``genre.dummy`` (both dummies at 1 when valued by name)."""
    from lmsci.methods.lm_steer import LMSteer

    return LMSteer.combine([sentiment, genre], prefixes=("sentiment.", "genre."))


def composed_values(s: float, g: float) -> dict[str, float]:
    """The composed steer's values: sentiment at ``s``, genre at ``g`` (units of eps0; the dummies at 1)."""
    return {"sentiment.attr": float(s), "genre.attr": float(g)}


@torch.no_grad()
def baseline_steers(cfg: Any, hf: Any, pos: list[list[int]], neg: list[list[int]], pad_id: int) -> dict[str, Any]:
    """The two baselines, valued by ``{"attr": s}`` (no dummy: ``s = 0`` is the unsteered model).

    Args:
        pos, neg: token lists of the positive and negative training lines.

    Returns:
        ``{"act_add": ActAdd, "logit_offset": LogitOffset}``. ``act_add``: the residual stream leaving block
        ``actadd_layer`` (None: the middle block) averaged over the first ``baseline_lines`` lines of each class,
        positive minus negative (``s = 1`` adds the full difference at every position). ``logit_offset``: ``b_v =
        log((c+_v + 1) / (N+ + V)) - log((c-_v + 1) / (N- + V))`` from the token counts ``c`` of every line of each
        class (``N``: their totals, the first token of a line, its newline, excluded: it is never a target).

    Raises:
        ConfigError: ``actadd_layer`` not a block of the model.
    """
    from lmsci.methods.steerable import n_layers, vocab_size
    from lmsci.methods.steering import ActAdd, LogitOffset

    L = n_layers(hf)
    layer = L // 2 if cfg.actadd_layer is None else int(cfg.actadd_layer)
    if not 0 <= layer < L:
        raise ConfigError("actadd_layer", cfg.actadd_layer, f"a block index in 0..{L - 1} (or None)")
    k = cfg.baseline_lines
    act = ActAdd.from_contrast(hf, layer, pos[:k], neg[:k], pad_id=pad_id, max_length=cfg.max_length)
    V = vocab_size(hf)
    counts = []
    for seqs in (pos, neg):
        c = np.zeros(V)
        np.add.at(c, np.array([t for s in seqs for t in s[1:cfg.max_length]], dtype=np.int64), 1.0)
        counts.append(c)
    b = np.log((counts[0] + 1) / (counts[0].sum() + V)) - np.log((counts[1] + 1) / (counts[1].sum() + V))
    off = LogitOffset(V, ("attr",), dummy=False, device=hf.device)
    off.bias.data[0] = torch.as_tensor(b, dtype=torch.float32, device=off.bias.device)
    return {"act_add": act, "logit_offset": off}


def matched_gain(target: float, sweep: list[dict[str, float]]) -> float:
    """A baseline's sentiment gain at perplexity increase ``target``: linear interpolation over its sweep points
    ``{"ppl_increase", "gain"}`` plus the unsteered anchor (0, 0), sorted by perplexity increase; NaN when
    ``target`` lies outside the measured range or is not finite."""
    xs = np.array([0.0] + [p["ppl_increase"] for p in sweep], dtype=float)
    ys = np.array([0.0] + [p["gain"] for p in sweep], dtype=float)
    ok = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[ok], ys[ok]
    o = np.argsort(xs)
    xs, ys = xs[o], ys[o]
    if not np.isfinite(target) or not len(xs) or not xs[0] <= target <= xs[-1]:
        return float("nan")
    return float(np.interp(target, xs, ys))


COMP_KEEP = 0.5
"""Registered fraction of the compositional claim: the composed sentiment spread must exceed this fraction of the
sentiment steer's own spread (``comp_margin`` = composed spread - COMP_KEEP x single spread)."""


def measure_composition(cfg: Any, point: Any, hf: Any, steer: Any, ex: dict[str, Any], prompts: torch.Tensor,
                        gen_seed: int, at: dict[float, dict], texts: dict[str, list[str]]) -> dict[str, Any]:
    """The sentiment steer summed with the run's genre steer (:func:`compose`), at sentiment +-S with genre at +S
    (the genre steer's own push is the same in both, so it cancels in the spread): ``comp_spread`` = mean VADER
    compound at (+S, +S) minus at (-S, +S), ``comp_margin`` = ``comp_spread - COMP_KEEP * spread`` (``spread`` =
    the sentiment steer's own +S minus -S from ``at``, the grid's points by steer value), ``comp_retention`` =
    ``comp_spread / spread`` (NaN unless ``spread > 0``); on the real arm also (+S, -S) for the genre (mean
    P(comedy)) spread under the sum, ``comp_genre_spread``, beside the sentiment steer's own ``single_genre_spread``.
    The continuations go to ``texts``."""
    from lmsci.experiments.steering._lm_steer_lm_data import evaluate

    S = cfg.steer_value
    both = compose(steer, ex["genre_steer"])
    runs = [("comp_++", S, S), ("comp_-+", -S, S)] + ([("comp_+-", S, -S)] if point.arm == "real" else [])
    r = {}
    for name, s, g in runs:
        r[name] = evaluate(cfg, hf, both, composed_values(s, g), prompts, gen_seed, ex["clf"])
        texts[name] = r[name].pop("_texts")
    spread = at[S]["sentiment"] - at[-S]["sentiment"]
    comp = r["comp_++"]["sentiment"] - r["comp_-+"]["sentiment"]
    row = {"comp_sentiment_pos": r["comp_++"]["sentiment"], "comp_sentiment_neg": r["comp_-+"]["sentiment"],
           "comp_spread": comp, "comp_margin": comp - COMP_KEEP * spread,
           "comp_retention": comp / spread if spread > 0 else float("nan"),
           "comp_ppl": (r["comp_++"]["ppl"] + r["comp_-+"]["ppl"]) / 2}
    if "comp_+-" in r:
        row["comp_genre_spread"] = r["comp_++"]["genre"] - r["comp_+-"]["genre"]
        row["single_genre_spread"] = at[S]["genre"] - at[-S]["genre"]
    return row


def measure_baselines(cfg: Any, hf: Any, bases: dict[str, Any], prompts: torch.Tensor, gen_seed: int,
                      at: dict[float, dict], texts: dict[str, list[str]]) -> dict[str, Any]:
    """LM-Steer against the baselines at matched perplexity (real arm): the unsteered model's continuations
    (``none``), LM-Steer's sentiment gain ``vsb_lm_gain`` and perplexity increase ``vsb_ppl_increase`` at +S over
    ``none``; each baseline swept over its grid (``actadd_grid``, ``offset_grid``) and its gain at LM-Steer's
    increase (:func:`matched_gain`, ``matched_act_add``, ``matched_logit_offset``); ``vs_baselines_margin`` =
    LM-Steer's gain minus the larger matched baseline gain (the baselines whose sweep brackets the increase; NaN
    when none does); the sweeps as JSON in ``baselines``."""
    from lmsci.experiments.steering._lm_steer_lm_data import evaluate

    S = cfg.steer_value
    none = evaluate(cfg, hf, None, 0.0, prompts, gen_seed)
    texts["none"] = none.pop("_texts")
    target = at[S]["ppl"] - none["ppl"]
    row: dict[str, Any] = {"none_sentiment": none["sentiment"], "none_ppl": none["ppl"], "vsb_ppl_increase": target,
                           "vsb_lm_gain": at[S]["sentiment"] - none["sentiment"]}
    sweeps: dict[str, list[dict[str, float]]] = {}
    for name, grid in (("act_add", cfg.actadd_grid), ("logit_offset", cfg.offset_grid)):
        pts = []
        for v in grid:
            r = evaluate(cfg, hf, bases[name], v, prompts, gen_seed)
            texts[f"{name}_{v:+g}"] = r.pop("_texts")
            pts.append({"s": v, "ppl_increase": r["ppl"] - none["ppl"], "gain": r["sentiment"] - none["sentiment"]})
        sweeps[name] = pts
        row[f"matched_{name}"] = matched_gain(target, pts)
    defined = [row[f"matched_{n}"] for n in sweeps if np.isfinite(row[f"matched_{n}"])]
    row["vs_baselines_margin"] = row["vsb_lm_gain"] - max(defined) if defined else float("nan")
    row["baselines"] = json.dumps({"none": {"ppl": none["ppl"], "sentiment": none["sentiment"]},
                                   "lm_steer": {"s": S, "ppl_increase": target, "gain": row["vsb_lm_gain"]},
                                   **sweeps})
    return row


# ---------------------------------------------------------------------------------------------------- report
def composition_section(results: Any) -> str:
    """A markdown table per arm (mean over seeds): the sentiment steer's own spread, the composed spread, the
    retention and the margin; the real arm's genre spread under the sum."""
    import pandas as pd

    if results.empty or "comp_spread" not in results:
        return ""
    lines = ["\n## Composition: sentiment + genre steers summed (mean over seeds)\n",
             f"Composed spread: mean VADER compound at sentiment +S with genre +S minus at -S with genre +S; margin = "
             f"composed spread - {COMP_KEEP} x the sentiment steer's own spread.\n",
             "| arm | own spread | composed spread | retention | margin | genre spread under the sum (P(comedy)) | "
             "sentiment steer's own genre spread | seeds |", "|---|---|---|---|---|---|---|---|"]
    for arm, g in results.groupby("arm"):
        def m(c):
            return f"{pd.to_numeric(g[c], errors='coerce').mean():.3f}" if c in g else "-"
        lines.append(f"| {arm} | {m('spread')} | {m('comp_spread')} | {m('comp_retention')} | {m('comp_margin')} | "
                     f"{m('comp_genre_spread')} | {m('single_genre_spread')} | {len(g)} |")
    return "\n".join(lines) + "\n"


def baselines_section(results: Any) -> str:
    """A markdown table of the real arm's baseline sweeps (mean over seeds): each method's sentiment gain and
    perplexity increase over the unsteered model, and the matched gains."""
    if results.empty or "baselines" not in results:
        return ""
    real = results[(results["arm"] == "real")].dropna(subset=["baselines"])
    if real.empty:
        return ""
    sw = [json.loads(b) for b in real["baselines"]]
    lines = ["\n## LM-Steer vs baselines (real arm, mean over seeds; gains and increases over the unsteered model)\n",
             "| method | steer value | sentiment gain (VADER compound) | perplexity increase | seeds |",
             "|---|---|---|---|---|",
             f"| LM-Steer | {sw[0]['lm_steer']['s']:+g} eps0 | {np.nanmean([s['lm_steer']['gain'] for s in sw]):.3f} | "
             f"{np.nanmean([s['lm_steer']['ppl_increase'] for s in sw]):.3g} | {len(sw)} |"]
    for name in ("act_add", "logit_offset"):
        for i, p in enumerate(sw[0].get(name, [])):
            lines.append(f"| {name} | {p['s']:+g} | {np.nanmean([s[name][i]['gain'] for s in sw]):.3f} | "
                         f"{np.nanmean([s[name][i]['ppl_increase'] for s in sw]):.3g} | {len(sw)} |")
    for name in ("act_add", "logit_offset"):
        col = f"matched_{name}"
        if col in real:
            vals = np.array([float(v) for v in real[col]])
            ok = np.isfinite(vals)
            mean = float(vals[ok].mean()) if ok.any() else float("nan")
            lines.append(f"\n{name} at LM-Steer's perplexity increase: mean gain {mean:.3f} ({int(ok.sum())} of "
                         f"{len(vals)} seeds bracketed by its sweep).")
    return "\n".join(lines) + "\n"


def probe_section(results: Any) -> str:
    """A markdown table of the SVD probe (App. G) of the real arm's first seed, and each arm's VADER enrichment."""
    import pandas as pd

    lines = ["\n## SVD probe of W (paper App. G)\n"]
    real = results[results.get("arm", pd.Series(dtype=str)) == "real"] if len(results) else results
    if real.empty or "probe_json" not in real:
        return lines[0] + "\nNo real-arm rows.\n"
    first = real.sort_values("seed_index").iloc[0]
    lines += [f"Seed {int(first['seed_index'])} of the real arm: the top (promoted at positive steer values) and "
              "bottom whole-word tokens of W's first singular directions.\n", "| dim | sigma | top | bottom |",
              "|---|---|---|---|"]
    for d in json.loads(first["probe_json"]):
        lines.append(f"| {d['dim']} | {d['sigma']:.3g} | {', '.join(d['top'])} | {', '.join(d['bottom'])} |")
    lines.append("\nVADER-lexicon words among the probe's tokens over their base rate among the candidates "
                 "(mean over seeds): " + ", ".join(f"{a} {g['probe_enrichment'].mean():.3g}"
                                                    for a, g in results.groupby("arm")) + ".\n")
    if "probe_excess" in results:
        parts = [f"{a} {g['probe_vader_frac'].mean():.3f} - {g['probe_random_frac'].mean():.3f} = "
                 f"{g['probe_excess'].mean():+.3f}" for a, g in results.groupby("arm")]
        lines.append("Their VADER fraction minus that of random orthonormal directions (the probe claim; mean over "
                     "seeds): " + ", ".join(parts) + ".\n")
    return "\n".join(lines) + "\n"
