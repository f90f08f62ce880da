"""The names a launch carries into a shell and a hostfile: environment variable names and host names (pure)."""

from __future__ import annotations

import re

from ..errors import UsageError

__all__ = ["ENV_NAME", "HOST_NAME", "check_env_name"]

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # what `export NAME=…`, `mpirun -x NAME` and srun accept
HOST_NAME = re.compile(r"[^\s=:,#]+\Z")  # a hostfile host: no space, '=', ':', ',' or '#' (they delimit)


def check_env_name(name: object) -> str:
    """`name` if it is a valid environment variable name, else UsageError."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        raise UsageError(
            f"{name!r} is not a valid environment variable name; use letters, digits and '_', not starting with a digit"
        )
    return name
