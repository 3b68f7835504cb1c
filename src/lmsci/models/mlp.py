"""The feed-forward sublayers of lmsci's GPT (:mod:`lmsci.models.gpt`): dense MLPs and a mixture of experts.

``GPTConfig.mlp`` picks one (``"none"``, attention-only, has no module: ``Block`` skips the sublayer):

* ``"gelu"`` / ``"relu"``: ``proj(act(fc x))`` (GPT-2, exact erf GELU; ReLU as Nanda et al. 2023,
  arXiv 2301.05217, and Power et al. 2022).
* ``"swiglu"``: the gated MLP ``proj(SiLU(gate x) * up x)`` (Shazeer 2020, arXiv 2002.05202; the Llama MLP,
  Physics of LMs Part 3.3's "GatedMLP").
* ``"moe"``: :class:`MoE`, ``moe_experts`` GELU experts of width ``d_mlp`` behind a learned router with top-``k``
  routing (``moe_top_k``). Top-1 is the Switch Transformer (Fedus, Zoph & Shazeer 2021, arXiv 2101.03961,
  sec. 2.1, eq. 1-2: the expert's output is scaled by its router probability); top-k > 1 renormalises the
  router's softmax over the chosen k experts (GShard / Mixtral, Jiang et al. 2024, arXiv 2401.04088, sec. 2.1).
  No expert capacity and no token dropping: every token reaches its k experts (tokens are gathered per expert,
  so the compute is about k dense MLPs, not ``moe_experts``). The load-balancing auxiliary loss of Switch
  (sec. 2.2, eq. 4-6), ``alpha * n_experts * sum_i f_i P_i`` with ``f_i`` the fraction of the token-to-expert
  assignments that go to expert i and ``P_i`` the mean router probability of expert i (1 * alpha when perfectly
  balanced), is kept from the last forward in :attr:`MoE.aux_loss`; ``GPT.moe_aux_loss()`` sums it over layers
  for the trainer (``alpha = moe_aux_coef``, Switch's 1e-2).

Hook points (``{i}`` the layer): dense MLPs have ``blocks.{i}.mlp.pre`` / ``.post`` ``[B, T, d_mlp]`` and
``blocks.{i}.mlp.out`` ``[B, T, d_model]``; the MoE has ``blocks.{i}.mlp.router`` (router probabilities
``[B, T, moe_experts]``) and ``blocks.{i}.mlp.out`` (no single pre-activation exists: each token has its own
experts).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MLP_KINDS = ("gelu", "relu", "swiglu", "none", "moe")
"""Every value of ``GPTConfig.mlp``."""


def _hook(name: str) -> Any:
    from lmsci.models.hooks import HookPoint

    return HookPoint(name)


class MLP(nn.Module):
    """GELU or ReLU MLP (``fc`` -> GELU/ReLU -> ``proj``) or SwiGLU (``proj(SiLU(gate x) * up x)``).

    ``x [B, T, d_model] -> [B, T, d_model]``; weights ``fc`` (or ``gate`` and ``up``) ``[d_mlp, d_model]`` and
    ``proj`` ``[d_model, d_mlp]``.
    """

    def __init__(self, cfg: Any, layer: int):
        super().__init__()
        self.kind = cfg.mlp
        d, h = cfg.d_model, cfg.mlp_dim
        if cfg.mlp in ("gelu", "relu"):
            self.fc = nn.Linear(d, h, bias=cfg.bias)
        else:
            self.gate = nn.Linear(d, h, bias=cfg.bias)
            self.up = nn.Linear(d, h, bias=cfg.bias)
        self.proj = nn.Linear(h, d, bias=cfg.bias)
        self.dropout = cfg.dropout
        p = f"blocks.{layer}.mlp."
        self.hook_pre, self.hook_post, self.hook_out = _hook(p + "pre"), _hook(p + "post"), _hook(p + "out")

    @property
    def hook_list(self) -> list:
        """This sublayer's hook points in forward order."""
        return [self.hook_pre, self.hook_post, self.hook_out]

    def forward(self, x: Tensor) -> Tensor:
        if self.kind in ("gelu", "relu"):
            act = F.gelu if self.kind == "gelu" else F.relu
            h = self.hook_post(act(self.hook_pre(self.fc(x))))
        else:
            h = self.hook_post(F.silu(self.hook_pre(self.gate(x))) * self.up(x))
        out = self.proj(h)
        if self.dropout and self.training:
            out = F.dropout(out, self.dropout)
        return self.hook_out(out)


