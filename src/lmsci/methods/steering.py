"""A steering harness for causal LMs: attach, score and generate with named steers; two baselines.

One harness serves LM-Steer (:class:`lmsci.methods.lm_steer.LMSteer`, a linear map on the input of the
unembedding) and the two baselines defined here, so that they are trained with the same loss on the same
data, attached the same way and driven by the same steer values:

* :class:`LogitOffset` -- a vocabulary bias ``b_k [vocab_size]`` added to the logits,
  ``logits <- logits + eps * sum_k s_k b_k``; the ``offset`` adaptor of the LM-Steer code
  (``Glaciohound/LM-Steer@265982f:lm_steer/models/steers.py``), trained with the LM-Steer loss.
* :class:`ActAdd` -- a steering vector ``a_k [d_model]`` added to the residual stream leaving block
  ``layer`` at every position, ``x <- x + eps * sum_k s_k a_k`` (activation addition, Turner et al. 2023,
  arXiv 2308.10248). Two ways to obtain ``a``: trained with the LM-Steer loss
  (:func:`~lmsci.methods.steer_training.train_intervention`), or :meth:`ActAdd.from_contrast`, the difference
  of the mean residual activations of positive and negative texts (the mean-difference form of Rimsky et al.
  2023, arXiv 2312.06681; Turner et al. contrast a single prompt pair, "Love" - "Hate", and inject at the first
  positions only -- here the vector is added at every position, which is what the steer values then scale).

Every steer holds ``K`` named steers (``names``; with ``dummy=True`` the last one is ``"dummy"``, see
:mod:`lmsci.methods.lm_steer`) and acts with a steer-value tensor ``s``: ``[K]`` (one setting for the whole
batch) or ``[batch, K]`` (one per example). The scalar ``epsilon`` multiplies every steer (LM-Steer's
``eps0 = 1e-3``; 1.0 for the baselines). The steer values are the scale knob: ``k * s`` scales the
intervention by ``k`` (the knob an experiment turns to match fluency cost across methods).

Models: an lmsci :class:`~lmsci.models.gpt.GPT`, an :class:`~lmsci.models.hf.HFModel`, or a raw
``transformers`` causal LM (wrapped by :func:`~lmsci.methods.steerable.as_steerable`). Where each site is on
each model:

==================  ===========================================  ==========================================
site                lmsci GPT                                    Hugging Face causal LM
==================  ===========================================  ==========================================
``unembed_input``   hook point ``final`` (input of ``lm_head``;  forward pre-hook on
                    also fires in ``sum_nll``)                   ``get_output_embeddings()`` (``lm_head``)
``logits``          forward hook on ``lm_head``                  forward hook on ``get_output_embeddings()``
``residual``        hook point ``blocks.{layer}.resid_post``     output of block ``layer`` (architecture
                                                                 map, :mod:`lmsci.models.arch`)
==================  ===========================================  ==========================================

Functions (shapes: ``B`` batch, ``T`` sequence, ``K`` steers, ``V`` vocabulary, ``d`` = ``d_model``):

* :func:`steering` ``(model, steer, values)`` -- context manager: the steer acts inside the block.
* :func:`~lmsci.methods.steer_training.train_intervention` ``(model, steer, data, values, ...)`` (in
  :mod:`lmsci.methods.steer_training`) -- next-token cross-entropy of the steered LM, padding masked, LM frozen.
* :func:`token_logprobs` ``(model, input_ids, steer, values)`` -> ``[B, T-1]`` log P(x_t | x_<t) (nats).
* :func:`generate` ``(model, input_ids, steer, values, max_new_tokens, **kw)`` -> ``[B, T + new]`` with the
  model's own ``generate`` and the steer active.
* :func:`save_steer` / :func:`load_steer` (``steer.json`` + ``steer.safetensors``).
* The model adapters and data helpers are in :mod:`lmsci.methods.steerable`: :func:`as_steerable`,
  :func:`mean_nll` (the training loss), :func:`unembed_inputs` ``-> [N, d]`` (final hidden states),
  :func:`pad_batch`, :func:`as_token_lists`, :func:`hidden_size`, :func:`output_embeddings`.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.methods.steerable import (as_steerable, as_token_lists, hidden_size, lm_head, logits_of, masked_nll,
                                     n_layers, pad_batch, vocab_size)
from lmsci.models.device import device_of
from lmsci.models.gpt import GPT
from lmsci.models.hf import HFModel

SITES = ("unembed_input", "logits", "residual")


# ------------------------------------------------------------------------------------ steers


class Steer(nn.Module):
    """Base class of the steers: ``K`` named steers acting at one ``site`` of a model.

    Args:
        names: the steer names (unique, non-empty strings).
        dummy: append a steer named ``"dummy"`` (set to 1 for every training example; see
            :mod:`lmsci.methods.lm_steer`).
        epsilon: scalar multiplying every steer.

    Subclasses set ``site`` and implement :meth:`shift` (the activation at the site -> the steered one).
    """

    site: str = ""
    kinds: dict[str, type[Steer]] = {}

    def __init_subclass__(cls, **kw: Any):
        super().__init_subclass__(**kw)
        Steer.kinds[cls.__name__] = cls

    def config(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this steer's shape (for :func:`save_steer`)."""
        return {"names": list(self.names), "dummies": list(self.dummies), "epsilon": self.epsilon}

    def __init__(self, names: Sequence[str], dummy: bool = True, epsilon: float = 1.0):
        super().__init__()
        names = (names,) if isinstance(names, str) else tuple(names)
        if not names or any(not isinstance(n, str) or not n for n in names):
            raise ConfigError("names", names, "a non-empty sequence of non-empty strings")
        if dummy:
            names = (*names, "dummy")
        if len(set(names)) != len(names):
            raise ConfigError("names", names, "unique names ('dummy' is reserved when dummy=True)")
        if not math.isfinite(float(epsilon)):
            raise ConfigError("epsilon", epsilon, "a finite number")
        self.names: tuple[str, ...] = names
        self.dummies: tuple[str, ...] = ("dummy",) if dummy else ()
        self.epsilon = float(epsilon)
        self._values: Tensor | None = None
        self.history: list[float] = []

    # -- names and values --------------------------------------------------------------------
    @property
    def K(self) -> int:
        """Number of steers ``K`` (the dummy included)."""
        return len(self.names)

    @property
    def attributes(self) -> tuple[str, ...]:
        """The non-dummy steer names."""
        return tuple(n for n in self.names if n not in self.dummies)

    def index(self, name: str) -> int:
        """Position of steer ``name``. Raises UnknownNameError (a ConfigError) naming the trained steers."""
        if name not in self.names:
            raise UnknownNameError("steer", name, self.names)
        return self.names.index(name)

    def values(self, named: Mapping[str, float] | None = None, *, dummy: float = 1.0,
               batch: int | None = None, **kw: float) -> Tensor:
        """Steer values ``[K]`` (or ``[batch, K]`` repeated): the named steers at the given values, every dummy
        steer at ``dummy``, the rest 0. ``steer.values(sentiment=5)`` (the paper's "5 eps0" with the dummy
        at 1, as the README's ``--steer_values 5 1``); ``steer.values({"a.x": 1})`` for dotted names.

        Raises:
            UnknownNameError: a name that is not one of this steer's (lists them).
        """
        out = torch.zeros(self.K, device=self._device())
        for n in self.dummies:
            out[self.index(n)] = float(dummy)
        for n, v in {**(named or {}), **kw}.items():
            out[self.index(n)] = float(v)
        return out if batch is None else out.expand(batch, -1).clone()

    def _device(self) -> torch.device:
        return device_of(self) if any(True for _ in self.parameters()) else torch.device("cpu")

    def set_values(self, values: Tensor | Mapping[str, float] | None) -> None:
        """Set the steer values used by the attached hooks: ``[K]``, ``[B, K]``, a name -> value mapping (dummy
        steers at 1) or None (the steer is inert: the activation is returned unchanged).

        Raises:
            ConfigError: a tensor whose last dimension is not ``K``.
        """
        if values is None:
            self._values = None
            return
        if isinstance(values, Mapping):
            values = self.values(values)
        values = torch.as_tensor(values, dtype=torch.float32)
        if values.dim() not in (1, 2) or values.shape[-1] != self.K:
            raise ConfigError("values", tuple(values.shape), f"[K] or [batch, K] with K={self.K} ({self.names})")
        self._values = values

    def coefficients(self, batch: int, values: Tensor | None = None, device: torch.device | None = None) -> Tensor:
        """The steer values for an activation of batch size ``batch``: ``[batch, K]`` float32. A ``[B0, K]``
        tensor with ``batch`` a multiple of ``B0`` is repeated per example (``repeat_interleave``, the order
        Hugging Face ``generate`` uses for ``num_return_sequences``)."""
        v = self._values if values is None else torch.as_tensor(values, dtype=torch.float32)
        if v is None:
            raise ConfigError("values", None, f"steer values [K] or [batch, K] (set_values / steering); K={self.K}")
        v = v.to(device if device is not None else self._device(), torch.float32)
        if v.dim() == 1:
            return v.expand(batch, -1)
        if v.shape[0] == batch:
            return v
        if v.shape[0] and batch % v.shape[0] == 0:
            return v.repeat_interleave(batch // v.shape[0], dim=0)
        raise ConfigError("values", tuple(v.shape), f"[K] or [batch, K] with batch={batch} (or a divisor of it)")

    def regularization(self) -> Tensor:
        """Sum of squares of the steer's parameters (the code's L2 term, ``--regularization``)."""
        return sum((p.float() ** 2).sum() for p in self.parameters())

    def shift(self, x: Tensor, coef: Tensor) -> Tensor:
        """The steered activation; ``coef [B, K]`` are the steer values. Implemented by subclasses."""
        raise NotImplementedError

    def _act(self, x: Tensor) -> Tensor:
        if self._values is None:
            return x
        coef = self.coefficients(x.shape[0], device=x.device)
        return self.shift(x, coef)

    # -- attaching ---------------------------------------------------------------------------
    def check_model(self, model: GPT | HFModel) -> None:
        """Raise ConfigError when this steer does not fit ``model`` (width, vocabulary, layer)."""

    def attach(self, model: Any) -> SteerHandle:
        """Attach to ``model`` (see the site table in the module docstring); returns a handle whose
        ``remove()`` (or ``with`` exit) detaches. The steer acts with the values of :meth:`set_values`.

        Raises:
            ConfigError: a model the steer does not fit, or without an ``lm_head``.
        """
        model = as_steerable(model)
        self.check_model(model)
        stack = contextlib.ExitStack()
        try:
            if self.site == "unembed_input":
                if isinstance(model, GPT):
                    stack.enter_context(model.hooks({"final": lambda x, hook: self._act(x)}))
                else:
                    def pre(module: nn.Module, args: tuple) -> tuple:
                        return (self._act(args[0]), *args[1:])

                    stack.callback(lm_head(model).register_forward_pre_hook(pre).remove)
            elif self.site == "logits":
                def post(module: nn.Module, args: tuple, out: Tensor) -> Tensor:
                    return self._act(out)

                stack.callback(lm_head(model).register_forward_hook(post).remove)
            elif self.site == "residual":
                name = f"blocks.{self.layer}.resid_post"  # type: ignore[attr-defined]
                stack.enter_context(model.hooks({name: lambda x, hook: self._act(x)}))
            else:  # pragma: no cover - subclass error
                raise ConfigError("site", self.site, ", ".join(SITES))
        except BaseException:
            stack.close()
            raise
        return SteerHandle(stack)


class SteerHandle:
    """Detaches a steer: ``remove()`` or leaving a ``with`` block."""

    def __init__(self, stack: contextlib.ExitStack):
        self._stack = stack

    def remove(self) -> None:
        """Detach the steer (remove its hooks); calling it again does nothing."""
        self._stack.close()

    def __enter__(self) -> SteerHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


@contextlib.contextmanager
def steering(model: Any, steer: Steer | None, values: Tensor | Mapping[str, float] | None) -> Iterator[GPT | HFModel]:
    """Context manager: ``steer`` acts on ``model`` with ``values`` (``[K]``, ``[B, K]`` or a name -> value
    mapping) inside the block; yields the steerable model. ``steer=None`` is a no-op (the unsteered LM).
    The previous values are restored and the hooks removed on exit, also when the body raises."""
    m = as_steerable(model)
    if steer is None:
        yield m
        return
    old = steer._values
    steer.set_values(values)
    handle = steer.attach(m)
    try:
        yield m
    finally:
        handle.remove()
        steer._values = old


class LogitOffset(Steer):
    """Logit-offset baseline: ``logits <- logits + eps * sum_k s_k b_k``, ``b [K, V]`` (initialised to 0).

    The ``offset`` adaptor of the LM-Steer code (``steers.py``); a context-independent shift of the
    next-token distribution. Trained with :func:`train_intervention` (the LM-Steer loss).
    """

    site = "logits"

    def __init__(self, vocab_size: int, names: Sequence[str] = ("attr",), dummy: bool = True, epsilon: float = 1.0,
                 device: str | torch.device | None = None):
        super().__init__(names, dummy, epsilon)
        if int(vocab_size) < 1:
            raise ConfigError("vocab_size", vocab_size, ">= 1")
        self.vocab_size = int(vocab_size)
        self.bias = nn.Parameter(torch.zeros(self.K, self.vocab_size, device=device))

    def config(self) -> dict[str, Any]:
        """The base config plus ``vocab_size`` (rebuilds the shape of ``bias [K, V]``)."""
        return {**super().config(), "vocab_size": self.vocab_size}

    def check_model(self, model: GPT | HFModel) -> None:
        """Raise ConfigError (field ``vocab_size``) when the model's vocabulary size is not ``vocab_size``."""
        v = vocab_size(model)
        if v != self.vocab_size:
            raise ConfigError("vocab_size", self.vocab_size, f"the model's vocabulary size {v}")

    def shift(self, x: Tensor, coef: Tensor) -> Tensor:
        """Logits ``x [B, T, V]`` (or ``[B, V]``) plus ``eps * coef @ bias``, ``coef [B, K]``; same dtype as ``x``."""
        off = (coef @ self.bias.float()) * self.epsilon  # [B, V]
        return x + off.view(x.shape[0], *([1] * (x.dim() - 2)), -1).to(x.dtype)


class ActAdd(Steer):
    """Activation-addition baseline: ``x <- x + eps * sum_k s_k a_k`` on the residual stream leaving block
    ``layer`` (0-based), every position; ``a [K, d]`` (initialised to 0; train it with
    :func:`train_intervention`, or set it with :meth:`from_contrast`). Turner et al. 2023, arXiv 2308.10248.
    """

    site = "residual"

    def __init__(self, d_model: int, layer: int, names: Sequence[str] = ("attr",), dummy: bool = True,
                 epsilon: float = 1.0, device: str | torch.device | None = None):
        super().__init__(names, dummy, epsilon)
        if int(d_model) < 1:
            raise ConfigError("d_model", d_model, ">= 1")
        if int(layer) < 0:
            raise ConfigError("layer", layer, ">= 0 (a block index)")
        self.d_model, self.layer = int(d_model), int(layer)
        self.vectors = nn.Parameter(torch.zeros(self.K, self.d_model, device=device))

    def config(self) -> dict[str, Any]:
        """The base config plus ``d_model`` and ``layer`` (rebuild the shape of ``vectors [K, d]``)."""
        return {**super().config(), "d_model": self.d_model, "layer": self.layer}

    def check_model(self, model: GPT | HFModel) -> None:
        """Raise ConfigError (field ``layer`` or ``d_model``) when block ``layer`` does not exist in the model or its
        width is not ``d_model``."""
        n = n_layers(model)
        if not 0 <= self.layer < n:
            raise ConfigError("layer", self.layer, f"a block index in 0..{n - 1}")
        d = hidden_size(model)
        if d != self.d_model:
            raise ConfigError("d_model", self.d_model, f"the model's width {d}")

    def shift(self, x: Tensor, coef: Tensor) -> Tensor:
        """Residual stream ``x [B, T, d]`` plus ``eps * coef @ vectors`` at every position, ``coef [B, K]``; same dtype as ``x``."""
        add = (coef @ self.vectors.float()) * self.epsilon  # [B, d]
        return x + add.view(x.shape[0], *([1] * (x.dim() - 2)), -1).to(x.dtype)

    @classmethod
    @torch.no_grad()
    def from_contrast(cls, model: Any, layer: int, positive: Any, negative: Any, name: str = "attr",
                      pad_id: int = 0, batch_size: int = 32, max_length: int = 256, tokenizer: Any = None) -> ActAdd:
        """A one-steer ActAdd whose vector is ``mean(x | positive) - mean(x | negative)``, the residual stream
        leaving block ``layer`` averaged over every non-padding position of the texts (``positive``/``negative``:
        token lists, ``[N, T]`` tensors or strings with ``tokenizer``). No dummy steer. ``s = +1`` moves the
        activations by the full mean difference.

        Raises:
            ConfigError: ``layer`` out of range; empty text sets.
        """
        m = as_steerable(model)
        d, dev = hidden_size(m), device_of(m)
        steer = cls(d, layer, names=(name,), dummy=False, device=dev)
        steer.check_model(m)
        means = []
        for field, data in (("positive", positive), ("negative", negative)):
            seqs = as_token_lists(data, tokenizer, max_length)
            if not seqs:
                raise ConfigError(field, 0, "at least one non-empty text")
            total, count = torch.zeros(d, device=dev, dtype=torch.float64), 0
            for i in range(0, len(seqs), batch_size):
                ids, mask = pad_batch(seqs[i:i + batch_size], pad_id, dev)
                with m.hooks(cache=f"blocks.{layer}.resid_post") as cache:
                    logits_of(m, ids, mask)
                x = cache[f"blocks.{layer}.resid_post"].double()
                total += (x * mask[..., None]).sum((0, 1))
                count += int(mask.sum())
            means.append(total / count)
        steer.vectors.data[0] = (means[0] - means[1]).float()
        return steer


def save_steer(steer: Steer, directory: str | Path) -> Path:
    """Write ``steer.json`` (kind, names, dummies, epsilon, shape) and ``steer.safetensors`` (its parameters)."""
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "steer.json").write_text(json.dumps({"kind": type(steer).__name__, **steer.config()}, indent=2))
    save_file({k: v.detach().contiguous().cpu() for k, v in steer.state_dict().items()}, str(d / "steer.safetensors"))
    return d


