"""Instruments for linear regression theory: the minimum-norm interpolator, ridge, exact excess risk under
a known covariance, effective ranks, and the exact isotropic asymptotic risk.

Sources:
- Bartlett, Long, Lugosi, Tsigler, "Benign overfitting in linear regression", PNAS 2020, arXiv 1906.11300
  (Definition 3: effective ranks r_k, R_k; Theorem 4: k* = min{k >= 0 : r_k >= b n}, excess risk
  ~ sigma^2 (k*/n + n/R_{k*}) for the variance term).
- Hastie, Montanari, Rosset, Tibshirani, "Surprises in high-dimensional ridgeless least squares
  interpolation", Ann. Statist. 2022, arXiv 1903.08560, Theorem 1 (isotropic features, p/n -> gamma):
  R(gamma) = sigma^2 gamma / (1 - gamma) for gamma < 1 and r^2 (1 - 1/gamma) + sigma^2 / (gamma - 1) for
  gamma > 1 (excess risk ||beta_hat - beta||^2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmsci.errors import ConfigError


def min_norm_fit(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The minimum-norm least-squares solution ``pinv(X) y`` (the interpolator when p >= n and X has rank n).

    Args:
        X: (n, p) design. y: (n,) or (n, k) targets.

    Returns:
        theta of shape (p,) or (p, k). Computed with ``numpy.linalg.lstsq(rcond=None)`` (machine-precision
        cut-off: a larger ``rcond`` regularises quietly and hides the interpolation peak). For p > n it is
        ``X^T (X X^T)^{-1} y`` when X X^T is well conditioned.
    """
    X = np.asarray(X, dtype=np.float64)
    n, p = X.shape
    if p > 2 * n:  # the dual (n x n) system is cheaper and exact for a full-row-rank design
        G = X @ X.T
        try:
            c = np.linalg.solve(G, y)
            if np.all(np.isfinite(c)) and np.linalg.cond(G) < 1e12:
                return X.T @ c
        except np.linalg.LinAlgError:
            pass
    return np.linalg.lstsq(X, y, rcond=None)[0]


