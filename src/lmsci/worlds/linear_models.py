"""Controlled worlds for learning-theory experiments: Gaussian designs, polynomial regression, random ReLU
features of scikit-learn's shipped ``load_digits``, and linearly separable classification data.

Every generator takes a :class:`numpy.random.Generator` and returns float64 arrays; nothing is
downloaded (``load_digits`` ships with scikit-learn: 1,797 8x8 images, 64 features, 10 classes).

Sources: Hastie, Montanari, Rosset, Tibshirani, "Surprises in high-dimensional ridgeless least squares"
(Ann. Statist. 2022, arXiv 1903.08560) for the isotropic design; Bartlett, Long, Lugosi, Tsigler,
"Benign overfitting in linear regression" (PNAS 2020, arXiv 1906.11300) for spiked covariances;
Belkin, Hsu, Ma, Mandal (PNAS 2019, arXiv 1812.11118) and Nakkiran et al. (arXiv 2003.01897) for random
features on images; Soudry et al. (arXiv 1710.10345) for separable data.
"""

from __future__ import annotations

import numpy as np

from lmsci.errors import ConfigError


def spiked_spectrum(n_spikes: int, spike: float, n_tail: int, tail: float) -> np.ndarray:
    """Eigenvalues of a spiked covariance: ``n_spikes`` of ``spike`` then ``n_tail`` of ``tail``.

    Returns:
        shape (n_spikes + n_tail,), non-increasing when ``spike >= tail``.

    Raises:
        ConfigError: negative counts, non-positive eigenvalues, or an empty spectrum.
    """
    if n_spikes < 0 or n_tail < 0 or n_spikes + n_tail == 0:
        raise ConfigError("n_spikes/n_tail", (n_spikes, n_tail), "non-negative counts, not both 0")
    if spike <= 0 or tail <= 0:
        raise ConfigError("spike/tail", (spike, tail), "positive eigenvalues")
    return np.concatenate([np.full(n_spikes, float(spike)), np.full(n_tail, float(tail))])


