"""Experiment ``passkey-lm``: passkey retrieval beyond LM-Infinite's window on a real pretrained model, with and
without top-k middle-token re-attention.

Source: Han, Wang, Peng, Xiong, Chen, Ji, Wang, "LM-Infinite: Zero-Shot Extreme Length Generalization for Large
Language Models", NAACL 2024, arXiv 2308.16137, Sec. 5.3 / Table 2 (passkey retrieval: LM-Infinite with top-5 middle
tokens from layer 5 of 32 recovers keys that LM-Infinite alone and truncation lose) and Appendix A; task format of
Mohtashami & Jaggi, "Landmark Attention", arXiv 2305.16300 (intro, filler "The grass is green. The sky is blue. The
sun is yellow. Here we go. There and back again." repeated, "The pass key is {KEY}. Remember it. {KEY} is the pass
key.", "What is the pass key? The pass key is"). Issue 45, item 1 (the passkey part); the toy twin is
``passkey-retrieval`` (a small RoPE GPT trained on a token world).

The model is a pretrained causal LM (default ``smollm2-135m``: SmolLM2-135M-Instruct, a Llama with RoPE, 30 layers,
trained to 8,192 tokens; any zoo name, local Hugging Face directory or ``.gguf``; ``tiny-llama``, a random 4-layer
Llama with a word-level tokenizer, for the smoke preset). Nothing is trained: seed k is an independent sample of
``n_prompts`` prompts per (context, arm), drawn with ``derive_seed`` (keys of ``n_digits`` random digits, first
non-zero; key placement), the model fixed. Every prompt has exactly ``context`` tokens; the key sentence is placed
between whole filler units, ``distance`` = tokens from its first token to the end of the prompt.

On a CPU the point is the *window*, not the 8k training length: LM-Infinite's local window ``n_local`` (quick: 256)
is much smaller than the context (quick: 1,024 tokens, within the training length), so vanilla full attention can
read the whole prompt while LM-Infinite cannot see a key placed beyond its window. The gpu preset reads 4k, 8k and
16k tokens with a 2k window (16k is twice SmolLM2's training length: vanilla's gate reads the contexts within it). Methods, each decoded greedily
(``n_digits + 3`` new tokens; the first run of digits in the decoded text must equal the key: accuracy = all digits
exact):

- ``vanilla``: the model's own (SDPA) attention over the whole prompt, its KV cache for the decoding;
- ``lm_infinite``: LM-Infinite (``n_global`` starting tokens + ``n_local`` recent keys, distances clipped at
  ``n_local``) through lmsci's blockwise harness (:mod:`lmsci.methods.lm_infinite`), decoded through a streaming
  session;
- ``lm_infinite_topk``: the same plus the paper's top-k middle-token re-attention (k = 5, from layer
  ``h = round(5/32 * n_layers)``: h = 5 on SmolLM2's 30 layers; middle keys scored at distance ``n_local / 2``), which
  the harness gives the last query row of every call, i.e. the last prompt token and every decoded token (the toy's
  "full cache with top-k"). Both LM-Infinite arms share one pass over the first ``n - 1`` prompt tokens
  (:func:`~lmsci.experiments.length._passkey_lm_task.streamed_answers`; exact, tested).

Arms: ``real`` places the whole key sentence more than ``n_local + 16`` tokens before the prompt's end (beyond the
window, uniformly over what fits); ``null`` places it within the last ``n_local - 16`` tokens (inside the window,
where LM-Infinite sees the key at its true distance and top-k has nothing to recover). The claim's statistic is
``gain`` = accuracy(lm_infinite_topk) - accuracy(lm_infinite) per prompt sample; rule: the across-sample 95%
interval lies above ``GAIN``; gate: vanilla's accuracy on the real arm (within the training length) is at least
``VANILLA`` in every sample (the model can do the task at this length at all).

Prompt format: ``plain`` text (default) or the model's ``chat`` template (one user turn, the assistant turn opening
with "The pass key is"). Plain was kept because it passes the gate: in the timing pilot (master seeds 1000000-1000002,
never the claim's statistic) vanilla retrieved 4 of 4 keys placed 683-1,931 tokens back in 2,048-token plain prompts
and 1 of 1 in a 1,024-token prompt; the chat format was not measured (the pilot's time ran out).

Timing pilot (SmolLM2-135M, bfloat16, one thread, niced beside the lead's runs on 2 cores at load average ~5; CPU
seconds by ``time.process_time``, which is what one quiet thread would take): one 1,024-token prompt (key beyond a
256 window) cost 8.1 CPU-s for the two LM-Infinite methods (shared prefix, 8 decoded tokens each) and 1.5 CPU-s for
vanilla (85 s and 15 s wall under that load); one 2,048-token vanilla prompt took 25 s wall. So quick (1,024 tokens,
2 arms x 3 samples x 7 prompts = 42 prompts x ~9.6 CPU-s + ~15 s to load the model) is estimated at ~7 min on one
quiet thread; 2,048-token prompts would have left ~3 prompts per point in 8 minutes.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, every_at_least
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms, save_figure
from lmsci.errors import ConfigError
from lmsci.experiments.length import _passkey_lm_task as T
from lmsci.experiments.registry import register
from lmsci.report.published import toy_rows_section
from lmsci.runs import RunDir, derive_seed

METHODS = ("vanilla", "lm_infinite", "lm_infinite_topk")
ARMS = ("real", "null")
GAIN = 0.1      # registered: the lower end of the gain's interval
VANILLA = 0.6   # registered: the gate on vanilla accuracy
PAPER_LAYER_RATIO = 5 / 32
_SRC = "Han et al., LM-Infinite, NAACL 2024, arXiv 2308.16137"


def claim_layer(n_layers: int) -> int:
    """The top-k layer h: ``round(5/32 * n_layers)``, halves rounded up (the paper's 5 of Llama-2's 32)."""
    return int(np.floor(PAPER_LAYER_RATIO * n_layers + 0.5))


class PasskeyLMConfig(ExperimentConfig):
    """Configuration of ``passkey-lm`` (field defaults = the quick preset). Lengths in tokens."""

    model: str = Field("smollm2-135m", description="a zoo name, a local Hugging Face directory, a .gguf file, or "
                                                   "tiny-llama (smoke)")
    dtype: str = Field("bfloat16", description="weights: float32 or bfloat16 (the harness's softmax is float32)")
    prompt_format: str = Field("plain", description="plain text or the tokenizer's chat template")
    contexts: list[int] = Field(default_factory=lambda: [1024], description="prompt lengths (tokens)")
    n_local: int = Field(256, ge=64, description="LM-Infinite's local window (and distance ceiling)")
    n_global: int = Field(10, ge=1, description="LM-Infinite's starting tokens")
    top_k: int = Field(5, ge=1, description="middle tokens re-attended (the paper: 5)")
    top_k_layer: int | None = Field(None, ge=0, description="first top-k layer (None: round(5/32 n_layers))")
    top_k_distance: int | None = Field(None, ge=1, description="distance middle keys are scored at (None: n_local/2)")
    n_digits: int = Field(5, ge=1, le=10)
    n_prompts: int = Field(7, ge=1, le=10000, description="prompts per (context, arm) per sample")
    batch: int = Field(1, ge=1, description="prompts per forward pass")
    block_size: int = Field(512, ge=8, description="queries per block of the harness")
    n_seeds: int = Field(3, ge=1, le=100, description="independent prompt samples")
    threads: int = Field(1, ge=0)

    PRESETS = {
        "smoke": {"model": "tiny-llama", "dtype": "float32", "contexts": [256], "n_local": 64, "n_global": 2,
                  "top_k_layer": 1, "n_digits": 3, "n_prompts": 2, "block_size": 32, "n_seeds": 2},
        "quick": {},
        # one H100: 4k-16k contexts (16k is twice the training length: vanilla's gate reads 4k and 8k only)
        "gpu": {"dtype": "float32", "contexts": [4096, 8192, 16384], "n_local": 2048, "n_prompts": 20, "batch": 4,
                "block_size": 2048, "threads": 0},
        # Table 2's lengths (6k-16k) with LM-Infinite's window at 4k, as the paper's Llama-2 (L = 4k)
        "paper": {"dtype": "float32", "contexts": [6144, 8192, 12288, 16384], "n_local": 4096, "n_prompts": 50,
                  "batch": 4, "block_size": 2048, "n_seeds": 5, "threads": 0},
    }


_GAIN_WORDS = ("accuracy (all n_digits digits of the greedy answer exact) of LM-Infinite + top-5 middle tokens from "
               "layer h = round(5/32 x n_layers) minus that of LM-Infinite without top-k, same prompts; mean over the "
               "contexts; per prompt sample of n_prompts prompts per context")


@register("passkey-lm")
class PasskeyLM(Experiment):
    """Passkey retrieval on a real pretrained LM: LM-Infinite's top-k recovers keys beyond its window (2308.16137)."""

    claim = ("On a real pretrained RoPE LM, a pass key placed beyond LM-Infinite's local window is lost by LM-Infinite "
             "and recovered by LM-Infinite with top-k middle-token re-attention, while full attention retrieves it.")
    source = f"{_SRC}, Sec. 5.3, Table 2, App. A; Mohtashami & Jaggi, arXiv 2305.16300 (task)"
    Config = PasskeyLMConfig
    time_estimate = {"smoke": "~10 s (a tiny random Llama)",
                     "quick": "~7m on one quiet thread (estimated from a measured 9.6 CPU-s per 1,024-token prompt, all "
                              "three methods; 42 prompts; see the module docstring)",
                     "gpu": "~10m on one H100 (estimated, not measured: no GPU in the session that wrote it; 3 x 2 x "
                            "20 prompts of 4k-16k tokens, float32)",
                     "paper": "~1 GPU-hour (estimated)"}
    claims = [
        Claim("topk-recovers-beyond-window",
              "LM-Infinite with top-k middle-token re-attention (k = 5, from layer h = round(5/32 x n_layers)) "
              "retrieves pass keys placed beyond its local window that LM-Infinite without top-k loses.",
              f"{_SRC}, Sec. 5.3, Table 2 (h = 5 of 32 layers, k = 5)",
              "Llama-2-7b-chat, 6K-16K: LM-Infinite + top-5 81.2% vs Truncate-to-4K 44.0% (avg); gain about 0.37",
              statistic=Stat("gain", words=_GAIN_WORDS),
              rule=ci_above(GAIN),
              gates=(Gate("vanilla-retrieves", every_at_least(VANILLA), arm="real",
                          stat=Stat("acc_vanilla", where={"in_train": 1},
                                    words="vanilla (full attention) accuracy on the real arm's prompts at contexts "
                                          "within the training length; per prompt sample")),),
              null="the same gain with the key sentence placed inside the window (within the last n_local - 16 "
                   "tokens), same model, methods and code",
              null_can_meet="top-k re-attention changes the last rows' attention in every layer >= h, so it could "
                            "raise accuracy inside the window too (LM-Infinite alone clips the distances of the "
                            "starting tokens and may answer worse than full attention there); a gain that comes from "
                            "sharpening rather than from recovering the lost key would show on this arm",
              arms=ARMS),
    ]

    def validate(self, cfg: PasskeyLMConfig) -> None:
        T.check_model(cfg.model)
        if cfg.dtype not in ("float32", "bfloat16"):
            raise ConfigError("dtype", cfg.dtype, "float32 or bfloat16")
        if cfg.prompt_format not in ("plain", "chat"):
            raise ConfigError("prompt_format", cfg.prompt_format, "plain or chat")
        if not cfg.contexts or any(c < cfg.n_local + 160 for c in cfg.contexts):
            raise ConfigError("contexts", cfg.contexts, f"non-empty, each >= n_local + 160 = {cfg.n_local + 160} "
                                                        "(room for a key beyond the window)")
        if cfg.n_global >= cfg.n_local:
            raise ConfigError("n_global", cfg.n_global, f"< n_local = {cfg.n_local}")

    def points(self, cfg: PasskeyLMConfig) -> list[Point]:
        return cross_arms([Point(f"n{c}", {"context": c}) for c in sorted(set(cfg.contexts))], ARMS)

    def run_point(self, cfg: PasskeyLMConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        hf = T.load(cfg.model, ctx.device, cfg.dtype, cfg.threads)
        if getattr(hf, "provenance", None):
            ctx.run.record_model(hf.provenance)
        n, L = point.params["context"], T.train_length_of(hf.model)
        parts = T.prompt_parts(hf.tokenizer, cfg.prompt_format)
        rng = np.random.default_rng(derive_seed(ctx.seed, "prompts", n, point.arm))
        prompts = [T.make_prompt(parts, n, cfg.n_digits, point.arm == "null", cfg.n_local, rng)
                   for _ in range(cfg.n_prompts)]
        t0 = time.time()
        ok, texts = answer_all(cfg, hf, prompts)
        row: dict[str, Any] = {"context": n, "L": L, "in_train": int(n <= L), "n_prompts": len(prompts),
                               "h": self.top_k_layer(cfg, hf.model), "seconds": time.time() - t0,
                               "distances": json.dumps([p.distance for p in prompts]),
                               "correct": json.dumps({m: [int(x) for x in ok[m]] for m in METHODS}),
                               "answers": json.dumps({m: texts[m][:3] for m in METHODS})}
        for m in METHODS:
            row[f"acc_{m}"] = float(np.mean(ok[m]))
        row["gain"] = row["acc_lm_infinite_topk"] - row["acc_lm_infinite"]
        return row

    @staticmethod
    def top_k_layer(cfg: PasskeyLMConfig, model: Any) -> int:
        """h: ``cfg.top_k_layer`` or ``round(5/32 * n_layers)``.

        Raises:
            ConfigError: h outside the model's layers."""
        nl = T.n_layers_of(model)
        h = claim_layer(nl) if cfg.top_k_layer is None else cfg.top_k_layer
        if not 0 <= h < nl:
            raise ConfigError("top_k_layer", h, f"a layer in [0, {nl})")
        return h

    def figures(self, cfg: PasskeyLMConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        from lmsci.experiments.length._passkey_lm_report import accuracy_figure

        fig = accuracy_figure(cfg, results)
        if fig is None:
            return []
        return [save_figure(fig, run, "passkey_accuracy.png",
                            f"Pass-key accuracy (all digits) by method and key distance (tokens from the key sentence "
                            f"to the prompt's end, binned), real arm (beyond the window) and null arm (inside it); "
                            f"dotted: n_local = {cfg.n_local}. Right: per-sample accuracy by method and arm.",
                            claims=("topk-recovers-beyond-window",))]

    def report_sections(self, cfg: PasskeyLMConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.experiments.length._passkey_lm_report import accuracy_table

        return accuracy_table(results) + toy_rows_section("passkey-retrieval")


def answer_all(cfg: PasskeyLMConfig, hf: Any, prompts: list[T.Prompt]) -> tuple[dict[str, list[bool]],
                                                                               dict[str, list[str]]]:
    """Each method's correctness and decoded answer text per prompt (``cfg.batch`` prompts per forward)."""
    from lmsci.methods.lm_infinite import lm_infinite_policy

    model, tok = hf.model, hf.tokenizer
    h, nl = PasskeyLM.top_k_layer(cfg, model), T.n_layers_of(model)
    kw = dict(top_k_distance=cfg.top_k_distance, block_size=cfg.block_size)
    pols = {"lm_infinite": lm_infinite_policy(cfg.n_local, cfg.n_global, block_size=cfg.block_size),
            "lm_infinite_topk": lm_infinite_policy(cfg.n_local, cfg.n_global, top_k=cfg.top_k, top_k_from_layer=h,
                                                   **kw)}
    prefix = lm_infinite_policy(cfg.n_local, cfg.n_global, top_k=cfg.top_k, top_k_from_layer=nl, **kw)
    n_new = cfg.n_digits + 3
    ok: dict[str, list[bool]] = {m: [] for m in METHODS}
    texts: dict[str, list[str]] = {m: [] for m in METHODS}
    dev = next(model.parameters()).device
    for a in range(0, len(prompts), cfg.batch):
        chunk = prompts[a:a + cfg.batch]
        ids = torch.as_tensor([p.ids for p in chunk], dtype=torch.long, device=dev)
        got = {"vanilla": T.vanilla_answers(model, ids, n_new), **T.streamed_answers(model, ids, n_new, pols, prefix)}
        for m in METHODS:
            for p, row in zip(chunk, got[m].cpu().tolist()):
                text = tok.decode(row)
                texts[m].append(text)
                ok[m].append(T.read_key(text) == p.key)
    return ok, texts
