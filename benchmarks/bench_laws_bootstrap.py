"""Bootstrap speed of the Chinchilla fit: batched descent vs one SciPy L-BFGS-B per resample.

Fits L = E + A/N^alpha + B/D^beta to Epoch AI's 240 Chinchilla runs (Besiroglu et al. 2024,
arXiv 2404.10102) with Huber (delta 1e-3) on log loss, then bootstraps with both methods of
:func:`lmsci.laws.fit.bootstrap`, timed in one process (so machine load hits both alike), and prints
the seconds, the ratio, and the largest difference between the two sets of bootstrap estimates.
The per-resample L-BFGS-B arm is timed on a subset and scaled to the full count.

Usage::

    python benchmarks/bench_laws_bootstrap.py                  # 1,000 resamples, L-BFGS-B arm on 100
    python benchmarks/bench_laws_bootstrap.py --n-boot 4000 --lbfgsb 200
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lmsci.laws.datasets import chinchilla_csv_path, load_csv
from lmsci.laws.fit import bootstrap, fit


def _all(r) -> np.ndarray:
    """Fit-space estimates of every requested resample, NaN where it did not converge."""
    out = np.full((r.n_boot, len(r.theta)), np.nan)
    if r.boot_theta is not None:
        out[r.boot_converged] = r.boot_theta
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--lbfgsb", type=int, default=100, help="resamples timed for the L-BFGS-B arm")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    d = load_csv(chinchilla_csv_path()).drop_highest(5)
    t0 = time.perf_counter()
    r = fit("chinchilla", d.X, d.y)
    t_fit = time.perf_counter() - t0
    print(f"fit (4,500-start grid, batched screening + L-BFGS-B polish): {t_fit:.2f} s  params {r.params}")

    t0 = time.perf_counter()
    bootstrap(r, d.X, d.y, n_boot=args.n_boot, seed=args.seed, method="batched")
    t_b = time.perf_counter() - t0
    batched = r.boot_theta.copy()
    failed_b = r.n_boot_failed

    t0 = time.perf_counter()
    bootstrap(r, d.X, d.y, n_boot=args.lbfgsb, seed=args.seed, method="lbfgsb")
    t_l = (time.perf_counter() - t0) * args.n_boot / args.lbfgsb
    # same seed => the first resamples coincide only when n_boot matches; compare on a shared draw
    bootstrap(r, d.X, d.y, n_boot=args.lbfgsb, seed=args.seed + 1, method="lbfgsb")
    ref = _all(r)
    bootstrap(r, d.X, d.y, n_boot=args.lbfgsb, seed=args.seed + 1, method="batched")
    diff = np.nanmax(np.abs(_all(r) - ref))  # over the resamples both methods converged on
    print(f"bootstrap {args.n_boot} resamples, batched: {t_b:.2f} s ({failed_b} did not converge, excluded)")
    print(f"bootstrap {args.n_boot} resamples, L-BFGS-B per resample: {t_l:.1f} s "
          f"(timed on {args.lbfgsb}, scaled)")
    print(f"speed-up batched / L-BFGS-B: {t_l / t_b:.1f}x; max |difference| of fit-space estimates: {diff:.2e}")
    q = np.quantile(batched[:, 3:], [0.025, 0.975], axis=0)
    print(f"alpha 95% CI [{q[0, 0]:.4f}, {q[1, 0]:.4f}], beta 95% CI [{q[0, 1]:.4f}, {q[1, 1]:.4f}]")


if __name__ == "__main__":
    main()
