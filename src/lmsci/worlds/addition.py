"""Multi-digit addition as token sequences, with a multi-token or a single-token answer.

A problem is ``a + b`` with ``a, b`` uniform in ``[0, 10^digits)``, written digit by digit (most significant first,
zero-padded), then ``=`` and the answer. The answer of the multi-token task is the sum's ``digits + 1`` digits
written least significant first (the reversed order of Lee et al., "Teaching Arithmetic to Small Transformers",
arXiv 2307.03381, Section 4: each output digit then depends only on digits already seen and the carry); the
single-token task's answer is the sum's units digit, one token. Used by ``emergence-metrics`` (Schaeffer, Miranda &
Koyejo, arXiv 2304.15004: exact match of a multi-token answer against per-token metrics).

Tokens: ``0``-``9`` are the digits, ``10`` is ``+``, ``11`` is ``=`` (vocabulary 12).
"""

from __future__ import annotations

import torch

from lmsci.errors import ConfigError

PLUS, EQ, VOCAB_SIZE = 10, 11, 12
TASKS = ("multi", "single")


class AdditionWorld:
    """Addition problems of ``digits``-digit operands (module docstring).

    Args:
        digits: operand digits (>= 1, <= 9).
        task: ``"multi"`` (the ``digits + 1``-token reversed sum) or ``"single"`` (the units digit).

    Attributes:
        prompt_len: tokens before the answer (``2 digits + 2``); answer_len: answer tokens; seq_len: both.

    Raises:
        ConfigError: ``digits`` outside [1, 9] or an unknown ``task``.
    """

    vocab_size = VOCAB_SIZE

    def __init__(self, digits: int, task: str = "multi"):
        if not isinstance(digits, int) or not 1 <= digits <= 9:
            raise ConfigError("digits", digits, "an integer in [1, 9]")
        if task not in TASKS:
            raise ConfigError("task", task, f"one of {TASKS}")
        self.digits, self.task = digits, task
        self.prompt_len = 2 * digits + 2
        self.answer_len = digits + 1 if task == "multi" else 1
        self.seq_len = self.prompt_len + self.answer_len

    def _digits(self, x: torch.Tensor, n: int, reverse: bool) -> torch.Tensor:
        p = 10 ** torch.arange(n - 1, -1, -1, dtype=torch.long)  # most significant first
        d = (x[:, None] // p) % 10
        return d.flip(1) if reverse else d

    def sample(self, n: int, gen: torch.Generator) -> torch.Tensor:
        """``[n, seq_len]`` long token ids of ``n`` problems with their answers (all randomness from ``gen``)."""
        hi = 10 ** self.digits
        a = torch.randint(0, hi, (n,), generator=gen)
        b = torch.randint(0, hi, (n,), generator=gen)
        s = a + b
        ans = self._digits(s, self.digits + 1, reverse=True) if self.task == "multi" else (s % 10)[:, None]
        col = lambda v: torch.full((n, 1), v, dtype=torch.long)  # noqa: E731
        return torch.cat([self._digits(a, self.digits, False), col(PLUS), self._digits(b, self.digits, False),
                          col(EQ), ans], dim=1)

    def split(self, x: torch.Tensor) -> tuple[list[list[int]], list[list[int]]]:
        """``(prompts, answers)`` token lists of the problems ``x [n, seq_len]``."""
        return x[:, : self.prompt_len].tolist(), x[:, self.prompt_len:].tolist()
