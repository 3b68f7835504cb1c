"""IOI prompts for a real tokenizer and the circuit measures of ``ioi-circuit-lm`` on a Hugging Face Llama-family
model (head outputs at the ``o_proj`` input, :mod:`lmsci.measure.hf_heads`).

Sources: Wang et al. 2022, "Interpretability in the Wild", arXiv 2211.00593: templates (App., with the
``worlds.ioi`` copy of the 15 BABA templates and their ABBA twins), the ABC distribution (sec. 2), path patching
(sec. 3, App. B), name movers (3.1), S-inhibition heads (3.2), faithfulness with mean-ablation over p_ABC (sec. 4);
attribution patching (Nanda 2023; Syed, Rager, Conmy 2023, arXiv 2310.10348) for the selection scans.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.experiments.syntax._lm_common import encode
from lmsci.measure import hf_heads as H
from lmsci.worlds.ioi import BABA_TEMPLATES, NAMES, OBJECTS, PLACES


def natural(t: str) -> str:
    """A ``worlds.ioi`` template in natural spacing (``"Then , {S}"`` -> ``"Then, {S}"``)."""
    return t.replace(" ,", ",").replace(" .", ".")


def single_tokens(tok, words) -> list[str]:
    """The words that are one token with a leading space (how they occur mid-sentence)."""
    return [w for w in words if len(encode(tok, " " + w)) == 1]


@dataclass
class Prompts:
    """Paired clean / ABC IOI prompts, right-padded: ``clean, abc [n, T]``; ``end, io_pos, s1_pos [n]``; ``io, s
    [n]`` the clean names' tokens; ``template [n]``."""

    clean: Tensor
    abc: Tensor
    end: Tensor
    io_pos: Tensor
    s1_pos: Tensor
    io: Tensor
    s: Tensor
    template: Tensor

    def to(self, device) -> Prompts:
        return Prompts(**{k: v.to(device) for k, v in self.__dict__.items()})


def vocabulary(tok) -> tuple[list[str], list[str], list[str]]:
    """Single-token names, places and objects of ``worlds.ioi`` for this tokenizer.

    Raises:
        ConfigError: fewer than 5 names, or no place or object, are single tokens.
    """
    names, places, objects = single_tokens(tok, NAMES), single_tokens(tok, PLACES), single_tokens(tok, OBJECTS)
    if len(names) < 5 or not places or not objects:
        raise ConfigError("model", "tokenizer", f"a tokenizer with >= 5 single-token names (got {len(names)}), and "
                                                "single-token places and objects")
    return names, places, objects


def make_prompts(tok, n_per_template: int, n_templates: int, gen: np.random.Generator, pad: int = 0) -> Prompts:
    """``n_per_template`` prompts of each of the first ``n_templates`` templates (ABBA and BABA alternating), each
    with its ABC twin (IO, S1, S2 replaced by three other names, same positions)."""
    names, places, objects = vocabulary(tok)
    tid = {w: encode(tok, " " + w)[0] for w in names}
    rows = []
    for t in range(n_templates):
        for j in range(n_per_template):
            io, s, x, y, z = gen.choice(names, 5, replace=False)
            tmpl = natural(BABA_TEMPLATES[t])
            if j % 2 == 0:  # ABBA: IO named first
                tmpl = tmpl.replace("{S} and {IO}", "{IO} and {S}", 1)
            text = tmpl[:tmpl.rfind(" {IO}")].format(S=s, IO=io, PLACE=gen.choice(places), OBJECT=gen.choice(objects))
            ids = encode(tok, text)
            pos_io = [i for i, v in enumerate(ids) if v == tid[io]]
            pos_s = [i for i, v in enumerate(ids) if v == tid[s]]
            if len(pos_io) != 1 or len(pos_s) != 2:
                raise ConfigError("model", "tokenizer", f"names tokenised in context as alone ({text!r})")
            abc = list(ids)
            abc[pos_io[0]], abc[pos_s[0]], abc[pos_s[1]] = tid[x], tid[y], tid[z]
            rows.append((ids, abc, pos_io[0], pos_s[0], tid[io], tid[s], t))
    T = max(len(r[0]) for r in rows)

    def padded(k):
        return torch.tensor([r[k] + [pad] * (T - len(r[k])) for r in rows])

    return Prompts(padded(0), padded(1), torch.tensor([len(r[0]) - 1 for r in rows]),
                   torch.tensor([r[2] for r in rows]),
                   torch.tensor([r[3] for r in rows]), torch.tensor([r[4] for r in rows]),
                   torch.tensor([r[5] for r in rows]), torch.tensor([r[6] for r in rows]))


