"""Modular arithmetic worlds for grokking: ``x op y mod p`` over all pairs, split by a training fraction.

Sources:

* Power, Burda, Edwards, Babuschkin, Misra, "Grokking: Generalization Beyond Overfitting on Small
  Algorithmic Datasets", arXiv 2201.02177 (2022), sec. 2 and App. A.1; code ``openai/grok``
  (``grok/data.py``): binary operations on Z_p (p = 97), every equation ``x op y = z``, one random shuffle,
  the first ``train_data_pct`` % of equations are the training set. Division ``x / y = x * y^{-1}`` is
  defined for ``y != 0`` only (their ``a / b`` rows exclude ``b = 0``).
* Nanda, Chan, Lieberum, Smith, Steinhardt, "Progress measures for grokking via mechanistic
  interpretability", arXiv 2301.05217 (ICLR 2023), sec. 3: ``(x + y) mod p`` with p = 113, input tokens
  ``[x, y, "="]`` (the "=" token has id ``p``; vocabulary ``p + 1``), training fraction 0.3, the answer is
  predicted at the last ("=") position.

Token layout (every operation)::

    position 0: x in [0, p)      position 1: y in [0, p)      position 2: "=" (id p)

targets are the residue ``z in [0, p)``. Operations (``OPERATIONS``):

=========  ==============================  =====================================
``add``    ``(x + y) mod p``               all ``p**2`` pairs (Nanda et al.)
``sub``    ``(x - y) mod p``               all ``p**2`` pairs (Power et al.)
``mul``    ``(x * y) mod p``               all ``p**2`` pairs (Power et al.)
``div``    ``(x * y^{-1}) mod p``          ``p (p - 1)`` pairs with ``y != 0`` (Power et al.)
``x2y2``   ``(x**2 + y**2) mod p``         all pairs (Power et al.)
``x2xyy2`` ``(x**2 + x y + y**2) mod p``   all pairs (Power et al.)
``x3xy``   ``(x**3 + x y) mod p``          all pairs (Power et al.)
=========  ==============================  =====================================

The inverse ``y^{-1}`` is ``y**(p-2) mod p`` (Fermat's little theorem; p prime).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lmsci.errors import ConfigError

OPERATIONS = ("add", "sub", "mul", "div", "x2y2", "x2xyy2", "x3xy")


def is_prime(n: int) -> bool:
    """Whether the integer ``n`` is prime (trial division; fine for the moduli used here)."""
    if n < 2:
        return False
    if n < 4:
        return True
    if n % 2 == 0:
        return False
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def mod_inverse(y: torch.Tensor, p: int) -> torch.Tensor:
    """``y^{-1} mod p`` elementwise for ``y`` in ``[1, p)`` (``y**(p-2) mod p``, Fermat), long tensor.

    Raises:
        ValueError: some ``y`` is ``0 mod p`` (no inverse).
    """
    y = y.long() % p
    if bool((y == 0).any()):
        raise ValueError("0 has no inverse mod p")
    out = torch.ones_like(y)
    base, e = y.clone(), p - 2
    while e:  # square and multiply, all values stay below p**2 < 2**63
        if e & 1:
            out = out * base % p
        base = base * base % p
        e >>= 1
    return out


def apply_op(op: str, x: torch.Tensor, y: torch.Tensor, p: int) -> torch.Tensor:
    """``x op y mod p`` elementwise (long tensors in ``[0, p)``); see the table in the module docstring.

    Raises:
        ConfigError: an unknown ``op``.
        ValueError: ``op="div"`` with some ``y == 0``.
    """
    x, y = x.long(), y.long()
    if op == "add":
        return (x + y) % p
    if op == "sub":
        return (x - y) % p
    if op == "mul":
        return x * y % p
    if op == "div":
        return x * mod_inverse(y, p) % p
    if op == "x2y2":
        return (x * x + y * y) % p
    if op == "x2xyy2":
        return (x * x + x * y + y * y) % p
    if op == "x3xy":
        return (x * x % p * x + x * y) % p
    raise ConfigError("op", op, ", ".join(OPERATIONS))


@dataclass(frozen=True)
class ModularData:
    """All equations of one operation and its train/test split.

    Attributes:
        p: the prime modulus; ``vocab_size = p + 1`` (the "=" token is ``p``).
        op: the operation (``OPERATIONS``).
        input_ids: ``[n_pairs, 3]`` long, rows ``[x, y, p]`` in the order ``x``-major (``x * p + y`` for
            ``add``; ``div`` skips ``y = 0``).
        targets: ``[n_pairs]`` long, ``x op y mod p``.
        train_idx, test_idx: long indices into the rows (disjoint, covering all rows).
    """

    p: int
    op: str
    input_ids: torch.Tensor
    targets: torch.Tensor
    train_idx: torch.Tensor
    test_idx: torch.Tensor

    @property
    def vocab_size(self) -> int:
        return self.p + 1

    @property
    def eq_token(self) -> int:
        return self.p

    @property
    def n_pairs(self) -> int:
        return int(self.targets.shape[0])

    def train(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids [n_train, 3], targets [n_train])``."""
        return self.input_ids[self.train_idx], self.targets[self.train_idx]

    def test(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids [n_test, 3], targets [n_test])``."""
        return self.input_ids[self.test_idx], self.targets[self.test_idx]


def check_modular(p: int, train_frac: float, op: str = "add", field: str = "p", frac_field: str = "train_frac") -> None:
    """Validate a modular task before any work.

    Raises:
        ConfigError: ``p`` not prime (field ``field``), ``train_frac`` outside the open interval (0, 1)
            (field ``frac_field``), or an unknown ``op``.
    """
    if not isinstance(p, int) or isinstance(p, bool) or not is_prime(p):
        raise ConfigError(field, p, "a prime (the modular tasks need a field Z_p: division needs inverses and the "
                                    "Fourier analysis needs p prime), e.g. 53, 59, 97, 113")
    if not (0.0 < float(train_frac) < 1.0):
        raise ConfigError(frac_field, train_frac, "a fraction strictly between 0 and 1")
    if op not in OPERATIONS:
        raise ConfigError("op", op, ", ".join(OPERATIONS))


def modular_data(p: int, op: str = "add", train_frac: float = 0.3, seed: int = 0) -> ModularData:
    """Every equation ``x op y = z`` over Z_p and a random split with ``round(train_frac * n_pairs)``
    training equations (at least 1, and at least one test equation).

    Args:
        p: a prime modulus.
        op: one of ``OPERATIONS``.
        train_frac: training fraction in (0, 1).
        seed: the split's seed (a ``torch.Generator`` permutation; no global RNG state).

    Raises:
        ConfigError: see :func:`check_modular`.
    """
    check_modular(p, train_frac, op)
    x = torch.arange(p).repeat_interleave(p)
    y = torch.arange(p).repeat(p)
    if op == "div":
        keep = y != 0
        x, y = x[keep], y[keep]
    z = apply_op(op, x, y, p)
    ids = torch.stack([x, y, torch.full_like(x, p)], dim=1)
    n = ids.shape[0]
    n_train = min(max(1, round(train_frac * n)), n - 1)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    return ModularData(p, op, ids, z, perm[:n_train].sort().values, perm[n_train:].sort().values)
