"""Activation patching of every attention head (and position) on IOI: lmsci's hooks vs nnsight, side by side.

Issue 43 item 4. The same scan, run twice on the same model in one process: for each layer l, head h (and, with
``--per head_position``, each position t), the head's output ``z`` (the ``o_proj`` input, ``[batch, seq, n_heads,
d_head]``) from the corrupted (ABC) run is written into the clean run, and the change of the mean logit difference
logit(IO) - logit(S) at the last token is recorded (nats). lmsci computes it with
:func:`lmsci.measure.attribution_patching.exact_patching` (forward pre-hooks on ``o_proj``); nnsight 0.8
(https://nnsight.net, Fiotto-Kaufman et al., arXiv 2407.14561) with one ``trace`` per patch that assigns into
``o_proj.input``. Both do one forward pass per patch, so the ratio is the cost of the interface; the two are
alternated patch by patch so that a shared machine's load falls on both alike.

Prints the wall time of each, their ratio (nnsight / lmsci: > 1 means lmsci is faster) and the largest absolute
difference of the patched logit differences (target: float tolerance). IOI prompts (Wang et al., arXiv
2211.00593): "When A and B went to the store, B gave a drink to" with single-token names of the tokenizer; ABC:
the three name tokens replaced by three other names (same positions).

    python benchmarks/bench_patching_nnsight.py --model smollm2-135m --n-prompts 8 --threads 1
    python benchmarks/bench_patching_nnsight.py --model tiny            # a random 2-layer Llama (seconds)

Needs ``pip install nnsight`` (not a dependency of lmsci; ``pip install 'lmsci[bench]'``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from lmsci.measure.attribution_patching import exact_patching, head_shape

TEMPLATE = "When {A} and {B} went to the store, {B} gave a drink to"


def tiny_model():
    """A random 2-layer Llama with grouped-query attention (3 query heads, 1 key-value head), float32, eval."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmsci.models.hf import HFModel

    cfg = LlamaConfig(vocab_size=128, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=3,
                      num_key_value_heads=1, max_position_embeddings=64, attn_implementation="eager")
    torch.manual_seed(0)
    return HFModel(LlamaForCausalLM(cfg).eval(), None, "tiny-random-llama")


def ioi_batch(hf, n: int, gen: np.random.Generator):
    """``(clean [n, T], corrupt [n, T], end [n], io [n], s [n])``: IOI prompts and their ABC twins."""
    if hf.tokenizer is None:  # random model: random tokens, names at the template's positions
        T, V = 12, hf.model.config.vocab_size
        clean = torch.tensor(gen.integers(0, V, (n, T)))
        io, s = torch.tensor(gen.integers(0, V, n)), torch.tensor(gen.integers(0, V, n))
        corrupt = clean.clone()
        corrupt[:, [1, 3, 8]] = torch.tensor(gen.integers(0, V, (n, 3)))
        return clean, corrupt, torch.full((n,), T - 1), io, s
    from lmsci.worlds.ioi import NAMES

    tok = hf.tokenizer
    names = [w for w in NAMES if len(tok.encode(" " + w, add_special_tokens=False)) == 1]
    tid = {w: tok.encode(" " + w, add_special_tokens=False)[0] for w in names}
    rows = []
    for _ in range(n):
        a, b, x, y, z = gen.choice(names, 5, replace=False)
        ids = tok.encode(TEMPLATE.format(A=a, B=b), add_special_tokens=False)
        abc = [tid[x] if v == tid[a] else tid[y] if v == tid[b] else v for v in ids]
        abc[[i for i, v in enumerate(ids) if v == tid[b]][1]] = tid[z]
        rows.append((ids, abc, tid[a], tid[b]))
    T = {len(r[0]) for r in rows}
    assert len(T) == 1, "the template tokenises to one length for single-token names"
    clean = torch.tensor([r[0] for r in rows])
    return (clean, torch.tensor([r[1] for r in rows]), torch.full((n,), clean.shape[1] - 1),
            torch.tensor([r[2] for r in rows]), torch.tensor([r[3] for r in rows]))


