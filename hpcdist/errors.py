"""hpcdist's exceptions: one for user mistakes, one hierarchy for waits that ran out of time, one for lost ranks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .ranklist import by_host

__all__ = [
    "HeartbeatLost",
    "JobEnding",
    "JobFailed",
    "LaunchTimeout",
    "LauncherStalled",
    "MapTimeout",
    "RankFailed",
    "RanksLost",
    "RendezvousTimeout",
    "TooFewRanks",
    "UsageError",
    "WaitTimeout",
    "check_same_world",
    "lost_text",
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
        told = f"\n\nthe rank's traceback:\n{remote_traceback}" if remote_traceback else ""  # none: no line for it
        super().__init__(text + (f"\n{hint}" if hint else "") + told)


class JobFailed(Exception):
    """A job of `hpcdist.submit` ended without every rank's value, and no rank raised: cancelled, out of time, killed.

    `job_id` and `state` (in Slurm's words under every scheduler: CANCELLED, TIMEOUT, NODE_FAIL, …) say which job and
    how it ended.
    """

    def __init__(self, job_id: str, state: str, message: str) -> None:
        self.job_id, self.state = job_id, state
        super().__init__(message)


class RanksLost(Exception):
    """Ranks of the job died (MPI reported their process failed, ULFM): which, where, and in which call it was seen.

    `ranks` are numbered as at the job's start, `hosts` maps them to their host where known, `during` names the call
    (`all_reduce #57 on world`, `step 120`). Under `--on-failure shrink` the survivors call
    `hpcdist.resilience.membership.recover()` and carry on.
    """

    def __init__(
        self, ranks: Iterable[int], hosts: Mapping[int, str] | None = None, during: str = "", why: str = ""
    ) -> None:
        self.ranks = tuple(sorted(set(ranks)))
        self.hosts = {rank: host for rank, host in (hosts or {}).items() if rank in self.ranks}
        self.during = during
        super().__init__(why or lost_text(self.ranks, self.hosts, during))


class TooFewRanks(RanksLost):
    """The survivors of a failure would be fewer than --min-np: the job ends (or restarts, from its checkpoint).

    `survivor` is this process's rank among the survivors: every survivor raises it alike, and 0 says it for them all.
    """

    def __init__(
        self,
        ranks: Iterable[int],
        hosts: Mapping[int, str] | None = None,
        during: str = "",
        why: str = "",
        survivor: int = 0,
    ) -> None:
        super().__init__(ranks, hosts, during, why)
        self.survivor = survivor

    def line(self) -> str:
        """What the job says of it, once: the loss, the survivors left, and what starts it again."""
        return f"{self} (--max-restarts N starts the job again, from its last checkpoint)"


def lost_text(ranks: Iterable[int], hosts: Mapping[int, str], during: str = "") -> str:
    """`ranks 2-3 on n2 were lost (process failed) during all_reduce #57`."""
    listed = sorted(set(ranks))
    verb = "was" if len(listed) == 1 else "were"
    where = f" during {during}" if during else ""
    return f"{by_host(listed, hosts)} {verb} lost (process failed){where}"


def check_same_world(who: str, said: tuple[int, int], mpi: tuple[int, int]) -> None:
    """Refuse a process whose MPI world is not the launch's: `who` (`the slurm launch`, `torch`) says it is rank
    `said[0]` of `said[1]`, MPI.COMM_WORLD that it is `mpi[0]` of `mpi[1]`.

    Raises:
        UsageError: they differ: mpi4py's MPI is not the one that started the job.
    """
    if said == mpi:
        return
    raise UsageError(
        f"{who} says this process is rank {said[0]} of {said[1]} but MPI says rank {mpi[0]} of {mpi[1]}: mpi4py's "
        "MPI is not the one that started the job (srun --mpi=pmi2 with Open MPI 5 starts every task alone in a world "
        "of 1; torchrun starts no MPI job); launch with hpcdist mpirun, the mpirun of the MPI mpi4py was built with, "
        "or srun --mpi=pmix"
    )