def gaussian_design(n: int, eigvals: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``n`` rows x ~ N(0, diag(eigvals)).

    Returns:
        X of shape (n, p), p = len(eigvals).
    """
    lam = np.asarray(eigvals, dtype=np.float64)
    return rng.standard_normal((n, lam.size)) * np.sqrt(lam)


def linear_targets(X: np.ndarray, theta: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """y = X theta + eps, eps ~ N(0, sigma^2) i.i.d.; shape (n,)."""
    return X @ theta + sigma * rng.standard_normal(X.shape[0])


def sphere_vector(p: int, norm: float, rng: np.random.Generator) -> np.ndarray:
    """A vector of length ``norm`` uniform on the sphere in R^p; shape (p,)."""
    v = rng.standard_normal(p)
    return v * (norm / np.linalg.norm(v))


# -- polynomial regression (the classical U-curve, ESL Fig. 2.11) ------------------------------------
def smooth_target(x: np.ndarray) -> np.ndarray:
    """The regression function of the U-curve task on [-1, 1]: ``sin(pi x) + 0.5 cos(3 pi x / 2)``."""
    return np.sin(np.pi * x) + 0.5 * np.cos(1.5 * np.pi * x)


def polynomial_task(n: int, sigma: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points x ~ U[-1, 1], y = smooth_target(x) + N(0, sigma^2); shapes (n,), (n,)."""
    x = rng.uniform(-1.0, 1.0, n)
    return x, smooth_target(x) + sigma * rng.standard_normal(n)


def legendre_features(x: np.ndarray, degree: int) -> np.ndarray:
    """Legendre polynomials P_0 .. P_degree at x (well conditioned on [-1, 1]); shape (len(x), degree + 1)."""
    return np.polynomial.legendre.legvander(np.asarray(x, dtype=np.float64), degree)


# -- random ReLU features of load_digits -------------------------------------------------------------
def digits_split(n_train: int, label_noise: float, rng: np.random.Generator):
    """A random train/test split of scikit-learn's ``load_digits`` with standardised pixels and one-hot targets.

    Args:
        n_train: training images (the rest, 1,797 - n_train, are the test set).
        label_noise: fraction of training labels replaced by a different class drawn uniformly (test labels clean).

    Returns:
        (X_train (n_train, 64), Y_train (n_train, 10) one-hot of the possibly flipped labels,
        X_test (n_test, 64), labels_test (n_test,) int).

    Raises:
        ConfigError: ``n_train`` outside [10, 1,700] or ``label_noise`` outside [0, 1).
    """
    from sklearn.datasets import load_digits

    X, labels = load_digits(return_X_y=True)
    if not 10 <= n_train <= len(X) - 97:
        raise ConfigError("n_train", n_train, f"10 .. {len(X) - 97}")
    if not 0.0 <= label_noise < 1.0:
        raise ConfigError("label_noise", label_noise, "[0, 1)")
    perm = rng.permutation(len(X))
    tr, te = perm[:n_train], perm[n_train:]
    mu, sd = X[tr].mean(0), X[tr].std(0)
    sd = np.where(sd > 0, sd, 1.0)
    Xs = (X - mu) / sd
    y = labels[tr].copy()
    flip = rng.random(n_train) < label_noise
    y[flip] = (y[flip] + rng.integers(1, 10, flip.sum())) % 10
    return Xs[tr], np.eye(10)[y], Xs[te], labels[te]


def relu_feature_weights(d: int, n_features: int, rng: np.random.Generator) -> np.ndarray:
    """First-layer weights of random ReLU features, W ~ N(0, 1/d); shape (d, n_features). Draw the largest
    width once and slice its first columns so that narrower models are nested in wider ones."""
    return rng.standard_normal((d, n_features)) / np.sqrt(d)


def relu_features(X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """phi(x) = ReLU(x W) / sqrt(N): features whose Gram matrix tends to the arc-cosine kernel; shape (n, N)."""
    return np.maximum(X @ W, 0.0) / np.sqrt(W.shape[1])


# -- separable classification ------------------------------------------------------------------------
def separable_data(n: int, d: int, margin: float, rng: np.random.Generator,
                   n_test: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Linearly separable data with the intercept folded in (last coordinate 1).

    x = (z, 1), z ~ N(0, I_{d-1}); labels y = sign(w*^T x) of a random teacher w* (unit norm, with a bias);
    training points with |w*^T x| < ``margin`` are redrawn (rejection), so the training set is separable
    by the teacher with margin >= ``margin``. Test points are drawn without rejection (some lie near or
    across the max-margin separator, which makes the held-out logistic loss grow in late training).

    Returns:
        (X (n, d), y (n,) in {-1, +1}, X_test (n_test, d), y_test (n_test,)).

    Raises:
        ConfigError: ``d < 2``, ``n < 2`` or ``margin < 0``.
    """
    if d < 2 or n < 2:
        raise ConfigError("n/d", (n, d), "n >= 2 and d >= 2 (the last coordinate is the folded intercept)")
    if margin < 0:
        raise ConfigError("margin", margin, ">= 0")
    w = rng.standard_normal(d)
    w[-1] = 0.3 * rng.standard_normal()
    w /= np.linalg.norm(w)

    def draw(m: int, reject: bool) -> tuple[np.ndarray, np.ndarray]:
        out = np.empty((0, d))
        while len(out) < m:
            z = np.hstack([rng.standard_normal((4 * m + 8, d - 1)), np.ones((4 * m + 8, 1))])
            if reject:
                z = z[np.abs(z @ w) >= margin]
            out = np.vstack([out, z])
        out = out[:m]
        s = np.sign(out @ w)
        s[s == 0] = 1.0
        return out, s

    X, y = draw(n, True)
    Xt, yt = draw(n_test, False) if n_test else (np.empty((0, d)), np.empty(0))
    return X, y, Xt, yt
