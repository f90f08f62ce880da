"""The scheduler plug-in's base class: an allocation's hosts, the variables its tasks see, its submit command (pure).

A scheduler hands out allocations of hosts (Slurm, PBS, LSF, Flux, Grid Engine) and may start the tasks of a job
itself (srun, jsrun, flux run). hpcdist asks it: whether this process runs inside an allocation (`inside`), the
allocation's hosts and slots (`hosts`, reading a host file through the `read` it is given when the scheduler keeps
them in one, as PBS_NODEFILE and PE_HOSTFILE do, or asking a command of the scheduler's through the `ask` it is given,
as Flux's `flux resource R`; `slot_lines` reads the one-line-per-slot kind) and whether an MPI's
mpirun reads them itself (`launchers_read_hosts`), the signal it sends every process of a job it ends
(`signals_job`), whether it spans hosts (`spans_hosts`), the job's id (`job_id`),
what its submit command printed (`submitted`), and the variables its task launcher sets in each task (`ranks`, with
`task_step`, `local_size`, `node_place` and `step_hosts` to read them). A scheduler with a command-line client also
says how a batch job is submitted, asked about and cancelled (`clients`, `submit_argv`, `state_argv`, `job_state`,
`cancel_argv`): the command lines and the reading of their output, never the running of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

from ..errors import UsageError
from ..hosts import HOST_NAME, HostSlots
from ..plugins import LazyPattern
from ..ranksource import Source
from ..values import MAX_COUNT, parse_whole

__all__ = ["Scheduler", "failed_command", "host_and_slots", "host_lines", "read_host_file", "slot_lines"]


class Scheduler:
    """One scheduler; a subclass registered with `hpcdist.schedulers.register` is asked about every launch."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""  # as hpcdist shows it: 'Slurm'
    ranks: ClassVar[Source | None] = None  # the variables its task launcher sets in each task; None: it starts none
    # an MPI's mpirun inside its allocation finds the hosts itself (Open MPI's and Hydra's read Slurm's); else
    # hpcdist mpirun reads them (`hosts`) and passes them on
    launchers_read_hosts: ClassVar[bool] = False
    printed_id: ClassVar[LazyPattern | None] = None  # its submit command's last line; group 1: the job id
    more_slots: ClassVar[str] = ""  # how a job asks it for more slots, for an error: 'qsub -l select=…:mpiprocs=N'
    # the signal it sends every process of a job it ends (cancelled, preempted, out of time), SIGKILL following a
    # grace time later; None: it signals no process but the job script's, or kills outright. An MPI's launcher
    # then gets it beside the ranks, and holds SIGTERM (families.base.Family.held)
    signals_job: ClassVar[int | None] = None
    # the commands on PATH that tell a login node of it (all of them; none: hpcdist submits no batch job to it)
    clients: ClassVar[tuple[str, ...]] = ()
    # its client on PATH decides alone: a Slurm site may carry other schedulers' commands (slurm-torque's qsub)
    first_on_path: ClassVar[bool] = False
    ping: ClassVar[str] = ""  # a command that tells whether its server answers, for an error: 'scontrol ping'
    script_on_stdin: ClassVar[bool] = False  # its submit command reads the job script on stdin (bsub < job.lsf)

    def inside(self, environ: Mapping[str, str]) -> bool:
        """Whether this process runs inside one of its allocations (an MPI launcher then finds the hosts itself)."""
        return False

    def allocation(self, environ: Mapping[str, str]) -> str:
        """The allocation this process runs in, as a message names it: 'the Slurm allocation n[1-2]'."""
        return f"the {self.title} allocation"

    def hosts(
        self,
        environ: Mapping[str, str],
        slots: int | None = None,
        read: Callable[[str], str] | None = None,
        ask: Callable[[Sequence[str]], str] | None = None,
    ) -> tuple[HostSlots, ...]:
        """The allocation's hosts and their slots (`slots` each when given); `read(path)` reads a host file's text,
        `ask(argv)` runs a command of the scheduler's and gives what it printed.

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
        """The job id its submit command printed in `output`: the first group of `printed_id` matching the last line.

        Raises:
            UsageError: the output holds no job id.
        """
        if self.printed_id is None:
            raise UsageError(f"{self.title}'s submit command printed {output.strip()!r} instead of a job id")
        lines = output.strip().splitlines()
        found = self.printed_id.fullmatch(lines[-1].strip()) if lines else None
        if found is None:
            words = self.submit_argv("")[:2]  # its program and subcommand, before the options and the script
            command = " ".join(word for word in words if word and not word.startswith("-"))
            raise UsageError(f"{command} printed {output.strip()!r} instead of a job id")
        return found[1]

    def submit_argv(self, script: str) -> tuple[str, ...]:
        """The command that submits the job script at `script` (given on stdin instead when `script_on_stdin`)."""
        raise UsageError(f"hpcdist submits no batch job to {self.title}; write its job with `hpcdist {self.name}`")

    def state_argv(self, job_id: str) -> tuple[str, ...]:
        """The command whose output `job_state` reads."""
        raise UsageError(f"hpcdist cannot ask {self.title} about job {job_id}; use its own commands")

    def job_state(self, job_id: str, status: int, out: str, err: str) -> str | None:
        """The job's state in the words every handle speaks (Slurm's: PENDING, RUNNING, SUSPENDED, COMPLETED,
        FAILED, CANCELLED, TIMEOUT), from what `state_argv` printed and its exit status; None when the scheduler
        no longer knows the job.

        Raises:
            UsageError: the command failed for another reason, or printed what is not its documented form.
        """
        raise UsageError(f"hpcdist cannot read {self.title}'s state of job {job_id}")

    def cancel_argv(self, job_id: str) -> tuple[str, ...]:
        """The command that ends the job, or takes it out of the queue."""
        raise UsageError(f"hpcdist cannot cancel {self.title}'s job {job_id}; use its own commands")

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

    def node_place(self, environ: Mapping[str, str], rank: int, world: int) -> dict[str, tuple[str, int]]:
        """For a task launcher whose tasks see no local size (`ranks.local_world_size` empty): this task's
        local_rank, local_world_size and node_rank, each (what an error names, value), from rank `rank` of `world`.

        Raises:
            UsageError: they cannot be told from what the launcher set.
        """
        raise UsageError(f"{self.title}'s tasks carry no local rank and size; set LOCAL_RANK and LOCAL_WORLD_SIZE")

    def step_hosts(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """The hosts of the task launch that started this process, in order (none when it does not say)."""
        return ()


def read_host_file(
    environ: Mapping[str, str], var: str, title: str, read: Callable[[str], str] | None
) -> tuple[str, str]:
    """The host file `var` names, of a `title` job: how an error names it (`VAR PATH`), and its text (`read(path)`).

    Raises:
        UsageError: `var` is unset or empty, or there is no way to read it here.
    """
    path = environ.get(var, "")
    if not path:
        raise UsageError(f"{var} is unset, so the hosts of this {title} job are unknown; give --hostfile or -H")
    if read is None:
        raise UsageError(f"hpcdist cannot read {var}={path} here; give --hostfile or -H")
    return f"{var} {path}", read(path)


def slot_lines(text: str, where: str, slots: int | None = None) -> tuple[HostSlots, ...]:
    """`host_lines` of a host file that names a host once for each of its slots (PBS_NODEFILE, LSB_DJOB_HOSTFILE)."""
    return host_lines(text, where, "a host name, one line for each slot", _one_host, slots)


def _one_host(line: str) -> tuple[str, str | None] | None:
    """A line of a host file naming a host for one slot: (host, None)."""
    host = line.strip()
    return (host, None) if host else None


def host_and_slots(line: str) -> tuple[str, str | None] | None:
    """A `HOST SLOTS …` line (Grid Engine's PE_HOSTFILE, LSB_MCPU_HOSTS's pairs): (host, its slots' text)."""
    words = line.split()
    return (words[0], words[1] if len(words) > 1 else "") if words else None


def host_lines(
    text: str,
    where: str,
    form: str,
    parse: Callable[[str], tuple[str, str | None] | None],
    slots: int | None = None,
) -> tuple[HostSlots, ...]:
    """The hosts of a host file's `text`, in the order first named, with their slots summed over their lines (or
    `slots` each). `parse` gives a line's (host, its slots' text, None for one slot), or None for a line to skip.

    Raises:
        UsageError: a line with no host name or no slot count from 1 to MAX_COUNT (`where` names the file, `form`
            what its lines should be), or no host at all.
    """
    counts: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        found = parse(line)
        if found is None:
            continue
        host, count_text = found
        count = 1 if count_text is None else parse_whole(count_text)
        if not HOST_NAME.match(host) or "@" in host or count is None or not 1 <= count <= MAX_COUNT:
            raise UsageError(f"{where}:{number}: {line.strip()!r} is not {form}; give --hostfile or -H")
        counts[host] = counts.get(host, 0) + count
    if not counts:
        raise UsageError(f"{where} lists no hosts; give --hostfile or -H")
    return tuple(HostSlots(host, slots if slots is not None else n) for host, n in counts.items())


def failed_command(argv: tuple[str, ...], status: int, err: str, ping: str) -> UsageError:
    """The error for a client's command that failed (`argv`, its exit status and stderr): its last line says why."""
    lines = err.strip().splitlines()
    reason = lines[-1] if lines else f"exit status {status}"
    return UsageError(f"`{' '.join(argv)}` failed ({reason}); check that its server answers (`{ping}`), then try again")