def _ld(logit_end: Tensor, p: Prompts) -> Tensor:
    """``[n]`` logit(IO) - logit(S) at END (nats)."""
    return logit_end.gather(1, p.io[:, None]).squeeze(1) - logit_end.gather(1, p.s[:, None]).squeeze(1)


def _end(x: Tensor, p: Prompts) -> Tensor:
    return x[torch.arange(len(p.end), device=p.end.device), p.end]


@dataclass
class Run:
    """One forward's records: ``ld [n]``, ``z [n_layers, n, T, n_heads, d_head]``, final-norm input at END ``x_end
    [n, d_model]``, the residual after layer 0 ``resid0 [n, T, d_model]``, and (with grad) the LD gradients of the
    head outputs ``gz`` and of the query projections' outputs at END ``gq [n_layers, n, n_heads * d_head]``, the
    decoder layers' input residual at END ``res_in [n_layers, n, d_model]``."""

    ld: Tensor
    z: Tensor
    x_end: Tensor
    resid0: Tensor
    gz: Tensor | None = None
    gq: Tensor | None = None
    res_in: Tensor | None = None


def forward(lm, ids: Tensor, p: Prompts, grad: bool = False, edit: H.ZEdit | None = None) -> Run:
    """A forward on ``ids`` (clean or ABC) recording :class:`Run`; ``grad`` also backpropagates the mean LD."""
    m, lays = H.hf_module(lm), H.layers(lm)
    zs: dict[int, Tensor] = {}
    qs: dict[int, Tensor] = {}
    rin: dict[int, Tensor] = {}
    rec: dict[str, Tensor] = {}

    def z_edit(i: int, z: Tensor):
        new = edit(i, z) if edit is not None else None
        if grad:
            new = (z if new is None else new).detach().requires_grad_(True)
        return new

    handles = [m.model.norm.register_forward_pre_hook(lambda mod, a: rec.__setitem__("x", a[0])),
               lays[0].register_forward_hook(
                   lambda mod, a, o: rec.__setitem__("r0", o[0] if isinstance(o, tuple) else o))]
    for i, lay in enumerate(lays):
        handles.append(lay.input_layernorm.register_forward_pre_hook(
            lambda mod, a, i=i: rin.__setitem__(i, a[0].detach())))
        if grad:
            def keep_q(mod, a, o, i=i):
                if o.requires_grad:
                    o.retain_grad()
                qs[i] = o
            handles.append(lay.self_attn.q_proj.register_forward_hook(keep_q))
    try:
        with torch.set_grad_enabled(grad), H.z_hooks(lm, z_edit, zs):
            out = m(input_ids=ids, use_cache=False).logits
            ld = _ld(_end(out, p).float(), p)
            if grad:
                ld.mean().backward()
    finally:
        for h in handles:
            h.remove()
    L = len(lays)
    run = Run(ld.detach(), torch.stack([zs[i].detach() for i in range(L)]), _end(rec["x"], p).detach().float(),
              rec["r0"].detach().float())
    if grad:
        run.gz = torch.stack([zs[i].grad if zs[i].grad is not None else torch.zeros_like(zs[i]) for i in range(L)])
        run.gq = torch.stack([_end(qs[i].grad, p) if qs[i].grad is not None else
                              torch.zeros_like(_end(qs[i], p)) for i in range(L)]).detach()
        run.res_in = torch.stack([_end(rin[i], p) for i in range(L)]).float()
    return run


