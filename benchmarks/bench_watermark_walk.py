"""Wall time of one perturbation step of watermark-removal's random walk: the cached proposal vs full passes.

Source of the method: Zhang et al., "Watermarks in the Sand", arXiv 2311.04378, Algorithm 1 (perturbation oracle:
resample a span of ``span`` tokens from an unwatermarked LM). Reference: the walk as first written, which ran the
attacker over the whole text once per resampled token (``span`` full passes) and once more to score the proposal
(``span + 1`` passes over ``n x (prompt_len + T)`` tokens). Measured: :func:`lmsci.experiments.watermark.watermark_removal.
propose_span`, which runs the prefix once and reuses its key/value cache for the draws and the suffix (one pass'
worth of tokens). Both on the quick preset's attacker shape (a 2-layer d_model 128 GPT exported to a
``GPT2LMHeadModel``, vocabulary 1024; random weights: timing does not depend on training), the same span start for
both, alternating timed windows, one table with the ratio. The log-probabilities of both arms are compared too.

Usage::

    python benchmarks/bench_watermark_walk.py --threads 2
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-texts", type=int, default=50)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--T", type=int, default=200)
    ap.add_argument("--span", type=int, default=6)
    ap.add_argument("--steps", type=int, default=10, help="walk steps per timed window and arm")
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import torch

    from lmsci.experiments.watermark.watermark_removal import propose_span, token_logprobs
    from lmsci.models.gpt import GPT, GPTConfig
    from lmsci.models.hf_convert import to_hf

    torch.set_num_threads(a.threads)
    L = a.prompt_len + a.T
    A = to_hf(GPT(GPTConfig(vocab_size=1024, seq_len=L, n_layers=2, n_heads=4, d_model=128), seed=0)).eval()
    x = torch.randint(0, 1024, (a.n_texts, L), generator=torch.Generator().manual_seed(0))
    rows = torch.arange(a.n_texts)

    @torch.no_grad()
    def full_passes(s: int, g: torch.Generator):
        new = x.clone()
        for j in range(a.span):
            logits = A(new).logits[rows, s + j - 1].float()
            new[rows, s + j] = torch.multinomial(torch.softmax(logits, -1), 1, generator=g).squeeze(1)
        return new, token_logprobs(A, new)[:, s - 1:]

    def cached(s: int, g: torch.Generator):
        return propose_span(A, x, s, a.span, g)

    starts = torch.randint(a.prompt_len, L - a.span + 1, (a.steps,), generator=torch.Generator().manual_seed(1))
    new_f, lp_f = full_passes(int(starts[0]), torch.Generator().manual_seed(2))
    new_c, lp_c = cached(int(starts[0]), torch.Generator().manual_seed(2))
    same_draws = bool(torch.equal(new_f, new_c))
    max_lp_diff = float((lp_f - lp_c).abs().max()) if same_draws else float("nan")
    times = {"full passes": [], "cached": []}
    for _ in range(a.windows):
        for name, fn in (("full passes", full_passes), ("cached", cached)):
            g = torch.Generator().manual_seed(3)
            t0 = time.perf_counter()
            for s in starts:
                fn(int(s), g)
            times[name].append((time.perf_counter() - t0) / a.steps)
    best = {k: min(v) for k, v in times.items()}
    print(f"torch {torch.__version__}, {a.threads} threads, {a.n_texts} texts x {L} tokens, span {a.span}, "
          f"{a.steps} steps x {a.windows} windows per arm (best window)")
    print(f"{'arm':<14}{'s per walk step':>18}")
    for k, v in best.items():
        print(f"{k:<14}{v:>18.4f}")
    print(f"ratio full/cached: {best['full passes'] / best['cached']:.2f}x; same draws for one seed: {same_draws}; "
          f"max |log-prob difference|: {max_lp_diff:.2e}")


if __name__ == "__main__":
    main()
