"""Who is still in the job: the survivors' agreement at each step (`commit`), and their recovery (`recover`).

    try:
        loss.backward(); membership.commit()       # every survivor steps, or none does
        optimizer.step()
    except hpcdist.RanksLost as lost:
        recovery = membership.recover(lost)       # revoke, agree, shrink, rebuild torch's groups
        if recovery.rank == 0: print(recovery.line())

A recovery revokes every communicator of the world (so no rank waits in a call on it any more), shrinks it to the
survivors (ULFM's fault-tolerant agreement on who failed), then remakes torch's default group for the same backend
and every subgroup made before, over their surviving members, renumbered. On the mpi backend, torch's own
`dist.shrink_group` shrinks the default group (its store over MPI moves to the survivors); on gloo and nccl, and
where spares join, a new default group is made over a new store on the shrunk communicator. A failure during it
starts it again (`_ATTEMPTS` times at most).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from mpi4py import MPI

from .. import mpi_backend
from ..abort import survive_finalize
from ..errors import RanksLost, TooFewRanks, lost_text
from ..mpi_backend.lost import failed_starts, hosts, is_failure
from ..ranklist import by_host
from ..records import field, record
from ..runtime.mpistore import MPIStore
from ..runtime.prepare import job_timeout
from ..runtime.process import RankProcess, current
from . import detector, spares, ulfm

__all__ = ["Recovery", "commit", "failure_of", "recover"]

# commit's agreement: bit _DONE, the rank finished its step; bit _LIVE, set by every rank, so a result without it came
# out wrong: Open MPI 5.0.11's agreement (Early Returning Consensus) on a shrunk communicator returned 0 for all-ones
# on every survivor alike, about once in some hundreds of steps, with no rank failed. All of them then agree again.
# With the failure detector's thread testing its receive during the agreement (gloo, nccl), one survivor alone got a
# garbage value now and then and agreed again while the others went on: 3 stalls in 20 runs under `stress-ng --cpu 2`
# (2026-11-29, 2 cores). The thread now makes no MPI call while commit agrees (`detector.still`). Bit _NO_GLOO, set
# by a rank in no gloo group: a result without it starts the failure detector under an mpi default group.
_DONE, _LIVE, _NO_GLOO, _AGREE_TRIES = 1, 2, 4, 3

_LEARN = 1.0  # seconds a survivor waits to learn which ranks failed, when a collective raised
_ATTEMPTS = 5  # recoveries in a row (each after a failure during the last) before the job gives up
Subgroups = list[tuple[str, tuple[int, ...], str, Any]]  # (name, members' start ranks, backend, the group)


@record
class _Unfinished:
    """What a recovery found before torch's groups were torn down, kept until a recovery completes.

    One per process (`_UNFINISHED`): a recovery that failed midway is resumed by the program's next `recover()` call,
    which hands nothing back.
    """

    backend: str | None = None  # the default group's backend (None: no recovery under way)
    subgroups: Subgroups = field(default_factory=list)


_UNFINISHED = _Unfinished()


@record(frozen=True)
class Recovery:
    """What one recovery did: who was lost (start ranks, their hosts), the world before and after, this rank's new
    rank, how long it took, and each subgroup of this rank's old ones mapped to its rebuilt one."""

    lost: tuple[int, ...]
    hosts: dict[int, str]
    before: int
    after: int
    rank: int
    seconds: float
    groups: dict[Any, Any] = field(default_factory=dict)
    during: str = ""
    joined: tuple[int, ...] = ()  # the spares (start ranks) that took lost ranks' places (--spares)

    def line(self, step: int | None = None) -> str:
        """The one line rank 0 prints: `hpcdist: rank 2 on n1 lost (process failed during all_reduce #57 on world);
        3 ranks carry on from step 120 (recovered in 0.41 s)`."""
        why = f"process failed during {self.during}" if self.during else "process failed"
        verb = "carry on" if self.after > 1 else "carries on"
        since = f" from step {step}" if step is not None else ""
        if self.joined:  # `...; 3 of 4 ranks carry on and 1 spare joins them: 4 ranks again from step 21 (...)`
            spares = f"{len(self.joined)} spares join" if len(self.joined) > 1 else "1 spare joins"
            return (
                f"hpcdist: {by_host(self.lost, self.hosts)} lost ({why}); {self.after - len(self.joined)} of "
                f"{self.before} ranks carry on and {spares} them: {self.after} ranks again{since} (recovered in "
                f"{self.seconds:.2f} s)"
            )
        return (
            f"hpcdist: {by_host(self.lost, self.hosts)} lost ({why}); {self.after} of {self.before} ranks {verb}"
            f"{since} (recovered in {self.seconds:.2f} s)"
        )


