"""Who failed, who began it and who the job's end reached, read off the rank book (pure).

`named` gives the failed ranks a launch names, causes first; `blamed` the ranks the others waited for when every
failure was a casualty; `ended` the ranks the job's end reached, said together in one line.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ..ranklist import ranks_text
from ..status import ABORTED
from .book import RankBook
from .outcome import BLAMED, VANISHED

__all__ = ["blamed", "ended", "named"]


def named(
    book: RankBook,
    returncode: int,
    vanished_named: bool,
    silent: Mapping[int, str],
    causes: Collection[int] | None,
) -> dict[int, str]:
    """The failed ranks (rank -> how), if the launch failed first the ranks seen to vanish that caused it.

    `vanished_named` (the family's clean-up kills every rank's process group, taggers included): a tagger that says
    its rank vanished speaks of the rank that was killed, so every such rank is named. Otherwise (Open MPI) the
    clean-up leaves the taggers to see their ranks killed, after the failure that began it, and the launcher names a
    killed rank itself, unless a peer's failure reaches it first (a peer blocked on the killed rank's sockets): there
    only the first rank heard to vanish before any failure is named, a failure whose error said a peer had gone not
    counting: the killed rank's tagger hears its end only once the process is torn down, often after that peer's
    word. `silent`: the ranks whose heartbeat stopped (rank -> how). `causes`: when hpcdist mpirun ended the job, the
    ranks heard to fail before it did (the others are its consequences). The ranks that failed after a peer's loss
    come last.
    """
    failed = dict(book.failed)
    if returncode == 0:
        return failed
    first = book.vanished if vanished_named else [r for r in (book.first_vanished,) if r is not None]
    blame = blamed(book, failed)
    vanished = {rank: VANISHED for rank in first if rank not in failed and not blame}
    found = {**vanished, **silent, **failed, **blame}
    if causes is not None:
        found = {rank: how for rank, how in found.items() if rank in causes or rank in blame}
    heard = list(found)

    def order(rank: int) -> tuple[bool, float, bool, int]:
        """Causes before casualties; within each, by when the rank said it ended (its own clock), a rank known only
        from the launcher's word that it called MPI_Abort (most often its MPI's end for a peer's failure, when its
        own report did not come through) after one killed or vanished, then as heard."""
        casualty = rank in book.after_peer and rank not in blame
        aborted = found[rank] == ABORTED and rank not in book.told
        return (casualty, book.at.get(rank, float("inf")), aborted, heard.index(rank))

    return dict(sorted(found.items(), key=lambda item: order(item[0])))


def blamed(book: RankBook, failed: Mapping[int, str]) -> dict[int, str]:
    """When every failure was a casualty: the ranks the others waited for (rank -> how), else none.

    The hang report's verdict names them (a rank that finished its program, was in no call, or never initialised,
    while others waited in one); without one, the ranks that said their program finished before the first
    casualty failed.
    """
    if any(rank not in book.after_peer for rank in failed):
        return {}
    hang = book.hang
    if hang is not None:
        call = hang.call.replace("#", " #")
        while_ = f" while {ranks_text(hang.waiting)} waited in {call}" if hang.waiting and call else ""
        kinds = {"finished": hang.finished, "idle": hang.idle, "uninit": hang.uninit}
        # none when all waited (mismatched calls): the report's first divergence says which
        return {rank: f"{BLAMED[kind]}{while_}" for kind, ranks in kinds.items() for rank in ranks}
    first = min((book.at.get(rank, float("inf")) for rank in failed), default=float("inf"))
    early = [rank for rank in book.finished if rank not in failed and book.at.get(rank, first) < first]
    if not early or not failed:
        return {}
    waited = sorted(failed)
    calls = sorted({book.calls[rank].replace("#", " #") for rank in waited if rank in book.calls})
    where = f" waited in {', '.join(calls)}" if calls else " failed after it"
    return dict.fromkeys(early, f"{BLAMED['finished']} while {ranks_text(waited)}{where}")


def ended(book: RankBook, named: Collection[int], lost: Collection[str]) -> dict[int, str]:
    """The ranks the job's end reached: rank -> how it said it ended ('' when unheard).

    Not those `named` (the failure's causes), those on the `lost` hosts (named in the error) or those that ended
    well."""
    heard = {*book.hosts, *book.failed}
    return {
        rank: book.failed.get(rank, "")
        for rank in sorted(heard)
        if rank not in named and rank not in book.done and book.hosts.get(rank) not in lost
    }
