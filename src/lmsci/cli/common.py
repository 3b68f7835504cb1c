"""What every ``lmsci`` command shares: the error exit, the input-error guard, the help texts of the options several
commands take (--backend, --address, --device) and the --device override."""

from __future__ import annotations

from typing import Optional

import typer

from lmsci.errors import ConfigError, LmsciError


def fail(msg: str, code: int = 2) -> None:
    """Print an error to stderr and exit (code 2 = bad input)."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


#: help texts of the options that ``run`` and ``suite`` share
BACKEND_HELP = ("where points are computed: local (one after another in this process) | processes (CPUs // threads "
                "worker processes on this machine, each computing one group of points at a time) | ray (as Ray tasks "
                "on a cluster; rows come back to this run directory; needs pip install 'lmsci\\[ray]')")
ADDRESS_HELP = ("with --backend ray: the Ray head HOST:PORT (`ray start --head` prints it), ray://HOST:10001 or "
                "auto (default: $RAY_ADDRESS, else a new Ray instance on this machine)")


DEVICE_HELP = "cpu | cuda | cuda:N | auto: the config's device field (the same as --set device=...)"


def device_overrides(set_: Optional[list[str]], device: Optional[str]) -> list[str]:
    """The ``--set`` overrides with ``--device D`` added as ``device=D`` (validated as the config's ``device``
    field: cpu | cuda | cuda:N | auto; cuda without CUDA is refused before any work).

    Raises:
        ConfigError: ``--device`` beside ``--set device=...`` (one of the two, please).
    """
    out = list(set_ or [])
    if device is None:
        return out
    if any(s.split("=", 1)[0].strip() == "device" for s in out):
        raise ConfigError("--device", device, "either --device or --set device=..., not both")
    return out + [f"device={device}"]


def guard(fn, *args, **kwargs):
    """Run ``fn``; turn lmsci input errors into a clear message and exit code 2."""
    try:
        return fn(*args, **kwargs)
    except LmsciError as e:  # ConfigError, RunDirError, DataError, ...
        fail(str(e))

