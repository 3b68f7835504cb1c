"""Experiment ``grokking``: delayed generalisation on modular arithmetic, its progress measures and phases.

Sources:

* Power, Burda, Edwards, Babuschkin, Misra, "Grokking: Generalization Beyond Overfitting on Small
  Algorithmic Datasets", arXiv 2201.02177 (2022), Fig. 1 (x/y mod 97: training accuracy near 100% long
  before validation accuracy) and Fig. 1 right / sec. 3.1 (steps to generalise fall as the training
  fraction grows); weight decay is the most effective intervention (sec. 3.3, Fig. 2).
* Nanda, Chan, Lieberum, Smith, Steinhardt, "Progress measures for grokking via mechanistic
  interpretability", arXiv 2301.05217 (ICLR 2023), secs. 3-5: (x + y) mod 113, training fraction 0.3, a
  one-layer transformer (d_model 128, 4 heads of 32, d_mlp 512, ReLU, no LayerNorm, learned positions,
  untied unembedding; init of ``transformers.py``: every weight ``randn / sqrt(d_model)``, the unembedding
  ``randn / sqrt(d_vocab)``, biases 0), full-batch AdamW lr 1e-3, weight decay 1, betas (0.9, 0.98), linear
  warmup over 10 steps; the model learns a few key frequencies (5 at p = 113) and the progress measures
  (restricted loss, excluded loss, weight norm) reveal three phases: memorisation, circuit formation,
  clean-up, with the test loss falling sharply in clean-up.

The model is :class:`lmsci.models.gpt.GPT` with ``mlp="relu"``, ``norm="none"``, ``pos="learned"``,
``n_layers=1`` (its ``bias=True`` adds zero-initialised attention biases that Nanda's model lacks), re-initialised
as in Nanda's code (:func:`nanda_init`). Only the answer position is needed: :func:`answer_logits` computes the
last position's logits (attention over all three positions, the MLP and unembedding at the last one only),
equal to ``model(ids)[:, -1]`` (tested) at about half the cost. The loss is the cross-entropy over the ``p + 1``
output logits computed in float64 (``loss_dtype``; as Nanda's ``cross_entropy_high_precision``; the model runs in
float32), and accuracy and the Fourier measures read the ``p`` residue logits.

Training is stacked: every point of a run (the seeds of the weight-decay runs and of the wd = 0 controls in
``grokking``; every fraction in ``grokking-fractions``) is one member of a stack trained by
:func:`train_modular_stacked` (:func:`stacked_answer_logits`: the same function as :func:`answer_logits` from
per-token key/value/score tables, every weight with a leading member dimension; AdamW over the stacked tensors
with each member's own decoupled weight decay). Seeds, splits and inits are those of one-model-at-a-time training
(:func:`train_modular`), whose curves it reproduces to float rounding (tested). On one CPU thread the per-step
cost is the MLP's GEMMs: stacking itself saves little there; the tables halve the FLOPs a step
(``benchmarks/bench_grokking.py``). On a GPU the stack turns K small launches into one.

Progress measures (at checkpoints on a log-spaced plus regular step grid; key frequencies are those of the
*final* model, as in Nanda et al., applied to every checkpoint):

* the embedding's Fourier spectrum: ``W_E`` restricted to the ``p`` residue tokens (``[p, d_model]``) in the
  orthonormal Fourier basis over residues (constant, ``cos(2 pi k x / p)``, ``sin(2 pi k x / p)``,
  ``k = 1 .. (p-1)/2``); the share of the squared Frobenius norm per frequency (:func:`embedding_spectrum`);
* key frequencies: the ``n_key`` frequencies with the largest share at the end of training;
* restricted loss: the logits over all ``p**2`` pairs projected, for every output ``c``, onto the constant and
  the directions ``cos(w_k (x + y))``, ``sin(w_k (x + y))`` of the key frequencies (``w_k = 2 pi k / p``), the
  cross-entropy on the test pairs (:func:`fourier_logit_split`);
* excluded loss: the same directions *removed* from the logits, the cross-entropy on the training pairs;
* total weight norm ``sqrt(sum of squared parameters)``.

Phase detection (:func:`detect_phases`, the rule fixed before the first run): memorisation ends at ``t_mem``,
the first step whose training accuracy (measured every step from the training logits) reaches 0.99;
circuit formation runs from ``t_mem`` to ``t_clean``, the first evaluation at or after ``t_mem`` whose test
loss is at most half the largest test loss seen between ``t_mem`` and ``t_gen``; clean-up runs from
``t_clean`` to ``t_gen``, the first evaluation with test accuracy >= 0.99.

Null arms (issue 29; measured in the same run, the same statistic and rule): ``delay`` and
``restricted-before-test`` read the weight_decay = 0 control (the paper's own control: the same model, seeds,
split and steps without weight decay, whose progress measures are computed as the main runs'); ``fourier-sparse``
reads each main run's embedding at step 0 (its random initialisation). ``no-wd-no-grok`` is a design check:
it checks that the null arm is a null (the control does not generalise), and is never counted as reproduced.
``grokking-fractions/fraction-sweep`` is decided at the gpu and paper presets only (3 seeds; the quick preset, one
seed, is reported and decides nothing); its null arm is the same Spearman with the training fractions permuted
across the runs (a fixed permutation drawn from the master seed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from pydantic import Field

from lmsci.claims import Claim, Gate, Verdict, across_seeds
from lmsci.config import ExperimentConfig
from lmsci.errors import ConfigError, DivergedError
from lmsci.experiments.base import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.registry import register
from lmsci.measure.fourier import embedding_spectrum, fourier_logit_split, key_frequencies, top_share
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.runs import RunDir, derive_seed
from lmsci.worlds.modular import ModularData, check_modular, modular_data

# the registered thresholds (issue 17)
ACC = 0.99              # "reaches" = accuracy >= 0.99
DELAY_FACTOR = 5.0      # test accuracy reaches 0.99 at least 5x later than training accuracy
NOWD_MAX_ACC = 0.5      # the wd = 0 control's test accuracy stays below this
TOP_K, TOP_SHARE = 6, 0.8
LOSS_X = 1.0            # nats: the level restricted and test loss are timed at
RESTRICTED_FACTOR = 1.25  # t(test loss < X) / t(restricted loss < X) at least this
EXCLUDED_FACTOR = 2.0   # excluded loss at the end of circuit formation / at its start
SPEARMAN_MAX = -0.8


class ModularTrainConfig(ExperimentConfig):
    """Model and optimiser fields shared by ``grokking`` and ``grokking-fractions`` (Nanda et al.'s transformer and
    full-batch AdamW; defaults as their code)."""

    d_model: int = Field(128, ge=1)
    n_heads: int = Field(4, ge=1)
    d_mlp: int = Field(512, ge=1)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1.0, ge=0, description="decoupled AdamW weight decay")
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.98, ge=0, lt=1)
    warmup_steps: int = Field(10, ge=0)
    loss_dtype: Literal["float64", "float32"] = Field(
        "float64", description="dtype of the logits in the training loss (Nanda: float64, cross_entropy_high_precision; "
                               "in float32 the loss of a memorised training set rounds to exactly 0 and its gradient vanishes)")
    eval_every: int = Field(10, ge=1, description="test loss/accuracy every this many steps")
    threads: int = Field(1, ge=0, description="torch threads (0 = torch's default)")


class GrokkingConfig(ModularTrainConfig):
    """Configuration of ``grokking`` (field defaults = the ``quick`` preset).

    The quick preset departs from Nanda et al. (p = 113, fraction 0.3, lr 1e-3; the ``paper`` and ``gpu`` presets)
    to fit 3 seeds and 3 wd = 0 controls into ~10 CPU minutes: one full-batch step at p = 113 costs ~0.16 s on one
    loaded core and grokking there needs ~10-13k steps (about 30 min a seed). It uses p = 59, training fraction 0.4
    and lr 2e-3 (the decay time scale of decoupled weight decay is 1 / (lr * wd) steps, so clean-up comes about
    twice as soon): p = 59 at fraction 0.5 and lr 2e-3 grokked in 3 of 3 seeds in earlier measurements
    (research notes, physics_of_lms.md sec. 6.3), but at fraction 0.5 half the test pairs are mirror images
    ``(y, x)`` of training pairs, so a model that only learned commutativity scores ~0.5 and the wd = 0 control
    reached 0.45; at 0.4 that ceiling is 0.4. At fraction 0.3 with lr 1e-3 p = 59 had test accuracy 0.07 after
    1,800 steps (not yet grokked).
    """

    p: int = Field(59, description="prime modulus of the task (x + y) mod p")
    op: Literal["add"] = Field("add", description="operation (the Fourier measures assume addition)")
    train_frac: float = Field(0.4, description="training fraction of the p**2 pairs, in (0, 1)")
    lr: float = Field(2e-3, gt=0, description="AdamW learning rate (Nanda et al.: 1e-3, the paper preset)")
    steps: int = Field(3000, ge=10, description="full-batch steps of the main runs and of the wd = 0 control")
    n_checkpoints: int = Field(60, ge=4, description="log-spaced checkpoints for the Fourier measures "
                                                    "(plus one every steps/40)")
    n_key: int = Field(TOP_K, ge=1, description="key frequencies (top by final embedding norm)")
    control: bool = Field(True, description="run the weight_decay = 0 control (same steps, every seed)")

    PRESETS = {
        # p = 31 (15 frequencies): at p = 13 the top 6 of 6 frequencies hold ~all of any embedding's norm, so the
        # random-init null arm of fourier-sparse could not fail its rule
        "smoke": {"p": 31, "train_frac": 0.6, "d_model": 32, "n_heads": 2, "d_mlp": 64, "steps": 60,
                  "eval_every": 5, "n_checkpoints": 8, "lr": 3e-3, "n_key": 3, "n_seeds": 1},
        "quick": {"n_seeds": 3, "threads": 0},
        "gpu": {"p": 113, "train_frac": 0.3, "lr": 1e-3, "steps": 25000, "eval_every": 25, "n_seeds": 3, "threads": 0},
        "paper": {"p": 113, "train_frac": 0.3, "lr": 1e-3, "steps": 40000, "eval_every": 50, "n_seeds": 3,
                  "threads": 0},
    }


class GrokkingFractionsConfig(ModularTrainConfig):
    """Configuration of ``grokking-fractions`` (Power et al.'s sweep; defaults = the ``quick`` preset).

    Each run stops as soon as its test accuracy reaches 0.99 (evaluated every ``eval_every`` steps) or at ``steps``.
    The quick preset uses x/y mod 59 at lr 2e-3 (as ``grokking``'s quick preset); the ``paper`` preset is Power et
    al.'s x/y mod 97 with a 1e5-step cap at lr 1e-3 (their AdamW lr; their batch is min(512, half the training
    set), ours is the full training set). The claim is decided at gpu and paper (3 seeds); quick keeps one seed (3
    seeds would take ~25 CPU-minutes) and only reports its value.
    """

    p: int = Field(59, description="prime modulus")
    op: Literal["add", "sub", "mul", "div", "x2y2", "x2xyy2", "x3xy"] = Field("div", description="operation")
    train_fracs: list[float] = Field([0.3, 0.4, 0.5, 0.6, 0.7, 0.8], min_length=1, description="training fractions")
    lr: float = Field(2e-3, gt=0, description="AdamW learning rate (Power et al. and Nanda et al.: 1e-3, the paper preset)")
    steps: int = Field(3000, ge=10, description="step cap of each run (stops at test accuracy 0.99)")

    PRESETS = {
        "smoke": {"p": 7, "train_fracs": [0.5, 0.8], "d_model": 32, "n_heads": 2, "d_mlp": 64, "steps": 40,
                  "eval_every": 5, "lr": 3e-3},
        "quick": {"threads": 0},
        "gpu": {"p": 97, "lr": 1e-3, "steps": 20000, "eval_every": 25, "n_seeds": 3, "threads": 0},
        "paper": {"p": 97, "lr": 1e-3, "steps": 100000, "eval_every": 50, "n_seeds": 3, "threads": 0},
    }


# ------------------------------------------------------------------------------------------ model


def grokking_model(p: int, d_model: int = 128, n_heads: int = 4, d_mlp: int = 512, seed: int = 0) -> GPT:
    """Nanda et al.'s one-layer transformer as a :class:`GPT` (vocabulary ``p + 1``, 3 positions), initialised
    by :func:`nanda_init`. Source: arXiv 2301.05217 sec. 3; ``transformers.py`` of their code."""
    cfg = GPTConfig(vocab_size=p + 1, seq_len=3, n_layers=1, n_heads=n_heads, d_model=d_model, d_mlp=d_mlp,
                    pos="learned", mlp="relu", norm="none", bias=True, tie_embeddings=False)
    model = GPT(cfg, seed=seed)
    nanda_init(model, seed)
    return model


def nanda_init(model: GPT, seed: int) -> None:
    """Re-initialise in place as Nanda et al.'s ``transformers.py``: every weight matrix (embeddings, q/k/v,
    output projection, MLP in/out) ``randn / sqrt(d_model)``, the unembedding ``randn / sqrt(vocab_size)``,
    biases zero. Deterministic in ``seed``; the global RNG is not used."""
    g = torch.Generator().manual_seed(int(seed))
    d = model.cfg.d_model
    with torch.no_grad():
        for name, w in model.named_parameters():
            if name.endswith("bias"):
                w.zero_()
                continue
            scale = 1 / math.sqrt(model.cfg.vocab_size) if name == "lm_head.weight" else 1 / math.sqrt(d)
            w.copy_(torch.randn(w.shape, generator=g) * scale)


def answer_logits(model: GPT, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits at the last position, ``[batch, vocab_size]``, for ``input_ids [batch, seq]``.

    Equals ``model(input_ids)[:, -1]`` for a one-layer GPT (tested): the attention layer runs over all positions,
    the MLP and the unembedding only at the last one. Hook points other than ``embed``/``attn.*`` do not fire.
    """
    blk = model.blocks[0] if len(model.blocks) == 1 else None
    if blk is None:
        return model(input_ids)[:, -1]
    T = input_ids.shape[1]
    pos = torch.arange(T, device=input_ids.device)
    x = model.wte(input_ids)
    if model.cfg.pos == "learned":
        x = x + model.wpe(pos)
    attn = blk.attn
    if model.cfg.pos in ("learned", "none") and not any(h.active for h in (attn.hook_scores, attn.hook_pattern,
                                                                          attn.hook_z, attn.hook_out)):
        x = x[:, -1] + _last_query_attention(attn, blk.ln1(x))
    else:
        x = (x + attn(blk.ln1(x), pos))[:, -1]
    if blk.has_mlp:
        x = x + blk.mlp(blk.ln2(x))
    return model.lm_head(model.ln_f(x))


