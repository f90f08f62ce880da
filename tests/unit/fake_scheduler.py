"""A made-up scheduler, `fakesched`, that keeps its allocation's hosts in a file as PBS does: one file, all of it.

Nothing in hpcdist names it: test_plugins.py registers it (`hpcdist.schedulers.register`) and runs a dry run inside
its allocation, which shows that adding a scheduler is adding one file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from hpcdist.errors import UsageError
from hpcdist.hosts import HostSlots
from hpcdist.ranksource import Source
from hpcdist.schedulers.base import Scheduler

__all__ = ["FakeScheduler"]

_SUBMITTED = re.compile(r"Job <(?P<id>\d+)> is submitted")


class FakeScheduler(Scheduler):
    """fakesched: FAKE_JOB names the job, FAKE_NODEFILE lists one line per slot (`n1` twice: two slots on n1)."""

    name = "fakesched"
    title = "FakeSched"
    ranks = Source(
        "fakesched", "FAKE_TASK", ("FAKE_TASKS",), "FAKE_LOCAL_TASK", ("FAKE_LOCAL_TASKS",), "FAKE_NODE", (),
        "fakesched's task launcher", "FAKE_NODES",
    )  # fmt: skip

    def inside(self, environ: Mapping[str, str]) -> bool:
        """Inside an allocation when it names its node file."""
        return "FAKE_NODEFILE" in environ

    def allocation(self, environ: Mapping[str, str]) -> str:
        """'the FakeSched job 42'."""
        return f"the FakeSched job {environ.get('FAKE_JOB', '?')}"

    def hosts(
        self,
        environ: Mapping[str, str],
        slots: int | None = None,
        read: Callable[[str], str] | None = None,
        ask: Callable[[Sequence[str]], str] | None = None,
    ) -> tuple[HostSlots, ...]:
        """The node file's hosts, a slot per line."""
        if read is None or "FAKE_NODEFILE" not in environ:
            raise UsageError("not inside a FakeSched job, or no way to read its node file")
        counts: dict[str, int] = {}
        for line in read(environ["FAKE_NODEFILE"]).split():
            counts[line] = counts.get(line, 0) + 1
        return tuple(HostSlots(host, slots or count) for host, count in counts.items())

    def spans_hosts(self, environ: Mapping[str, str]) -> bool:
        """FAKE_NODES says how many hosts."""
        return environ.get("FAKE_NODES", "1").isdigit() and int(environ.get("FAKE_NODES", "1")) > 1

    def job_id(self, environ: Mapping[str, str]) -> str | None:
        """FAKE_JOB."""
        return environ.get("FAKE_JOB")

    def submitted(self, output: str) -> str:
        """`Job <42> is submitted to the default queue.`"""
        found = _SUBMITTED.search(output)
        if found is None:
            raise UsageError(f"fakesub printed {output.strip()!r} instead of a job id")
        return found["id"]
