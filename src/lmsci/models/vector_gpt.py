"""A GPT over real-valued vectors: a linear read-in replaces the token embedding, a linear read-out the unembedding.

The set-up of Garg, Tsipras, Liang, Valiant, "What Can Transformers Learn In-Context? A Case Study of Simple
Function Classes" (arXiv 2208.01066, Sec. 2 and App. A.1): the prompt ``x_1, f(x_1), x_2, f(x_2), ...`` is a
sequence of ``d_in``-dimensional vectors (the scalar ``f(x_i)`` padded with zeros), each mapped to the residual
stream by one linear layer; the GPT-2 trunk (learned positions, pre-norm blocks) is unchanged; a linear layer reads
one scalar out of the final residual stream at every position.

The trunk is lmsci's :class:`~lmsci.models.gpt.GPT` (its blocks, learned position table, final norm and hook
points are reused; its token embedding and ``lm_head`` are not used). All hook points of :mod:`lmsci.models.gpt`
(``embed``, ``blocks.{i}.resid_post``, ``blocks.{i}.attn.pattern``, ...) fire as in the token model and are
reached through :meth:`VectorGPT.hooks` / :meth:`VectorGPT.run_with_cache`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from lmsci.errors import ConfigError
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hooks import HookFn


class VectorGPT(nn.Module):
    """GPT trunk with a linear read-in of ``d_in``-dimensional vectors and a ``d_out``-dimensional linear read-out.

    Args:
        cfg: the trunk's architecture (``vocab_size`` is unused and may be 1; ``seq_len`` bounds the prompt length).
        d_in: input vector width.
        d_out: output width per position (1 for regression).
        seed: initialisation seed (trunk: GPT-2 init; read-in/out: PyTorch's ``nn.Linear`` default
            ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` as in Garg et al.'s code); the global torch RNG is neither used
            nor advanced.

    Modules: ``read_in`` (``Linear(d_in, d_model)``), ``gpt`` (the trunk), ``read_out`` (``Linear(d_model, d_out)``).

    Raises:
        ConfigError: ``d_in < 1`` or ``d_out < 1``.
    """

    def __init__(self, cfg: GPTConfig, d_in: int, d_out: int = 1, seed: int = 0):
        super().__init__()
        if d_in < 1:
            raise ConfigError("d_in", d_in, ">= 1")
        if d_out < 1:
            raise ConfigError("d_out", d_out, ">= 1")
        self.cfg, self.d_in, self.d_out = cfg, d_in, d_out
        self.gpt = GPT(cfg, seed=seed)
        del self.gpt.wte, self.gpt.lm_head  # unused by the vector model
        self.read_in = nn.Linear(d_in, cfg.d_model)
        self.read_out = nn.Linear(cfg.d_model, d_out)
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for lin in (self.read_in, self.read_out):
                # PyTorch's nn.Linear default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias, as in Garg et
                # al.'s code (plain nn.Linear read-in/out); drawn from ``g`` so the global RNG is untouched
                bound = 1.0 / lin.in_features ** 0.5
                lin.weight.copy_((torch.rand(lin.weight.shape, generator=g) * 2 - 1) * bound)
                lin.bias.copy_((torch.rand(lin.bias.shape, generator=g) * 2 - 1) * bound)

    def hidden(self, inputs: Tensor) -> Tensor:
        """``inputs [batch, seq, d_in]`` float -> the final-norm residual stream ``[batch, seq, d_model]``.

        Raises:
            ConfigError: ``inputs`` not 3-D, last dimension not ``d_in``, or ``seq > cfg.seq_len`` (learned positions).
        """
        if inputs.dim() != 3 or inputs.shape[-1] != self.d_in:
            raise ConfigError("inputs.shape", tuple(inputs.shape), f"[batch, seq, d_in={self.d_in}]")
        B, T, _ = inputs.shape
        g = self.gpt
        if T > self.cfg.seq_len and self.cfg.pos == "learned":
            raise ConfigError("inputs.shape[1]", T, f"at most seq_len={self.cfg.seq_len} with pos='learned'")
        pos = torch.arange(T, device=inputs.device)
        x = self.read_in(inputs)
        if self.cfg.pos == "learned":
            x = x + g.wpe(pos)
        x = g.hook_embed(x)
        for block in g.blocks:
            x = block(x, pos, None)
        return g.hook_final(g.ln_f(x))

    def forward(self, inputs: Tensor) -> Tensor:
        """``inputs [batch, seq, d_in]`` -> outputs ``[batch, seq, d_out]`` (one read-out per position)."""
        return self.read_out(self.hidden(inputs))

    @contextmanager
    def hooks(self, fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] | Mapping[str, HookFn] = (),
              cache: Iterable[str] | str | Callable[[str], bool] | None = None) -> Iterator[dict[str, Tensor]]:
        """The trunk's :meth:`lmsci.models.gpt.GPT.hooks` (same names, same guarantees)."""
        with self.gpt.hooks(fwd_hooks, cache) as store:
            yield store

    @property
    def hook_points(self):
        """The trunk's hook points by name."""
        return self.gpt.hook_points

    def run_with_cache(self, inputs: Tensor, names: Iterable[str] | str | Callable[[str], bool] = "*"
                       ) -> tuple[Tensor, dict[str, Tensor]]:
        """Forward and record activations: ``(outputs [B, T, d_out], {hook name: activation})``."""
        with self.hooks(cache=names) as store:
            out = self(inputs)
        return out, store