class MoE(nn.Module):
    """Mixture of GELU experts with top-k routing (module docstring; Switch Transformer, arXiv 2101.03961).

    Weights: ``router`` ``[n_experts, d_model]`` (no bias), expert stacks ``fc_weight [n_experts, d_mlp, d_model]``,
    ``proj_weight [n_experts, d_model, d_mlp]`` (and ``fc_bias [n_experts, d_mlp]``, ``proj_bias
    [n_experts, d_model]`` when ``bias``). ``x [B, T, d_model] -> [B, T, d_model]``.

    Attributes:
        aux_loss: the load-balancing loss of the last forward (scalar tensor, ``moe_aux_coef`` included; in the
            autograd graph when that forward was), None before any forward.
        last_counts: int64 ``[n_experts]``: token-to-expert assignments of the last forward (no gradient).
    """

    def __init__(self, cfg: Any, layer: int):
        super().__init__()
        self.kind = "moe"
        d, h, E = cfg.d_model, cfg.mlp_dim, cfg.moe_experts
        self.n_experts, self.top_k, self.aux_coef = E, cfg.moe_top_k, cfg.moe_aux_coef
        self.router = nn.Linear(d, E, bias=False)
        self.fc_weight = nn.Parameter(torch.empty(E, h, d))
        self.fc_bias = nn.Parameter(torch.zeros(E, h)) if cfg.bias else None
        self.proj_weight = nn.Parameter(torch.empty(E, d, h))
        self.proj_bias = nn.Parameter(torch.zeros(E, d)) if cfg.bias else None
        for w in (self.fc_weight, self.proj_weight):  # nn.Linear's default, per expert (GPT re-initialises)
            nn.init.kaiming_uniform_(w, a=math.sqrt(5))
        self.dropout = cfg.dropout
        p = f"blocks.{layer}.mlp."
        self.hook_router, self.hook_out = _hook(p + "router"), _hook(p + "out")
        self.aux_loss: Tensor | None = None
        self.last_counts: Tensor | None = None

    @property
    def hook_list(self) -> list:
        """This sublayer's hook points in forward order."""
        return [self.hook_router, self.hook_out]

    def __getstate__(self) -> dict[str, Any]:
        # copies and pickles leave out the last forward's loss: it may hold that forward's autograd graph, which
        # copy.deepcopy refuses (lmsci.models.quantize.fake_quantize copies a model right after training)
        state = dict(self.__dict__)
        state["aux_loss"] = None
        return state

    def forward(self, x: Tensor) -> Tensor:
        B, T, d = x.shape
        flat = x.reshape(B * T, d)
        logits = self.router(flat).float()
        probs = self.hook_router(torch.softmax(logits, dim=-1).view(B, T, -1)).reshape(B * T, -1)
        top_p, top_i = probs.topk(self.top_k, dim=-1)
        gates = top_p if self.top_k == 1 else top_p / top_p.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e in range(self.n_experts):
            tok, slot = (top_i == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            xe = flat.index_select(0, tok)
            h = F.linear(xe, self.fc_weight[e], None if self.fc_bias is None else self.fc_bias[e])
            ye = F.linear(F.gelu(h), self.proj_weight[e], None if self.proj_bias is None else self.proj_bias[e])
            out = out.index_add(0, tok, ye * gates[tok, slot].unsqueeze(-1).to(ye.dtype))
        counts = torch.bincount(top_i.reshape(-1), minlength=self.n_experts)
        frac = counts.to(probs.dtype) / max(top_i.numel(), 1)
        self.aux_loss = self.aux_coef * self.n_experts * (frac.detach() * probs.mean(0)).sum()
        self.last_counts = counts.detach()
        out = out.view(B, T, d)
        if self.dropout and self.training:
            out = F.dropout(out, self.dropout)
        return self.hook_out(out)


def make_mlp(cfg: Any, layer: int) -> nn.Module | None:
    """The feed-forward sublayer of ``cfg.mlp`` for block ``layer`` (None for ``"none"``)."""
    if cfg.mlp == "none":
        return None
    return MoE(cfg, layer) if cfg.mlp == "moe" else MLP(cfg, layer)
