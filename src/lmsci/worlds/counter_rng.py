"""Counter-based randomness: a 64-bit hash of integer counters and a keyed pseudo-random permutation.

A draw is a pure function of its counters (seed, tag, person, copy, ...), not of a generator's state, so a
stream of documents can be re-rendered from any point and does not depend on how it is chunked
(:mod:`lmsci.worlds.bios_render`, :mod:`lmsci.worlds.bios_stream`, :mod:`lmsci.worlds.bios_junk`).

Source: the splitmix64 finaliser (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
OOPSLA 2014); the Feistel network with cycle walking (Black & Rogaway, "Ciphers with arbitrary finite domains",
CT-RSA 2002).
"""

from __future__ import annotations

import numpy as np
from numba import njit

GOLD = np.uint64(0x9E3779B97F4A7C15)
"""The golden-ratio increment of splitmix64 (uint64)."""
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (Steele et al. 2014), elementwise on uint64."""
    x = (x ^ (x >> _S30)) * _C1
    x = (x ^ (x >> _S27)) * _C2
    return x ^ (x >> _S31)


def hash_u64(*cols) -> np.ndarray:
    """A 64-bit hash of integer columns (broadcast), counter-based randomness: uint64 array."""
    with np.errstate(over="ignore"):
        h = np.full(np.broadcast(*[np.asarray(c) for c in cols]).shape, GOLD, dtype=np.uint64)
        for c in cols:
            h = mix64(h + np.asarray(c).astype(np.int64).astype(np.uint64) * GOLD + GOLD)
    return h


def below(h: np.ndarray, k) -> np.ndarray:
    """Map a uint64 hash to ``[0, k)`` (multiply-shift on the high 32 bits): int64."""
    return (((h >> _S32) * np.asarray(k, dtype=np.uint64)) >> _S32).astype(np.int64)


def feistel_permutation(idx: np.ndarray, n: int, key: int) -> np.ndarray:
    """A keyed pseudo-random permutation of ``[0, n)`` applied to ``idx`` (int array of positions).

    A 4-round balanced Feistel network on the smallest even number of bits covering ``n``, with
    cycle walking (re-encrypt while the value is >= n), so it is a bijection of ``[0, n)`` needing no
    table: O(len(idx)) time and memory whatever ``n``. Returns int64 of ``idx``'s shape.
    """
    bits = max(2, int(n - 1).bit_length())
    bits += bits % 2
    keys = np.array([hash_u64(key, r, 977)[()] for r in range(4)], dtype=np.uint64)
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    out = np.empty(idx.shape, dtype=np.int64)
    _feistel_kernel(idx.ravel(), np.uint64(n), np.uint64(bits // 2), np.uint64((1 << (bits // 2)) - 1), keys,
                    out.ravel())
    return out


@njit(cache=True)
def _mix1(x):  # pragma: no cover - compiled; the splitmix64 finaliser of mix64 on one uint64
    x = (x ^ (x >> _S30)) * _C1
    x = (x ^ (x >> _S27)) * _C2
    return x ^ (x >> _S31)


@njit(cache=True)
def _feistel_kernel(idx, n, half, mask, keys, out):  # pragma: no cover - compiled
    for t in range(idx.shape[0]):
        x = np.uint64(idx[t])
        while True:
            left = x >> half
            right = x & mask
            for r in range(4):
                f = _mix1(right ^ keys[r]) & mask
                left, right = right, left ^ f
            x = (left << half) | right
            if x < n:
                break
        out[t] = np.int64(x)
