"""The scheduler plug-in's base class: an allocation's hosts, the variables its tasks see, its submit command (pure).

A scheduler hands out allocations of hosts (Slurm, and later PBS, LSF, Flux, Grid Engine, Kubernetes) and may start
the tasks of a job itself (srun). hpcdist asks it: whether this process runs inside an allocation (`inside`), the
allocation's hosts and slots (`hosts`, reading a host file through the `read` it is given when the scheduler keeps
them in one, as PBS_NODEFILE and PE_HOSTFILE do), whether it spans hosts (`spans_hosts`), the job's id (`job_id`),
what its submit command printed (`submitted`), and the variables its task launcher sets in each task (`ranks`, with
`task_step`, `local_size` and `step_hosts` to read them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

from ..errors import UsageError
from ..hosts import HostSlots
from ..ranksource import Source
from ..values import parse_whole

__all__ = ["Scheduler"]


class Scheduler:
    """One scheduler; a subclass registered with `hpcdist.schedulers.register` is asked about every launch."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""  # as hpcdist shows it: 'Slurm'
    ranks: ClassVar[Source | None] = None  # the variables its task launcher sets in each task; None: it starts none

    def inside(self, environ: Mapping[str, str]) -> bool:
        """Whether this process runs inside one of its allocations (an MPI launcher then finds the hosts itself)."""
        return False

    def allocation(self, environ: Mapping[str, str]) -> str:
        """The allocation this process runs in, as a message names it: 'the Slurm allocation n[1-2]'."""
        return f"the {self.title} allocation"

    def hosts(
        self, environ: Mapping[str, str], slots: int | None = None, read: Callable[[str], str] | None = None
    ) -> tuple[HostSlots, ...]:
        """The allocation's hosts and their slots (`slots` each when given); `read(path)` reads a host file's text.

        Raises:
            UsageError: not inside an allocation, or what the scheduler says of it cannot be read.
        """
        raise UsageError(f"hpcdist cannot read the hosts of {self.allocation(environ)}; give --hostfile or -H")

    def spans_hosts(self, environ: Mapping[str, str]) -> bool:
        """Whether the allocation this process runs in has more than one host."""
        return False

    def job_id(self, environ: Mapping[str, str]) -> str | None:
        """The id of the job this process runs in, or None outside one."""
        return None

    def submitted(self, output: str) -> str:
        """The job id its submit command printed in `output`.

        Raises:
            UsageError: the output holds no job id.
        """
        raise UsageError(f"{self.title}'s submit command printed {output.strip()!r} instead of a job id")

    def task_step(self, environ: Mapping[str, str]) -> str | None:
        """The id of its task launch (a step) that started this process, '' when it has no ids, or None when this
        process is no task of one (its variables then describe the allocation, not this process)."""
        return ""

    def same_step(self, environ: Mapping[str, str], world: int) -> bool:
        """Whether this process's task launch started `world` tasks (else its variables describe another launch,
        such as the one that started an MPI launcher's daemons)."""
        return True

    def local_size(self, var: str, text: str, node_id: int) -> int:
        """This node's task count from `text`, the value of `var` (node `node_id` of the launch).

        Raises:
            UsageError: it is no count.
        """
        count = parse_whole(text)
        if count is None:
            raise UsageError(f"{var}={text!r} is not a non-negative integer; fix or unset {var}")
        return count

    def step_hosts(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """The hosts of the task launch that started this process, in order (none when it does not say)."""
        return ()