def _last_query_attention(attn, h: torch.Tensor) -> torch.Tensor:
    """Causal attention output at the last position only, ``[batch, d_model]``, for ``h [batch, T, d_model]``
    (a layer without positional terms in the attention logits: learned or no positions).

    The last query sees every key, so no mask is needed; only its query and the keys/values of all positions are
    projected (about 3x fewer query and output-projection FLOPs than the full layer at T = 3), and the softmax over
    T keys is two small einsums instead of a fused-attention call whose set-up dominates at T = 3.
    """
    B, T, _ = h.shape
    H, D = attn.n_heads, attn.d_head
    inner = H * D
    w, b = attn.qkv.weight, attn.qkv.bias
    q = F.linear(h[:, -1], w[:inner], None if b is None else b[:inner]).view(B, H, D)
    k, v = F.linear(h, w[inner:], None if b is None else b[inner:]).view(B, T, 2, H, D).unbind(2)
    pattern = torch.softmax(torch.einsum("bhd,bthd->bht", q, k) * (1.0 / math.sqrt(D)), dim=-1)
    z = torch.einsum("bht,bthd->bhd", pattern, v).reshape(B, inner)
    return attn.proj(z)


# ------------------------------------------------------------------------------------------ phases


def first_step(steps, values, pred) -> int | None:
    """The first ``steps[i]`` with ``pred(values[i])`` true, or None."""
    for s, v in zip(steps, values):
        if v is not None and np.isfinite(v) and pred(v):
            return int(s)
    return None


def detect_phases(steps: np.ndarray, test_loss: np.ndarray, test_acc: np.ndarray, t_mem: int | None) -> dict:
    """The three phases of Nanda et al. from the measured curves (rule in the module docstring).

    Args:
        steps: evaluation steps ``[n]`` (increasing).
        test_loss, test_acc: ``[n]`` at those steps.
        t_mem: the first step with training accuracy >= 0.99 (None: never memorised).

    Returns:
        ``{"t_mem", "t_clean", "t_gen"}`` (steps; None where a boundary was not reached): memorisation
        ``[0, t_mem)``, circuit formation ``[t_mem, t_clean)``, clean-up ``[t_clean, t_gen]``.
    """
    steps, test_loss, test_acc = (np.asarray(a, float) for a in (steps, test_loss, test_acc))
    t_gen = first_step(steps, test_acc, lambda v: v >= ACC)
    out = {"t_mem": t_mem, "t_clean": None, "t_gen": t_gen}
    if t_mem is None:
        return out
    after = steps >= t_mem
    window = after & (steps <= (t_gen if t_gen is not None else steps[-1]))
    if not window.any():
        return out
    peak = float(np.nanmax(test_loss[window]))
    t_clean = first_step(steps[after], test_loss[after], lambda v: v <= 0.5 * peak)
    if t_gen is not None and t_clean is not None:
        t_clean = min(t_clean, t_gen)
    out["t_clean"] = t_clean
    return out


def spearman(x, y) -> float:
    """Spearman rank correlation (scipy; ties averaged); NaN when undefined."""
    from scipy import stats

    if len(x) < 3:
        return float("nan")
    r = stats.spearmanr(x, y).statistic
    return float(r)


# ------------------------------------------------------------------------------------------ training