def load_steer(directory: str | Path, device: str | torch.device | None = None) -> Steer:
    """Read a steer written by :func:`save_steer` (import :mod:`lmsci.methods.lm_steer` first for an LMSteer).

    Raises:
        ConfigError: a directory without the two files, or an unknown kind.
    """
    from safetensors.torch import load_file

    d = Path(directory)
    if not (d / "steer.json").is_file() or not (d / "steer.safetensors").is_file():
        raise ConfigError("directory", str(d), "a directory with steer.json and steer.safetensors (save_steer)")
    meta = json.loads((d / "steer.json").read_text())
    kind = meta.pop("kind")
    if kind not in Steer.kinds:
        raise UnknownNameError("steer kind", kind, Steer.kinds)
    dummies = tuple(meta.pop("dummies"))
    steer = Steer.kinds[kind](**meta, dummy=False, device=device)
    steer.dummies = dummies
    steer.load_state_dict({k: v.to(device) if device is not None else v
                           for k, v in load_file(str(d / "steer.safetensors")).items()})
    return steer


# ------------------------------------------------------------------------------------ scoring / generation


@torch.no_grad()
def token_logprobs(model: Any, input_ids: Tensor, steer: Steer | None = None,
                   values: Tensor | Mapping[str, float] | None = None, attention_mask: Tensor | None = None) -> Tensor:
    """``log P(x_t | x_<t)`` for ``t = 1 .. T-1`` under the (steered) model: ``[B, T-1]`` nats
    (``input_ids [B, T]`` or ``[T]``; padding positions of ``attention_mask`` give 0)."""
    m = as_steerable(model)
    ids = input_ids if input_ids.dim() == 2 else input_ids[None]
    ids = ids.to(device_of(m))
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask.to(ids.device)
    with steering(m, steer, values):
        nll, tmask = masked_nll(logits_of(m, ids, mask), ids, mask)
    return -nll * tmask


@torch.no_grad()
def generate(model: Any, input_ids: Tensor, steer: Steer | None = None,
             values: Tensor | Mapping[str, float] | None = None, max_new_tokens: int = 20, **kw: Any) -> Tensor:
    """Decode with the model's own ``generate`` while ``steer`` acts with ``values`` (``[K]`` for all prompts,
    ``[B, K]`` per prompt, or a name -> value mapping); ``input_ids [B, T]`` -> ``[B, T + new]``.
    ``kw`` go to ``GPT.generate`` (``temperature``, ``top_k``, ``generator``) or Hugging Face ``generate``
    (``do_sample``, ``top_p``, ``attention_mask``, ...)."""
    m = as_steerable(model)
    ids = input_ids.to(device_of(m))
    with steering(m, steer, values):
        return m.generate(ids, max_new_tokens, **kw)


__all__ = ["SITES", "Steer", "SteerHandle", "LogitOffset", "ActAdd", "steering", "token_logprobs", "generate",
           "save_steer", "load_steer"]