def head_writes(lm, dz_end: Tensor) -> Tensor:
    """``dz_end [n_layers, n, n_heads, d_head]`` -> every head's residual write ``[n_layers, n, n_heads, d_model]``."""
    sh, out = H.head_shape(lm), []
    for l, lay in enumerate(H.layers(lm)):
        Wo = lay.self_attn.o_proj.weight.float().view(sh.d_model, sh.n_heads, sh.d_head)
        out.append(torch.einsum("nhd,mhd->nhm", dz_end[l].float(), Wo))
    return torch.stack(out)


def _rms(x: Tensor) -> Tensor:
    return torch.sqrt(x.pow(2).mean(-1) + 1e-6)


def direct_effects(lm, clean: Run, abc: Run, p: Prompts) -> tuple[Tensor, Tensor]:
    """Path patching head -> logits, linearised at the clean final-norm scale: ``[n_layers, n_heads]`` mean change of
    LD when a head's END output is moved clean -> ABC on its direct path; and the writes ``dO [L, n, H, d_model]``."""
    idx = torch.arange(len(p.end), device=p.end.device)
    dO = head_writes(lm, (abc.z - clean.z)[:, idx, p.end])
    _, W_U, _ = H.unembed(lm)
    u = (W_U[:, p.io] - W_U[:, p.s]).T / _rms(clean.x_end)[:, None]  # [n, d_model]
    return torch.einsum("lnhm,nm->lhn", dO, u).mean(-1), dO


def attribution(clean: Run, abc: Run) -> Tensor:
    """Attribution patching of every head's output (all positions) clean -> ABC: ``[n_layers, n_heads]`` linearised
    change of the mean LD."""
    return torch.einsum("lnthd,lnthd->lh", clean.gz, abc.z - clean.z)


def query_effects(lm, clean: Run, dO: Tensor, receivers: list[tuple[int, int]]) -> Tensor:
    """Path patching sender -> receivers' queries, linearised: ``[n_layers, n_heads]`` change of the mean LD when a
    sender's END output (``dO``) is added to the residual read by the receivers' queries (senders below them)."""
    sh, lays = H.head_shape(lm), H.layers(lm)
    out = torch.zeros(sh.n_layers, sh.n_heads, device=dO.device)
    for lr, hr in receivers:
        Wq = lays[lr].self_attn.q_proj.weight.float()[hr * sh.d_head:(hr + 1) * sh.d_head]
        g = lays[lr].input_layernorm.weight.float()
        gq = clean.gq[lr][:, hr * sh.d_head:(hr + 1) * sh.d_head]                  # [n, d_head]
        a = (gq @ Wq) * g / _rms(clean.res_in[lr])[:, None]                         # [n, d_model]
        out[:lr] += torch.einsum("lnhm,nm->lh", dO[:lr], a)
    return out


def direct_ld(lm, clean: Run, dO: Tensor, p: Prompts, heads: list[tuple[int, int]]) -> Tensor:
    """Exact direct-path patching (final norm recomputed): ``[n]`` LD when ``heads``' END outputs move to ABC only
    on their direct path to the logits."""
    x = clean.x_end + sum((dO[l, :, h] for l, h in heads), torch.zeros_like(clean.x_end))
    _, W_U, _ = H.unembed(lm)
    lo = (x / _rms(x)[:, None]) @ W_U[:, torch.cat([p.io, p.s])]
    n = len(p.io)
    r = torch.arange(n, device=lo.device)
    return lo[r, r] - lo[r, n + r]


