"""In-context linear regression: prompts ``x_1, y_1, ..., x_n, y_n`` with ``y_i = w . x_i + noise``, the curriculum,
and the exact baselines (least squares, ridge, one gradient step, k nearest neighbours, averaging).

Sources: Garg, Tsipras, Liang, Valiant, "What Can Transformers Learn In-Context? A Case Study of Simple Function
Classes", arXiv 2208.01066: Sec. 2 (x ~ N(0, I_d), w ~ N(0, I_d), prompts of 2d + 1 points, the error normalised
by d), App. A.2 (the curriculum: the active dimension and the number of points grow every fixed number of steps;
the inactive coordinates of x are zero) and Fig. 2 (the baselines: least squares, 3-nearest neighbours, averaging
``w = mean_i y_i x_i``); Akyurek, Schuurmans, Andreas, Ma, Zhou, "What learning algorithm is in-context learning?
Investigations with linear models", arXiv 2211.15661, Sec. 4 (noisy targets, ridge regression with the Bayes
regulariser ``lambda = sigma^2 / tau^2``, one step of gradient descent, and the squared prediction difference SPD
between two predictors).

Encoding (Garg et al., ``models.py: _combine``): the prompt is the vector sequence ``x_1, (y_1, 0, ..., 0), x_2,
(y_2, 0, ..., 0), ...`` of width ``d``; the model's output at the position of ``x_i`` predicts ``y_i`` from the
``i - 1`` pairs before it.

Everything here is numpy/torch on the caller's generator; nothing is global.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lmsci.errors import ConfigError


@dataclass
class RegressionPrompts:
    """A batch of in-context regression prompts.

    Attributes:
        xs: ``[batch, n_points, d]`` inputs (coordinates beyond the active dimension are 0).
        ys: ``[batch, n_points]`` targets ``w . x + noise``.
        ws: ``[batch, d]`` the task vectors (0 beyond the active dimension).
    """

    xs: torch.Tensor
    ys: torch.Tensor
    ws: torch.Tensor

    def tokens(self) -> torch.Tensor:
        """The interleaved input sequence ``[batch, 2 n_points, d]`` (:func:`interleave`)."""
        return interleave(self.xs, self.ys)


def interleave(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """``x_1, (y_1, 0..0), x_2, (y_2, 0..0), ...`` as ``[batch, 2 n, d]`` (Garg et al., ``_combine``).

    Args:
        xs: ``[batch, n, d]``; ys: ``[batch, n]``.
    """
    B, n, d = xs.shape
    y_tok = torch.zeros_like(xs)
    y_tok[..., 0] = ys
    return torch.stack([xs, y_tok], dim=2).reshape(B, 2 * n, d)


class LinearRegressionWorld:
    """Prompts of noisy linear regression tasks in ``d`` dimensions.

    Args:
        d: the input dimension (the model's input width).
        noise_std: standard deviation ``sigma`` of the target noise (Garg et al.'s main task is noiseless;
            Akyurek et al. add noise).
        w_std: ``tau``, the prior standard deviation of each coordinate of w (1 in both papers).

    Raises:
        ConfigError: ``d < 1``, negative ``noise_std``, non-positive ``w_std``.
    """

    def __init__(self, d: int, noise_std: float = 0.0, w_std: float = 1.0):
        if d < 1:
            raise ConfigError("d", d, ">= 1")
        if noise_std < 0:
            raise ConfigError("noise_std", noise_std, ">= 0")
        if w_std <= 0:
            raise ConfigError("w_std", w_std, "> 0")
        self.d, self.noise_std, self.w_std = d, float(noise_std), float(w_std)

    @property
    def ridge_lambda(self) -> float:
        """The Bayes-optimal ridge penalty ``sigma^2 / tau^2`` (the posterior mean of w under the Gaussian prior;
        Akyurek et al. Sec. 4); tiny when the task is noiseless."""
        return max(self.noise_std ** 2 / self.w_std ** 2, 1e-8)

    def sample(self, batch: int, n_points: int, gen: torch.Generator, d_active: int | None = None,
               device: str | torch.device = "cpu") -> RegressionPrompts:
        """Draw ``batch`` prompts of ``n_points`` pairs; only the first ``d_active`` coordinates are non-zero.

        Raises:
            ConfigError: ``d_active`` outside ``[1, d]`` or ``n_points < 1``.
        """
        d_active = self.d if d_active is None else int(d_active)
        if not 1 <= d_active <= self.d:
            raise ConfigError("d_active", d_active, f"1..d={self.d}")
        if n_points < 1:
            raise ConfigError("n_points", n_points, ">= 1")
        xs = torch.randn(batch, n_points, self.d, generator=gen)
        ws = torch.randn(batch, self.d, generator=gen) * self.w_std
        if d_active < self.d:
            xs[..., d_active:] = 0
            ws[:, d_active:] = 0
        ys = (xs @ ws[:, :, None])[..., 0] + self.noise_std * torch.randn(batch, n_points, generator=gen)
        return RegressionPrompts(xs.to(device), ys.to(device), ws.to(device))


@dataclass(frozen=True)
class Curriculum:
    """Garg et al.'s curriculum (App. A.2): a value that starts at ``start`` and grows by ``inc`` every
    ``interval`` steps up to ``end`` (used for the active dimension and for the number of points)."""

    start: int
    end: int
    inc: int
    interval: int

    def at(self, step: int) -> int:
        """The value at 0-based training ``step``."""
        if self.interval <= 0 or self.inc <= 0:
            return self.end
        return int(min(self.end, self.start + self.inc * (step // self.interval)))


# -- baselines (exact, numpy) ------------------------------------------------------------------------------
BASELINES = ("least_squares", "ridge", "gd_1step", "knn3", "averaging", "zero")


def _lstsq(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(X, y, rcond=None)[0]


def baseline_predictions(xs: np.ndarray, ys: np.ndarray, *, ridge_lambda: float, gd_lr: float | None = None,
                         k: int = 3) -> dict[str, np.ndarray]:
    """Every baseline's prediction of ``y_i`` from the ``i`` pairs before it, for every prompt and every ``i``.

    Args:
        xs: ``[batch, n, d]``; ys: ``[batch, n]`` (float64 is used inside).
        ridge_lambda: the ridge penalty (``LinearRegressionWorld.ridge_lambda``: Bayes-optimal).
        gd_lr: step size of one gradient-descent step from ``w = 0`` on the summed squared loss,
            ``w = gd_lr * X^T y`` (Akyurek et al.); None tunes it per context size on these prompts
            (:func:`best_gd_lr`).
        k: neighbours for the k-NN baseline (Garg et al.: 3, uniform weights; fewer when fewer pairs exist).

    Returns:
        ``{name: [batch, n]}`` for ``BASELINES``: ``least_squares`` (the minimum-norm solution, ``np.linalg.lstsq``),
        ``ridge`` (``(X^T X + lambda I)^{-1} X^T y``), ``gd_1step``, ``knn3`` (mean ``y`` of the ``k`` nearest
        ``x_j``), ``averaging`` (``w = mean_j y_j x_j``, Garg et al.), ``zero``. Position 0 (no pairs) predicts 0
        for all.
    """
    xs = np.asarray(xs, np.float64)
    ys = np.asarray(ys, np.float64)
    B, n, d = xs.shape
    out = {name: np.zeros((B, n)) for name in BASELINES}
    lrs = [gd_lr] * n if gd_lr is not None else [best_gd_lr(xs, ys, i) for i in range(n)]
    eye = np.eye(d)
    for i in range(1, n):
        X, y, xq = xs[:, :i], ys[:, :i], xs[:, i]
        XtX = np.einsum("bij,bik->bjk", X, X)
        Xty = np.einsum("bij,bi->bj", X, y)
        w_ridge = np.linalg.solve(XtX + ridge_lambda * eye, Xty[..., None])[..., 0]
        out["ridge"][:, i] = np.einsum("bj,bj->b", w_ridge, xq)
        w_ls = np.stack([_lstsq(X[b], y[b]) for b in range(B)])
        out["least_squares"][:, i] = np.einsum("bj,bj->b", w_ls, xq)
        out["gd_1step"][:, i] = lrs[i] * np.einsum("bj,bj->b", Xty, xq)
        out["averaging"][:, i] = np.einsum("bj,bj->b", Xty / i, xq)
        dist = np.linalg.norm(X - xq[:, None, :], axis=-1)
        kk = min(k, i)
        nn_idx = np.argsort(dist, axis=1)[:, :kk]
        out["knn3"][:, i] = np.take_along_axis(y, nn_idx, axis=1).mean(1)
    return out


def best_gd_lr(xs: np.ndarray, ys: np.ndarray, i: int) -> float:
    """The step size ``eta`` minimising the mean squared error of ``eta * (X^T y) . x_q`` at context size ``i``
    (closed form of a one-dimensional least squares); 0 for ``i = 0``."""
    if i == 0:
        return 0.0
    xs = np.asarray(xs, np.float64)
    ys = np.asarray(ys, np.float64)
    g = np.einsum("bij,bi,bj->b", xs[:, :i], ys[:, :i], xs[:, i])
    den = float((g * g).sum())
    return float((g * ys[:, i]).sum() / den) if den > 0 else 0.0


def squared_errors(pred: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Per-position mean squared error over the batch ``[n]`` (not normalised; divide by d for Garg's scale)."""
    return ((np.asarray(pred, np.float64) - np.asarray(ys, np.float64)) ** 2).mean(0)


def spd(pred_a: np.ndarray, pred_b: np.ndarray) -> np.ndarray:
    """Squared prediction difference per position ``[n]`` (Akyurek et al. Sec. 4.1, SPD), mean over prompts."""
    return ((np.asarray(pred_a, np.float64) - np.asarray(pred_b, np.float64)) ** 2).mean(0)
