"""`python -m hpcdist.launching.heldterm PROGRAM [ARGS...]`: run PROGRAM with SIGTERM held (blocked), by exec.

For an MPI's launcher in the job of a scheduler that sends SIGTERM to every process of a job it ends
(`Scheduler.signals_job`; families.base.Family.held): Slurm (then SIGKILL KillWait later) and PBS (kill_delay
later), the ranks included. Open MPI's launcher and daemons (PRRTE) answer SIGTERM by ending their ranks themselves
(SIGCONT, SIGTERM, then SIGKILL a quarter second apart), MPICH's Hydra by passing it on (measured): each rank would
be signalled twice, under Open MPI killed half a second after the scheduler's SIGTERM instead of at the grace time's
end. Held, the signal stays pending in them; PRRTE and Hydra unblock every signal in each rank they start, so the
ranks get the scheduler's SIGTERM once and keep the grace time to end in, and its SIGKILL ends the launchers with
them. hpcdist mpirun ends such a job with SIGINT (Ctrl-C, a failure, its own kill wait).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from .world import World


def main(argv: list[str], world: World) -> NoReturn:
    """Block SIGTERM, then become `argv` (exit status 2 without one, 127 when it cannot be run; said on `world`)."""
    if not argv:
        print("hpcdist: error: no program given; usage: python -m hpcdist.launching.heldterm PROGRAM [ARGS...]",
              file=world.stderr)  # fmt: skip
        sys.exit(2)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"hpcdist: error: cannot run {argv[0]}: {exc.strerror or exc}; check that it exists on this node "
              "and can run", file=world.stderr)  # fmt: skip
        sys.exit(127)


if __name__ == "__main__":
    from .world import World

    main(sys.argv[1:], World.current())