def train_modular(cfg: ModularTrainConfig, *, p: int, op: str, train_frac: float, weight_decay: float, steps: int,
                  seed: int, checkpoints: list[int] | None = None, stop_at_gen: bool = False, ctx: PointContext | None = None
                  ) -> dict:
    """Full-batch AdamW on one modular task: the single-model reference.

    One :class:`GPT` through :func:`answer_logits`, ``torch.optim.AdamW`` with the decay in its update and a
    ``LambdaLR`` warmup. The experiments train with :func:`train_modular_stacked` (all points of a run as one
    stack); this function is what that is tested against (same seeds -> same curves to float rounding) and what
    ``benchmarks/bench_grokking.py`` times as "K x single".

    Returns:
        ``{"data", "model", "curve" (DataFrame: step, train_loss, train_acc, test_loss, test_acc, weight_norm),
        "t_mem" (first step with training accuracy >= 0.99, measured every step), "checkpoints" ({step: state}),
        "steps_run"}``.

    Raises:
        DivergedError: a non-finite training loss.
    """
    data = modular_data(p, op, train_frac, seed=derive_seed(seed, "split"))
    dev = torch.device(ctx.device) if ctx is not None else torch.device("cpu")
    # initialised on the CPU (nanda_init's generator, identical on every device), then moved
    model = grokking_model(p, cfg.d_model, cfg.n_heads, cfg.d_mlp, seed=derive_seed(seed, "init")).to(dev)
    x_tr, y_tr = (t.to(dev) for t in data.train())
    x_te, y_te = (t.to(dev) for t in data.test())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=weight_decay, betas=(cfg.beta1, cfg.beta2))
    warm = cfg.warmup_steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, 1.0) if warm else 1.0)
    ldt = torch.float64 if cfg.loss_dtype == "float64" else torch.float32
    ck = set(checkpoints or [])
    saved: dict[int, dict] = {}
    rows, t_mem = [], None
    bar = ctx.progress(steps, f"wd={weight_decay:g} frac={train_frac:g}") if ctx else None
    step = 0
    for step in range(steps + 1):
        logits = answer_logits(model, x_tr)
        loss = F.cross_entropy(logits.to(ldt), y_tr)
        if not torch.isfinite(loss):
            raise DivergedError(step, float(loss.detach()))
        tr_acc = float((logits[:, :p].argmax(-1) == y_tr).float().mean())
        if t_mem is None and tr_acc >= ACC:
            t_mem = step
        if step in ck:
            saved[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if step % cfg.eval_every == 0 or step == steps:
            with torch.no_grad():
                lt = answer_logits(model, x_te)
                te_loss = float(F.cross_entropy(lt.float(), y_te))
                te_acc = float((lt[:, :p].argmax(-1) == y_te).float().mean())
                wn = float(torch.sqrt(sum((w.detach() ** 2).sum() for w in model.parameters())))
            row = {"step": step, "train_loss": float(loss.detach()), "train_acc": tr_acc, "test_loss": te_loss,
                   "test_acc": te_acc, "weight_norm": wn}
            rows.append(row)
            if ctx is not None:
                ctx.log(**row)
            if stop_at_gen and te_acc >= ACC:
                break
        if step == steps:
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return {"data": data, "model": model, "curve": pd.DataFrame(rows), "t_mem": t_mem, "checkpoints": saved,
            "steps_run": step}


# ------------------------------------------------------------------------------------------ stacked training


def stacked_answer_logits(params: dict[str, torch.Tensor], input_ids: torch.Tensor, n_heads: int,
                          query_token: int) -> torch.Tensor:
    """Answer-position logits of K one-layer models at once, ``[K, batch, vocab_size]``.

    Args:
        params: the K models' parameters stacked, ``{GPT parameter name: [K, *shape]}`` (names and layouts of
            :func:`grokking_model`: ``wte.weight [K, V, d]``, ``wpe.weight [K, T, d]``, ``blocks.0.attn.qkv.*``,
            ``blocks.0.attn.proj.*``, ``blocks.0.mlp.fc.*``, ``blocks.0.mlp.proj.*``, ``lm_head.weight [K, V, d]``).
        input_ids: ``[K, batch, T]`` long (member k's rows are ``input_ids[k]``); the last position of every row
            holds ``query_token`` (the "=" token of :class:`~lmsci.worlds.modular.ModularData`: the caller checks).
        n_heads: attention heads.
        query_token: the token at the answer position.

    Returns:
        logits ``[K, batch, V]`` equal to ``answer_logits(model_k, input_ids[k])`` for every k (tested; float
        rounding only).

    The same function as :func:`answer_logits`, computed from per-token tables: a one-layer model's keys, values
    and attention scores at position t depend only on the token there, so they are computed once for the ``V``
    tokens at each of the T positions (``[K, T * V, .]``, independent of the batch) and gathered per example; the
    answer position's query is one vector per member (its token is always ``query_token``). Per example only
    the softmax over T keys, the value mixture, and the output projection, MLP and unembedding GEMMs remain
    (about half the FLOPs of :func:`answer_logits`). Every matmul is batched over the K members (``bmm`` /
    ``baddbmm`` on ``[K, ...]`` weights).
    """
    E, pos = params["wte.weight"], params["wpe.weight"]
    K, V, d = E.shape
    B, T = input_ids.shape[1], input_ids.shape[2]
    W, b = params["blocks.0.attn.qkv.weight"], params["blocks.0.attn.qkv.bias"]
    inner = W.shape[1] // 3
    H = n_heads
    D = inner // H
    h = E[:, None] + pos[:, :, None]                                       # [K, T, V, d]: token v at position t
    kv = torch.baddbmm(b[:, None, inner:], h.reshape(K, T * V, d), W[:, inner:].transpose(1, 2))  # [K, T*V, 2I]
    h_q = h[:, T - 1, query_token]                                         # [K, d]: the answer position's input
    q = torch.baddbmm(b[:, None, :inner], h_q[:, None], W[:, :inner].transpose(1, 2)).view(K, H, D)
    k_tab, v_tab = kv.view(K, T * V, 2, inner).unbind(2)
    scores = torch.einsum("khd,knhd->knh", q, k_tab.reshape(K, T * V, H, D)) * (1.0 / math.sqrt(D))  # [K, T*V, H]
    flat = (input_ids + torch.arange(T, device=input_ids.device) * V).reshape(K, B * T, 1)
    s = torch.gather(scores, 1, flat.expand(-1, -1, H)).view(K, B, T, H)
    pattern = torch.softmax(s, dim=2)                                      # over the T keys
    v = torch.gather(v_tab, 1, flat.expand(-1, -1, inner)).view(K, B, T, H, D)
    z = (pattern[..., None] * v).sum(2).reshape(K, B, inner)
    r = h_q[:, None] + torch.baddbmm(params["blocks.0.attn.proj.bias"][:, None], z,
                                     params["blocks.0.attn.proj.weight"].transpose(1, 2))       # residual [K, B, d]
    a = torch.relu(torch.baddbmm(params["blocks.0.mlp.fc.bias"][:, None], r,
                                 params["blocks.0.mlp.fc.weight"].transpose(1, 2)))
    r = r + torch.baddbmm(params["blocks.0.mlp.proj.bias"][:, None], a, params["blocks.0.mlp.proj.weight"].transpose(1, 2))
    return torch.bmm(r, params["lm_head.weight"].transpose(1, 2))


@dataclass
class ModularMember:
    """One model of a stack trained by :func:`train_modular_stacked`.

    Attributes:
        data: its task and train/test split.
        weight_decay: its decoupled AdamW weight decay.
        init_seed: the seed of :func:`grokking_model` (``nanda_init``).
        checkpoints: steps at which its parameters are kept (for :func:`progress_measures`).
        stop_at_gen: stop this member at the first evaluation with test accuracy >= 0.99.
        log: receives its evaluation rows (``log(**row)``), e.g. ``PointContext.log``.
    """

    data: ModularData
    weight_decay: float
    init_seed: int
    checkpoints: frozenset[int] = frozenset()
    stop_at_gen: bool = False
    log: Callable[..., None] | None = None


def _pad_rows(xs: list[torch.Tensor], ys: list[torch.Tensor], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """Member row sets of different sizes as ``[K, N_max, T]`` ids, ``[K, N_max]`` targets and a ``[K, N_max]``
    validity mask (padding repeats each member's first row, masked out), plus the sizes."""
    n = [int(x.shape[0]) for x in xs]
    N = max(n)
    X = torch.stack([torch.cat([x, x[:1].expand(N - len(x), -1)]) for x in xs]).to(device)
    Y = torch.stack([torch.cat([y, y[:1].expand(N - len(y))]) for y in ys]).to(device)
    mask = (torch.arange(N)[None, :] < torch.tensor(n)[:, None]).to(device)
    return X, Y, mask, n


def _masked_mean(v: torch.Tensor, mask: torch.Tensor, n: list[int]) -> torch.Tensor:
    """Row means over the valid entries, ``[K]`` (a plain mean when nothing is padded)."""
    if all(k == v.shape[1] for k in n):
        return v.mean(1)
    return (v * mask).sum(1) / torch.tensor(n, dtype=v.dtype, device=v.device)


def train_modular_stacked(cfg: ModularTrainConfig, members: list[ModularMember], steps: int,
                          device: str | torch.device = "cpu", progress=None) -> list[dict]:
    """Full-batch AdamW on K modular tasks at once: the recipe of :func:`train_modular` for every member, one
    stacked computation per step (the models, optimizer state and data carry a leading member dimension).

    Every member is Nanda et al.'s one-layer transformer (:func:`grokking_model` with its ``init_seed``, built on
    the CPU and moved to ``device``) trained on its own training set (sizes may differ: shorter sets are padded
    and masked, so each member's loss is the mean over its own rows), with its own weight decay
    (:func:`lmsci.train.stacked.decay_members`; AdamW itself runs with ``weight_decay=0``), the shared learning
    rate, betas and linear warmup. Each step, for every member: the training loss (``cfg.loss_dtype``) and
    accuracy from the training logits; its checkpoints; every ``cfg.eval_every`` steps and at the last step the
    test loss/accuracy and weight norm; then one AdamW update. A member that stops (``stop_at_gen``) or whose
    loss is non-finite leaves the stack (:func:`lmsci.train.stacked.select_members`); the others go on
    unchanged. Member k's curve equals ``train_modular`` on the same data and seeds to float rounding (tested).

    Returns:
        one dict per member, as :func:`train_modular`'s (``data``, ``model`` (a :class:`GPT` holding the final
        weights), ``curve``, ``t_mem``, ``checkpoints``, ``steps_run``) plus ``diverged``: the
        :class:`DivergedError` of a member whose training loss became non-finite (its curve ends there), or None.

    Raises:
        ConfigError: no members, members of different moduli/operations' vocabularies, or rows whose last token
            is not the "=" token.
    """
    from lmsci.train.stacked import decay_members, select_members

    if not members:
        raise ConfigError("members", [], "at least one member")
    p = members[0].data.p
    if any(m.data.p != p for m in members):
        raise ConfigError("members", sorted({m.data.p for m in members}), "one modulus p for every member")
    eq = members[0].data.eq_token
    if any(not bool((m.data.input_ids[:, -1] == eq).all()) for m in members):
        raise ConfigError("members", "rows without '=' last", f"every row ending in the '=' token ({eq})")
    dev = torch.device(device)
    K = len(members)
    models = [grokking_model(p, cfg.d_model, cfg.n_heads, cfg.d_mlp, seed=m.init_seed).to(dev) for m in members]
    names = [n for n, _ in models[0].named_parameters()]
    params = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]).requires_grad_(True)
              for n in names}
    opt = torch.optim.AdamW(list(params.values()), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=0.0,
                            fused=True)
    ldt = torch.float64 if cfg.loss_dtype == "float64" else torch.float32
    warm = cfg.warmup_steps
    alive = list(range(K))  # stack slot -> member

    def tensors_of(slots: list[int]):
        tr = [members[i].data.train() for i in slots]
        te = [members[i].data.test() for i in slots]
        return (_pad_rows([x for x, _ in tr], [y for _, y in tr], dev),
                _pad_rows([x for x, _ in te], [y for _, y in te], dev),
                torch.tensor([members[i].weight_decay for i in slots], dtype=torch.float64, device=dev))

    (x_tr, y_tr, m_tr, n_tr), (x_te, y_te, m_te, n_te), wd = tensors_of(alive)
    rows: list[list[dict]] = [[] for _ in range(K)]
    t_mem: list[int | None] = [None] * K
    saved: list[dict[int, dict]] = [{} for _ in range(K)]
    steps_run = [0] * K
    diverged: dict[int, DivergedError] = {}

    def finish(slot_members: list[int], step: int) -> None:
        with torch.no_grad():
            for i in slot_members:
                j = alive.index(i)
                for n, w in models[i].named_parameters():
                    w.copy_(params[n][j])
                steps_run[i] = step

    step = 0
    for step in range(steps + 1):
        logits = stacked_answer_logits(params, x_tr, cfg.n_heads, eq)                  # [A, N, V]
        A, N, V = logits.shape
        ce = F.cross_entropy(logits.to(ldt).reshape(A * N, V), y_tr.reshape(-1), reduction="none").view(A, N)
        loss = _masked_mean(ce, m_tr, n_tr)                                            # [A]
        with torch.no_grad():
            correct = ((logits[..., :p].argmax(-1) == y_tr) & m_tr).sum(1)
        loss_h, correct_h = loss.detach().tolist(), correct.tolist()
        bad = [i for j, i in enumerate(alive) if not math.isfinite(loss_h[j])]
        for j, i in enumerate(alive):
            if i in bad:
                diverged[i] = DivergedError(step, loss_h[j])
                continue
            tr_acc = correct_h[j] / n_tr[j]
            if t_mem[i] is None and tr_acc >= ACC:
                t_mem[i] = step
            if step in members[i].checkpoints:
                saved[i][step] = {n: params[n][j].detach().clone() for n in names}
        done = list(bad)
        if step % cfg.eval_every == 0 or step == steps:
            with torch.no_grad():
                lt = stacked_answer_logits(params, x_te, cfg.n_heads, eq)
                Ae, Ne, Ve = lt.shape
                te_loss = _masked_mean(F.cross_entropy(lt.float().reshape(Ae * Ne, Ve), y_te.reshape(-1),
                                                       reduction="none").view(Ae, Ne), m_te, n_te).tolist()
                te_correct = ((lt[..., :p].argmax(-1) == y_te) & m_te).sum(1).tolist()
                wn = torch.sqrt(sum(w.detach().pow(2).reshape(A, -1).sum(1) for w in params.values())).tolist()
            for j, i in enumerate(alive):
                if i in bad:
                    continue
                row = {"step": step, "train_loss": loss_h[j], "train_acc": correct_h[j] / n_tr[j],
                       "test_loss": te_loss[j], "test_acc": te_correct[j] / n_te[j], "weight_norm": wn[j]}
                rows[i].append(row)
                if members[i].log is not None:
                    members[i].log(**row)
                if members[i].stop_at_gen and row["test_acc"] >= ACC:
                    done.append(i)
        if step == steps:
            break
        if done:
            finish(done, step)
            keep = [j for j, i in enumerate(alive) if i not in done]
            if not keep:
                alive = []
                break
            params, opt = select_members(params, opt, keep)
            alive = [alive[j] for j in keep]
            (x_tr, y_tr, m_tr, n_tr), (x_te, y_te, m_te, n_te), wd = tensors_of(alive)
            # the loss of the kept members, recomputed on the smaller stack (same values; the graph of the old one
            # holds the dropped members' parameters)
            logits = stacked_answer_logits(params, x_tr, cfg.n_heads, eq)
            A, N, V = logits.shape
            ce = F.cross_entropy(logits.to(ldt).reshape(A * N, V), y_tr.reshape(-1), reduction="none").view(A, N)
            loss = _masked_mean(ce, m_tr, n_tr)
        for w in params.values():
            w.grad = None
        loss.sum().backward()
        lr = cfg.lr * (min((step + 1) / warm, 1.0) if warm else 1.0)  # LambdaLR of train_modular
        decay_members(params, lr, wd)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        if progress is not None:
            progress.update(1)
    if alive:
        finish(list(alive), step)
    if progress is not None:
        progress.close()
    return [{"data": m.data, "model": models[i], "curve": pd.DataFrame(rows[i]), "t_mem": t_mem[i],
             "checkpoints": saved[i], "steps_run": steps_run[i], "diverged": diverged.get(i)}
            for i, m in enumerate(members)]