def commit(done: bool = True) -> None:
    """Agree (ULFM's fault-tolerant agreement) that every rank finished its step: return when all passed done=True
    and none failed. Every survivor returns, or every survivor raises, alike.

    Raises:
        RanksLost: ranks failed (named as at the job's start), or some rank passed done=False (no rank named).
    """
    comm = ulfm.world()
    process = current()
    detector.start(process)
    mine = _LIVE | (_DONE if done else 0) | (0 if detector.gloo_here() else _NO_GLOO)
    for _ in range(_AGREE_TRIES):
        try:
            flag = ulfm.agree(comm, mine)
        except MPI.Exception as exc:
            if not is_failure(exc):
                raise
            raise _lost(comm, "commit", exc) from exc
        if flag & _LIVE:  # every rank sets it: an agreement without it came out wrong, and all ranks try again
            break
    else:
        raise RanksLost((), during="commit", why=f"the ranks' agreement came out wrong {_AGREE_TRIES} times in a row")
    detector.start(process, gloo=not flag & _NO_GLOO)  # every survivor got the same agreement
    if not flag & _DONE:
        raise RanksLost((), during="commit", why="a rank did not complete its step (commit(done=False)): no rank steps")


def failure_of(error: BaseException) -> RanksLost | None:
    """The RanksLost behind a collective's `error` on any backend (gloo's own say only that a peer closed), or None
    when no rank of the world failed: then `error` is the program's own. Waits up to `_LEARN` s to hear of a failure.
    """
    if isinstance(error, RanksLost):
        return error
    comm = ulfm.world()
    deadline = time.monotonic() + _LEARN
    while True:
        with contextlib.suppress(MPI.Exception):
            ranks = sorted(set(failed_starts(comm)) | set(detector.lost()))
            if ranks:
                return RanksLost(ranks, hosts(), "", why=f"{lost_text(ranks, hosts())}: {error}")
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)


def recover(error: BaseException | None = None) -> Recovery:
    """Revoke, agree who is gone, shrink, and rebuild torch's default group and subgroups on the survivors.

    Collective over the survivors: each calls it once it met the failure (a RanksLost, or a collective that raised).

    Raises:
        TooFewRanks: the survivors are fewer than --min-np (the contract's `min_np`); the job should end (or restart).
        RanksLost: the recovery failed `_ATTEMPTS` times in a row, each time as more ranks died.
    """
    began = time.monotonic()
    process = current()
    old = ulfm.world()
    before = old.size
    starts_before = ulfm.starts(old)
    if _UNFINISHED.backend is None:
        _UNFINISHED.backend = str(dist.get_backend()) if dist.is_initialized() else spares.backend()
        _UNFINISHED.subgroups = _own_subgroups()
    backend, subgroups, min_np = _UNFINISHED.backend, _UNFINISHED.subgroups, process.contract.min_np
    seconds = job_timeout(os.environ)
    during = getattr(error, "during", "") or ""
    last: BaseException | None = error
    for _ in range(_ATTEMPTS):
        world = ulfm.world()
        by_torch = _torch_shrinks(process, backend)
        _tear_down(process, world, keep_default=by_torch)
        spares.revoke()
        try:
            shrunk: MPI.Intracomm = (spares.whole() or world).Shrink()  # type: ignore[assignment]  # an Intracomm
        except MPI.Exception as exc:  # a failure while shrinking: shrink what is left
            if not is_failure(exc):
                raise
            last = exc
            continue
        survivors = ulfm.starts(shrunk)
        lost = tuple(rank for rank in starts_before if rank not in survivors)
        if spares.whole() is not None:  # the actives, spares joining them; a spare that stays one waits again
            actives = spares.split(shrunk)
            if actives is None:
                _UNFINISHED.backend, _UNFINISHED.subgroups = None, []
                spares.wait_again(shrunk)
                return recover(error)
            shrunk = actives
        if shrunk.size < min_np:
            raise TooFewRanks(
                lost,
                hosts(),
                during,
                why=f"{lost_text(lost, hosts(), during)}: {shrunk.size} ranks are left, fewer than "
                f"--min-np {min_np}; the job ends",
                survivor=shrunk.rank,
            )
        try:
            if by_torch:
                shrunk = _shrink_default(world, shrunk)
            else:
                ulfm.replace(shrunk)
            groups = _rebuild(process, shrunk, backend, subgroups, seconds, default=not by_torch)
            if not ulfm.agree(shrunk, 1):  # every survivor rebuilt, none failed meanwhile
                raise RanksLost((), during="recovery", why="a rank failed to rebuild its groups")
        except (MPI.Exception, RanksLost, dist.DistError) as exc:
            if isinstance(exc, MPI.Exception) and not is_failure(exc):
                raise
            last = exc
            continue
        _UNFINISHED.backend, _UNFINISHED.subgroups = None, []
        survive_finalize()
        joined = tuple(spares.joined())
        took = time.monotonic() - began
        return Recovery(lost, hosts(), before, shrunk.size, shrunk.rank, took, groups, during, joined)
    raise RanksLost(
        [rank for rank in starts_before if rank not in ulfm.starts(ulfm.world())],
        hosts(),
        during,
        why=f"the recovery failed {_ATTEMPTS} times in a row as more ranks were lost; last: {last}",
    )


def _lost(comm: MPI.Comm, during: str, error: BaseException) -> RanksLost:
    """RanksLost for an MPI `error` of ULFM's classes met in `during`."""
    ranks = sorted(set(failed_starts(comm)) | set(detector.lost()))
    if not ranks:
        return RanksLost((), hosts(), during, why=f"ranks were lost during {during} (another rank revoked: {error})")
    return RanksLost(ranks, hosts(), during)


