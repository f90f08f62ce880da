"""A host's beat: each rank's tagger notes its beat in a directory of its host's, and the lowest rank of the host still
beating speaks for them all, so that hpcdist mpirun reads one beat line per host, not one per rank.

A note is a file named for the rank, rewritten at each beat with how the rank is frozen ('' when it is not). A
tagger that finds no note of a lower rank younger than FRESH beats speaks: a leader that dies, or whose tagger
freezes, leaves a stale note, and within FRESH beats the next rank up speaks for the host, inside the heartbeat
limit of six beats. The beat gives each note's age, so hpcdist mpirun counts a rank's silence from its own last
note, as when each rank beat for itself: a rank whose tagger is starved, frozen or gone is named silent after the
limit, and no sooner. A rank's first beat is its own, whoever leads: hpcdist mpirun learns each rank's host as it
starts, not a beat later (a host lost meanwhile is named with all its ranks). The directory is in /dev/shm (else the
temporary directory), named for the launch's token and the host, so hosts that share a file system keep apart. Where
it cannot be written, each rank speaks for itself.
"""

from __future__ import annotations

import contextlib
import os
import time

__all__ = ["FRESH", "HostBeat", "directory"]

FRESH = 2.5  # beats a rank's note stays fresh: a leader gone is replaced within this, well inside six beats


def directory(token: str, host: str) -> str:
    """Where the ranks of `host` note their beats in the launch of `token`."""
    base = "/dev/shm"
    if not os.access(base, os.W_OK | os.X_OK):
        import tempfile  # here: it loads shutil, random and three compressors, which a rank's start-up never needs

        base = tempfile.gettempdir()
    return os.path.join(base, f"hpcdist-beats-{token}-{host}")


class HostBeat:
    """This rank's notes in its host's directory, and whom its beat speaks for."""

    def __init__(self, where: str, rank: int, interval: float) -> None:
        self.where = where
        self.rank = rank
        self.stale = FRESH * interval  # seconds after which a note is stale
        self.shared = True  # False once the directory failed: the rank speaks for itself
        self.told = False  # whether this rank's beat has been sent once (its first is its own)

    def note(self, frozen: str) -> dict[int, tuple[float, str]] | None:
        """Note this rank's beat (`frozen`: how its rank is frozen, '' when it is not); the ranks this beat speaks
        for, each with its note's age in seconds and how it is frozen, or None when a lower rank of the host speaks."""
        told, self.told = self.told, True
        if self.shared:
            try:
                heard = self._lead(frozen)
            except OSError:
                self.shared = False
            else:
                if heard is not None or told:
                    return heard
        return {self.rank: (0.0, frozen)}

    def _lead(self, frozen: str) -> dict[int, tuple[float, str]] | None:
        """Write this rank's note, then read the host's notes: theirs when no lower rank's is fresh.

        The first fresh note of a lower rank ends the look; a note of one byte says its rank is not frozen, so only
        a frozen rank's note is opened and read.
        """
        os.makedirs(self.where, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(self.where, str(self.rank)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, f"+{frozen}".encode())  # never empty: the write itself marks the note fresh
        finally:
            os.close(fd)
        now = time.time()
        ages: dict[int, tuple[float, str]] = {}  # rank -> its note's age, and its path when it says more than '+'
        with os.scandir(self.where) as notes:
            for entry in notes:
                if not entry.name.isdigit():
                    continue
                rank = int(entry.name)
                with contextlib.suppress(OSError):  # a note that went meanwhile is no rank's
                    status = entry.stat()
                    age = max(0.0, now - status.st_mtime)
                    if rank < self.rank and age <= self.stale:
                        return None
                    ages[rank] = (age, entry.path if status.st_size > 1 else "")
        heard: dict[int, tuple[float, str]] = {}
        for rank, (age, path) in ages.items():
            if not path:
                heard[rank] = (age, "")
                continue
            with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as text:
                heard[rank] = (age, text.read()[1:])
        heard[self.rank] = (0.0, frozen)
        return heard

    def leave(self) -> None:
        """The rank ended: its note goes, and the directory with the host's last."""
        if self.shared:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.where, str(self.rank)))
                os.rmdir(self.where)
