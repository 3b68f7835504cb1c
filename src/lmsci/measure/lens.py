"""The logit lens and the tuned lens: read the residual stream of every layer through the model's own unembedding.

Source: nostalgebraist 2020, "interpreting GPT: the logit lens" (LessWrong): decode the residual stream after block
``l`` with the final norm and the unembedding, ``lens_l(h) = lm_head(final_norm(h))``. Belrose et al. 2023, "Eliciting
Latent Predictions from Transformers with the Tuned Lens", arXiv 2303.08112, sec. 3: a learned affine *translator*
per layer, ``tuned_l(h) = lm_head(final_norm(h + A_l h + b_l))``, ``A_l`` and ``b_l`` initialised at zero (the
identity map), trained to minimise ``KL(p_final || p_lens)`` over tokens with the model (final norm and unembedding
included) frozen; the last layer needs no translator (its lens is the model's output). Optimiser as the official
code (AlignmentResearch/tuned-lens, ``tuned_lens/scripts/ingredients.py``, ``Optimizer``): SGD with Nesterov momentum
0.9, learning rate ``lr_scale * (1 - momentum)`` with ``lr_scale = 1``, weight decay 1e-3, linear decay to 0 without
warm-up, 250 steps (paper sec. 3 and App. C); Adam (``amsgrad``, lr ``1e-3 * lr_scale``, 20% linear warm-up) as the
alternative there.

Null (``shuffle_targets=True``): a tuned lens trained on targets permuted across token positions (layer ``l``'s
state at token ``i`` is trained towards the final distribution at token ``pi(i)``); it learns the marginal next-token
distribution but nothing position-specific, so its KL to the *true* final distribution should be far above a real
tuned lens's.

Layers are the residual stream leaving each block, ``blocks.{l}.resid_post`` for ``l = 0 .. n_layers-1`` (``[batch,
seq, d_model]``); at the last layer both lenses equal the model (KL 0). Works on an lmsci
:class:`~lmsci.models.gpt.GPT` (``ln_f``, ``lm_head``), an :class:`~lmsci.models.hf.HFModel` or a ``transformers``
causal LM of a family the architecture map knows (:func:`lmsci.models.arch.arch_of`; Llama: ``model.norm``,
``lm_head``; GPT-2: ``transformer.ln_f``, ``lm_head``).

Why not the ``tuned-lens`` package: ``pip install --dry-run tuned-lens`` (0.2.0) would add ``torchdata`` 0.11.0,
``wandb``, ``datasets``, ``plotly`` and the OpenTelemetry exporters; its training loop
(``tuned_lens/scripts/ingredients.py``) imports ``torchdata.dataloader2`` and ``torchdata.datapipes``, which
torchdata removed in 0.10 (the 0.11.0 wheel has neither module), and the older torchdata releases that have them pin
older torch versions; its ``TunedLens.from_model`` takes a ``transformers`` ``PreTrainedModel`` only (no lmsci GPT).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmsci.errors import ConfigError, DivergedError
from lmsci.models.device import device_of

OPTIMIZERS = ("sgd", "adam")


def as_lensable(model: Any) -> Any:
    """``model`` as something with ``hooks``/``run_with_cache`` and lmsci hook names: an lmsci GPT or an
    :class:`~lmsci.models.hf.HFModel` (a raw ``transformers`` causal LM is wrapped).

    Raises:
        ConfigError: anything else.
    """
    from lmsci.models.gpt import GPT
    from lmsci.models.hf import HFModel

    if isinstance(model, (GPT, HFModel)):
        return model
    if isinstance(model, nn.Module) and hasattr(model, "config") and hasattr(model, "get_output_embeddings"):
        return HFModel(model, None, type(model).__name__)
    raise ConfigError("model", type(model).__name__, "an lmsci GPT, an HFModel or a transformers causal LM")


def lens_parts(model: Any) -> tuple[int, nn.Module, nn.Module]:
    """``(n_layers, final_norm, lm_head)`` of the model (architecture map)."""
    from lmsci.models.arch import arch_of

    arch = arch_of(as_lensable(model))
    return arch.n_layers, arch.final_norm(), arch.lm_head()


@torch.no_grad()
def residual_stream(model: Any, ids: Tensor) -> tuple[Tensor, Tensor]:
    """One forward: ``(h [n_layers, batch, seq, d_model], logits [batch, seq, vocab])`` with ``h[l]`` the residual
    stream leaving block ``l`` (``blocks.{l}.resid_post``), float32."""
    m = as_lensable(model)
    L = lens_parts(m)[0]
    names = [f"blocks.{l}.resid_post" for l in range(L)]
    logits, cache = m.run_with_cache(ids.to(device_of(m)), names)
    return torch.stack([cache[n].float() for n in names]), logits.float()


@contextlib.contextmanager
def _frozen(*modules: nn.Module) -> Iterator[None]:
    params = [p for mod in modules for p in mod.parameters()]
    flags = [p.requires_grad for p in params]
    try:
        for p in params:
            p.requires_grad_(False)
        yield
    finally:
        for p, f in zip(params, flags):
            p.requires_grad_(f)


def decode(model: Any, h: Tensor) -> Tensor:
    """The logit lens: ``lm_head(final_norm(h))``, ``h [..., d_model]`` -> logits ``[..., vocab]`` (float32)."""
    _, norm, head = lens_parts(model)
    w = head.weight
    return head(norm(h.to(w.dtype))).float()


class TunedLens(nn.Module):
    """Affine translators ``h -> h + A_l h + b_l`` for layers ``0 .. n_layers-2`` (identity at init; the last layer
    has none). Belrose et al. 2023, arXiv 2303.08112, eq. 4-5.

    Args:
        n_layers, d_model: the model's. Parameters: ``translators[l].weight`` ``[d_model, d_model]`` (``A_l``),
        ``.bias`` ``[d_model]`` (``b_l``), all zero at init.
    """

    def __init__(self, n_layers: int, d_model: int):
        super().__init__()
        if int(n_layers) < 1 or int(d_model) < 1:
            raise ConfigError("(n_layers, d_model)", (n_layers, d_model), "positive integers")
        self.n_layers, self.d_model = int(n_layers), int(d_model)
        self.translators = nn.ModuleList(nn.Linear(self.d_model, self.d_model) for _ in range(self.n_layers - 1))
        for t in self.translators:
            nn.init.zeros_(t.weight)
            nn.init.zeros_(t.bias)

    def transform(self, h: Tensor, layer: int) -> Tensor:
        """``h + A_l h + b_l`` (``h`` at the last layer unchanged), ``[..., d_model]``, float32."""
        if not 0 <= layer < self.n_layers:
            raise ConfigError("layer", layer, f"0..{self.n_layers - 1}")
        h = h.float()
        return h if layer == self.n_layers - 1 else h + self.translators[layer](h)


def _lr_lambda(kind: str, steps: int):
    warm = steps // 5 if kind == "adam" else 0

    def f(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (steps - step) / max(1, steps - warm))

    return f


def _kl(target_logp: Tensor, logits: Tensor) -> Tensor:
    """Mean over rows of ``KL(p || q)`` (nats), ``target_logp [n, V]`` log-probabilities, ``logits [n, V]``."""
    return (target_logp.exp() * (target_logp - F.log_softmax(logits, -1))).sum(-1).mean()


def train_tuned_lens(model: Any, batches: Iterable[Tensor], *, steps: int = 250, batch_tokens: int = 512,
                     optimizer: str = "sgd", lr_scale: float = 1.0, momentum: float = 0.9, weight_decay: float = 1e-3,
                     shuffle_targets: bool = False, seed: int = 0) -> tuple[TunedLens, dict[str, list[float]]]:
    """Train a :class:`TunedLens` on the residual streams of ``batches`` (Belrose et al. 2023, sec. 3; the official
    optimiser, see the module docstring): gathers every layer's states once (``n_layers * n_tokens * d_model``
    floats on the model's device) and calls :func:`fit_tuned_lens` on them.

    Args:
        model: an lmsci GPT, HFModel or transformers causal LM (frozen; its parameters get no gradient).
        batches: ``[batch, seq]`` long token ids (no padding).
        steps, batch_tokens, optimizer, lr_scale, momentum, weight_decay, shuffle_targets, seed: as
            :func:`fit_tuned_lens`.

    Returns:
        ``(lens, {"step", "loss"})``; ``loss`` is the summed per-layer KL of the step's batch.

    Raises:
        ConfigError: bad arguments or no tokens (before any work); DivergedError: a non-finite loss.
    """
    _check_fit(optimizer, steps, batch_tokens, lr_scale, momentum, weight_decay)
    m = as_lensable(model)
    hs = [residual_stream(m, ids)[0].flatten(1, 2) for ids in batches]
    if not hs:
        raise ConfigError("batches", 0, "at least one batch of token ids")
    return fit_tuned_lens(m, torch.cat(hs, 1), steps=steps, batch_tokens=batch_tokens, optimizer=optimizer,
                          lr_scale=lr_scale, momentum=momentum, weight_decay=weight_decay,
                          shuffle_targets=shuffle_targets, seed=seed)


def _check_fit(optimizer: str, steps: int, batch_tokens: int, lr_scale: float, momentum: float,
               weight_decay: float) -> None:
    if optimizer not in OPTIMIZERS:
        raise ConfigError("optimizer", optimizer, ", ".join(OPTIMIZERS))
    if int(steps) < 1 or int(batch_tokens) < 1 or not lr_scale > 0 or not 0 <= momentum < 1 or weight_decay < 0:
        raise ConfigError("(steps, batch_tokens, lr_scale, momentum, weight_decay)",
                          (steps, batch_tokens, lr_scale, momentum, weight_decay),
                          "steps >= 1, batch_tokens >= 1, lr_scale > 0, 0 <= momentum < 1, weight_decay >= 0")


def _check_layers(states: Tensor, layers: Sequence[int] | None, L: int) -> list[int]:
    """The layers of ``states [k, N, d]`` (default all ``L``), increasing, the last one ``L - 1``."""
    layers = list(range(L)) if layers is None else [int(x) for x in layers]
    if (states.ndim != 3 or states.shape[0] != len(layers) or not layers or layers[-1] != L - 1
            or any(b <= a for a, b in zip(layers, layers[1:])) or layers[0] < 0 or states.shape[1] < 1):
        raise ConfigError("(states, layers)", (tuple(states.shape), layers),
                          f"states [len(layers), n_tokens >= 1, d_model] at increasing layers ending with the "
                          f"last layer {L - 1}")
    return layers


def fit_tuned_lens(model: Any, states: Tensor, layers: Sequence[int] | None = None, *, steps: int = 250,
                   batch_tokens: int = 512, optimizer: str = "sgd", lr_scale: float = 1.0, momentum: float = 0.9,
                   weight_decay: float = 1e-3, shuffle_targets: bool = False,
                   seed: int = 0) -> tuple[TunedLens, dict[str, list[float]]]:
    """Train a :class:`TunedLens` on residual streams gathered beforehand (e.g. cached on disk).

    Each step draws ``batch_tokens`` tokens (with replacement, generator seeded with ``seed``) and minimises the sum
    over ``layers[:-1]`` of ``KL(p_final || p_lens_l)`` (nats), one backward per layer; ``p_final`` is the model's
    output, decoded from the last layer's states. The translators are independent, so training a subset of layers
    gives the same translators as training all of them and keeping those; the other layers stay the identity.

    Args:
        model: an lmsci GPT, HFModel or transformers causal LM (frozen).
        states: ``[len(layers), n_tokens, d_model]`` the residual stream (``blocks.{l}.resid_post``) at ``layers``.
        layers: increasing layer indices ending with ``n_layers - 1`` (default: every layer).
        steps, batch_tokens: optimisation length and tokens per step.
        optimizer: ``"sgd"`` (Nesterov, lr ``lr_scale * (1 - momentum)``, linear decay) or ``"adam"`` (amsgrad,
            lr ``1e-3 * lr_scale``, 20% warm-up then linear decay).
        shuffle_targets: the null lens (targets permuted across token positions with ``seed``).

    Returns:
        ``(lens, {"step", "loss"})``; ``loss`` is the summed per-layer KL of the step's batch.

    Raises:
        ConfigError: bad arguments (before any work); DivergedError: a non-finite loss.
    """
    _check_fit(optimizer, steps, batch_tokens, lr_scale, momentum, weight_decay)
    m = as_lensable(model)
    L, norm, head = lens_parts(m)
    layers = _check_layers(states, layers, L)
    H = states
    N, d = H.shape[1], H.shape[2]
    lens = TunedLens(L, d).to(H.device)
    params = [p for l in layers[:-1] for p in lens.translators[l].parameters()]
    if not params:  # only the last layer: nothing to train
        return lens.eval(), {"step": [], "loss": []}
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr_scale * (1 - momentum), momentum=momentum, nesterov=True,
                              weight_decay=weight_decay)
    else:
        opt = torch.optim.Adam(params, lr=1e-3 * lr_scale, betas=(momentum, 0.999), amsgrad=True,
                               weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(optimizer, int(steps)))
    g = torch.Generator().manual_seed(int(seed))
    perm = torch.randperm(N, generator=g).to(H.device) if shuffle_targets else None
    hist: dict[str, list[float]] = {"step": [], "loss": []}
    with _frozen(norm, head):
        for step in range(int(steps)):
            idx = torch.randint(0, N, (int(batch_tokens),), generator=g).to(H.device)
            with torch.no_grad():
                tgt = F.log_softmax(decode(m, H[-1, idx if perm is None else perm[idx]]), -1)
            opt.zero_grad(set_to_none=True)
            total = 0.0
            for i, l in enumerate(layers[:-1]):
                loss = _kl(tgt, decode(m, lens.transform(H[i, idx], l)))
                if not torch.isfinite(loss):
                    raise DivergedError(step, float(loss), f"tuned-lens KL at layer {l}")
                loss.backward()
                total += float(loss.detach())
            opt.step()
            sched.step()
            hist["step"].append(step)
            hist["loss"].append(total)
    return lens.eval(), hist


@torch.no_grad()
def states_kl(model: Any, states: Tensor, layers: Sequence[int] | None = None, lens: TunedLens | None = None,
              chunk: int = 256) -> np.ndarray:
    """Mean ``KL(p_final || p_lens_l)`` over the tokens of cached residual streams, per layer of ``layers``:
    ``[len(layers)]`` (nats/token; the last entry, the model's own output, is 0). ``lens=None``: the logit lens.

    Args:
        states: ``[len(layers), n_tokens, d_model]`` as :func:`fit_tuned_lens`. chunk: tokens decoded at once.

    Raises:
        ConfigError: bad ``states``/``layers``; a lens of another depth.
    """
    m = as_lensable(model)
    L = lens_parts(m)[0]
    layers = _check_layers(states, layers, L)
    if lens is not None and lens.n_layers != L:
        raise ConfigError("lens.n_layers", lens.n_layers, f"the model's n_layers={L}")
    N = states.shape[1]
    tot = torch.zeros(len(layers), dtype=torch.float64)
    for a in range(0, N, int(chunk)):
        logp = F.log_softmax(decode(m, states[-1, a:a + int(chunk)]), -1)
        for i, l in enumerate(layers):
            h = states[i, a:a + int(chunk)]
            tot[i] += float(_kl(logp, decode(m, h if lens is None else lens.transform(h, l)))) * logp.shape[0]
    return (tot / N).numpy()


@torch.no_grad()
def lens_logits(model: Any, h: Tensor, lens: TunedLens | None = None) -> Tensor:
    """Logits of every layer ``[n_layers, ..., vocab]`` from residual streams ``h [n_layers, ..., d_model]``: the
    logit lens (``lens=None``) or a tuned lens."""
    L = h.shape[0]
    if lens is not None and lens.n_layers != L:
        raise ConfigError("lens.n_layers", lens.n_layers, f"the model's n_layers={L}")
    return torch.stack([decode(model, h[l] if lens is None else lens.transform(h[l], l)) for l in range(L)])


@torch.no_grad()
def lens_kl(model: Any, batches: Iterable[Tensor], lens: TunedLens | None = None) -> np.ndarray:
    """Mean ``KL(p_final || p_lens_l)`` over every token of ``batches``, per layer: ``[n_layers]`` (nats; the last
    entry is 0). ``lens=None``: the logit lens.

    Raises:
        ConfigError: no tokens; a lens of another depth.
    """
    m = as_lensable(model)
    tot, n = None, 0
    for ids in batches:
        h, logits = residual_stream(m, ids)
        logp = F.log_softmax(logits, -1).flatten(0, 1)  # [N, V]
        if lens is not None and lens.n_layers != h.shape[0]:
            raise ConfigError("lens.n_layers", lens.n_layers, f"the model's n_layers={h.shape[0]}")
        # one layer's logits at a time ([B, T, V]; all layers at once would be n_layers times that)
        per = torch.stack([_kl(logp, decode(m, h[l] if lens is None else lens.transform(h[l], l)).flatten(0, 1))
                           for l in range(h.shape[0])]) * logp.shape[0]
        tot = per if tot is None else tot + per
        n += logp.shape[0]
    if tot is None:
        raise ConfigError("batches", 0, "at least one batch of token ids")
    return (tot / n).cpu().numpy()


@torch.no_grad()
def answer_layers(model: Any, ids: Tensor, positions: Sequence[int] | Tensor, lens: TunedLens | None = None,
                  answers: Sequence[int] | Tensor | None = None) -> dict[str, np.ndarray]:
    """For each prompt, the layer at which the answer becomes the lens's top-1 prediction at ``positions``.

    Args:
        ids: ``[n, seq]`` prompts (right padding is harmless: causal). positions: ``[n]`` the position read (the
            prompt's last token). answers: ``[n]`` token ids (default: the model's own top-1 at that position).

    Returns:
        ``{"first_top1": [n]`` first layer whose top-1 is the answer (``n_layers`` when none),
        ``"stays_top1": [n]`` first layer from which the answer stays top-1 through the last layer
        (``n_layers`` when the model itself does not rank it first), ``"answer": [n]``,
        ``"answer_rank": [n_layers, n]`` rank of the answer at every layer (0 = top-1)}``.
    """
    m = as_lensable(model)
    pos = torch.as_tensor(positions, dtype=torch.long)
    if pos.shape != (ids.shape[0],):
        raise ConfigError("positions", tuple(pos.shape), f"one position per prompt ({ids.shape[0]})")
    h, logits = residual_stream(m, ids)
    rows = torch.arange(ids.shape[0])
    pos = pos.to(h.device)
    last = logits[rows, pos]  # [n, V]
    ans = last.argmax(-1) if answers is None else torch.as_tensor(answers, dtype=torch.long).to(last.device)
    ll = lens_logits(m, h[:, rows, pos], lens)  # [L, n, V]
    a = ll.gather(-1, ans.view(1, -1, 1).expand(ll.shape[0], -1, 1))
    rank = (ll > a).sum(-1)  # [L, n]
    top = (rank == 0).cpu().numpy()
    L = top.shape[0]
    first = np.where(top.any(0), top.argmax(0), L)
    stays = np.full(top.shape[1], L)
    for j in range(top.shape[1]):
        if top[-1, j]:
            off = np.flatnonzero(~top[:, j])
            stays[j] = 0 if len(off) == 0 else off[-1] + 1
    return {"first_top1": first, "stays_top1": stays, "answer": ans.cpu().numpy(), "answer_rank": rank.cpu().numpy()}


__all__ = ["OPTIMIZERS", "as_lensable", "lens_parts", "residual_stream", "decode", "TunedLens", "train_tuned_lens",
           "fit_tuned_lens", "states_kl", "lens_logits", "lens_kl", "answer_layers"]
