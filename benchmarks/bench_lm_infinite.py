"""Wall time and peak memory of LM-Infinite vs full attention at long lengths, encoding and decoding.

Source of the claim: Han et al., "LM-Infinite", NAACL 2024, arXiv 2308.16137, Appendix G (Llama-2-7B at
32K on an A100 with DeepSpeed ZeRO-3 CPU offload: encoding 3.16x faster, decoding 2.72x faster, memory
7.53x lower). Here: the same lmsci RoPE GPT (random weights; timing does not depend on training) on CPU.

* encoding: one forward pass over n tokens. Full attention = the model's own attention
  (``F.scaled_dot_product_attention``, causal); LM-Infinite = the blockwise Lambda path.
* decoding: after a prefill of n tokens, ``--decode`` tokens fed one at a time through a streaming
  session. Full attention keeps the whole KV cache (the harness's ``full`` policy); LM-Infinite's cache
  is trimmed to ``n_global + n_local`` entries.

Each measurement runs in a fresh subprocess; peak memory = the child's peak RSS (``ru_maxrss``) minus
its RSS after building the model and the input. Ratios are full / LM-Infinite, printed in one table.

Usage::

    python benchmarks/bench_lm_infinite.py --lengths 4096 8192 16384 32768 --threads 2
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(args: argparse.Namespace) -> None:
    import torch

    from lmsci.methods.lm_infinite import AttentionPatch, full_policy, lm_infinite_policy
    from lmsci.models.gpt import GPT, GPTConfig

    torch.set_num_threads(args.threads)
    cfg = GPTConfig(vocab_size=256, seq_len=args.window, n_layers=args.n_layers, n_heads=args.n_heads,
                    d_model=args.d_model, pos="rope", norm="rmsnorm", bias=False)
    model = GPT(cfg, seed=0).eval()
    n = args.n
    x = torch.randint(0, 256, (1, n), generator=torch.Generator().manual_seed(0))
    lminf = lm_infinite_policy(args.window, args.n_global)
    base = _rss_mb()
    out: dict = {"method": args.method, "mode": args.mode, "n": n}
    with torch.no_grad():
        if args.mode == "encode":
            if args.method == "full":
                t = time.perf_counter()
                model(x)
                out["seconds"] = time.perf_counter() - t
            else:
                with AttentionPatch(model, lminf):
                    t = time.perf_counter()
                    model(x)
                    out["seconds"] = time.perf_counter() - t
        else:
            pol = full_policy() if args.method == "full" else lminf
            patch = AttentionPatch(model, pol)
            with patch, patch.stream() as s:
                s.feed(x)
                steps = []
                nxt = x[:, -1:]
                for _ in range(args.decode):
                    t = time.perf_counter()
                    logits = s.feed(nxt)
                    steps.append(time.perf_counter() - t)
                    nxt = logits[:, -1:].argmax(-1)
                out["seconds"] = sum(steps) / len(steps)
                out["cache_entries"] = s.cache_len()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["peak_mb"] = max(peak - base, 0.0)
    print(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384])
    p.add_argument("--window", type=int, default=512, help="n_local = training length L")
    p.add_argument("--n-global", type=int, default=10)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--decode", type=int, default=16, help="tokens decoded after the prefill")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--modes", nargs="+", default=["encode", "decode"])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    rows = []
    for mode in args.modes:
        for n in args.lengths:
            res = {}
            for method in ("full", "lm_infinite"):
                cmd = [sys.executable, __file__, "--child", "--n", str(n), "--method", method, "--mode", mode,
                       "--window", str(args.window), "--n-global", str(args.n_global), "--n-layers",
                       str(args.n_layers), "--d-model", str(args.d_model), "--n-heads", str(args.n_heads),
                       "--decode", str(args.decode), "--threads", str(args.threads)]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    res[method] = {"error": (r.stderr.strip().splitlines() or ["?"])[-1]}
                else:
                    res[method] = json.loads(r.stdout.strip().splitlines()[-1])
            rows.append((mode, n, res))
            f, li = res["full"], res["lm_infinite"]
            if "error" in f or "error" in li:
                print(f"{mode:7s} n={n:6d}  error: {f.get('error', '')} {li.get('error', '')}", flush=True)
                continue
            extra = ""
            if mode == "decode":
                extra = f"  cache entries full={f['cache_entries']} lm_inf={li['cache_entries']}"
            print(f"{mode:7s} n={n:6d}  time full={f['seconds']:.4f}s lm_inf={li['seconds']:.4f}s "
                  f"ratio={f['seconds'] / li['seconds']:.2f}x   peak mem full={f['peak_mb']:.1f}MB "
                  f"lm_inf={li['peak_mb']:.1f}MB ratio={f['peak_mb'] / max(li['peak_mb'], 1e-3):.2f}x{extra}",
                  flush=True)
    print(f"\nmodel: n_layers={args.n_layers} d_model={args.d_model} n_heads={args.n_heads}; LM-Infinite "
          f"n_local={args.window} n_global={args.n_global}; threads={args.threads}; decode={args.decode} tokens "
          "(seconds per token). Ratios are full / LM-Infinite (>1 = LM-Infinite better).")


if __name__ == "__main__":
    main()