def query_patched_ld(lm, p: Prompts, dO: Tensor, senders: list[tuple[int, int]],
                     receivers: list[tuple[int, int]]) -> Tensor:
    """Exact path patching senders -> receivers' queries (Wang et al. App. B): ``[n]`` LD of a clean forward where
    each receiver's END query is computed from its layer's clean input residual plus the senders' (below it) END
    output changes clean -> ABC; everything else runs freely."""
    sh, lays, m = H.head_shape(lm), H.layers(lm), H.hf_module(lm)
    idx = torch.arange(len(p.end), device=p.end.device)
    res: dict[int, Tensor] = {}
    handles = []
    for lr in sorted({l for l, _ in receivers}):
        hs = [h for l, h in receivers if l == lr]
        delta = sum((dO[l, :, h] for l, h in senders if l < lr), torch.zeros_like(dO[0, :, 0]))
        lay = lays[lr]
        handles.append(lay.input_layernorm.register_forward_pre_hook(lambda mod, a, lr=lr: res.__setitem__(lr, a[0])))

        def q_hook(mod, a, o, lr=lr, hs=hs, delta=delta, lay=lay):
            x = res[lr][idx, p.end] + delta.to(o.dtype)
            ln = lay.input_layernorm  # by hand: calling a hooked module here would fire its hooks again
            xf = x.float()
            xn = (ln.weight.float() * xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ln.variance_epsilon))
            q = torch.nn.functional.linear(xn.to(o.dtype), mod.weight, mod.bias)     # [n, n_heads * d_head]
            o = o.clone()
            for h in hs:
                sl = slice(h * sh.d_head, (h + 1) * sh.d_head)
                o[idx, p.end, sl] = q[:, sl]
            return o
        handles.append(lay.self_attn.q_proj.register_forward_hook(q_hook))
    try:
        with torch.no_grad():
            out = m(input_ids=p.clean, use_cache=False).logits
    finally:
        for h in handles:
            h.remove()
    return _ld(_end(out, p).float(), p)


def template_means(z_abc: Tensor, template: Tensor) -> Tensor:
    """Per-template, per-position mean of the ABC head outputs, one per prompt: ``[n_layers, n, T, n_heads, d_head]``
    (prompts of one template have one length and one position layout)."""
    out = torch.empty_like(z_abc)
    for t in template.unique():
        rows = template == t
        out[:, rows] = z_abc[:, rows].mean(1, keepdim=True)
    return out


def ablate_except(keep: list[tuple[int, int]], means: Tensor, n_heads: int) -> H.ZEdit:
    """An edit mean-ablating every head not in ``keep`` (``means [n_layers, n, T, n_heads, d_head]``)."""
    keep_by = {}
    for l, h in keep:
        keep_by.setdefault(l, set()).add(h)

    def edit(i: int, z: Tensor) -> Tensor:
        drop = [h for h in range(n_heads) if h not in keep_by.get(i, set())]
        z = z.clone()
        z[:, :, drop] = means[i][:, :, drop].to(z.dtype)
        return z
    return edit


def name_positions(run: Run, p: Prompts) -> tuple[Tensor, Tensor]:
    """The residual after layer 0 at IO and S1 (``[2n, d_model]``) and their name tokens ``[2n]``."""
    idx = torch.arange(len(p.end), device=p.end.device)
    return (torch.cat([run.resid0[idx, p.io_pos], run.resid0[idx, p.s1_pos]]), torch.cat([p.io, p.s]))


def bottom(x: Tensor, k: int, allowed: Tensor | None = None) -> list[tuple[int, int]]:
    """The ``k`` (layer, head) with the most negative values of ``x [n_layers, n_heads]`` (within ``allowed``)."""
    v = x.clone().float()
    if allowed is not None:
        v[~allowed.to(v.device)] = float("inf")
    idx = torch.argsort(v.flatten())[:k].tolist()
    return sorted((i // x.shape[1], i % x.shape[1]) for i in idx)
