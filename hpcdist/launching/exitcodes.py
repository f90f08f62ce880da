"""Hydra's `-print-all-exitcodes` lines: each rank's exit status as MPICH's or Intel MPI's mpiexec reports it (pure).

Measured (MPICH 5.0.2, impi-rt 2021.19), on mpiexec's stdout as the job ends, one line per host, its ranks in order:
    [mpiexec@node1] Exit codes: [node1] 0,0         MPICH: wait statuses (768 = exit code 3, 9 = SIGKILL)
    [node2] 0,768
    [mpiexec@vm] Exit codes: [localhost:0] 3,3,3,3  Intel MPI: exit codes (137 after a SIGKILL), `host:N`
MPICH prints them when a rank ended abnormally (a kill, an exit without MPI_Finalize), not after MPI_Abort; Intel MPI
prints the job's code for every rank after MPI_Abort or a kill (`1,1,1,1`, `137,137,137,137`), so a rank's own
failure is told only where the statuses differ.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping

from ..ranklist import describe_status, ranks_text

__all__ = ["ExitCodeWatch", "describe_exit_codes", "parse_exit_codes", "ranks_of"]

_HEADER = re.compile(r"^\[mpiexec@[^\]]*\] Exit codes: (?P<rest>.*)$")
_HOST = re.compile(r"^\[(?P<host>[^\]\s:]+)(?P<intel>:\d+)?\] (?P<codes>-?\d+(?:,-?\d+)*)$")


def parse_exit_codes(lines: Iterable[str]) -> list[tuple[str, tuple[str, ...]]]:
    """Each host's ranks' endings ('exit code 3', 'killed by SIGKILL'), in order, from Hydra's `Exit codes:` block.

    Host lines count only right after the header line (and each other); other output ends the block.
    """
    hosts: list[tuple[str, tuple[str, ...]]] = []
    inside = False
    for raw in lines:
        line = _bare(raw)
        header = _HEADER.match(line)
        if header:
            line, inside = header["rest"], True
        match = _HOST.match(line) if inside else None
        if match is None:
            inside = False
            continue
        codes = (int(code) for code in match["codes"].split(","))
        hosts.append((match["host"], tuple(_intel(code) if match["intel"] else _wait(code) for code in codes)))
    return hosts


def _bare(line: str) -> str:
    """A line without the NULs, blanks and line ends around it."""
    return line.strip("\0 \t\r\n")


def _wait(status: int) -> str:
    """MPICH reports the raw wait status of each rank."""
    if status < 0 or status > 0xFFFF:
        return f"status {status}"
    return describe_status(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def _intel(code: int) -> str:
    """Intel MPI reports exit codes as a shell does: 128 + N after signal N."""
    return describe_status(128 - code if 128 < code < 160 else code)


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
    """Fed mpiexec's output in chunks, takes out the lines of Hydra's exit-code block for `parse_exit_codes`.

    hpcdist asks for the block (-print-all-exitcodes) and says what it tells in its own summary, so the block is
    never shown: Hydra prints it after every job, a successful one too (`[mpiexec@vm] Exit codes: [localhost] 0,0`).
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._held: dict[str, bytes] = {}  # a stream's unfinished last line, when it may begin a block line
        self._inside: dict[str, bool] = {}  # whether a stream's last whole line was in the block
        self._lock = threading.Lock()

    def feed(self, stream: str, chunk: bytes) -> bytes:
        """Keep the block's lines of a chunk and return the rest to show; b"" (the end) returns what was held."""
        with self._lock:
            data = self._held.pop(stream, b"") + chunk
            if not chunk:  # the end: a held line is whole now
                return b"" if data and self._take(stream, data) else data
            *lines, tail = data.split(b"\n")
            shown = [line + b"\n" for line in lines if not self._take(stream, line)]
            if tail.startswith(b"[") and (self._inside.get(stream) or tail[:9] == b"[mpiexec@"[: len(tail[:9])]):
                self._held[stream] = tail  # it may be a block line: shown or taken when whole
            else:
                shown.append(tail)
            return b"".join(shown)

    def _take(self, stream: str, line: bytes) -> bool:
        """Keep `line` when it belongs to the block (True), else note that the block, if any, has ended."""
        text = _bare(line.decode(errors="replace"))
        inside = bool(_HEADER.match(text) or (self._inside.get(stream) and _HOST.match(text)))
        self._inside[stream] = inside
        if inside:
            self.lines.append(text)
        return inside

    def endings(self, known: Mapping[int, str]) -> dict[int, str]:
        """rank -> how it ended as Hydra reports it ({} when Hydra said nothing or its ranks cannot be told)."""
        with self._lock:
            return ranks_of(parse_exit_codes(self.lines), known)
