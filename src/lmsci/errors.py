"""Errors raised by lmsci.

Every error that concerns user input names the field, the offending value and what is allowed,
so that the CLI can print it and exit with code 2 before any work starts.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class LmsciError(Exception):
    """Base class of all lmsci errors."""


class ConfigError(LmsciError, ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range.

    Attributes:
        field: dotted name of the field (for example ``"model.d_model"``).
        value: the offending value as given.
        allowed: human-readable description of the allowed values.
    """

    def __init__(self, field: str, value: object, allowed: str, hint: str = ""):
        self.field, self.value, self.allowed, self.hint = field, value, allowed, hint
        msg = f"{field}={value!r} is not allowed; allowed: {allowed}"
        if hint:
            msg += f". {hint}"
        super().__init__(msg)


class UnknownNameError(ConfigError):
    """A name (experiment, preset, config key, law, ...) is not one of the known names."""

    def __init__(self, field: str, value: str, choices: Iterable[str]):
        choices = sorted(choices)
        close = difflib.get_close_matches(str(value), choices, n=3, cutoff=0.5)
        hint = f"Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        super().__init__(field, value, ", ".join(choices) if choices else "(none)", hint)
        self.choices = choices


class DataError(LmsciError, ValueError):
    """Input data (a CSV, a corpus) is malformed; the message names the rows or files at fault."""


class RunDirError(LmsciError):
    """A run directory is missing, incomplete or belongs to a different configuration."""


class DivergedError(LmsciError):
    """Training produced a non-finite loss; the point is recorded as diverged, not as a result.

    Attributes:
        step: the optimizer step at which the loss was first non-finite.
        loss: the offending loss value.
    """

    def __init__(self, step: int, loss: float, what: str = "training loss"):
        self.step, self.loss = int(step), float(loss)
        super().__init__(f"{what} became non-finite ({loss}) at step {step}; the point is recorded as diverged "
                         "(lower lr, or raise warmup_steps / grad_clip)")


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(str(value), list(choices), n=1, cutoff=0.5)
    return f" Did you mean {close[0]!r}?" if close else ""