def ridge_fit(X: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """Ridge regression minimising ``(1/n) ||X theta - y||^2 + lam ||theta||^2``.

    Args:
        X: (n, p). y: (n,) or (n, k). lam: > 0.

    Returns:
        theta (p,) or (p, k), from whichever of the primal (p x p) or dual (n x n) systems is smaller.

    Raises:
        ConfigError: ``lam <= 0`` (use :func:`min_norm_fit`).
    """
    if not lam > 0:
        raise ConfigError("ridge", lam, "> 0 (lam = 0 is min_norm_fit)")
    n, p = X.shape
    if p <= n:
        return np.linalg.solve(X.T @ X + n * lam * np.eye(p), X.T @ y)
    return X.T @ np.linalg.solve(X @ X.T + n * lam * np.eye(n), y)


def excess_risk(theta_hat: np.ndarray, theta_star: np.ndarray, sigma_cov: np.ndarray) -> float:
    """Exact excess risk ``(theta_hat - theta*)^T Sigma (theta_hat - theta*)`` for a known covariance.

    Args:
        theta_hat, theta_star: (p,).
        sigma_cov: (p,) eigenvalues of a diagonal Sigma, or a (p, p) matrix.
    """
    d = np.asarray(theta_hat, dtype=np.float64) - np.asarray(theta_star, dtype=np.float64)
    S = np.asarray(sigma_cov, dtype=np.float64)
    return float(d @ (S * d)) if S.ndim == 1 else float(d @ S @ d)


def variance_term(X: np.ndarray, sigma_cov: np.ndarray, sigma: float) -> float:
    """Exact noise (variance) part of the min-norm interpolator's excess risk given X (p >= n, diagonal Sigma):
    ``sigma^2 tr(C Sigma C^T)`` with ``C = X^T (X X^T)^{-1}`` (Bartlett et al. 2020, eq. (3) and Lemma 6)."""
    lam = np.asarray(sigma_cov, dtype=np.float64)
    Ginv = np.linalg.inv(X @ X.T)
    M = Ginv @ ((X * lam) @ X.T) @ Ginv
    return float(sigma ** 2 * np.trace(M))


@dataclass
class EffectiveRanks:
    """Effective ranks of a spectrum (Bartlett et al. 2020, Definition 3).

    Attributes:
        r: r_k = sum_{i>k} lambda_i / lambda_{k+1}, k = 0 .. K-1 (shape (K,)).
        R: R_k = (sum_{i>k} lambda_i)^2 / sum_{i>k} lambda_i^2 (shape (K,)).
        k_star: min{k >= 0 : r_k >= b n} (None when no k < K qualifies).
        b, n: the constant and the sample size used.
    """

    r: np.ndarray
    R: np.ndarray
    k_star: int | None
    b: float
    n: int

    @property
    def r0(self) -> float:
        return float(self.r[0])

    def bound_terms(self) -> dict[str, float]:
        """The theorem's quantities at k*: r_0/n, k*/n, n/R_{k*} (variance term / sigma^2 = k*/n + n/R_{k*})."""
        if self.k_star is None:
            return {"r0_over_n": self.r0 / self.n, "kstar_over_n": float("nan"), "n_over_Rkstar": float("nan"),
                    "variance_term_over_sigma2": float("nan")}
        k = self.k_star
        return {"r0_over_n": self.r0 / self.n, "kstar_over_n": k / self.n, "n_over_Rkstar": self.n / float(self.R[k]),
                "variance_term_over_sigma2": k / self.n + self.n / float(self.R[k])}


def effective_ranks(eigvals: np.ndarray, n: int, b: float = 1.0, k_max: int | None = None) -> EffectiveRanks:
    """r_k, R_k for k < k_max and k* = min{k : r_k >= b n} (Bartlett et al. 2020, Def. 3, Thm 4).

    Args:
        eigvals: (p,) covariance eigenvalues (sorted non-increasing here).
        n: sample size. b: the universal constant of the theorem (we use b = 1).
        k_max: how many k to tabulate (default min(p, 10 n)).

    Raises:
        ConfigError: a non-positive eigenvalue, ``n < 1`` or ``b <= 0``.
    """
    lam = np.sort(np.asarray(eigvals, dtype=np.float64))[::-1]
    if lam.size == 0 or np.any(lam <= 0):
        raise ConfigError("eigvals", "non-positive or empty", "positive eigenvalues")
    if n < 1 or b <= 0:
        raise ConfigError("n/b", (n, b), "n >= 1 and b > 0")
    K = min(lam.size, k_max or 10 * n)
    tail = np.cumsum(lam[::-1])[::-1]  # tail[k] = sum_{i >= k} lambda_i (0-based) = sum_{i > k} in 1-based
    tail2 = np.cumsum((lam ** 2)[::-1])[::-1]
    r = tail[:K] / lam[:K]
    R = tail[:K] ** 2 / tail2[:K]
    hit = np.nonzero(r >= b * n)[0]
    return EffectiveRanks(r, R, int(hit[0]) if hit.size else None, float(b), int(n))


def isotropic_risk(gamma: float | np.ndarray, r2: float, sigma2: float) -> np.ndarray:
    """Limiting excess risk of min-norm least squares with isotropic features (Hastie et al. 2022, Thm 1).

    Args:
        gamma: p/n (> 0), scalar or array. r2: ||beta||^2. sigma2: noise variance.

    Returns:
        sigma2 gamma/(1-gamma) for gamma < 1; r2 (1 - 1/gamma) + sigma2/(gamma - 1) for gamma > 1;
        inf at gamma = 1.

    Raises:
        ConfigError: gamma <= 0, r2 < 0 or sigma2 < 0.
    """
    g = np.asarray(gamma, dtype=np.float64)
    if np.any(g <= 0) or not np.all(np.isfinite(g)):
        raise ConfigError("gamma", gamma, "> 0 (p/n)")
    if r2 < 0 or sigma2 < 0:
        raise ConfigError("r2/sigma2", (r2, sigma2), ">= 0")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(g < 1, sigma2 * g / (1 - g), r2 * (1 - 1 / g) + sigma2 / (g - 1))
    return np.where(g == 1, np.inf, out)