def scan(hf, clean, corrupt, end, io, s, per: str = "head", layer_stride: int = 1):
    """Both scans, patch by patch: each (layer, head[, position]) is patched through lmsci's hooks
    (:func:`lmsci.measure.attribution_patching.head_outputs`, a forward pre-hook on ``o_proj``) and then through
    nnsight (one ``trace`` assigning into ``o_proj.input``), alternately, so both see the same machine load.

    Returns:
        ``(ours, theirs, seconds_ours, seconds_theirs, n_patches)``; ``ours``/``theirs`` are the changes of the mean
        logit difference, ``[n_layers_scanned, n_heads]`` or ``[.., seq]`` (nats).
    """
    import nnsight
    from nnsight import NNsight

    from lmsci.measure.attribution_patching import head_outputs

    lm = NNsight(hf.model)
    L, H = head_shape(hf)
    dh = hf.model.config.hidden_size // H
    rows = torch.arange(len(end))
    layers = lm.model.layers

    def metric(logits):
        last = logits[rows, end]
        return (last[rows, io] - last[rows, s]).mean()

    with torch.no_grad():
        zx: dict[int, torch.Tensor] = {}
        with head_outputs(hf, lambda l, z: zx.__setitem__(l, z.clone())):
            hf.model(input_ids=corrupt, use_cache=False)
        base_ours = float(metric(hf.model(input_ids=clean, use_cache=False).logits))
        with lm.trace(corrupt):  # a trace body runs in its own frame: save the container, append to it
            zs = nnsight.save([])
            for l in range(L):
                zs.append(layers[l].self_attn.o_proj.input)
        with lm.trace(clean):
            base_p = metric(lm.output.logits).save()
        base_theirs = float(base_p)
    scanned = list(range(0, L, layer_stride))
    positions = [None] if per == "head" else list(range(clean.shape[1]))
    ours = torch.zeros(len(scanned), H, len(positions))
    theirs = torch.zeros_like(ours)
    t_ours = t_theirs = 0.0
    with torch.no_grad():
        for i, l in enumerate(scanned):
            for h in range(H):
                sl = slice(h * dh, (h + 1) * dh)
                for j, t in enumerate(positions):
                    def patch(layer, z, l=l, h=h, t=t):
                        if layer != l:
                            return None
                        z = z.clone()
                        if t is None:
                            z[:, :, h] = zx[l][:, :, h]
                        else:
                            z[:, t, h] = zx[l][:, t, h]
                        return z
                    t0 = time.perf_counter()
                    with head_outputs(hf, patch):
                        ours[i, h, j] = float(metric(hf.model(input_ids=clean, use_cache=False).logits)) - base_ours
                    t1 = time.perf_counter()
                    with lm.trace(clean):
                        x = layers[l].self_attn.o_proj.input
                        if t is None:
                            x[:, :, sl] = zs[l][:, :, sl]
                        else:
                            x[:, t, sl] = zs[l][:, t, sl]
                        val = metric(lm.output.logits).save()
                    theirs[i, h, j] = float(val) - base_theirs
                    t2 = time.perf_counter()
                    t_ours += t1 - t0
                    t_theirs += t2 - t1
    sq = (lambda x: x[..., 0]) if per == "head" else (lambda x: x)
    return sq(ours), sq(theirs), t_ours, t_theirs, len(scanned) * H * len(positions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="a zoo name, a local HF directory, or 'tiny'")
    ap.add_argument("--n-prompts", type=int, default=8)
    ap.add_argument("--per", choices=("head", "head_position"), default="head")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layer-stride", type=int, default=1, help="scan every k-th layer (1: all)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.model == "tiny":
        hf = tiny_model()
    else:
        from lmsci.models.zoo import load_model

        hf = load_model(a.model, "cpu", attn_implementation="eager")
    batch = ioi_batch(hf, a.n_prompts, np.random.default_rng(a.seed))
    L, H = head_shape(hf)
    n_patch = len(range(0, L, a.layer_stride)) * H * (1 if a.per == "head" else batch[0].shape[1])
    print(f"model {a.model}: {L} layers x {H} heads (every {a.layer_stride} layer(s) scanned), {a.n_prompts} prompts "
          f"of {batch[0].shape[1]} tokens, per={a.per}: {n_patch} patched forward passes each, alternated, "
          f"{a.threads} thread(s)")
    ours, theirs, t_ours, t_theirs, n_patch = scan(hf, *batch, per=a.per, layer_stride=a.layer_stride)
    if a.layer_stride == 1:  # the library's own scan gives the same numbers
        lib = exact_patching(hf, *batch, per=a.per)
        print(f"exact_patching (the library's scan) vs the hook loop: {float((lib - ours).abs().max()):.1e} nats")
    diff = float((ours - theirs).abs().max())
    top_ours = torch.topk(ours.flatten().abs(), 5).indices
    top_theirs = torch.topk(theirs.flatten().abs(), 5).indices
    print(f"lmsci hooks: {t_ours:.2f} s ({1e3 * t_ours / n_patch:.1f} ms/patch)")
    print(f"nnsight {__import__('nnsight').__version__}: {t_theirs:.2f} s ({1e3 * t_theirs / n_patch:.1f} ms/patch)")
    print(f"ratio nnsight/lmsci: {t_theirs / t_ours:.2f}x")
    print(f"largest |difference| of the patched logit differences: {diff:.3e} nats "
          f"(largest effect {float(ours.abs().max()):.3f}); top-5 heads equal: "
          f"{set(top_ours.tolist()) == set(top_theirs.tolist())}")


if __name__ == "__main__":
    main()