def _own_subgroups() -> Subgroups:
    """This rank's torch subgroups, in creation order: (name, members' start ranks, backend, the group)."""
    if not dist.is_initialized():
        return []
    c10d = dist.distributed_c10d
    starts = ulfm.starts(ulfm.world())
    default = c10d._get_default_group()
    found: Subgroups = []
    for group, name in c10d._world.pg_names.items():
        if group is default:
            continue
        members = tuple(starts[rank] for rank in sorted(c10d._world.pg_group_ranks[group]))
        found.append((str(name), members, str(dist.get_backend(group)), group))
    return found


def _torch_shrinks(process: RankProcess, backend: str) -> bool:
    """Whether torch's shrink_group shrinks the default group: the mpi backend's, with the store over MPI (which
    moves to the survivors) and no spares (which join: a shrink only leaves ranks out). nccl's shrink needs two GPUs
    to be checked, and stays on the rebuild."""
    return (
        backend == mpi_backend.BACKEND_NAME
        and dist.is_initialized()
        and isinstance(process.mpi_store, MPIStore)
        and spares.whole() is None
    )


def _shrink_default(world: MPI.Intracomm, probe: MPI.Intracomm) -> MPI.Intracomm:
    """torch's `dist.shrink_group` of the default group (its ranks are `world`'s), leaving out the ranks MPI's shrink
    (`probe`, then freed) found failed; the survivors' communicator it made the world.

    Raises:
        RanksLost: a rank failed since the probe (MPI's shrink drops it too): the recovery starts again.
    """
    kept = set(ulfm.starts(probe))
    probe.Free()
    try:
        with _subgroups_remade():
            dist.shrink_group([rank for rank, start in enumerate(ulfm.starts(world)) if start not in kept])
    except RuntimeError as exc:  # shrinking.survivors: a failed rank missing from the list
        raise RanksLost((), during="recovery", why=str(exc)) from exc
    return ulfm.world()


@contextlib.contextmanager
def _subgroups_remade() -> Iterator[None]:
    """Without torch's warning that shrinking the default group destroys the other groups: the recovery remakes
    them (a line from every rank, as each recovered)."""

    def other(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Shrinking default group will destroy")

    logger = logging.getLogger(dist.distributed_c10d.__name__)
    logger.addFilter(other)
    try:
        yield
    finally:
        logger.removeFilter(other)


def _tear_down(process: RankProcess, world: MPI.Intracomm, keep_default: bool = False) -> None:
    """Revoke every communicator of the world (no call on them waits any more) and abort torch's groups, but with
    `keep_default` (torch's shrink_group then shrinks the default group, aborts the others and moves the store)."""
    detector.stop()
    with contextlib.suppress(MPI.Exception):
        world.Revoke()
    mpi_backend.revoke_all()
    if dist.is_initialized() and (str(dist.get_backend()) != mpi_backend.BACKEND_NAME or detector.watches_gloo()):
        detector.release_gloo(process)  # a peer's gloo call may wait on this rank (its detector saw nothing yet)
    if keep_default:  # torch's shrink_group aborts the subgroups itself
        return
    if process.mpi_store is not None:
        process.mpi_store.abandon()
    if dist.is_initialized():
        with contextlib.suppress(Exception):  # a group that cannot abort (gloo's) is dropped all the same
            dist.distributed_c10d._abort_process_group()
    if dist.is_initialized():  # _abort_process_group left it (it raised): forget the groups
        dist.distributed_c10d._update_default_pg(None)


def _rebuild(
    process: RankProcess, comm: MPI.Intracomm, backend: str, subgroups: Subgroups, seconds: float, default: bool
) -> dict[Any, Any]:
    """With `default`, torch's default group for `backend` on `comm` over a new store; then every survivor's
    subgroups alike."""
    if default:
        store = process.mpi_store = MPIStore(comm, seconds)  # the one shutdown closes
        init = getattr(dist.init_process_group, "_hpcdist_original", dist.init_process_group)
        init(backend, store=store, rank=comm.rank, world_size=comm.size, timeout=timedelta(seconds=seconds))
    starts = ulfm.starts(comm)
    known: dict[str, tuple[tuple[int, ...], str]] = {}
    for theirs in comm.allgather([(name, members, kind) for name, members, kind, _ in subgroups]):
        for name, members, kind in theirs:
            known.setdefault(name, (members, kind))
    mine = {name: group for name, _, _, group in subgroups}
    groups: dict[Any, Any] = {}
    for name in sorted(known, key=lambda text: (len(text), text)):  # torch names them 1, 2, ... as made
        members, kind = known[name]
        ranks = [starts.index(rank) for rank in members if rank in starts]
        made = dist.new_group(ranks, backend=kind, timeout=timedelta(seconds=seconds))
        if name in mine:
            groups[mine[name]] = made
    watchdog = sys.modules.get("hpcdist.forensics.watchdog")  # loaded where hang forensics run
    if watchdog is not None:
        watchdog.rebase(comm)
    detector.start(process)
    return groups
