"""Experiment ``watermark-removal``: the random-walk attack of "Watermarks in the Sand" on the KGW watermark.

Source: Zhang, Edelman, Francati, Venturi, Ateniese, Barak, "Watermarks in the Sand: Impossibility of Strong
Watermarking for Generative Models", ICML 2024, arXiv 2311.04378, Algorithm 1 (perturbation oracle + quality
oracle, random walk); counterpoint Harel-Canada et al., "Sandcastles in the Storm", arXiv 2505.06827
(traceability of the walk's endpoint to its origin); spec ``impossibility_and_theory.md`` §1b; issue 18.

Three lmsci GPTs are trained on Shakespeare (BPE, different seeds; one after another: at this shape, seq_len 256
and d_model 128, stacking them with :func:`lmsci.train.stacked.train_stacked` was 0.94x as fast on 2 CPU threads):
the generator ``G`` (watermarked through
transformers' ``WatermarkLogitsProcessor``, left-hash, gamma 0.25, delta 2), the attacker's own model ``A`` and an
independent judge ``J``. Each walk step, for every text at once:

1. perturbation oracle: mask a random span of ``span`` generated tokens and resample it from ``A`` (no watermark)
   given the left context; Metropolis-Hastings acceptance ``min(1, A(suffix | new span) / A(suffix | old span))``
   (the proposal ``A(span | left)`` cancels, so the walk's stationary law is ``A`` itself). One span start is
   drawn per step for the whole batch of texts (each text's walk is the same Markov chain as with its own draw;
   the draws are only coupled across texts), so the proposal and its scoring share one key/value cache of the
   prefix: one forward pass' worth of tokens per step (:func:`propose_span`) instead of ``span + 1`` full passes;
2. quality oracle: keep the proposal only if ``A``'s mean NLL of the generated tokens is at most the original
   text's plus ``tau`` nats/token (quality compared with the original, as in Algorithm 1).

Measured: the median z-score (transformers' ``WatermarkDetector``) every ``detect_every`` steps; the judge's
quality change (mean NLL per token of the final minus the original text under ``J``); traceability: the share of
the final text's 4-grams found in its own origin against the largest share found in any other origin text.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Verdict
from lmsci.config import ExperimentConfig
from lmsci.errors import ConfigError
from lmsci.experiments.base import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.registry import register
from lmsci.methods import watermark as wm
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import to_hf
from lmsci.runs import RunDir, derive_seed, resolve_device
from lmsci.train.trainer import TrainConfig, train

Z_START, Z_END = 4.0, 2.0


class RemovalConfig(ExperimentConfig):
    """Configuration of ``watermark-removal`` (field defaults = the ``quick`` preset)."""

    gamma: float = Field(0.25)
    delta: float = Field(2.0)
    scheme: str = Field("lefthash")
    key: int = Field(15485863)
    T: int = Field(200, ge=16)
    n_texts: int = Field(50, ge=4)
    prompt_len: int = Field(32, ge=1)
    temperature: float = Field(0.7, gt=0)
    walk_steps: int = Field(200, ge=1)
    span: int = Field(6, ge=1, description="tokens masked and resampled per step")
    tau: float = Field(0.02, ge=0, description="quality tolerance, nats/token under the attacker's model")
    detect_every: int = Field(20, ge=1)
    ngram: int = Field(4, ge=1, description="n of the traceability overlap")
    vocab_size: int = Field(1024, ge=64)
    n_layers: int = Field(2, ge=1)
    n_heads: int = Field(4, ge=1)
    d_model: int = Field(128, ge=8)
    seq_len: int = Field(256, ge=16)
    steps: int = Field(800, ge=1, description="training steps of each of the three models")
    batch_size: int = Field(8, ge=1)
    lr: float = Field(2e-3, gt=0)
    generator_model: str | None = Field(None, description="a local directory holding a Hugging Face causal LM and its "
                                        "tokenizer to watermark instead of the trained generator GPT (e.g. OPT-1.3B, "
                                        "the paper's); with attacker_model and judge_model, never downloaded")
    attacker_model: str | None = Field(None, description="local causal LM of the perturbation and quality oracles "
                                       "(same vocabulary as generator_model)")
    judge_model: str | None = Field(None, description="local causal LM that judges quality (same vocabulary)")
    threads: int = Field(1, ge=0)

    PRESETS = {
        "smoke": {"T": 24, "n_texts": 6, "prompt_len": 8, "walk_steps": 6, "detect_every": 3, "n_layers": 1,
                  "d_model": 32, "seq_len": 48, "steps": 5, "batch_size": 4},
        "quick": {},
        "gpu": {"n_texts": 200, "walk_steps": 400, "steps": 5000, "d_model": 256, "n_layers": 4, "batch_size": 32,
                "threads": 0},
        "paper": {"n_texts": 400, "walk_steps": 400, "steps": 20000, "d_model": 512, "n_layers": 8, "n_heads": 8,
                  "batch_size": 64, "threads": 0},
    }


def ngram_overlap(a: np.ndarray, b: np.ndarray, n: int) -> float:
    """Share of the distinct n-grams of token sequence ``a`` that occur in ``b``."""
    ga = {tuple(a[i: i + n]) for i in range(len(a) - n + 1)}
    gb = {tuple(b[i: i + n]) for i in range(len(b) - n + 1)}
    return len(ga & gb) / max(1, len(ga))


@torch.no_grad()
def token_logprobs(model: Any, x: torch.Tensor) -> torch.Tensor:
    """``[B, L-1]`` log-probabilities of ``x[:, 1:]`` under a Hugging Face causal LM."""
    lp = torch.log_softmax(model(x).logits[:, :-1].float(), -1)
    return lp.gather(2, x[:, 1:, None]).squeeze(2)


@torch.no_grad()
def propose_span(model: Any, x: torch.Tensor, s: int, k: int, generator: torch.Generator
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The perturbation oracle: resample positions ``s .. s+k-1`` of every row of ``x`` from ``model``.

    Args:
        model: a Hugging Face causal LM (``model(ids, past_key_values=..., use_cache=True)``).
        x: ``[n, L]`` long token ids; ``1 <= s`` and ``s + k <= L``.
        s, k: the span's first position and its length (the same for every row).
        generator: a CPU ``torch.Generator`` for the multinomial draws (temperature 1, no truncation).

    Returns:
        ``(new [n, L], lp [n, L-s])``: the proposal (``x`` outside the span) and the log-probabilities under
        ``model`` of ``new[:, s:]`` given everything before them, equal to ``token_logprobs(model, new)[:, s-1:]``
        to float rounding. The prefix ``x[:, :s]`` is run once and its key/value cache reused for the ``k`` draws
        and for scoring the suffix, so a step costs one pass over ``L`` tokens.

    Raises:
        ValueError: a span outside ``[1, L)``.
    """
    n, L = x.shape
    if not (1 <= s and k >= 1 and s + k <= L):
        raise ValueError(f"span [{s}, {s + k}) must lie within [1, {L}]")
    new = x.clone()
    out = model(x[:, :s], use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1].float()
    lps = []
    for j in range(k):
        logp = torch.log_softmax(logits, -1)
        tok = torch.multinomial(logp.exp().cpu(), 1, generator=generator).squeeze(1).to(x.device)
        new[:, s + j] = tok
        lps.append(logp.gather(1, tok[:, None]))
        if j < k - 1:
            out = model(tok[:, None], past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1].float()
    if s + k < L:  # score the suffix given the new span: feed the span's last token and the suffix
        logp = torch.log_softmax(model(new[:, s + k - 1: -1], past_key_values=cache).logits.float(), -1)
        lps.append(logp.gather(2, new[:, s + k:, None]).squeeze(2))
    return new, torch.cat(lps, 1)


