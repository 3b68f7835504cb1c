"""Overhead of an installed attention patch on a Hugging Face Llama: forward pass, patched vs unpatched.

Issue 21's performance target: a 4-layer d_model=256 Llama at 2,048 tokens, ``full_policy()`` installed
through ``transformers.AttentionInterface`` (:mod:`lmsci.models.hf_attention`), costs at most 1.10x the
unpatched model's forward pass. Both are timed in one process, interleaved (unpatched, patched,
unpatched, ...), ``--repeats`` times after a warm-up; the median of each is reported and the ratio
printed. For information, the same model under ``lm_infinite_policy(n_local=n)`` (a no-op Lambda mask
computed by the blockwise harness, not the fused kernel) is timed too, and the largest logit
difference of each patched run against the unpatched one is printed.

The model is random (timing does not depend on training) and runs with ``attn_implementation="sdpa"``,
the ``transformers`` default.

Usage::

    python benchmarks/bench_arch_overhead.py --n 2048 --d-model 256 --n-layers 4 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048, help="tokens per forward pass")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-layers", type=int, default=4)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmsci.models.attention_harness import AttentionPatch, full_policy, lm_infinite_policy

    torch.set_num_threads(args.threads)
    cfg = LlamaConfig(vocab_size=512, hidden_size=args.d_model, intermediate_size=4 * args.d_model,
                      num_hidden_layers=args.n_layers, num_attention_heads=args.n_heads,
                      num_key_value_heads=args.n_heads, max_position_embeddings=args.n,
                      attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    x = torch.randint(0, 512, (1, args.n), generator=torch.Generator().manual_seed(0))
    patches = {"full_policy": AttentionPatch(model, full_policy()),
               "lm_infinite(L=n)": AttentionPatch(model, lm_infinite_policy(args.n, 4))}
    times: dict[str, list[float]] = {"unpatched": [], **{k: [] for k in patches}}
    diffs: dict[str, float] = {}

    def run(name: str) -> torch.Tensor:
        p = patches.get(name)
        if p is not None:
            p.apply()
        try:
            t = time.perf_counter()
            out = model(input_ids=x, use_cache=False).logits
            dt = time.perf_counter() - t
        finally:
            if p is not None:
                p.remove()
        times[name].append(dt)
        return out

    with torch.no_grad():
        ref = run("unpatched")  # warm-up
        for k in patches:
            diffs[k] = float((run(k) - ref).abs().max())
        for v in times.values():
            v.clear()
        for _ in range(args.repeats):
            for name in times:
                run(name)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"Llama {args.n_layers} layers d_model={args.d_model} heads={args.n_heads}, n={args.n} tokens, "
          f"threads={args.threads}, {args.repeats} interleaved repeats (median seconds)")
    for k, v in med.items():
        extra = "" if k == "unpatched" else f"  ratio={v / med['unpatched']:.3f}  max|dlogit|={diffs[k]:.2e}"
        print(f"  {k:<18} {v:8.4f} s{extra}")
    r = med["full_policy"] / med["unpatched"]
    print(f"overhead full_policy/unpatched: {r:.3f}x (target <= 1.10: {'met' if r <= 1.10 else 'NOT met'})")


if __name__ == "__main__":
    main()
