"""Fine-tuning: LoRA adapters through Hugging Face ``peft``, or full fine-tuning, on fixed windows.

``finetune(model, windows, spec, seed=...)`` trains ``model`` on the windows ``(input_ids [W, T],
targets [W, T])`` in order, ``spec.batch_size`` windows per optimizer step, with the trainer of
:mod:`lmsci.train.trainer` (AdamW, warmup, cosine decay to ``min_lr_ratio * lr``). With
``spec.method == "lora"`` it first wraps the model with :func:`add_lora` (``peft.get_peft_model``),
so only the adapters train and the base weights stay exactly as they were; ``"full"`` trains every
parameter (the ablation).

LoRA targets (the recipe of Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316, Section 4.1,
and Part 3.2, arXiv 2309.14402, footnote 19: LoRA of rank 8-16 on the attention query/value
matrices plus a low-rank update of rank up to 128 on the input embedding; lr 3e-4, weight decay
0.01, cosine decay to 10%):

* lmsci's :class:`~lmsci.models.gpt.GPT`: the fused attention projection ``qkv`` of every block
  (query, key and value in one matrix; peft's own default for Hugging Face GPT-2 targets its fused
  ``c_attn`` the same way) and the token embedding ``wte``. When the output head is tied to ``wte``
  the embedding adapter changes only the input side: the head reads the frozen base matrix.
* a Hugging Face model: ``spec.targets`` when given, else peft's default for the architecture
  (``q_proj``/``v_proj`` for Llama-style models, ``c_attn`` for GPT-2), plus the module returned by
  ``get_input_embeddings()``.

Source: Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", arXiv 2106.09685; the peft
library (``LoraConfig``, ``get_peft_model``; embedding LoRA via ``target_modules``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn as nn
from pydantic import Field

from lmsci.config import StrictModel
from lmsci.errors import ConfigError
from lmsci.train.trainer import TrainConfig, TrainResult, train


class FinetuneSpec(StrictModel):
    """How to fine-tune (defaults: the papers' LoRA recipe, Part 3.1 Section 4.1).

    Attributes:
        method: ``"lora"`` (peft adapters; base weights frozen) or ``"full"`` (every parameter).
        rank: LoRA rank of the attention targets (the papers: 8-16).
        alpha: LoRA scaling numerator (update = ``alpha / rank * B A``); default ``2 * rank``.
        embedding_rank: rank of the low-rank update of the input embedding (the papers: up to 128);
            capped at ``d_model``; 0 leaves the embedding frozen.
        embedding_alpha: LoRA scaling numerator of the embedding update (its update is
            ``embedding_alpha / r_emb * B A``). None (default): step-matched, :func:`matched_embedding_alpha`:
            one Adam step moves a token's input embedding by the same fraction of a full fine-tuning step as
            the attention adapters move their weights. peft initialises an embedding adapter with ``A = 0`` and
            ``B ~ N(0, 1)`` (not ``A`` of scale ``1/sqrt(d_model)`` and ``B = 0`` as for a linear layer), so at
            the attention's ``alpha / rank`` its steps are ``sqrt(3 * d_model)`` times larger relative to a
            full fine-tuning step (about 28x at ``d_model`` 256): QA fine-tuning then rewrote every input
            embedding the QA data touch and erased biography recall (0.998 -> 0.07 in 30 steps at lr 1e-3 on a
            2-layer d_model 64 GPT, 2026-11-26; 0.74 with no embedding update).
        targets: module names (peft ``target_modules``: exact names or name suffixes) of the attention
            targets; None: ``["qkv"]`` for lmsci's GPT, peft's architecture default otherwise.
        lr, weight_decay, batch_size, warmup_frac, min_lr_ratio: AdamW and schedule (warmup then
            cosine to ``min_lr_ratio * lr``); weight decay applies to matrices (the adapters in LoRA).
        epochs: passes over the fine-tuning windows.
    """

    method: Literal["lora", "full"] = "lora"
    rank: int = Field(16, ge=1)
    alpha: float | None = Field(None, gt=0)
    embedding_rank: int = Field(128, ge=0)
    embedding_alpha: float | None = Field(None, gt=0)
    targets: list[str] | None = None
    lr: float = Field(3e-4, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    batch_size: int = Field(48, ge=1)
    warmup_frac: float = Field(0.05, ge=0, le=0.5)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    epochs: int = Field(1, ge=1)


def _embedding_name(model: nn.Module) -> str | None:
    """Qualified name of the input-embedding module (``wte`` for lmsci's GPT, ``get_input_embeddings()``
    for Hugging Face models), or None."""
    emb = None
    if hasattr(model, "get_input_embeddings"):
        try:
            emb = model.get_input_embeddings()
        except (NotImplementedError, AttributeError):
            emb = None
    if emb is None:
        emb = getattr(model, "wte", None)
    if emb is None:
        return None
    for name, mod in model.named_modules():
        if mod is emb:
            return name
    return None


def _d_model(emb: nn.Module) -> int:
    return int(getattr(emb, "embedding_dim", 0) or emb.weight.shape[1])


def matched_embedding_alpha(rank: int, alpha: float, embedding_rank: int, d_model: int) -> float:
    """The embedding adapter's ``alpha`` whose Adam steps move input embeddings by the same fraction of a full
    fine-tuning step as the linear adapters move their weights.

    With Adam every adapter entry moves by about ``lr`` per step (same sign over steps while the gradient
    keeps its sign). A linear adapter (peft: ``A`` Kaiming-uniform, std ``1/sqrt(3 d_model)``; ``B = 0``, the
    entries that move) changes a weight entry by ``(alpha / rank) * sqrt(rank) / sqrt(3 d_model) * lr``; an
    embedding adapter (``A = 0``, the entries that move; ``B ~ N(0, 1)``) changes an embedding coordinate by
    ``(alpha_emb / r_emb) * sqrt(r_emb) * lr``; a full fine-tuning step is ``lr``. Equal fractions give
    ``alpha_emb = (alpha / rank) * sqrt(rank * r_emb / (3 d_model))`` (3.27 for rank 16, alpha 32, r_emb 128,
    d_model 256, against 256 at the attention's scaling).

    Source: the initialisations of Hu et al., arXiv 2106.09685 (loralib) as peft implements them.
    """
    return float(alpha / rank * math.sqrt(rank * embedding_rank / (3.0 * d_model)))


def add_lora(model: nn.Module, spec: FinetuneSpec) -> nn.Module:
    """Wrap ``model`` with LoRA adapters (``peft.get_peft_model``); only the adapters are trainable.

    Returns:
        the ``peft.PeftModel``; it forwards attribute access to ``model`` (``sum_nll``,
        ``run_with_cache``, ``generate``), so it can replace ``model`` everywhere.

    Raises:
        ConfigError: no attention target found and none given in ``spec.targets``.
    """
    from peft import LoraConfig, get_peft_model

    from lmsci.models.gpt import GPT

    targets = list(spec.targets) if spec.targets is not None else (["qkv"] if isinstance(model, GPT) else None)
    rank_pattern: dict[str, int] = {}
    alpha_pattern: dict[str, float] = {}
    alpha = float(spec.alpha if spec.alpha is not None else 2 * spec.rank)
    if spec.embedding_rank > 0:
        emb_name = _embedding_name(model)
        if emb_name is not None:
            d_model = _d_model(model.get_submodule(emb_name))
            r_emb = min(spec.embedding_rank, d_model)
            if targets is None:  # peft's architecture default for the attention, plus the embedding
                from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as MAP

                mt = getattr(getattr(model, "config", None), "model_type", None)
                if mt not in MAP:
                    raise ConfigError("finetune.targets", None, "module names to adapt (peft has no default for "
                                      f"model_type {mt!r})")
                targets = list(MAP[mt])
            targets = targets + [emb_name]
            key = f"^{emb_name}$" if "." in emb_name else emb_name  # peft pattern: the exact module, or its leaf name
            rank_pattern[key] = r_emb
            alpha_pattern[key] = float(spec.embedding_alpha if spec.embedding_alpha is not None
                                       else matched_embedding_alpha(spec.rank, alpha, r_emb, d_model))
    cfg = LoraConfig(r=spec.rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, bias="none",
                     rank_pattern=rank_pattern, alpha_pattern=alpha_pattern)
    return get_peft_model(model, cfg)


def trainable_parameters(model: nn.Module) -> dict[str, int]:
    """``{"trainable", "total"}`` parameter counts (shared tensors counted once)."""
    seen: set[int] = set()
    tr = tot = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        tot += p.numel()
        tr += p.numel() if p.requires_grad else 0
    return {"trainable": tr, "total": tot}


def finetune(model: nn.Module, windows: tuple[torch.Tensor, torch.Tensor], spec: FinetuneSpec, *, seed: int,
             device: str = "cpu", log: Callable[[dict[str, Any]], None] | None = None, progress: Any = None,
             eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
             eval_every: int = 0, precision: str = "fp32") -> tuple[nn.Module, TrainResult]:
    """Fine-tune ``model`` on ``windows`` (LoRA or full, per ``spec.method``).

    Args:
        windows: ``(input_ids [W, T] long, targets [W, T] long)``, targets ``-100`` where no loss is taken;
            trained in order, ``spec.batch_size`` windows per step, ``spec.epochs`` passes
            (``ceil(W / batch_size) * epochs`` steps; the last batch of a pass wraps around).
        seed: the trainer's seed, and the seed of the LoRA adapters' initialisation.
        precision: ``"fp32"`` or ``"bf16"`` (autocast; :class:`lmsci.train.trainer.TrainConfig`).

    Returns:
        ``(model, result)``: the fine-tuned model (a ``peft.PeftModel`` wrapping ``model`` for LoRA;
        ``model`` itself for full fine-tuning) and the trainer's :class:`~lmsci.train.trainer.TrainResult`.
    """
    x, y = windows
    W = int(x.shape[0])
    if W == 0:
        raise ConfigError("windows", 0, "at least one window")
    B = spec.batch_size
    steps = max(1, -(-W // B)) * spec.epochs
    if spec.method == "lora":
        # peft initialises the adapters (lora_A) from torch's global generator: seed it from ``seed`` so that the
        # same seed gives the same fine-tuning whatever ran before in the process (the caller's state is kept)
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(int(seed) ^ 0x10FA)
            model = add_lora(model, spec)
    tc = TrainConfig(steps=steps, batch_size=B, lr=spec.lr, warmup_steps=int(spec.warmup_frac * steps),
                     min_lr_ratio=spec.min_lr_ratio, weight_decay=spec.weight_decay, grad_clip=1.0, device=device,
                     log_every=max(1, steps // 50), eval_every=eval_every, precision=precision)
    per_pass = max(1, -(-W // B))

    def get_batch(step: int, g: torch.Generator):
        s = (step % per_pass) * B
        idx = torch.arange(s, s + B) % W
        return x[idx], y[idx]

    res = train(model, get_batch, tc, seed=seed, log=log, progress=progress, eval_fn=eval_fn)
    return model, res


def lora_finetune(model: nn.Module, windows: tuple[torch.Tensor, torch.Tensor], spec: FinetuneSpec | None = None,
                  **kw: Any) -> nn.Module:
    """LoRA fine-tune (``spec.method`` forced to ``"lora"``); returns the ``peft.PeftModel``.
    Arguments as :func:`finetune` (``seed`` defaults to 0)."""
    spec = (spec or FinetuneSpec()).model_copy(update={"method": "lora"})
    kw.setdefault("seed", 0)
    return finetune(model, windows, spec, **kw)[0]
