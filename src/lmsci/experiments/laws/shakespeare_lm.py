"""Experiment ``shakespeare-lm``: a small GPT trained on Shakespeare, measured against n-gram baselines.

A GPT (:mod:`lmsci.models.gpt`) is trained from scratch on the training works of the Shakespeare
corpus (:mod:`lmsci.worlds.shakespeare`: 42 works, split by work) and evaluated on the held-out
works: validation NLL in nats/token, perplexity, bits per character, training/validation loss
curves and samples. The registered claims compare the validation NLL with add-alpha unigram and
bigram models fitted on the same training split and scored on the same validation targets: the
difference (bigram NLL - model NLL, converted to nats/char) per training seed, with a Student-t
95% CI across seeds (``n_seeds``; quick: 3); a bootstrap CI over validation windows is reported as within-run.

Arms of the sweep, all from one initialisation and one training per seed (``groups``: the arms of a seed form one
group), each row holding the same columns (``val_nll``, ``bigram_minus_model``, ``unigram_minus_model``):

- ``real`` (point ``<id>``): the trained GPT.
- ``ctx1`` (point ``ctx1-<id>``): the null arm of ``beats-bigram`` (issue 44 item 4): the trained GPT scored with a
  context of one token, each held-out target predicted from the previous token alone (the prediction the model
  makes at a window's first position, which training covers in every window). It is a bigram predictor, so it beats
  the tuned add-alpha bigram only by estimating the same bigram statistics better (smoothing of rare pairs, a sparse
  BPE bigram table, held-out text leaking into training), not by the longer context the claim credits; it could meet
  the rule where those account for the gap. It replaced the untrained model, which predicts near-uniformly (about
  log(vocab) nats/char) and so could not meet the rule by construction.
- ``null`` (point ``null-<id>``): the same model before training (its random init), scored on the same validation
  windows: the null arm of both items as first registered (issue 29), now reported beside ``beats-unigram``, which
  is a check (issue 44 item 4): any trained character model beats the unigram, so it says that training worked and
  decides no claim.

The claims engine judges both items (no hand-written verdicts).

Sources: Karpathy 2015, "The Unreasonable Effectiveness of Recurrent Neural Networks" (char-rnn
on Shakespeare) and nanoGPT's ``shakespeare_char`` configuration; n-gram baselines in the sense of
Shannon 1951, "Prediction and Entropy of Printed English"; GPT: Radford et al. 2019.

The same pipeline backs ``lmsci train`` (a run of this experiment with the options mapped to
config fields); ``lmsci generate RUN_DIR`` samples from the saved ``points/<id>/model``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from pydantic import Field

from lmsci.claims import Claim, Stat, ci_above
from lmsci.stats import bootstrap_ci
from lmsci.config import ExperimentConfig
from lmsci.errors import ConfigError
from lmsci.experiments.base import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.registry import register
from lmsci.models.gpt import GPTSpec
from lmsci.runs import RunDir
from lmsci.train.trainer import TrainSpec

SAMPLES_FILE = "samples.txt"
MODEL_DIR = "model"


class ShakespeareLMConfig(ExperimentConfig):
    """Configuration of ``shakespeare-lm`` (defaults = the ``quick`` preset).

    Corpus: ``tokenizer`` (char | bpe), ``vocab_size`` (BPE only), ``val_fraction`` and
    ``split_seed`` (split by work), ``texts_dir`` (a ``shksprdata/texts``-like directory; default
    the installed package), ``cache_dir`` (default ``$LMSCI_CACHE`` or ``~/.cache/lmsci``).
    Model: ``model``, the GPT trained (:class:`lmsci.models.gpt.GPTSpec`); ``seq_len`` is the context length.
    Training: ``train``, its optimizer and schedule (:class:`lmsci.train.trainer.TrainSpec`); ``checkpoint_every``.
    Measurement: ``eval_every`` / ``eval_tokens`` (curves), ``final_eval_tokens`` (final NLL and
    verdict), ``sample_tokens``/``temperature``/``top_k``/``prompt`` (samples in the report).
    """

    tokenizer: Literal["char", "bpe"] = "char"
    vocab_size: int = Field(1024, ge=257, le=65536, description="BPE vocabulary size (ignored for char)")
    val_fraction: float = Field(0.1, gt=0, lt=1)
    split_seed: int = Field(0, ge=0)
    texts_dir: str | None = None
    cache_dir: str | None = None

    model: GPTSpec = GPTSpec(n_layers=4, n_heads=4, d_model=128)
    seq_len: int = Field(128, ge=2)

    train: TrainSpec = TrainSpec(steps=2000, batch_size=16, lr=3e-3, warmup_steps=100, min_lr_ratio=0.1,
                                 weight_decay=0.1, grad_clip=1.0, grad_accum=1)
    checkpoint_every: int = Field(500, ge=0)

    eval_every: int = Field(200, ge=0)
    eval_tokens: int = Field(16384, ge=1)
    final_eval_tokens: int = Field(131072, ge=1)
    sample_tokens: int = Field(500, ge=0)
    n_samples: int = Field(2, ge=0)
    temperature: float = Field(0.8, ge=0)
    top_k: int | None = Field(None, ge=1)
    prompt: str = "\n"

    PRECISIONS = ("fp32", "bf16")  # the base field ``precision`` goes to the trainer
    PRESETS = {
        "smoke": {"model.d_model": 32, "model.n_layers": 1, "model.n_heads": 2, "seq_len": 32, "train.steps": 20,
                  "train.batch_size": 8, "train.warmup_steps": 5, "eval_every": 10, "eval_tokens": 1024, "final_eval_tokens": 4096,
                  "checkpoint_every": 10, "sample_tokens": 40, "n_samples": 1},
        # 3 training seeds (the claims need an interval across >= 3 seeds)
        "quick": {"n_seeds": 3},
        # one H100: the quick model (which beats the bigram by 0.8 nats/char on one seed) at nanoGPT's batch, 3 seeds
        "gpu": {"train.batch_size": 64, "n_seeds": 3, "threads": 0},
        # nanoGPT's shakespeare_char "baby GPT" (6 layers, 6 heads, 384 wide, 256 context, dropout 0.2)
        "paper": {"model.d_model": 384, "model.n_layers": 6, "model.n_heads": 6, "seq_len": 256, "model.dropout": 0.2,
                  "train.steps": 5000, "train.batch_size": 64, "train.lr": 1e-3, "train.warmup_steps": 100,
                  "eval_every": 250,
                  "final_eval_tokens": 1_000_000, "checkpoint_every": 500, "n_seeds": 3},
    }


@register("shakespeare-lm")
class ShakespeareLM(Experiment):
    """Train a small GPT on Shakespeare; compare held-out NLL with unigram and bigram baselines.

    Source: Karpathy 2015 (char-rnn, Shakespeare); nanoGPT ``shakespeare_char``; Shannon 1951 (n-grams).
    """

    claim = ("A small GPT trained on Shakespeare's works predicts held-out works better than "
             "unigram and bigram models fitted on the same training split.")
    source = ("Karpathy 2015, 'The Unreasonable Effectiveness of RNNs' (char-rnn on Shakespeare); "
              "nanoGPT shakespeare_char; Shannon 1951 (n-gram baselines)")
    Config = ShakespeareLMConfig
    _CTX1 = ("the same trained GPT scored with a context of one token on the same validation windows (each target "
             "predicted from the previous token alone, as at a window's first position): a bigram predictor, so it "
             "can beat the tuned bigram only by better bigram estimates, not by the longer context the claim credits")
    _NULL = ("the same GPT at its random initialisation (same seed and architecture, untrained), scored on the "
             "same validation windows: it has learned nothing, so it cannot beat an n-gram model")
    claims = [
        Claim(
            id="beats-bigram",
            statement="A small GPT trained on Shakespeare's training works predicts the held-out works at least "
                      "0.5 nats/char better than a tuned bigram model fitted on the same training split.",
            source="Karpathy 2015, 'The Unreasonable Effectiveness of RNNs' (char-rnn on Shakespeare); nanoGPT "
                   "shakespeare_char (val loss ~1.47 nats/char); Shannon 1951 (n-gram baselines)",
            paper_value="nanoGPT baby GPT: val 1.47 nats/char vs a character bigram at about 2.5 (about 1 nat/char "
                        "better)",
            # the old rule "mean >= 0.5 and the CI's lower end > 0.5": the lower end above 0.5 implies the mean above it
            statistic=Stat("bigram_minus_model", over=Stat("val_chars_per_token", words="chars per token"),
                           words="bigram NLL - model NLL on the same held-out targets, in nats/char (nats/token / "
                                 "chars per token; a char token is a char)"),
            rule=ci_above(0.5),
            null=_CTX1,
            arms=("real", "ctx1"),
            null_can_meet="the GPT at a context of one token is a bigram model learnt by gradient descent; the tuned "
                          "baseline is only the best add-alpha bigram, so the null meets the rule wherever better "
                          "bigram estimates (smoothing of rare pairs, a sparse BPE bigram table, held-out works "
                          "leaking into training) rather than longer context make up the 0.5 nats/char",
        ),
        Claim(
            id="beats-unigram",
            statement="A small GPT trained on Shakespeare's training works predicts the held-out works better than a "
                      "tuned unigram model fitted on the same training split.",
            source="Shannon 1951, 'Prediction and Entropy of Printed English' (n-gram baselines); Karpathy 2015",
            paper_value="not stated as a number (any trained char model beats the unigram by > 1 nat/char)",
            statistic=Stat("unigram_minus_model", over=Stat("val_chars_per_token", words="chars per token"),
                           words="unigram NLL - model NLL on the held-out works, in nats/char"),
            rule=ci_above(0.0),
            # issue 44 item 4: any trained character model beats the unigram (the paper's own words), so this is a
            # check that training worked, not a claim; the untrained model's row is still reported beside it
            kind="check",
        ),
    ]
    time_estimate = {"smoke": "5 s",
                     "quick": "~11 min wall with threads=2 alone on the 2-core machine (3 seeds x 2,000 steps; "
                              "estimated 2026-11-27 from a 100-step timing of the quick model: 21k tokens/s, about "
                              "3.5 min a seed with its evaluations); 9.6 min for 1 seed was measured on one thread "
                              "beside another run",
                     "gpu": "173 s wall (3 seeds x 2,000 steps of 8,192 tokens, 0.29-0.33M tokens/s; "
                            "measured 2026-11-26 on one H200, sharing it with 7 other lmsci processes (scripts/device_check.sh))",
                     "paper": "~1.5 h on one GPU (3 seeds, ~30 min each; estimated)"}

    def validate(self, cfg: ShakespeareLMConfig) -> None:
        # head widths (d_model a multiple of n_heads, even with rope) are checked by GPTSpec
        if cfg.train.warmup_steps > cfg.train.steps:
            raise ConfigError("train.warmup_steps", cfg.train.warmup_steps, f"at most train.steps={cfg.train.steps}")

    def points(self, cfg: ShakespeareLMConfig) -> list[Point]:
        pid = f"{cfg.tokenizer}_L{cfg.model.n_layers}_d{cfg.model.d_model}_{cfg.model.pos}"
        # the null arms share the trained model's seed (point_seed strips the arm prefix): the same initialisation
        return [Point(pid, {}, arm="real"), Point(f"null-{pid}", {}, arm="null"), Point(f"ctx1-{pid}", {}, arm="ctx1")]

    def groups(self, cfg: ShakespeareLMConfig, points: list[Point]) -> list[list[Point]]:
        """The arms of one training seed form one group (one initialisation, one training), the real arm first."""
        by: dict[str, list[Point]] = {}
        for p in points:
            key = p.id[len(p.arm) + 1:] if p.arm and p.id.startswith(f"{p.arm}-") else p.id
            by.setdefault(key, []).append(p)
        return [sorted(g, key=lambda p: p.arm != "real") for g in by.values()]

    # ---------------------------------------------------------------------------------------
    def run_point(self, cfg: ShakespeareLMConfig, point: Point, ctx: PointContext) -> dict:
        return self.run_group(cfg, [point], [ctx])[0]

    def run_group(self, cfg: ShakespeareLMConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        """The arms of one seed: the model at initialisation (``null``), trained (``real``) and trained but scored at a
        context of one token (``ctx1``), one row each."""
        from lmsci.models.gpt import GPT
        from lmsci.train.adaptor import train_point
        from lmsci.train.trainer import evaluate_nll
        from lmsci.worlds import shakespeare as sh

        corpus = sh.prepare(cfg.tokenizer, cfg.vocab_size, cfg.val_fraction, cfg.split_seed,
                            texts_dir=cfg.texts_dir, cache_dir=cfg.cache_dir)
        tok = corpus.tokenizer
        gcfg = cfg.model.gpt_config(tok.vocab_size, cfg.seq_len)
        arms = {p.arm or "real": (p, c) for p, c in zip(points, ctxs)}
        point, ctx = arms.get("real", (points[0], ctxs[0]))
        model = GPT(gcfg, seed=ctx.seed).to(ctx.device)
        get_batch = sh.make_get_batch(corpus.train_ids, cfg.train.batch_size, cfg.seq_len)
        val_curve = sh.eval_batches(corpus.val_ids, cfg.seq_len, cfg.eval_tokens)
        train_curve = sh.eval_batches(corpus.train_ids, cfg.seq_len, cfg.eval_tokens)

        def eval_fn(m):
            return {"train_nll": evaluate_nll(m, train_curve), "val_nll": evaluate_nll(m, val_curve)}

        # the null arm: the same model before training, on the final validation windows
        val_final = sh.eval_batches(corpus.val_ids, cfg.seq_len, cfg.final_eval_tokens)
        null_win = window_nll(model, val_final)
        base = sh.ngram_baselines(corpus.train_ids, corpus.val_ids, tok.vocab_size)
        table = sh.bigram_logprobs(corpus.train_ids, tok.vocab_size, base["bigram_alpha"])
        bigram_win = np.concatenate([-table[x.numpy(), y.numpy()].mean(1) for x, y in val_final])
        cpt = corpus.val_chars_per_token
        common = {"tokenizer": cfg.tokenizer, "vocab_size": tok.vocab_size, "val_chars_per_token": cpt,
                  "unigram_nll": base["unigram_nll"], "bigram_nll": base["bigram_nll"],
                  "bigram_window_nll": float(bigram_win.mean()), "unigram_alpha": base["unigram_alpha"],
                  "bigram_alpha": base["bigram_alpha"], "n_val_windows": len(bigram_win),
                  "n_train_tokens": len(corpus.train_ids), "n_val_tokens": len(corpus.val_ids),
                  "val_works": ";".join(corpus.val_works)}
        null_nll = float(null_win.mean())
        null_row = {**common, "n_params": model.num_params(), "val_nll": null_nll,
                    "bigram_minus_model": float((bigram_win - null_win).mean()),
                    "unigram_minus_model": base["unigram_nll"] - null_nll}
        if set(arms) <= {"null"}:
            return [null_row for _ in points]

        result = train_point(model, get_batch, cfg.train, ctx, eval_fn=eval_fn,
                             checkpoint_dir=ctx.artifact_dir / "checkpoints", eval_every=cfg.eval_every,
                             checkpoint_every=cfg.checkpoint_every,
                             log_every=max(1, min(10, cfg.train.steps // 50)), precision=cfg.precision)

        # final measurement on a larger, fixed set of validation windows (same targets for all models)
        train_final = sh.eval_batches(corpus.train_ids, cfg.seq_len, cfg.final_eval_tokens)
        model_win = window_nll(model, val_final)  # [n_windows] mean NLL per window
        val_nll = float(model_win.mean())
        train_nll = evaluate_nll(model, train_final)
        diff = bigram_win - model_win
        lo, hi = bootstrap_ci(diff, n_boot=2000, seed=ctx.seed)

        # samples, the model and its tokenizer, saved with the run
        samples = []
        if cfg.n_samples and cfg.sample_tokens:
            dev = next(model.parameters()).device
            g = torch.Generator(device=dev).manual_seed(ctx.seed)  # sampling draws on the model's device
            prompt = torch.tensor([tok.encode(cfg.prompt)] * cfg.n_samples, dtype=torch.long, device=dev)
            out = model.generate(prompt, cfg.sample_tokens,
                                 temperature=cfg.temperature, top_k=cfg.top_k, generator=g)
            samples = [tok.decode(row.tolist()) for row in out.cpu()]
        (ctx.artifact_dir / SAMPLES_FILE).write_text("\n\n=====\n\n".join(samples))
        model.save_pretrained(ctx.artifact_dir / MODEL_DIR)
        tok.save(ctx.artifact_dir / MODEL_DIR)

        train_recs = [r for r in result.history if "grad_norm" in r]
        real_row = {
            **common,
            "n_params": model.num_params(), "n_params_non_embedding": model.num_params(non_embedding=True),
            "steps": result.steps, "tokens_seen": result.tokens_seen,
            "tokens_per_s": float(np.median([r["tokens_per_s"] for r in train_recs])) if train_recs else float("nan"),
            "mfu": mfu(float(np.median([r["tokens_per_s"] for r in train_recs])) if train_recs else float("nan"),
                       model.flops_per_token(cfg.seq_len)),
            "train_nll": train_nll, "val_nll": val_nll, "val_ppl": math.exp(val_nll),
            "val_bits_per_char": val_nll / cpt / math.log(2),
            "bigram_minus_model": float(diff.mean()), "diff_ci_low": float(lo), "diff_ci_high": float(hi),
            "unigram_minus_model": base["unigram_nll"] - val_nll,
        }
        ctx1_win = window_nll(model, val_final, context=1)  # [n_windows]: the previous token alone
        ctx1_nll = float(ctx1_win.mean())
        ctx1_row = {**common, "n_params": model.num_params(), "val_nll": ctx1_nll,
                    "bigram_minus_model": float((bigram_win - ctx1_win).mean()),
                    "unigram_minus_model": base["unigram_nll"] - ctx1_nll}
        rows = {"real": real_row, "null": null_row, "ctx1": ctx1_row}
        return [rows[p.arm or "real"] for p in points]

    def figures(self, cfg: ShakespeareLMConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        m = run.metrics()
        real = _real(results)
        if m.empty or real.empty:
            return []
        r = real.iloc[0]  # the first finished seed
        if "point" in m and "point" in r:
            m = m[m["point"] == r["point"]]
        fig, ax = plt.subplots(figsize=(7, 4.2))
        tr = m[m["loss"].notna()] if "loss" in m else m.iloc[0:0]
        if len(tr):
            smooth = tr["loss"].rolling(5, min_periods=1).mean()
            ax.plot(tr["step"], smooth, color="0.6", lw=1, label="train batch loss (5-pt mean)")
        if "val_nll" in m:
            ev = m[m["val_nll"].notna()]
            ax.plot(ev["step"], ev["train_nll"], "o-", color="C0", ms=3, label="train NLL (fixed windows)")
            ax.plot(ev["step"], ev["val_nll"], "o-", color="C3", ms=3, label="validation NLL (held-out works)")
        ax.axhline(r["unigram_nll"], ls=":", color="k", label=f"unigram baseline {r['unigram_nll']:.3f}")
        ax.axhline(r["bigram_nll"], ls="--", color="k", label=f"bigram baseline {r['bigram_nll']:.3f}")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("NLL (nats/token)")
        curves = [float(r["train_nll"]), float(r["val_nll"]), float(r["bigram_nll"]), float(r["unigram_nll"])]
        if "val_nll" in m:
            curves += m["val_nll"].dropna().tolist() + m["train_nll"].dropna().tolist()
        ax.set_ylim(max(0.0, min(curves) - 0.2), max(curves) + 0.3)
        ax.set_title(f"shakespeare-lm: {r['tokenizer']} tokens, {int(r['n_params']):,} params")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        return [save_figure(fig, run, "loss_curves.png",
                            "Training and validation loss (nats/token) with n-gram baselines", dpi=120)]

    def report_sections(self, cfg: ShakespeareLMConfig, results: pd.DataFrame, run: RunDir) -> str:
        real, null, ctx1 = _real(results), _real(results, "null"), _real(results, "ctx1")
        if real.empty:
            return ""
        r = real.iloc[0]  # the first finished seed (every seed's row is in the results table)
        within = "; ".join(f"seed {int(x.get('seed_index', 0))}: {x['bigram_minus_model'] / x['val_chars_per_token']:.4f} "
                           f"[{x['diff_ci_low'] / x['val_chars_per_token']:.4f}, "
                           f"{x['diff_ci_high'] / x['val_chars_per_token']:.4f}]" for _, x in real.iterrows())
        lines = [
            "## Measurements\n",
            "| quantity | value |", "|---|---|",
            f"| validation NLL (nats/token) | {r['val_nll']:.4f} |",
            f"| validation perplexity | {r['val_ppl']:.3f} |",
            f"| validation bits per character | {r['val_bits_per_char']:.4f} |",
            f"| train NLL (nats/token) | {r['train_nll']:.4f} |",
            f"| unigram baseline NLL | {r['unigram_nll']:.4f} |",
            f"| bigram baseline NLL | {r['bigram_nll']:.4f} |",
            *([f"| null arm: the untrained model's validation NLL | {null['val_nll'].iloc[0]:.4f} |"]
              if len(null) and pd.notna(null["val_nll"].iloc[0]) else []),
            *([f"| null arm of beats-bigram: the trained model at a context of one token, validation NLL | "
               f"{ctx1['val_nll'].iloc[0]:.4f} |"] if len(ctx1) and pd.notna(ctx1["val_nll"].iloc[0]) else []),
            f"| parameters (non-embedding) | {int(r['n_params']):,} ({int(r['n_params_non_embedding']):,}) |",
            f"| tokens seen | {int(r['tokens_seen']):,} (train split: {int(r['n_train_tokens']):,}) |",
            f"| training speed (median tokens/s) | {r['tokens_per_s']:,.0f}"
            + (f" (MFU {r['mfu']:.1%} of 170 GFLOP/s) |" if "mfu" in r else " |"),
            "",
            f"Validation works (held out): {str(r['val_works']).replace(';', ', ')}. Final NLL over "
            f"{int(r['n_val_windows'])} evenly spaced windows of {cfg.seq_len} tokens; bits per character = "
            f"NLL / ({r['val_chars_per_token']:.3f} chars/token) / ln 2. Baselines use add-alpha smoothing with "
            f"alpha chosen on the validation set (unigram {r['unigram_alpha']}, bigram {r['bigram_alpha']}), which "
            "favours them.\n",
            f"Bigram minus model NLL per seed (nats/char) with its within-run bootstrap 95% CI over validation "
            f"windows: {within}.\n",
        ]
        p = run.path / "points" / str(r["point"]) / SAMPLES_FILE
        if p.exists() and p.read_text():
            lines.append(f"## Samples (temperature {cfg.temperature}, prompt {cfg.prompt!r})\n")
            for s in p.read_text().split("\n\n=====\n\n"):
                lines.append("```text\n" + s.strip("\n") + "\n```\n")
        return "\n".join(lines)


def _real(results: pd.DataFrame, arm: str = "real") -> pd.DataFrame:
    """The finished rows of ``arm`` (a table without arms is all real), by seed."""
    ok = results[results["status"].fillna("ok") == "ok"] if "status" in results else results
    ok = ok[ok["arm"] == arm] if "arm" in ok else (ok if arm == "real" else ok.iloc[0:0])
    return ok.sort_values("seed_index") if "seed_index" in ok else ok


PEAK_FLOPS = 170e9  # fp32 matmul peak of the 2-core reference machine (docs/architecture.md)


def mfu(tokens_per_s: float, flops_per_token: float, peak: float = PEAK_FLOPS) -> float:
    """Model FLOPs utilisation: ``tokens_per_s * flops_per_token / peak`` (training FLOPs, 6N + 12 L d T)."""
    return tokens_per_s * flops_per_token / peak


@torch.no_grad()
def window_nll(model, batches, context: int | None = None) -> np.ndarray:
    """Mean NLL (nats/token) of each window: ``[n_windows]`` for ``batches`` of ``(x, y) [b, seq]``.

    ``context=1`` predicts each target from the token before it alone (every position scored as a window's first
    position: ``x`` reshaped to ``[b * seq, 1]``); None: the whole window as context.

    Raises:
        ValueError: ``context`` other than None or 1.
    """
    if context not in (None, 1):
        raise ValueError(f"window_nll: context = {context!r}, expected None or 1")
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = []
    for x, y in batches:
        b, t = x.shape
        inp = x.reshape(b * t, 1) if context == 1 else x
        logits = model(inp.to(dev)).float().reshape(b, t, -1)  # [b, seq, vocab]
        nll = F.cross_entropy(logits.transpose(1, 2), y.to(dev), reduction="none")  # [b, seq]
        out.append(nll.mean(1).cpu().numpy())
    model.train(was)
    return np.concatenate(out)


def find_model_dir(run_dir: str | Path) -> Path:
    """The saved model directory of a ``shakespeare-lm`` / ``lmsci train`` run (or a model dir itself).

    Raises:
        RunDirError: no ``config.json`` + ``model.safetensors`` found.
    """
    from lmsci.errors import RunDirError

    d = Path(run_dir)
    if (d / "model.safetensors").exists():
        return d
    found = sorted((d / "points").glob(f"*/{MODEL_DIR}/model.safetensors")) if (d / "points").is_dir() else []
    if not found:
        raise RunDirError(f"{d} holds no trained model (expected points/<id>/{MODEL_DIR}/model.safetensors; "
                          "is the run finished?)")
    return found[-1].parent
