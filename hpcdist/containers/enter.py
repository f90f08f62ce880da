"""`python -m hpcdist.containers.enter [FLAG AT] -- RUNTIME ARGS…`: a rank's container runtime, started on the host.

What a runtime's own command cannot do for a rank, this does before and while it runs:

- carry the rank's launcher variables in by name, for a runtime that takes no prefix (`docker run -e NAME`,
  `enroot start --env NAME`): with FLAG and AT it adds `FLAG NAME` after the command's first AT words for each
  variable of the rank that a container carries (`base.passed`);
- pass on the signal Open MPI's launcher relays for SIGTERM (`contract.RELAYED_SIGTERM`, SIGURG), which Podman and
  Docker, written in Go, never pass on to the container (measured with Podman 4.3.1: a SIGTERM reached the program
  in the container, a SIGURG did not): it is SIGTERM to the runtime here, and the other signals a rank is sent
  (`proctree.FORWARDED`) are passed on as they are.

It runs the runtime as its child and ends as the child ended (killed by the same signal). The command line is
built by `base.entering`; this module is run, never imported by the plug-ins.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from .. import proctree
from ..contract import RELAYED_SIGTERM
from ..errors import UsageError
from .base import with_environment

__all__ = ["main", "run"]


def run(argv: Sequence[str]) -> int:
    """Run the runtime's `argv`, passing on the rank's signals (RELAYED_SIGTERM as SIGTERM); its status (negative:
    killed by that signal).

    Raises:
        UsageError: it cannot start.
    """
    child = proctree.start(argv, "the container runtime")

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signal.SIGTERM if signum == RELAYED_SIGTERM else signum)

    for sig in (*proctree.FORWARDED, RELAYED_SIGTERM):
        signal.signal(sig, forward)
    return child.wait()


def main(words: Sequence[str]) -> int:
    """Run the command `words` give; a killed runtime ends this process by the same signal.

    Raises:
        UsageError: a command line hpcdist did not write, or a runtime that cannot start.
    """
    ours, dashes, argv = _split(words)
    if not dashes or not argv or len(ours) not in (0, 2) or (ours and not ours[1].isdigit()):
        raise UsageError(f"usage: python -m {__name__} [FLAG AT] -- COMMAND...; got {' '.join(words)!r}")
    command = with_environment(argv, ours[0], int(ours[1]), os.environ) if ours else list(argv)
    code = run(command)
    if code < 0:
        if -code != signal.SIGKILL:  # the one a handler cannot be set for
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def _split(words: Sequence[str]) -> tuple[list[str], bool, list[str]]:
    """The words before the first `--`, whether there was one, and the words after it."""
    if "--" not in words:
        return list(words), False, []
    at = list(words).index("--")
    return list(words[:at]), True, list(words[at + 1 :])


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as exc:
        print(f"hpcdist: error: {exc}", file=sys.stderr)
        sys.exit(2)