def modular_member(prm: dict, ctx: PointContext, checkpoints: frozenset[int] = frozenset(),
                   stop_at_gen: bool = False) -> ModularMember:
    """A point's member of a stack: its split from ``derive_seed(ctx.seed, "split")``, its init from
    ``derive_seed(ctx.seed, "init")`` (the seeds of :func:`train_modular`), its weight decay, and ``ctx.log``."""
    return ModularMember(modular_data(prm["p"], prm["op"], prm["train_frac"], seed=derive_seed(ctx.seed, "split")),
                         weight_decay=float(prm["weight_decay"]), init_seed=derive_seed(ctx.seed, "init"),
                         checkpoints=checkpoints, stop_at_gen=stop_at_gen, log=ctx.log)


def checkpoint_steps(steps: int, n_log: int) -> list[int]:
    """Log-spaced steps in ``[1, steps]`` (``n_log`` of them, deduplicated) plus 0, every ``steps // 40`` and
    ``steps``."""
    log = np.unique(np.round(np.logspace(0, math.log10(max(steps, 1)), n_log)).astype(int))
    reg = np.arange(0, steps + 1, max(1, steps // 40))
    return sorted(set(int(s) for s in np.concatenate([[0, steps], log, reg]) if 0 <= s <= steps))


def progress_measures(model: GPT, data, checkpoints: dict[int, dict], n_key: int) -> tuple[pd.DataFrame, list[int], np.ndarray]:
    """Fourier progress measures at every checkpoint (key frequencies of the final checkpoint).

    Returns:
        ``(table, keys, final_shares)``: table columns ``step, restricted_loss`` (test pairs), ``excluded_loss``
        (training pairs), ``full_test_loss``, ``full_train_loss``, ``top6_share``, ``const_share``,
        ``weight_norm`` and ``share_k{k}`` for every frequency.
    """
    p = data.p
    dev = next(model.parameters()).device
    order = sorted(checkpoints)
    model.load_state_dict(checkpoints[order[-1]])
    final_shares, _ = embedding_spectrum(model.wte.weight[:p])
    keys = key_frequencies(final_shares, n_key)
    grid_ids = torch.stack([torch.arange(p, device=dev).repeat_interleave(p), torch.arange(p, device=dev).repeat(p),
                            torch.full((p * p,), p, device=dev)], 1)
    z = (grid_ids[:, 0] + grid_ids[:, 1]) % p
    # rows of data.input_ids -> index into the x-major grid (add: x * p + y)
    flat = (data.input_ids[:, 0] * p + data.input_ids[:, 1]).to(dev)
    tr, te = flat[data.train_idx.to(dev)], flat[data.test_idx.to(dev)]
    rows = []
    for s in order:
        model.load_state_dict(checkpoints[s])
        with torch.no_grad():
            L = answer_logits(model, grid_ids)[:, :p]
            restricted, excluded = fourier_logit_split(L.view(p, p, p), keys)
            restricted, excluded = restricted.view(p * p, p), excluded.view(p * p, p)
            shares, const = embedding_spectrum(model.wte.weight[:p])
            wn = float(torch.sqrt(sum((w ** 2).sum() for w in model.parameters())))
        rows.append({"step": s,
                     "restricted_loss": float(F.cross_entropy(restricted[te], z[te])),
                     "excluded_loss": float(F.cross_entropy(excluded[tr], z[tr])),
                     "full_test_loss": float(F.cross_entropy(L[te], z[te])),
                     "full_train_loss": float(F.cross_entropy(L[tr], z[tr])),
                     f"top{TOP_K}_share": top_share(shares, TOP_K), "const_share": const, "weight_norm": wn,
                     **{f"share_k{k + 1}": float(v) for k, v in enumerate(shares)}})
    return pd.DataFrame(rows), keys, final_shares


# ------------------------------------------------------------------------------------------ experiment


@register("grokking")
class Grokking(Experiment):
    """Grokking on modular arithmetic (Power et al. 2022; Nanda et al. 2023)."""

    claim = ("On modular addition a small transformer trained with weight decay fits its training set long before "
             "it generalises (grokking); its embedding concentrates on a few Fourier frequencies, and progress "
             "measures reveal memorisation, circuit formation and clean-up.")
    source = ("Power et al., arXiv 2201.02177, Fig. 1 and sec. 3; Nanda et al., 'Progress measures for grokking via "
              "mechanistic interpretability', arXiv 2301.05217, secs. 3-5")
    Config = GrokkingConfig
    time_estimate = {
        "smoke": "~5 s",
        "gpu": "p = 113, fraction 0.3, 25k full-batch steps, 3 seeds + 3 wd = 0 controls: 173 s wall "
               "measured 2026-11-26 on one H200, sharing it with 7 other lmsci processes (scripts/device_check.sh)",
        "quick": "3 seeds + 3 wd = 0 controls of 3,000 full-batch steps at p = 59, trained as one stack: 6.6 min wall "
                 "(394 s; 743 CPU-s user) measured 2026-11-26 with threads=2 alone on the 2-core machine; 12.3 min wall "
                 "at one thread beside another run (2026-11-23); before stacking 42 min wall there (one model after "
                 "another); the controls' progress measures (the null arm, issue 29) add seconds",
        "paper": "p = 113, 40k steps, 3 seeds + 3 controls: ~0.16 s a step on one CPU core = ~1.8 h per run (~11 h on "
                 "CPU), minutes per run on a GPU (the gpu preset: 25k steps, 173 s on a shared H200, measured)",
    }

    _NANDA = "Nanda et al., arXiv 2301.05217, sec. 3 and Fig. 2/7 (mainline run p = 113, frac 0.3)"
    _GEN_GATE = Gate("generalised", f"every main-run seed reaches test accuracy >= {ACC} within the budget")
    claims = [
        Claim(
            "delay",
            "Training accuracy reaches 0.99 long before test accuracy does (grokking): at least 5x earlier, in every "
            "seed.",
            _NANDA + "; Power et al., arXiv 2201.02177, Fig. 1",
            "train accuracy ~100% by ~1.4k steps, test accuracy ~100% after ~10-13k steps (Nanda); ~10^3 vs ~10^5 "
            "steps (Power, x/y mod 97)",
            "per seed, t_test / t_train: the first step with test accuracy >= 0.99 (evaluated every eval_every steps) "
            "over the first step with training accuracy >= 0.99 (every step); the smallest over seeds",
            f"in every seed (at least 3) t_test / t_train >= {DELAY_FACTOR:g} (a seed that never reaches test "
            f"accuracy {ACC} does not meet it)",
            gates=(Gate("memorised", f"every main-run seed reaches training accuracy >= {ACC}"),
                   Gate("generalised", f"every main-run seed reaches test accuracy >= {ACC} within the budget")),
            null="the weight_decay = 0 control (same model, seeds, splits and steps; the paper's control): without "
                 "weight decay there is no grokking, so it does not reach test accuracy 0.99 late",
        ),
        Claim(
            "no-wd-no-grok",
            "Without weight decay the same model and budget do not generalise: test accuracy stays below 0.5.",
            _NANDA + " (saved_runs/mod_addition_no_wd.pth); Power et al. sec. 3.3 / Fig. 2 (weight decay is the most "
            "effective intervention)",
            "no grokking within the budget with wd = 0",
            "the largest test accuracy over training (every eval_every steps) of the weight_decay = 0 control runs, "
            "same steps; the largest over control seeds",
            f"every control seed's test accuracy stays < {NOWD_MAX_ACC} throughout the budget",
            gates=(Gate("memorised", f"every control seed reaches training accuracy >= {ACC}"),),
            uncertainty="exact", min_seeds=1, kind="check",
        ),
        Claim(
            "fourier-sparse",
            "The embedding concentrates on a few key frequencies: the top 6 Fourier frequencies hold at least 80% of "
            "its squared norm at the end of training.",
            "Nanda et al., arXiv 2301.05217, sec. 4 and Fig. 3 (W_E sparse in the Fourier basis; 5 key frequencies)",
            "5 key frequencies {14, 35, 41, 42, 52} at p = 113 carry nearly all of W_E's norm",
            f"per seed, the share of ||W_E||_F^2 (residue tokens, orthonormal Fourier basis) in its top {TOP_K} "
            "frequencies at the last step; the smallest over seeds (mean with Student-t CI reported)",
            f"in every seed (at least 3) the top-{TOP_K} share >= {TOP_SHARE}",
            gates=(_GEN_GATE,),
            null=f"the same share of each main run's embedding at step 0 (its random initialisation): an isotropic "
                 f"random embedding spreads its norm over all (p-1)/2 frequencies",
        ),
        Claim(
            "restricted-before-test",
            "Restricted loss (key frequencies only) falls well before test loss, and excluded loss (key frequencies "
            "removed) rises during circuit formation.",
            "Nanda et al., arXiv 2301.05217, sec. 5.1-5.2 and Fig. 7",
            "restricted loss falls during circuit formation (1.4k-9.4k steps), test loss falls in clean-up (9.4k-13k); "
            "excluded loss rises during circuit formation",
            f"per seed, (a) t(test loss < {LOSS_X:g} nat) / t(restricted loss < {LOSS_X:g} nat), both on the test pairs at "
            "the checkpoint steps (key frequencies of the final model); (b) excluded loss (training pairs) at t_clean "
            "over excluded loss at t_mem (linear interpolation between checkpoints); the smallest of each over seeds",
            f"in every seed (at least 3) (a) >= {RESTRICTED_FACTOR:g} and (b) >= {EXCLUDED_FACTOR:g} (the phase "
            "boundaries t_mem, t_clean by the rule of the module docstring)",
            gates=(_GEN_GATE,),
            null="the weight_decay = 0 control (same model, seeds, splits and steps), its progress measures computed "
                 "as the main runs' (key frequencies of its own final embedding): no circuit forms without weight decay",
        ),
    ]

    # -- config and points -------------------------------------------------------------------
    def validate(self, cfg: GrokkingConfig) -> None:
        check_modular(cfg.p, cfg.train_frac, cfg.op)
        if cfg.d_model % cfg.n_heads:
            raise ConfigError("n_heads", cfg.n_heads, f"a divisor of d_model={cfg.d_model}")
        if cfg.n_key > (cfg.p - 1) // 2:
            raise ConfigError("n_key", cfg.n_key, f"<= (p-1)/2 = {(cfg.p - 1) // 2} frequencies")

    def points(self, cfg: GrokkingConfig) -> list[Point]:
        pts = [Point("grok", {"kind": "grok", "p": cfg.p, "op": cfg.op, "train_frac": cfg.train_frac,
                              "weight_decay": cfg.weight_decay})]
        if cfg.control:
            pts.append(Point("nowd", {"kind": "control", "p": cfg.p, "op": cfg.op, "train_frac": cfg.train_frac,
                                      "weight_decay": 0.0}))
        return pts

    # -- points: one stack ---------------------------------------------------------------------
    def groups(self, cfg: GrokkingConfig, points: list[Point]) -> list[list[Point]]:
        """Every seed of the main runs and of the wd = 0 controls trained as one stack."""
        return [points] if points else []

    def run_point(self, cfg: GrokkingConfig, point: Point, ctx: PointContext) -> dict:
        return self.run_group(cfg, [point], [ctx])[0]

    def run_group(self, cfg: GrokkingConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        ck = frozenset(checkpoint_steps(cfg.steps, cfg.n_checkpoints))
        members = [modular_member(pt.params, c, checkpoints=ck) for pt, c in zip(points, ctxs)]
        res = train_modular_stacked(cfg, members, cfg.steps, device=ctxs[0].device,
                                    progress=ctxs[0].progress(cfg.steps, f"{len(points)} stacked"))
        return [self._row(cfg, pt, c, r) for pt, c, r in zip(points, ctxs, res)]

    def _row(self, cfg: GrokkingConfig, point: Point, ctx: PointContext, r: dict) -> dict:
        """One point's results row from its trained member (curves and measures written to its artifact dir)."""
        kind = point.params["kind"]
        prm = point.params
        if r["diverged"] is not None:
            r["curve"].to_csv(ctx.artifact_dir / "curve.csv", index=False)
            return {**prm, "status": "diverged", "diverged_step": r["diverged"].step}
        curve = r["curve"]
        curve.to_csv(ctx.artifact_dir / "curve.csv", index=False)
        phases = detect_phases(curve["step"].values, curve["test_loss"].values, curve["test_acc"].values, r["t_mem"])
        row = {**prm, "t_train": r["t_mem"], "t_test": phases["t_gen"], "t_clean": phases["t_clean"],
               "delay_ratio": (phases["t_gen"] / max(r["t_mem"], 1)) if (phases["t_gen"] is not None and r["t_mem"] is not None) else None,
               "final_train_acc": float(curve["train_acc"].iloc[-1]), "final_test_acc": float(curve["test_acc"].iloc[-1]),
               "max_test_acc": float(curve["test_acc"].max()), "final_test_loss": float(curve["test_loss"].iloc[-1]),
               "final_weight_norm": float(curve["weight_norm"].iloc[-1]), "n_train": int(r["data"].train_idx.numel()),
               "steps_run": r["steps_run"]}
        if kind in ("grok", "control"):  # the control's measures are the null arm of restricted-before-test
            meas, keys, shares = progress_measures(r["model"], r["data"], r["checkpoints"], cfg.n_key)
            meas.to_csv(ctx.artifact_dir / "measures.csv", index=False)
            st = meas["step"].values
            t_r = first_step(st, meas["restricted_loss"].values, lambda v: v < LOSS_X)
            t_t = first_step(st, meas["full_test_loss"].values, lambda v: v < LOSS_X)
            ex = meas["excluded_loss"].values
            ex_mem = float(np.interp(r["t_mem"], st, ex)) if r["t_mem"] is not None else None
            ex_clean = float(np.interp(phases["t_clean"], st, ex)) if phases["t_clean"] is not None else None
            init = meas[meas["step"] == meas["step"].min()].iloc[0]
            row.update(key_freqs=" ".join(map(str, keys)), top6_share=top_share(shares, TOP_K),
                       init_top6_share=float(init[f"top{TOP_K}_share"]),
                       top6_freqs=" ".join(map(str, key_frequencies(shares, TOP_K))),
                       t_restricted_below_x=t_r, t_test_loss_below_x=t_t,
                       restricted_ratio=(t_t / max(t_r, 1)) if (t_r is not None and t_t is not None) else None,
                       excluded_at_mem=ex_mem, excluded_at_clean=ex_clean,
                       excluded_ratio=(ex_clean / ex_mem) if (ex_mem and ex_clean is not None) else None)
        return row

    # -- verdicts ----------------------------------------------------------------------------
    def verdicts(self, cfg: GrokkingConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        out: list[Verdict] = []
        res = results.copy()
        if "seed_index" not in res:
            res["seed_index"] = 0
        kind = res["kind"] if "kind" in res else pd.Series([], dtype=str)

        def num(v):
            return None if v is None or (isinstance(v, float) and math.isnan(v)) or pd.isna(v) else float(v)

        main = res[kind == "grok"].sort_values("seed_index")
        ctl = res[kind == "control"].sort_values("seed_index")

        def col(df, name):
            return [num(v) for v in df[name]] if name in df else [None] * len(df)

        # the null arm of delay and restricted-before-test: the wd = 0 control, the same statistics and rules
        null_delay = null_restr = None
        null_det: dict = {}
        if len(ctl):
            c_tr, c_te = col(ctl, "t_train"), col(ctl, "t_test")
            c_ratio = [(b / max(a, 1)) if (a is not None and b is not None) else None for a, b in zip(c_tr, c_te)]
            null_delay = (None if any(r is None for r in c_ratio) else min(c_ratio),
                          bool(all(r is not None and r >= DELAY_FACTOR for r in c_ratio)))
            c_rr, c_er = col(ctl, "restricted_ratio"), col(ctl, "excluded_ratio")
            if "restricted_ratio" in ctl or "excluded_ratio" in ctl:
                ok = all(r is not None for r in c_rr + c_er) and min(c_rr) >= RESTRICTED_FACTOR \
                    and min(c_er) >= EXCLUDED_FACTOR
                null_restr = (None if any(r is None for r in c_rr) else min(c_rr), bool(ok))
            null_det = {int(s): {"t_train": a, "t_test": b, "delay_ratio": r, "restricted_ratio": rr,
                                 "excluded_ratio": e, "max_test_acc": num(m)}
                        for s, a, b, r, rr, e, m in zip(ctl["seed_index"], c_tr, c_te, c_ratio, c_rr, c_er,
                                                        col(ctl, "max_test_acc"))}
        if len(main):
            n = len(main)
            t_train = [num(v) for v in main["t_train"]]
            t_test = [num(v) for v in main["t_test"]]
            memorised = all(v is not None for v in t_train)
            generalised = all(v is not None for v in t_test)
            gen_gate = (f"{sum(v is not None for v in t_test)}/{n} seeds", generalised)
            ratios = [(b / max(a, 1)) if (a is not None and b is not None) else None for a, b in zip(t_train, t_test)]
            per_seed = {int(s): {"t_train": a, "t_test": b, "ratio": None if r is None else round(r, 3)}
                        for s, a, b, r in zip(main["seed_index"], t_train, t_test, ratios)}
            gates = {"memorised": (f"{sum(v is not None for v in t_train)}/{n}", memorised), "generalised": gen_gate}
            done = [r for r in ratios if r is not None]
            if not done:
                out.append(self.judge(cfg, "delay", value=None, passed=None, n_seeds=n, gates=gates,
                                      why_not_computed="no seed reached both training and test accuracy 0.99",
                                      null=null_delay, details={"per_seed": per_seed, "null_arm_wd0": null_det}))
            else:
                worst = min(done)
                st = across_seeds(done)
                out.append(self.judge(
                    cfg, "delay", value=worst, passed=bool(worst >= DELAY_FACTOR and generalised), n_seeds=n,
                    null=null_delay,
                    ci=st.ci, ci_kind=st.kind + " of the mean ratio; the rule reads the smallest", gates=gates,
                    details={"per_seed": per_seed, "null_arm_wd0": null_det, "t_train_mean": float(np.mean([v for v in t_train if v is not None])),
                             "t_test_mean": float(np.mean([v for v in t_test if v is not None]))},
                    note="" if worst >= DELAY_FACTOR else
                    f"a delay below {DELAY_FACTOR:g}x at p = {cfg.p}, fraction {cfg.train_frac}, lr {cfg.lr}; Nanda's "
                    "setting (p = 113, fraction 0.3, lr 1e-3: the paper preset) has a ~7-9x delay"))
            # Fourier sparsity
            shares = [num(v) for v in main.get("top6_share", pd.Series([None] * n))]
            if all(v is not None for v in shares):
                st = across_seeds(shares)
                init = col(main, "init_top6_share")
                null_f = None if any(v is None for v in init) else (min(init), bool(min(init) >= TOP_SHARE))
                out.append(self.judge(
                    cfg, "fourier-sparse", value=min(shares), passed=bool(min(shares) >= TOP_SHARE), n_seeds=n,
                    null=null_f,
                    ci=st.ci, ci_kind=st.kind + " of the mean; the rule reads the smallest",
                    gates={"generalised": gen_gate},
                    details={"per_seed": {int(s): {"top6_share": round(v, 4), "top6_freqs": f, "key_freqs": k}
                                          for s, v, f, k in zip(main["seed_index"], shares, main["top6_freqs"],
                                                                main["key_freqs"])}, "mean": st.mean,
                             "null_arm_random_init_top6_share_per_seed": init,
                             "wd0_control_final_top6_share_per_seed (reported)": col(ctl, "top6_share")}))
            # restricted / excluded
            rr = [num(v) for v in main.get("restricted_ratio", pd.Series([None] * n))]
            er = [num(v) for v in main.get("excluded_ratio", pd.Series([None] * n))]
            det = {int(s): {"t_restricted<X": num(a), "t_test_loss<X": num(b), "restricted_ratio": r,
                            "t_mem": num(tm), "t_clean": num(tc), "excluded_at_mem": num(em), "excluded_at_clean": num(ec),
                            "excluded_ratio": e}
                   for s, a, b, r, tm, tc, em, ec, e in zip(
                       main["seed_index"], main.get("t_restricted_below_x", [None] * n),
                       main.get("t_test_loss_below_x", [None] * n), rr, main["t_train"], main["t_clean"],
                       main.get("excluded_at_mem", [None] * n), main.get("excluded_at_clean", [None] * n), er)}
            if all(v is not None for v in rr) and all(v is not None for v in er):
                ok = min(rr) >= RESTRICTED_FACTOR and min(er) >= EXCLUDED_FACTOR
                out.append(self.judge(
                    cfg, "restricted-before-test", value=min(rr), passed=bool(ok), n_seeds=n, null=null_restr,
                    ci_kind="smallest over seeds (every seed must show it); value = restricted ratio (a)",
                    gates={"generalised": gen_gate},
                    details={"min_restricted_ratio": min(rr), "min_excluded_ratio": min(er), "loss_level_nats": LOSS_X,
                             "per_seed": det, "null_arm_wd0": null_det}))
            else:
                out.append(self.judge(cfg, "restricted-before-test", value=None, passed=None, n_seeds=n,
                                      gates={"generalised": gen_gate}, null=null_restr,
                                      why_not_computed=f"a seed's restricted or test loss never fell below {LOSS_X:g} nat, "
                                                       "or a phase boundary was not reached",
                                      details={"per_seed": det}))
        # control (a design check: the null arm of delay and restricted-before-test is a null)
        if len(ctl):
            mx = [float(v) for v in ctl["max_test_acc"]]
            mem = all(num(v) is not None for v in ctl["t_train"])
            out.append(self.judge(
                cfg, "no-wd-no-grok", value=max(mx), passed=bool(max(mx) < NOWD_MAX_ACC), n_seeds=len(ctl),
                ci_kind=f"largest over {len(ctl)} control seed(s)",
                gates={"memorised": (f"{sum(num(v) is not None for v in ctl['t_train'])}/{len(ctl)}", mem)},
                details={"per_seed": {int(s): {"max_test_acc": round(m, 4), "final_test_acc": round(float(f), 4),
                                               "t_train": num(t)}
                                      for s, m, f, t in zip(ctl["seed_index"], mx, ctl["final_test_acc"], ctl["t_train"])},
                         "steps": cfg.steps}))
        return out

    # -- figures and report ------------------------------------------------------------------
    def _csv(self, run: RunDir, pid: str, name: str) -> pd.DataFrame | None:
        path = run.path / "points" / pid / name
        return pd.read_csv(path) if path.exists() else None

    def figures(self, cfg: GrokkingConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        figs: list[Figure] = []
        res = results if "kind" in results else results.assign(kind="grok")
        main = res[res["kind"] == "grok"]
        if len(main):
            r0 = main.sort_values("seed_index").iloc[0] if "seed_index" in main else main.iloc[0]
            c = self._csv(run, r0["point"], "curve.csv")
            m = self._csv(run, r0["point"], "measures.csv")
            if c is not None and m is not None:
                fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
                s = c["step"].clip(lower=1)
                ax = axes[0]
                ax.plot(s, c["train_loss"], label="train loss")
                ax.plot(s, c["test_loss"], label="test loss")
                ms = m["step"].clip(lower=1)
                ax.plot(ms, m["restricted_loss"], "o-", ms=2, label="restricted loss (test)")
                ax.plot(ms, m["excluded_loss"], "s-", ms=2, label="excluded loss (train)")
                ax.set_yscale("log")
                ax.set_ylabel("cross-entropy (nats)")
                ax2 = axes[1]
                ax2.plot(s, c["train_acc"], label="train accuracy")
                ax2.plot(s, c["test_acc"], label="test accuracy")
                ax2.set_ylabel("accuracy")
                ax3 = axes[2]
                ax3.plot(ms, m[f"top{TOP_K}_share"], label=f"top-{TOP_K} Fourier share of W_E")
                ax3b = ax3.twinx()
                ax3b.plot(s, c["weight_norm"], color="C3", label="weight norm")
                ax3b.set_ylabel("total weight norm", color="C3")
                ax3.set_ylabel("share of ||W_E||^2")
                for a in axes:
                    a.set_xscale("log")
                    a.set_xlabel("step (log)")
                    t_mem, t_clean, t_gen = (r0.get("t_train"), r0.get("t_clean"), r0.get("t_test"))
                    ends = [v for v in (t_mem, t_clean, t_gen) if v is not None and not pd.isna(v)]
                    bounds = [1] + [max(1, float(v)) for v in ends]
                    for (lo, hi), col, lab in zip(zip(bounds, bounds[1:]), ("C0", "C1", "C2"),
                                                  ("memorisation", "circuit formation", "clean-up")):
                        a.axvspan(lo, hi, color=col, alpha=0.08, label=lab if a is axes[1] else None)
                    a.grid(True, alpha=0.3)
                axes[0].legend(fontsize=7)
                axes[1].legend(fontsize=7)
                axes[2].legend(fontsize=7, loc="center left")
                fig.suptitle(f"(x + y) mod {cfg.p}, fraction {cfg.train_frac}, wd {cfg.weight_decay} (seed 0); "
                             f"key frequencies {r0.get('key_freqs', '')}", fontsize=10)
                figs.append(save_figure(fig, run, "progress_measures.png",
                                        "Losses (train, test, restricted, excluded), accuracies and the embedding's "
                                        "top-6 Fourier share with the weight norm on a log-step axis; shaded: the "
                                        "three phases detected by the registered rule (cf. Nanda et al. Fig. 7)"))
                sh = m[[col for col in m if col.startswith("share_k")]].iloc[-1].values
                fig, ax = plt.subplots(figsize=(7, 3.2))
                ax.bar(np.arange(1, len(sh) + 1), sh)
                ax.set_xlabel("frequency k")
                ax.set_ylabel("share of ||W_E||^2")
                ax.set_title(f"embedding Fourier spectrum at step {int(m['step'].iloc[-1])} (seed 0)", fontsize=10)
                figs.append(save_figure(fig, run, "fourier_spectrum.png",
                                        "Share of the embedding's squared norm per Fourier frequency at the end (cf. "
                                        "Nanda et al. Fig. 3)"))
        # all seeds + control accuracy
        fig, ax = plt.subplots(figsize=(7, 4))
        any_curve = False
        for _, r in res[res["kind"].isin(["grok", "control"])].iterrows():
            c = self._csv(run, r["point"], "curve.csv")
            if c is None:
                continue
            any_curve = True
            col = "C0" if r["kind"] == "grok" else "C3"
            tag = f"wd={r['weight_decay']:g} seed {int(r.get('seed_index', 0) or 0)}"
            ax.plot(c["step"].clip(lower=1), c["test_acc"], color=col, alpha=0.8, label="test " + tag)
            ax.plot(c["step"].clip(lower=1), c["train_acc"], color=col, ls=":", alpha=0.8, label="train " + tag)
        if any_curve:
            ax.set_xscale("log")
            ax.set_xlabel("step (log)")
            ax.set_ylabel("accuracy")
            ax.legend(fontsize=6)
            ax.grid(True, alpha=0.3)
            figs.append(save_figure(fig, run, "accuracy_all_seeds.png",
                                    "Train (dotted) and test accuracy of every seed with weight decay and of the wd = 0 "
                                    "control"))
        else:
            plt.close(fig)
        return figs

    def report_sections(self, cfg: GrokkingConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        cols = ["point", "kind", "seed_index", "p", "op", "train_frac", "weight_decay", "n_train", "t_train", "t_clean",
                "t_test", "delay_ratio", "max_test_acc", "final_test_acc", "final_test_loss", "final_weight_norm",
                "top6_share", "init_top6_share", "top6_freqs", "key_freqs", "t_restricted_below_x", "t_test_loss_below_x",
                "restricted_ratio", "excluded_at_mem", "excluded_at_clean", "excluded_ratio", "steps_run"]
        text = (f"## Method\n\n(x + y) mod {cfg.p}, training fraction {cfg.train_frac}; Nanda et al.'s one-layer "
                f"transformer (d_model {cfg.d_model}, {cfg.n_heads} heads, d_mlp {cfg.d_mlp}, ReLU, no LayerNorm) with "
                f"their init; full-batch AdamW lr {cfg.lr}, weight decay {cfg.weight_decay}, betas ({cfg.beta1}, "
                f"{cfg.beta2}), {cfg.warmup_steps} warmup steps, {cfg.steps} steps, {cfg.loss_dtype} loss on the answer token. "
                f"Training accuracy every step, test loss/accuracy every {cfg.eval_every} steps, Fourier progress "
                f"measures at {cfg.n_checkpoints} log-spaced checkpoints plus one every {max(1, cfg.steps // 40)} steps. "
                f"Phases: memorisation until training accuracy >= 0.99 (t_train); circuit formation until the test loss "
                f"falls to half its peak after t_train (t_clean); clean-up until test accuracy >= 0.99 (t_test). "
                "The wd = 0 control trains the same model, seeds and steps without weight decay; it is the null arm of "
                "delay and restricted-before-test (its progress measures are computed as the main runs'), and "
                "init_top6_share (the embedding at step 0) is the null arm of fourier-sparse. All runs are trained "
                "as one stack (train_modular_stacked; same seeds and curves as one model at a time).\n\n## Runs\n\n")
        return text + markdown_table(results[[c for c in cols if c in results]])


@register("grokking-fractions")
class GrokkingFractions(Experiment):
    """Power et al.'s sweep: steps to generalise against the training fraction (x/y mod p)."""

    claim = ("On x/y mod p, the steps a transformer needs to generalise (test accuracy 0.99) fall as the training "
             "fraction grows.")
    source = "Power et al., 'Grokking', arXiv 2201.02177, Fig. 1 right and sec. 3.1"
    Config = GrokkingFractionsConfig
    time_estimate = {
        "smoke": "~5 s",
        "gpu": "x/y mod 97, 6 fractions x 3 seeds, each capped at 20k full-batch steps: ~8 min wall (3x the 169 s "
               "measured for 1 seed on 2026-11-26 on one H200, sharing it with 7 other lmsci processes; estimated)",
        "quick": "6 fractions of x/y mod 59, 1 seed (reported; the claim is decided at gpu and paper), trained as one "
                 "stack, each leaving it at test accuracy 0.99 or after 3,000 steps: 8.7 min wall (7.7 CPU-min user) "
                 "measured 2026-11-23 at one thread beside another run on the loaded 2-core machine; before stacking "
                 "23 min wall there",
        "paper": "x/y mod 97, 6 fractions x 3 seeds, up to 1e5 full-batch steps each: ~0.15 s a step on one CPU core "
                 "(days on CPU), hours on a GPU (the gpu preset caps at 20k steps, 3 seeds; estimated)",
    }
    claims = [
        Claim(
            "fraction-sweep",
            "Steps to generalise fall as the training fraction grows (x/y mod p).",
            "Power et al., arXiv 2201.02177, Fig. 1 right (x/y mod 97: steps to validation accuracy 99% vs training "
            "fraction)",
            "steps to 99% validation accuracy fall steeply from ~10^5 near 25-30% data to ~10^3-10^4 at 50-80%",
            "Spearman rank correlation between the training fraction and the step at which test accuracy first "
            "reaches 0.99 (a run that does not generalise within the step cap is ranked after every run that did), "
            "over the sweep runs (n_seeds per fraction)",
            f"Spearman <= {SPEARMAN_MAX} over at least 4 fractions, with at least 3 seeds per fraction (decided at "
            "the gpu and paper presets only)",
            gates=(Gate("some-generalise", "at least 3 fractions generalise within the step cap"),),
            uncertainty="within-run", presets=("gpu", "paper"),
            null="the same Spearman with the training fractions permuted across the runs (one permutation drawn from "
                 "the master seed): the steps no longer belong to their fractions",
        ),
    ]

    def validate(self, cfg: GrokkingFractionsConfig) -> None:
        for f in cfg.train_fracs:
            check_modular(cfg.p, f, cfg.op, frac_field="train_fracs")
        if len(set(cfg.train_fracs)) != len(cfg.train_fracs):
            raise ConfigError("train_fracs", cfg.train_fracs, "distinct fractions")
        if cfg.d_model % cfg.n_heads:
            raise ConfigError("n_heads", cfg.n_heads, f"a divisor of d_model={cfg.d_model}")

    def points(self, cfg: GrokkingFractionsConfig) -> list[Point]:
        return [Point(f"{cfg.op}_p{cfg.p}_f{f:g}", {"kind": "sweep", "p": cfg.p, "op": cfg.op, "train_frac": float(f),
                                                   "weight_decay": cfg.weight_decay}) for f in cfg.train_fracs]

    def groups(self, cfg: GrokkingFractionsConfig, points: list[Point]) -> list[list[Point]]:
        """Every fraction (and seed) as one stack: a run leaves it when it generalises."""
        return [points] if points else []

    def run_point(self, cfg: GrokkingFractionsConfig, point: Point, ctx: PointContext) -> dict:
        return self.run_group(cfg, [point], [ctx])[0]

    def run_group(self, cfg: GrokkingFractionsConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        members = [modular_member(pt.params, c, stop_at_gen=True) for pt, c in zip(points, ctxs)]
        res = train_modular_stacked(cfg, members, cfg.steps, device=ctxs[0].device,
                                    progress=ctxs[0].progress(cfg.steps, f"{len(points)} stacked"))
        rows = []
        for pt, c, r in zip(points, ctxs, res):
            prm = pt.params
            r["curve"].to_csv(c.artifact_dir / "curve.csv", index=False)
            if r["diverged"] is not None:
                rows.append({**prm, "status": "diverged", "diverged_step": r["diverged"].step})
                continue
            t_gen = first_step(r["curve"]["step"], r["curve"]["test_acc"], lambda v: v >= ACC)
            rows.append({**prm, "t_train": r["t_mem"], "t_test": t_gen, "steps_run": r["steps_run"],
                         "final_test_acc": float(r["curve"]["test_acc"].iloc[-1]),
                         "n_train": int(r["data"].train_idx.numel())})
        return rows

    def verdicts(self, cfg: GrokkingFractionsConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        def num(v):
            return None if v is None or pd.isna(v) else float(v)

        out: list[Verdict] = []
        sw = results.copy()
        if "seed_index" not in sw:
            sw["seed_index"] = 0
        if not len(sw):
            return out
        cap = cfg.steps + 1
        fr = [float(v) for v in sw["train_frac"]]
        st_ = [num(v) if num(v) is not None else cap for v in sw["t_test"]]
        n_gen_fr = sw[sw["t_test"].notna()]["train_frac"].nunique()
        n_fr = len(set(fr))
        rho = spearman(fr, st_)
        # the null arm: the fractions permuted across the runs (a fixed permutation drawn from the master seed)
        perm = np.random.default_rng(derive_seed(cfg.seed, self.name, "null-permutation")).permutation(len(fr))
        fr_null = [fr[i] for i in perm]
        rho_null = spearman(fr_null, st_)
        null = (rho_null if math.isfinite(rho_null) else None,
                bool(n_fr >= 4 and math.isfinite(rho_null) and rho_null <= SPEARMAN_MAX))
        table: dict[str, list] = {}
        for f, t in sorted(zip(fr, st_)):
            table.setdefault(f"{f:g}", []).append(None if t == cap else int(t))
        if n_fr < 4 or not math.isfinite(rho):
            out.append(self.judge(cfg, "fraction-sweep", value=rho if math.isfinite(rho) else None, passed=None,
                                  gates={"some-generalise": (n_gen_fr, n_gen_fr >= 3)}, null=null,
                                  n_seeds=int(sw["seed_index"].nunique()),
                                  why_not_computed=f"{n_fr} fraction(s); the rule needs at least 4 (or the "
                                                   "steps are all equal)", details={"steps_to_generalise": table}))
        else:
            out.append(self.judge(
                cfg, "fraction-sweep", value=rho, passed=bool(rho <= SPEARMAN_MAX), n_seeds=int(sw["seed_index"].nunique()),
                ci_kind=f"Spearman over {len(sw)} runs ({n_fr} fractions)",
                gates={"some-generalise": (n_gen_fr, n_gen_fr >= 3)}, null=null,
                details={"steps_to_generalise": table, "op": cfg.op, "p": cfg.p, "cap": cfg.steps,
                         "null_arm_spearman_permuted_fractions": null[0]}))
        return out

    def figures(self, cfg: GrokkingFractionsConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        figs: list[Figure] = []
        sw = results
        if not len(sw):
            return figs
        fig, ax = plt.subplots(figsize=(6, 4))
        gen = sw[sw["t_test"].notna()]
        ax.plot(gen["train_frac"], gen["t_test"], "o", label="steps to test accuracy 0.99")
        ng = sw[sw["t_test"].isna()]
        if len(ng):
            ax.plot(ng["train_frac"], [cfg.steps] * len(ng), "v", color="C3",
                    label=f"not generalised by {cfg.steps}")
        ax.plot(sw["train_frac"], sw["t_train"], "s", color="C2", alpha=0.6, label="steps to train accuracy 0.99")
        ax.set_yscale("log")
        ax.set_xlabel("training fraction")
        ax.set_ylabel("steps")
        ax.set_title(f"x {cfg.op} y mod {cfg.p} (Power et al. Fig. 1 right)", fontsize=10)
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
        figs.append(save_figure(fig, run, "fraction_sweep.png",
                                "Steps to generalise (test accuracy 0.99) against the training fraction"))
        return figs

    def report_sections(self, cfg: GrokkingFractionsConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        cols = ["point", "seed_index", "p", "op", "train_frac", "n_train", "t_train", "t_test", "steps_run",
                "final_test_acc"]
        return (f"## Method\n\nx {cfg.op} y mod {cfg.p} at training fractions {cfg.train_fracs}; the model and optimiser "
                f"of `grokking` (Nanda et al.'s one-layer transformer, full-batch AdamW lr {cfg.lr}, weight decay "
                f"{cfg.weight_decay}); each run stops when test accuracy reaches 0.99 (checked every {cfg.eval_every} "
                f"steps) or after {cfg.steps} steps; all fractions are trained as one stack that a run leaves when it "
                f"stops.\n\n## Runs\n\n") + markdown_table(
            results[[c for c in cols if c in results]])
