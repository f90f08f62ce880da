"""The launcher's report of each rank's exit (Hydra's `-print-all-exitcodes`), taken out of its output and told (pure).

Which lines the report is made of and what their statuses mean is the launch's MPI family's (`hpcdist.families`:
MPICH's wait statuses, Intel MPI's exit codes); here the report's lines are taken out of the output as it streams,
its endings put on the ranks, and said in one line.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from ..families.base import Family
from ..ranklist import ranks_text

__all__ = ["ExitCodeWatch", "describe_exit_codes", "ranks_of"]


def ranks_of(hosts: list[tuple[str, tuple[str, ...]]], known: Mapping[int, str]) -> dict[int, str]:
    """rank -> ending, when the hosts' ranks are consecutive (Hydra fills each host's slots in turn) and agree with
    the hosts the ranks said they were on (`known`); otherwise {} (the ranks cannot be told)."""
    endings: dict[int, str] = {}
    for host, statuses in hosts:
        for how in statuses:
            rank = len(endings)
            if known.get(rank, host).split(".")[0] != host.split(".")[0] and host != "localhost":
                return {}
            endings[rank] = how
    return endings


def describe_exit_codes(endings: Mapping[int, str]) -> str:
    """'rank 2 exit code 3; ranks 0-1, 3 killed by SIGKILL' for the ranks that did not end with exit code 0."""
    groups: dict[str, list[int]] = {}
    for rank in sorted(endings):
        if endings[rank] != "exit code 0":
            groups.setdefault(endings[rank], []).append(rank)
    return "; ".join(f"{ranks_text(ranks)} {how}" for how, ranks in groups.items())


class ExitCodeWatch:
    """Fed the launcher's output in chunks, takes out the lines of its exit-code report (`family.exit_code_line`).

    hpcdist asks for the report (-print-all-exitcodes) and says what it tells in its own summary, so the report is
    never shown: Hydra prints it after every job, a successful one too (`[mpiexec@vm] Exit codes: [localhost] 0,0`).
    """

    def __init__(self, family: Family) -> None:
        self.family = family
        self.lines: list[str] = []
        self._held: dict[str, bytes] = {}  # a stream's unfinished last line, when it may begin a report line
        self._inside: dict[str, bool] = {}  # whether a stream's last whole line was in the report
        self._lock = threading.Lock()

    def feed(self, stream: str, chunk: bytes) -> bytes:
        """Keep the report's lines of a chunk and return the rest to show; b"" (the end) returns what was held."""
        with self._lock:
            data = self._held.pop(stream, b"") + chunk
            if not chunk:  # the end: a held line is whole now
                return b"" if data and self._take(stream, data) else data
            *lines, tail = data.split(b"\n")
            shown = [line + b"\n" for line in lines if not self._take(stream, line)]
            if self.family.may_start_exit_codes(tail.decode(errors="replace"), self._inside.get(stream, False)):
                self._held[stream] = tail  # it may be a report line: shown or taken when whole
            else:
                shown.append(tail)
            return b"".join(shown)

    def _take(self, stream: str, line: bytes) -> bool:
        """Keep `line` when it belongs to the report (True), else note that the report, if any, has ended."""
        text = line.decode(errors="replace").strip("\0 \t\r\n")
        inside = self.family.exit_code_line(text, self._inside.get(stream, False))
        self._inside[stream] = inside
        if inside:
            self.lines.append(text)
        return inside

    def endings(self, known: Mapping[int, str]) -> dict[int, str]:
        """rank -> how it ended as the launcher reports it ({} when it said nothing or its ranks cannot be told)."""
        with self._lock:
            return ranks_of(self.family.exit_codes(self.lines), known)
