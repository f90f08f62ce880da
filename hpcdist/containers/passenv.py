"""`python -m hpcdist.containers.passenv FLAG AT -- RUNTIME ARGS…`: a runtime's command with the rank's variables.

For a runtime that takes a host variable only by its exact name (`docker run -e NAME`, `enroot start --env NAME`):
started in the rank, it adds `FLAG NAME` for each variable of its environment that a container carries
(`base.passed`) after the first AT words of the command, and becomes that command (exec).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from ..errors import UsageError
from .base import passed

__all__ = ["main", "passenv", "with_environment"]


def passenv(python: str, flag: str, at: int, argv: Sequence[str]) -> list[str]:
    """The rank's command that runs `argv` with `FLAG NAME` for each of its variables added after `at` words."""
    return [python, "-m", __name__, flag, str(at), "--", *argv]


def with_environment(argv: Sequence[str], flag: str, at: int, environ: Mapping[str, str]) -> list[str]:
    """`argv` with `flag NAME` after its first `at` words for each name of `environ` a container carries."""
    added = [word for name in passed(environ) for word in (flag, name)]
    return [*argv[:at], *added, *argv[at:]]


def main(argv: Sequence[str]) -> int:
    """Become the runtime's command; 2 with a message for a command line hpcdist did not write."""
    words = list(argv)
    if len(words) < 4 or words[2] != "--" or not words[1].isdigit():
        raise UsageError(f"usage: python -m {__name__} FLAG AT -- COMMAND...; got {' '.join(words)!r}")
    command = with_environment(words[3:], words[0], int(words[1]), os.environ)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        raise UsageError(f"cannot run {command[0]!r} ({exc.strerror}); install it or put it on PATH") from exc
    return 0  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as exc:
        print(f"hpcdist: error: {exc}", file=sys.stderr)
        sys.exit(2)
