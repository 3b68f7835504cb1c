"""Sparse autoencoders (SAEs) on a model's activations, and their standard measures.

Two kinds, both with a unit-norm decoder (rows of ``W_dec`` projected back to norm 1 after every step, and the
gradient component parallel to each row removed before it: Bricken et al. 2023, "Towards Monosemanticity",
transformer-circuits.pub, "Problem Setup"):

* ``"relu"``: ``z = ReLU(W_enc (x - b_dec) + b_enc)``, loss ``||x - x_hat||^2 + l1_coeff * ||z||_1`` (Bricken et al.
  2023; Cunningham et al. 2023, arXiv 2309.08600, eq. 1-3).
* ``"topk"``: ``z = ReLU(TopK_k(W_enc (x - b_dec) + b_enc))`` (only the ``k`` largest pre-activations kept), loss the
  normalised MSE ``||x - x_hat||^2 / ||x - mean(x)||^2`` plus, optionally, the AuxK loss
  ``aux_coeff * ||e - e_hat||^2 / ||e - mean(e)||^2`` where ``e = x - x_hat`` and ``e_hat`` is the reconstruction from
  the ``aux_k`` largest pre-activations of the *dead* latents (not fired for ``dead_tokens`` training tokens)
  (Gao et al. 2024, "Scaling and evaluating sparse autoencoders", arXiv 2406.04093, sec. 2.3 and A.2; ``aux_coeff =
  1/32`` there). Initialisation as Gao et al. sec. A.1: ``W_enc = W_dec^T``, ``b_dec`` = the data mean (they use the
  geometric median), ``b_enc = 0``.

Inputs are rescaled inside the SAE by one scalar so that the mean squared norm of a training activation is ``d_in``
(Anthropic's April 2024 update to the Monosemanticity recipe), so ``l1_coeff`` does not depend on the activations'
units; codes are in these rescaled units, reconstructions in the original ones.

Measures (:func:`sae_metrics`, :func:`spliced_nll`): L0 (mean number of active latents per activation), fraction of
variance unexplained ``FVU = sum ||x - x_hat||^2 / sum ||x - mean(x)||^2``, dead latents (fraction of latents never
active on an evaluation set), and the NLL increase (nats/token) when the reconstruction replaces the activation in the
model's forward pass (with the zero- and mean-ablation NLLs and the share of the loss recovered,
``(nll_zero - nll_spliced) / (nll_zero - nll_clean)``).

Activations come from :func:`gather_activations` through lmsci's hook names (``blocks.{i}.resid_post`` ...) on an
lmsci :class:`~lmsci.models.gpt.GPT` or an :class:`~lmsci.models.hf.HFModel` (architecture map).

Why not SAELens: ``pip install --dry-run sae-lens`` (6.54.12) against this environment would add 50 packages, among
them ``transformer-lens`` 3.9.0 (a second model/hook stack beside lmsci's), ``wandb``, ``datasets``, ``plotly``,
``nltk``, ``statsmodels``, ``py2store``/``babe`` and the OpenTelemetry exporters; its training runner
(``LanguageModelSAETrainingRunner``) gathers activations through a TransformerLens ``HookedTransformer`` and its own
activation store, not from a tensor of activations or lmsci hook points. The two training objectives above are a
few dozen lines, tested here against planted ground truth (``tests/measure/test_sae.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmsci.errors import ConfigError, DivergedError
from lmsci.models.device import device_of

KINDS = ("relu", "topk")


# ------------------------------------------------------------------------------------ activations


def _ids_and_mask(batch: Any) -> tuple[Tensor, Tensor | None]:
    if isinstance(batch, Mapping):
        return batch["input_ids"], batch.get("attention_mask")
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[0], Tensor):
        return batch[0], batch[1]
    if isinstance(batch, Tensor):
        return batch, None
    raise ConfigError("batches", type(batch).__name__, "[batch, seq] long tensors, (ids, mask) pairs or "
                      "{'input_ids', 'attention_mask'} dicts")


@torch.no_grad()
def gather_activations(model: Any, batches: Iterable[Any], hook_name: str, *, dtype: torch.dtype = torch.float32,
                       device: str | torch.device = "cpu") -> Tensor:
    """The activations of hook point ``hook_name`` at every (unmasked) position of ``batches``, ``[n, d]``.

    Args:
        model: an lmsci GPT or an :class:`~lmsci.models.hf.HFModel` (anything with ``run_with_cache(ids, names)``;
            HF models take lmsci hook names through the architecture map, or module paths).
        batches: iterable of ``input_ids [batch, seq]`` long tensors, ``(input_ids, mask)`` pairs (``mask [batch,
            seq]``, nonzero = keep) or dicts with ``input_ids``/``attention_mask``.
        hook_name: e.g. ``"blocks.1.resid_post"`` (``[batch, seq, d_model]``); trailing dimensions beyond the
            sequence are flattened (``blocks.0.attn.z`` gives ``d = n_heads * d_head``).
        dtype, device: of the returned tensor (activations are gathered on the model's device).

    Returns:
        ``[n, d]``, rows in batch-major, position-minor order of the kept positions.

    Raises:
        ConfigError: ``hook_name`` not a string; a batch of another type; no positions at all.
        UnknownNameError: a hook name the model does not have (from the model's hook API).
    """
    if not isinstance(hook_name, str):
        raise ConfigError("hook_name", hook_name, "one hook name, e.g. 'blocks.0.resid_post'")
    dev = device_of(model)
    was = model.training
    model.eval()
    out = []
    try:
        for batch in batches:
            ids, mask = _ids_and_mask(batch)
            _, cache = model.run_with_cache(ids.to(dev), [hook_name])
            h = cache[hook_name]
            h = h.reshape(h.shape[0] * h.shape[1], -1)
            if mask is not None:
                h = h[mask.reshape(-1).to(h.device) != 0]
            out.append(h.to(device=device, dtype=dtype))
    finally:
        model.train(was)
    if not out or sum(len(h) for h in out) == 0:
        raise ConfigError("batches", "no positions", "at least one unmasked position")
    return torch.cat(out)


# ------------------------------------------------------------------------------------ the SAE


class SparseAutoencoder(nn.Module):
    """A one-layer sparse autoencoder with a unit-norm decoder (see the module docstring).

    Args:
        d_in: activation width ``d``. d_sae: number of latents ``m``. kind: ``"relu"`` or ``"topk"``.
        k: active latents per input for ``"topk"`` (``1 <= k <= d_sae``); ignored for ``"relu"``.
        seed: initialisation seed (the global RNG is not used).

    Parameters: ``W_enc [d_in, d_sae]``, ``b_enc [d_sae]``, ``W_dec [d_sae, d_in]`` (unit rows: the dictionary),
    ``b_dec [d_in]``; buffer ``scale`` (input rescaling, set by :func:`train_sae`).

    Raises:
        ConfigError: non-positive sizes, an unknown kind, ``k`` out of range.
    """

    def __init__(self, d_in: int, d_sae: int, kind: str = "topk", k: int | None = None, seed: int = 0):
        super().__init__()
        if int(d_in) < 1 or int(d_sae) < 1:
            raise ConfigError("(d_in, d_sae)", (d_in, d_sae), "positive integers")
        if kind not in KINDS:
            raise ConfigError("kind", kind, ", ".join(KINDS))
        if kind == "topk" and (k is None or not 1 <= int(k) <= int(d_sae)):
            raise ConfigError("k", k, f"an integer in [1, d_sae={d_sae}] for a TopK SAE")
        self.d_in, self.d_sae, self.kind = int(d_in), int(d_sae), kind
        self.k = int(k) if kind == "topk" else None
        g = torch.Generator().manual_seed(int(seed))
        w = torch.randn(self.d_sae, self.d_in, generator=g)
        w = w / w.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(w)
        self.W_enc = nn.Parameter(w.T.clone())
        self.b_enc = nn.Parameter(torch.zeros(self.d_sae))
        self.b_dec = nn.Parameter(torch.zeros(self.d_in))
        self.register_buffer("scale", torch.ones(()))

    def pre_acts(self, x: Tensor) -> Tensor:
        """Encoder pre-activations ``[n, d_sae]`` of activations ``x [n, d_in]`` (original units)."""
        return (x * self.scale - self.b_dec) @ self.W_enc + self.b_enc

    def activate(self, pre: Tensor) -> Tensor:
        """Codes from pre-activations: ReLU, or ReLU of the top ``k`` (others 0)."""
        if self.kind == "relu":
            return F.relu(pre)
        top = pre.topk(self.k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, top.indices, F.relu(top.values))

    def encode(self, x: Tensor) -> Tensor:
        """Codes ``[n, d_sae]`` (non-negative, rescaled units) of ``x [n, d_in]``."""
        return self.activate(self.pre_acts(x))

    def decode(self, z: Tensor) -> Tensor:
        """Reconstruction ``[n, d_in]`` in the original units from codes ``z [n, d_sae]``."""
        return (z @ self.W_dec + self.b_dec) / self.scale

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x [n, d_in]`` -> ``(x_hat [n, d_in], z [n, d_sae])``; leading dimensions beyond one are kept."""
        shape = x.shape
        z = self.encode(x.reshape(-1, shape[-1]))
        return self.decode(z).reshape(shape), z.reshape(*shape[:-1], self.d_sae)

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Project the dictionary rows ``W_dec[j]`` back to unit norm."""
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-8))

    @torch.no_grad()
    def remove_parallel_grad(self) -> None:
        """Remove from ``W_dec.grad`` the component parallel to each row (Bricken et al. 2023)."""
        if self.W_dec.grad is not None:
            g = self.W_dec.grad
            g.sub_((g * self.W_dec).sum(1, keepdim=True) * self.W_dec)


def _nmse(x_hat: Tensor, x: Tensor) -> Tensor:
    return (x_hat - x).pow(2).sum() / (x - x.mean(0)).pow(2).sum().clamp_min(1e-12)


def _check_train_args(acts: Tensor, kind: str, d_sae: int, k: int | None, steps: int, batch_size: int,
                      lr: float, l1_coeff: float, aux_k: int | None) -> None:
    if not isinstance(acts, Tensor) or acts.dim() != 2 or acts.shape[0] < 2 or not acts.is_floating_point():
        raise ConfigError("acts", getattr(acts, "shape", type(acts).__name__), "a float tensor [n >= 2, d_in]")
    if not torch.isfinite(acts).all():
        raise ConfigError("acts", "non-finite values", "finite activations")
    if kind not in KINDS:
        raise ConfigError("kind", kind, ", ".join(KINDS))
    if int(steps) < 1 or int(batch_size) < 1:
        raise ConfigError("(steps, batch_size)", (steps, batch_size), "positive integers")
    if not lr > 0 or l1_coeff < 0:
        raise ConfigError("(lr, l1_coeff)", (lr, l1_coeff), "lr > 0 and l1_coeff >= 0")
    if aux_k is not None and not 1 <= int(aux_k) <= int(d_sae):
        raise ConfigError("aux_k", aux_k, f"None or an integer in [1, d_sae={d_sae}]")


def train_sae(acts: Tensor, d_sae: int, *, kind: str = "topk", k: int | None = None, l1_coeff: float = 1.0,
              steps: int = 2000, batch_size: int = 256, lr: float = 1e-3, aux_k: int | None = None,
              aux_coeff: float = 1 / 32, dead_tokens: int = 10_000, seed: int = 0,
              log: Callable[[dict], None] | None = None) -> tuple[SparseAutoencoder, dict[str, list[float]]]:
    """Train a :class:`SparseAutoencoder` on activations ``acts [n, d_in]`` (Adam, constant ``lr``; minibatches drawn
    with replacement by a generator seeded with ``seed``).

    Args:
        d_sae: latents ``m``. kind: ``"relu"`` (loss: squared error summed over ``d_in`` + ``l1_coeff`` * L1 of the
            codes, both in rescaled units where ``E||x||^2 = d_in``, batch means; Bricken et al. 2023; with planted
            features ``l1_coeff`` ~ 1 gave an L0 near the true one, 0.3 twice it)
            or ``"topk"`` (normalised MSE, Gao et al. arXiv 2406.04093). k: active latents (TopK only).
        steps, batch_size, lr: optimisation (Adam, betas (0.9, 0.999)).
        aux_k: TopK only: the AuxK loss on the ``aux_k`` largest pre-activations of dead latents (None: off).
        aux_coeff: the AuxK weight (Gao et al.: 1/32). dead_tokens: a latent is dead after this many training
            tokens without firing (Gao et al. use 10M tokens at their scale).
        log: called every 100 steps with ``{"step", "loss", "fvu", "l0", "dead"}``.

    Returns:
        ``(sae, history)``; history holds per-100-step ``step``, ``loss``, ``fvu`` (batch), ``l0`` (batch) lists.

    Raises:
        ConfigError: malformed ``acts`` or arguments (before any training).
        DivergedError: a non-finite loss.
    """
    _check_train_args(acts, kind, d_sae, k, steps, batch_size, lr, l1_coeff, aux_k)
    n, d = acts.shape
    sae = SparseAutoencoder(d, d_sae, kind, k, seed=seed).to(acts.device)
    x_all = acts.float()
    with torch.no_grad():
        mu = x_all.mean(0)
        sae.scale.fill_(math.sqrt(d / x_all.pow(2).sum(1).mean().clamp_min(1e-12).item()))
        sae.b_dec.copy_(mu * sae.scale)
    opt = torch.optim.Adam(sae.parameters(), lr=lr)
    g = torch.Generator(device="cpu").manual_seed(int(seed) + 1)
    since_fired = torch.zeros(d_sae, dtype=torch.long, device=acts.device)
    hist: dict[str, list[float]] = {"step": [], "loss": [], "fvu": [], "l0": []}
    for step in range(int(steps)):
        idx = torch.randint(0, n, (int(batch_size),), generator=g).to(acts.device)
        x = x_all[idx]
        pre = sae.pre_acts(x)
        z = sae.activate(pre)
        x_hat = sae.decode(z)
        xs, xs_hat = x * sae.scale, x_hat * sae.scale  # rescaled units
        if kind == "relu":
            loss = (xs_hat - xs).pow(2).sum(1).mean() + l1_coeff * z.abs().sum(1).mean()
        else:
            loss = _nmse(xs_hat, xs)
        fired = (z > 0).any(0)
        since_fired = torch.where(fired, torch.zeros_like(since_fired), since_fired + len(x))
        dead = since_fired >= dead_tokens
        if kind == "topk" and aux_k is not None and bool(dead.any()):
            ka = min(int(aux_k), int(dead.sum()))
            dpre = pre.masked_fill(~dead, float("-inf")).topk(ka, dim=-1)
            za = torch.zeros_like(pre).scatter(-1, dpre.indices, F.relu(dpre.values))
            e = (xs - xs_hat).detach()
            loss = loss + aux_coeff * _nmse(za @ sae.W_dec, e)
        if not torch.isfinite(loss):
            raise DivergedError(step, float(loss), "SAE training loss")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sae.remove_parallel_grad()
        opt.step()
        sae.normalize_decoder()
        if step % 100 == 0 or step == steps - 1:
            with torch.no_grad():
                rec = {"step": step, "loss": float(loss), "fvu": float(_nmse(xs_hat, xs)),
                       "l0": float((z > 0).float().sum(1).mean()), "dead": float(dead.float().mean())}
            for key in hist:
                hist[key].append(rec[key])
            if log is not None:
                log(rec)
    return sae.eval(), hist


# ------------------------------------------------------------------------------------ measures


@torch.no_grad()
def sae_metrics(sae: SparseAutoencoder, acts: Tensor, batch_size: int = 4096) -> dict[str, float]:
    """L0, FVU and dead latents of ``sae`` on evaluation activations ``acts [n, d_in]``.

    Returns:
        ``{"l0"}`` mean active latents per row; ``{"fvu"}`` ``sum ||x - x_hat||^2 / sum ||x - mean(x)||^2``
        (dimensionless; 0 perfect, 1 = no better than the mean); ``{"mse"}`` mean squared error per row (original
        units squared, summed over ``d_in``); ``{"dead_fraction"}`` share of latents never active on ``acts``;
        ``{"n"}`` rows.

    Raises:
        ConfigError: ``acts`` not ``[n, sae.d_in]``.
    """
    if not isinstance(acts, Tensor) or acts.dim() != 2 or acts.shape[1] != sae.d_in or len(acts) == 0:
        raise ConfigError("acts", getattr(acts, "shape", type(acts).__name__), f"a tensor [n, d_in={sae.d_in}]")
    x = acts.float().to(sae.W_dec.device)
    err, l0, fired = 0.0, 0.0, torch.zeros(sae.d_sae, dtype=torch.bool, device=x.device)
    for i in range(0, len(x), batch_size):
        xb = x[i:i + batch_size]
        x_hat, z = sae(xb)
        err += float((x_hat - xb).pow(2).sum())
        l0 += float((z > 0).float().sum())
        fired |= (z > 0).any(0)
    total = float((x - x.mean(0)).pow(2).sum())
    return {"l0": l0 / len(x), "fvu": err / max(total, 1e-30), "mse": err / len(x),
            "dead_fraction": float((~fired).float().mean()), "n": len(x)}


def model_nll_fn(model: Any, batches: Iterable[Tensor], hook_name: str) -> Callable[[Callable[[Tensor], Tensor] | None], float]:
    """A forward-with-hook callable for :func:`spliced_nll`: ``fn(replace)`` returns the mean next-token NLL (nats/token)
    of ``model`` on ``batches`` (``[batch, seq]`` long, no padding; every position but the last predicts the next)
    with ``replace(activation)`` substituted at hook point ``hook_name`` (``None``: unchanged).

    ``model``: an lmsci GPT or an :class:`~lmsci.models.hf.HFModel` (lmsci hook names through the architecture map);
    the activation passed to ``replace`` has the hook's shape (``[batch, seq, d]``).
    """
    batches = [b for b in batches]
    dev = device_of(model)

    @torch.no_grad()
    def fn(replace: Callable[[Tensor], Tensor] | None) -> float:
        hooks = {} if replace is None else {hook_name: lambda x, hook: replace(x).to(x.dtype)}
        total, count = 0.0, 0
        was = model.training
        model.eval()
        try:
            with model.hooks(hooks):
                for ids in batches:
                    ids = ids.to(dev)
                    logits = model(ids)[:, :-1].float()
                    total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                                   reduction="sum"))
                    count += ids[:, 1:].numel()
        finally:
            model.train(was)
        return total / max(count, 1)

    return fn


def spliced_nll(nll_fn: Callable[[Callable[[Tensor], Tensor] | None], float], sae: SparseAutoencoder,
                mean_act: Tensor | None = None) -> dict[str, float]:
    """The model's NLL with the SAE reconstruction spliced in at the hooked activation, against the clean run and
    ablations (Bricken et al. 2023 "loss recovered"; Gao et al. arXiv 2406.04093 sec. 4.1 "downstream loss").

    Args:
        nll_fn: ``nll_fn(replace) -> mean NLL (nats/token)`` with ``replace(activation [..., d_in]) -> same shape``
            applied at the hook (``None``: clean run); :func:`model_nll_fn` builds one for an lmsci GPT or HF model.
        sae: a trained SAE of width ``d_in``, on the device of the hooked activation.
        mean_act: ``[d_in]`` mean activation for the mean-ablation reference (default: ``sae.b_dec / sae.scale``,
            the training mean at initialisation, close to the data mean).

    Returns:
        ``{"nll_clean", "nll_spliced", "nll_increase", "nll_zero_ablation", "nll_mean_ablation",
        "loss_recovered"}``; NLLs in nats/token; ``loss_recovered = (zero - spliced) / (zero - clean)``
        (1 = as good as the clean model; NaN when zero ablation does not change the NLL).
    """
    mu = (sae.b_dec / sae.scale).detach() if mean_act is None else mean_act

    def recon(x: Tensor) -> Tensor:
        return sae(x.float())[0]

    clean = nll_fn(None)
    spliced = nll_fn(recon)
    zero = nll_fn(lambda x: torch.zeros_like(x))
    mean = nll_fn(lambda x: mu.to(x.device, x.dtype).expand_as(x))
    gap = zero - clean
    return {"nll_clean": clean, "nll_spliced": spliced, "nll_increase": spliced - clean, "nll_zero_ablation": zero,
            "nll_mean_ablation": mean, "loss_recovered": (zero - spliced) / gap if abs(gap) > 1e-12 else float("nan")}


__all__ = ["KINDS", "SparseAutoencoder", "gather_activations", "train_sae", "sae_metrics", "model_nll_fn",
           "spliced_nll"]