@register("watermark-removal")
class WatermarkRemoval(Experiment):
    """Algorithm 1 of Watermarks in the Sand against KGW, with an independent judge and Sandcastles traceability."""

    claim = ("A random walk with a perturbation oracle (span resampling) and a quality oracle removes the KGW "
             "watermark (median z from > 4 to < 2) without lowering quality beyond 0.02 nats/token.")
    source = ("Zhang et al., 'Watermarks in the Sand', ICML 2024, arXiv 2311.04378, Algorithm 1; Harel-Canada et al., "
              "arXiv 2505.06827")
    Config = RemovalConfig
    time_estimate = {"smoke": "~20 s", "quick": "309 s measured (threads=2, nothing else running; three models x 800 "
                                                "steps, then 200 walk steps over 50 texts)",
                     "gpu": "~20 min on one H100", "paper": "~1 h on one H100 with the trained GPTs; with "
                                                           "--set generator_model=DIR --set attacker_model=DIR "
                                                           "--set judge_model=DIR "
                                                           "(local causal LMs sharing a tokenizer, e.g. OPT-1.3B/2.7B/6.7B) "
                                                           "the time of their forward passes"}
    claims = [
        Claim(
            "removal",
            "Within 200 walk steps the median z-score of the watermarked texts falls below 2 while the median quality "
            "change measured by an independent LM stays within 0.02 nats/token.",
            "Zhang et al., arXiv 2311.04378, Algorithm 1 and sec. 5 (the attack removes KGW, EXP and Unigram "
            "watermarks with minor quality loss)",
            "p-values rise from 4e-15 to 0.24 and from 1e-5 to 0.47 on the paper's examples; quality flat under GPT-4",
            "median over texts of the z-score (left-hash detector) after walk_steps steps; median over texts of the "
            "judge's NLL change (final minus original, nats/token)",
            f"median final z < {Z_END} and median judge NLL change <= tau = 0.02 nats/token",
            gates=(Gate("watermarked", f"the median z of the original texts is > {Z_START}"),),
            uncertainty="within-run",
        ),
    ]

    def validate(self, cfg: RemovalConfig) -> None:
        wm.watermarking_config(cfg.gamma, cfg.delta, cfg.scheme, cfg.key)
        if cfg.prompt_len + cfg.T > cfg.seq_len:
            raise ConfigError("seq_len", cfg.seq_len, f">= prompt_len + T = {cfg.prompt_len + cfg.T}")
        if cfg.span >= cfg.T:
            raise ConfigError("span", cfg.span, f"< T = {cfg.T}")
        self._check_local_models(cfg)

    LOCAL = ("generator_model", "attacker_model", "judge_model")

    def _check_local_models(self, cfg: RemovalConfig) -> None:
        """All three local models or none; each a directory with a config; one vocabulary (ConfigError)."""
        paths = {f: getattr(cfg, f) for f in self.LOCAL}
        given = [f for f, v in paths.items() if v is not None]
        if not given:
            return
        if len(given) < 3:
            missing = [f for f in self.LOCAL if f not in given]
            raise ConfigError(missing[0], None, "a local model directory: generator_model, attacker_model and "
                                                "judge_model go together (they share one tokenizer)")
        from pathlib import Path

        from transformers import AutoConfig

        vocab = {}
        for f, v in paths.items():
            if not (Path(v).is_dir() and (Path(v) / "config.json").is_file()):
                raise ConfigError(f, v, "a local directory with a causal LM's config.json and weights "
                                        "(lmsci does not download models)")
            vocab[f] = int(AutoConfig.from_pretrained(v).vocab_size)
        if len(set(vocab.values())) > 1:
            raise ConfigError("attacker_model", vocab, "models with the generator's vocabulary (one tokenizer)")

    def points(self, cfg: RemovalConfig) -> list[Point]:
        return [Point("walk", {})]

    def _train(self, cfg: RemovalConfig, corpus: Any, role: str, ctx: PointContext, device: str):
        from lmsci.worlds import shakespeare as sh

        model = GPT(GPTConfig(vocab_size=corpus.vocab_size, seq_len=cfg.seq_len, n_layers=cfg.n_layers,
                              n_heads=cfg.n_heads, d_model=cfg.d_model), seed=derive_seed(ctx.seed, role, "init"))
        tcfg = TrainConfig(steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, warmup_steps=min(100, cfg.steps // 10),
                           device=device, log_every=50)
        train(model, sh.make_get_batch(corpus.train_ids, cfg.batch_size, cfg.seq_len), tcfg,
              seed=derive_seed(ctx.seed, role, "train"), log=lambda r: ctx.log(model=role, **r))
        return to_hf(model.cpu()).to(device).eval()

    def run_point(self, cfg: RemovalConfig, point: Point, ctx: PointContext) -> dict:
        from lmsci.worlds import shakespeare as sh

        device = resolve_device(cfg.device)
        if cfg.generator_model is not None:  # the paper preset on a user's machine: local models, never downloaded
            from lmsci.models.hf import load_hf

            G, A, J = (load_hf(getattr(cfg, f), device, tokenizer=(f == "generator_model")) for f in self.LOCAL)
            if G.tokenizer is None:
                raise ConfigError("generator_model", cfg.generator_model, "a directory that also holds the tokenizer")
            val = sh.val_ids_for(G.tokenizer)
            G, A, J = (h.model.eval() for h in (G, A, J))
        else:
            corpus = sh.prepare("bpe", cfg.vocab_size)
            G, A, J = (self._train(cfg, corpus, role, ctx, device) for role in ("generator", "attacker", "judge"))
            val = np.asarray(corpus.val_ids, dtype=np.int64)
        rng = np.random.default_rng(derive_seed(ctx.seed, "prompts"))
        starts = rng.integers(0, len(val) - cfg.prompt_len, cfg.n_texts)
        prompts = torch.as_tensor(np.stack([val[s: s + cfg.prompt_len] for s in starts]), device=device)
        wcfg = wm.watermarking_config(cfg.gamma, cfg.delta, cfg.scheme, cfg.key)
        det = wm.detector(G, wcfg, device)
        y0 = wm.generate(G, prompts, cfg.T, wcfg, cfg.temperature, derive_seed(ctx.seed, "gen"))
        P, T, k = cfg.prompt_len, cfg.T, cfg.span
        x = torch.cat([prompts, y0], 1)
        lpA = token_logprobs(A, x)[:, P - 1:]  # [n, T]: the attacker's log-probs of the generated tokens
        q0 = -lpA.mean(1)  # original quality (NLL per token under A)
        g = torch.Generator(device="cpu").manual_seed(derive_seed(ctx.seed, "walk"))
        n = cfg.n_texts
        curve = []
        accepted = torch.zeros(n)
        for step in range(cfg.walk_steps + 1):
            if step % cfg.detect_every == 0 or step == cfg.walk_steps:
                z = wm.detect(det, x[:, P:])["z"]
                curve.append({"step": step, "z_median": float(np.median(z)), "z_mean": float(np.mean(z)),
                              "accept_rate": float(accepted.mean() / max(step, 1)),
                              "quality_A_change": float((-lpA.mean(1) - q0).median())})
                ctx.log(**curve[-1])
            if step == cfg.walk_steps:
                break
            i = int(torch.randint(0, T - k + 1, (1,), generator=g))  # span start within the generated tokens
            new, lp_tail = propose_span(A, x, P + i, k, g)  # no watermark: the attacker's own model
            lp_new = torch.cat([lpA[:, :i], lp_tail], 1)
            # MH: the suffix after the span, scored under A with the new vs the old span
            log_ratio = (lp_new[:, i + k:] - lpA[:, i + k:]).sum(1)
            u = torch.rand(n, generator=g).to(device)
            mh = torch.log(u) < log_ratio
            quality_ok = (-lp_new.mean(1)) <= q0 + cfg.tau
            take = mh & quality_ok
            x = torch.where(take[:, None], new, x)
            lpA = torch.where(take[:, None], lp_new, lpA)
            accepted += take.float().cpu()
        final = x[:, P:]
        zf = wm.detect(det, final)["z"]
        z0 = wm.detect(det, y0)["z"]
        nll_j0 = -token_logprobs(J, torch.cat([prompts, y0], 1))[:, P - 1:].mean(1)
        nll_j1 = -token_logprobs(J, x)[:, P - 1:].mean(1)
        dq = (nll_j1 - nll_j0).cpu().numpy()
        y0n, fn = y0.cpu().numpy(), final.cpu().numpy()
        own = np.array([ngram_overlap(fn[t], y0n[t], cfg.ngram) for t in range(n)])
        other = np.array([max(ngram_overlap(fn[t], y0n[u], cfg.ngram) for u in range(n) if u != t) for t in range(n)])
        pd.DataFrame(curve).to_csv(ctx.artifact_dir / "curve.csv", index=False)
        np.savez(ctx.artifact_dir / "texts.npz", z0=z0, zf=zf, dq=dq, own=own, other=other)
        return {"z0_median": float(np.median(z0)), "zf_median": float(np.median(zf)),
                "zf_frac_below_2": float((zf < Z_END).mean()), "zf_frac_above_4": float((zf > Z_START).mean()),
                "judge_dq_median": float(np.median(dq)), "judge_dq_mean": float(dq.mean()),
                "attacker_dq_median": float((-lpA.mean(1) - q0).median()),
                "accept_rate": float(accepted.mean() / cfg.walk_steps),
                "tokens_changed": float((final != y0).float().mean()),
                "trace_own_overlap": float(own.mean()), "trace_other_max_overlap": float(other.mean()),
                "traceable_share": float((own > other).mean()),
                "analytic_z_random_edits": float(np.median(z0) * float((final == y0).float().mean()) ** 2)}

    def verdicts(self, cfg: RemovalConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        if results.empty or "zf_median" not in results:
            return []
        r = results.iloc[0]
        z0, zf, dq = float(r["z0_median"]), float(r["zf_median"]), float(r["judge_dq_median"])
        return [self.judge(cfg, "removal", value=zf, passed=bool(zf < Z_END and dq <= cfg.tau),
                           ci_kind=f"medians over {cfg.n_texts} texts", gates={"watermarked": (z0, z0 > Z_START)},
                           details={"z0_median": z0, "judge_quality_change_median": dq,
                                    "traceable_share": float(r["traceable_share"]),
                                    "own_vs_other_overlap": [float(r["trace_own_overlap"]),
                                                             float(r["trace_other_max_overlap"])],
                                    "tokens_changed": float(r["tokens_changed"])},
                           note="Sandcastles (arXiv 2505.06827): the endpoint's n-gram overlap with its origin against "
                                "the largest with any other origin is reported as traceable_share.")]

    def figures(self, cfg: RemovalConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        p = run.path / "points" / "walk" / "curve.csv"
        if not p.exists():
            return []
        c = pd.read_csv(p)
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        ax.plot(c["step"], c["z_median"], "o-", label="median z")
        ax.axhline(Z_START, color="r", lw=1, ls="--")
        ax.axhline(Z_END, color="g", lw=1, ls="--")
        ax.set_xlabel("walk step")
        ax.set_ylabel("median z-score")
        ax2 = ax.twinx()
        ax2.plot(c["step"], c["quality_A_change"], "s-", color="C1", label="attacker NLL change")
        ax2.set_ylabel("attacker NLL change (nats/token)", color="C1")
        ax.grid(True, alpha=0.3)
        return [save_figure(fig, run, "walk.png", "Median z-score and the attacker's quality change along the walk")]

    def report_sections(self, cfg: RemovalConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import quantity_table

        if results.empty:
            return ""
        return (f"## Method\n\nGenerator, attacker and judge: lmsci GPTs ({cfg.n_layers} layers, d_model {cfg.d_model}, "
                f"{cfg.steps} steps each, different seeds) on Shakespeare BPE {cfg.vocab_size}. {cfg.n_texts} watermarked "
                f"texts of T = {cfg.T} tokens ({cfg.scheme}, gamma {cfg.gamma}, delta {cfg.delta}); {cfg.walk_steps} walk "
                f"steps, span {cfg.span}, tau {cfg.tau}.\n\n## Measurements\n\n" + quantity_table(results, max_rows=60))
