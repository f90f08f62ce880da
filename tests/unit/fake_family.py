"""A made-up MPI, `fake`, whose launcher `fakerun` speaks a dialect of its own: one file, all hpcdist needs of an MPI.

Nothing in hpcdist names it: test_plugins.py registers it (`hpcdist.families.register`) and drives it through a dry
run, its banners and its exit codes, which shows that adding an MPI is adding one file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hpcdist.families.base import Family, HostLost, MpirunSpec, Observation, RankAborted, RankKilled, Scanner
from hpcdist.hosts import HostSlots, hosts_text
from hpcdist.plugins import LazyPattern
from hpcdist.ranksource import Source
from hpcdist.status import describe_status

__all__ = ["FakeMpi"]

# fakerun's words: `fakerun: lost host n2`, `fakerun: rank 3 on n2 killed by signal 9`, `fakerun: rank 1 aborted`
_LOST = re.compile(r"^fakerun: lost host (?P<host>\S+)$")
_KILLED = re.compile(r"^fakerun: rank (?P<rank>\d+) on (?P<host>\S+) killed by signal (?P<sig>\d+)$")
_ABORTED = re.compile(r"^fakerun: rank (?P<rank>\d+) aborted$")
# and its exit-code report, one line: `fakerun: exits n1=0,3 n2=0` (exit codes, each host's ranks in order)
_EXITS = re.compile(r"^fakerun: exits (?P<hosts>(?:\S+=-?\d+(?:,-?\d+)* ?)+)$")


class FakeScanner(Scanner):
    """fakerun's one-line banners."""

    def scan(self, stream: str, line: str) -> list[Observation]:
        """What one line says."""
        text = line.strip("\0 \t\r\n")
        if lost := _LOST.match(text):
            return [HostLost(), HostLost(lost["host"])]
        if killed := _KILLED.match(text):
            return [RankKilled(int(killed["rank"]), killed["host"], int(killed["sig"]))]
        if aborted := _ABORTED.match(text):
            return [RankAborted(int(aborted["rank"]))]
        return []


class FakeMpi(Family):
    """fakerun: `fakerun --ranks N [--hosts a:2,b:2] [--env NAME=VALUE]... -- PROGRAM`."""

    name = "fake"
    title = "Fake MPI"
    order = 50
    identity = LazyPattern(r"Fake MPI (\d+\.\d+)")
    markers = ("fake_info",)
    launcher_names = ("fakerun",)
    ranks = Source("fake", "FAKE_RANK", ("FAKE_SIZE",), "FAKE_LOCAL_RANK", ("FAKE_LOCAL_SIZE",), None, (), "fakerun")
    names_vanished = True

    def command(self, spec: MpirunSpec) -> list[str]:
        """fakerun's argv."""
        argv = [spec.mpirun, "--ranks", str(spec.np)] if spec.np is not None else [spec.mpirun]
        argv += ["--hosts", hosts_text(spec.hosts)] if spec.hosts else []
        argv += [f"--env={name}={value}" for name, value in spec.env if value is not None]
        return [*argv, "--", *spec.program]

    def hostfile(self, hosts: Sequence[HostSlots]) -> str:
        """`host=N` lines."""
        return "".join(f"{h.host}={h.slots}\n" for h in hosts)

    def scanner(self) -> Scanner:
        """A fresh reader of fakerun's banners."""
        return FakeScanner()

    def hides(self, text: str) -> bool:
        """fakerun's banners about a rank: hpcdist's summary says them."""
        return bool(_KILLED.match(text.strip()) or _ABORTED.match(text.strip()))

    def exit_code_line(self, line: str, inside: bool) -> bool:
        """The one line of its exit-code report."""
        return bool(_EXITS.match(line))

    def exit_codes(self, lines: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
        """Each host's ranks' exit codes."""
        hosts: list[tuple[str, tuple[str, ...]]] = []
        for line in lines:
            found = _EXITS.match(line)
            for item in found["hosts"].split() if found else []:
                host, _, codes = item.partition("=")
                hosts.append((host, tuple(describe_status(int(code)) for code in codes.split(","))))
        return hosts
