"""The names a launch carries into a shell: environment variable names (pure; host names are `hosts.HOST_NAME`)."""

from __future__ import annotations

import re

from ..errors import UsageError

__all__ = ["BASH_SPECIAL", "ENV_NAME", "check_env_name"]

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # what `export NAME=…`, `mpirun -x NAME` and srun accept
# Names bash will not export as given: read-only (an assignment ends the script) or dynamic (bash overwrites the
# value, e.g. RANDOM, SECONDS), from bash(1) "Shell Variables".
BASH_SPECIAL = frozenset(
    {"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID"}
    | {"BASHPID", "BASH_ARGC", "BASH_ARGV", "BASH_ARGV0", "BASH_COMMAND", "BASH_LINENO", "BASH_SOURCE"}
    | {"BASH_SUBSHELL", "DIRSTACK", "EPOCHREALTIME", "EPOCHSECONDS", "FUNCNAME", "GROUPS", "HISTCMD"}
    | {"LINENO", "PIPESTATUS", "RANDOM", "SECONDS", "SRANDOM"}
)


def check_env_name(name: object) -> str:
    """`name` if a generated script can `export` it: a valid name that bash neither holds read-only nor rewrites."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        raise UsageError(
            f"{name!r} is not a valid environment variable name; use letters, digits and '_', not starting with a digit"
        )
    if name in BASH_SPECIAL:
        raise UsageError(
            f"{name} is a variable bash sets itself (read-only or rewritten on every use), so a job script cannot "
            "export it; pick another name"
        )
    return name
