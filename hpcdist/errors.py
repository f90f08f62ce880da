"""hpcdist's exceptions: one for user mistakes, and one hierarchy for waits that ran out of time."""

__all__ = [
    "HeartbeatLost",
    "JobEnding",
    "JobFailed",
    "LaunchTimeout",
    "LauncherStalled",
    "MapTimeout",
    "RankFailed",
    "RendezvousTimeout",
    "UsageError",
    "WaitTimeout",
]


class UsageError(Exception):
    """A mistake in the user's input or environment: what, where, and how to fix it.

    The CLI prints it as `hpcdist: error: …` and exits 2.
    """


class WaitTimeout(TimeoutError):
    """A wait outlived its timeout; the message says who waited for what."""


class RendezvousTimeout(WaitTimeout):
    """A rank waited longer than the job's timeout for its peers during rendezvous."""


class MapTimeout(WaitTimeout):
    """A rank waited longer than the job's timeout for a message of `hpcdist.map`."""


class LaunchTimeout(WaitTimeout):
    """`hpcdist.launch` waited longer than its timeout for the ranks to return; the job was ended."""


class JobEnding(WaitTimeout):
    """What `hpcdist mpirun`'s watch heard (or did not) while the job ran ends the job: the message says why."""


class HeartbeatLost(JobEnding):
    """`hpcdist mpirun` heard no heartbeat from a running rank for longer than its limit; the job is ended.

    The message names the silent ranks and their host (`host n2 lost: no heartbeat from ranks 2-3 for 30 s`).
    """


class LauncherStalled(JobEnding):
    """A rank failed and the MPI launcher had not ended the job after a grace period; `hpcdist mpirun` ends it.

    Hydra, for one, sometimes leaves the other ranks running after a rank's `os._exit(3)` (measured: 2 runs in 4).
    """


class RankFailed(Exception):
    """A rank of `hpcdist.launch` raised: which rank, on which host, what it raised, and its traceback.

    `exception` is the rank's exception itself when it could be sent back (also this one's `__cause__`), else None.
    """

    def __init__(
        self, rank: int, host: str, kind: str, message: str, remote_traceback: str, hint: str = "", what: str = ""
    ) -> None:
        self.rank, self.host, self.kind, self.message = rank, host, kind, message
        self.remote_traceback, self.hint = remote_traceback, hint
        self.exception: BaseException | None = None
        text = what or f"rank {rank} on {host} raised {kind}: {message}"  # `what`: the rank began it another way
        super().__init__(text + (f"\n{hint}" if hint else "") + f"\n\nthe rank's traceback:\n{remote_traceback}")


class JobFailed(Exception):
    """A job of `hpcdist.submit` ended without every rank's value, and no rank raised: cancelled, out of time, killed.

    `job_id` and `state` (Slurm's JobState: CANCELLED, TIMEOUT, NODE_FAIL, …) say which job and how it ended.
    """

    def __init__(self, job_id: str, state: str, message: str) -> None:
        self.job_id, self.state = job_id, state
        super().__init__(message)
