"""Slurm: nodelists (`node[01-04],gpu7`), an allocation's hosts and slots, srun's variables and steps, sbatch's ids."""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence

from ..errors import UsageError
from ..hosts import HOST_NAME, HostSlots
from ..plugins import LazyPattern
from ..ranksource import Source
from ..values import MAX_COUNT, parse_whole, slurm_counts
from . import register
from .base import Scheduler

__all__ = ["SBATCH_OPTIONS", "Slurm", "collect_nodelist", "expand_nodelist"]

# sbatch's long options (Slurm 22.05 to 24.11, `sbatch --help`), by what each takes: a value, an optional one (only
# as --name=value), or none. `hpcdist sbatch` writes those it does not model into the script as #SBATCH lines.
_VALUE = [
    "account",
    "acctg-freq",
    "array",
    "batch",
    "bb",
    "bbf",
    "begin",
    "chdir",
    "cluster-constraint",
    "clusters",
    "comment",
    "constraint",
    "container",
    "container-id",
    "core-spec",
    "cores-per-socket",
    "cpu-freq",
    "cpus-per-gpu",
    "cpus-per-task",
    "deadline",
    "delay-boot",
    "dependency",
    "distribution",
    "error",
    "export-file",
    "extra",
    "extra-node-info",
    "gid",
    "gpu-bind",
    "gpu-freq",
    "gpus",
    "gpus-per-node",
    "gpus-per-socket",
    "gpus-per-task",
    "gres",
    "gres-flags",
    "hint",
    "input",
    "job-name",
    "licenses",
    "mail-type",
    "mail-user",
    "mcs-label",
    "mem",
    "mem-bind",
    "mem-per-cpu",
    "mem-per-gpu",
    "mincpus",
    "network",
    "nodefile",
    "nodelist",
    "nodes",
    "ntasks",
    "ntasks-per-core",
    "ntasks-per-gpu",
    "ntasks-per-node",
    "ntasks-per-socket",
    "open-mode",
    "output",
    "partition",
    "power",
    "prefer",
    "priority",
    "profile",
    "qos",
    "reservation",
    "signal",
    "sockets-per-node",
    "switches",
    "thread-spec",
    "threads-per-core",
    "time",
    "time-min",
    "tmp",
    "tres-bind",
    "tres-per-task",
    "uid",
    "wckey",
    "exclude",
]
_OPTIONAL = ["exclusive", "export", "kill-on-invalid-dep", "nice", "propagate"]
_FLAG = [
    "contiguous",
    "get-user-env",
    "hold",
    "ignore-pbs",
    "no-kill",
    "no-requeue",
    "overcommit",
    "oversubscribe",
    "reboot",
    "requeue",
    "spread-job",
    "use-min-nodes",
]
SBATCH_OPTIONS: Mapping[str, str] = {
    **dict.fromkeys(_VALUE, "value"),
    **dict.fromkeys(_OPTIONAL, "optional"),
    **dict.fromkeys(_FLAG, "flag"),
}

_MAX_NORMAL_STEP_ID = 0xFFFFFFF0  # above: Slurm's batch/extern/interactive/pending pseudo-steps


def expand_nodelist(value: str, what: str = "--nodelist") -> list[str]:
    """Host names of a Slurm nodelist such as `node[01-04],gpu7` (python-hostlist), else UsageError."""
    import hostlist

    try:
        hosts = hostlist.expand_hostlist(value)
    except hostlist.BadHostlist as exc:
        raise UsageError(f"{what} {value!r} is not a valid Slurm nodelist ({exc}); e.g. 'node[01-04],gpu7'") from None
    bad = [h for h in hosts if not HOST_NAME.match(h) or "@" in h]  # Slurm's node names carry no user@
    if not hosts or bad:
        raise UsageError(
            f"{what} {value!r}: {bad[0] if bad else 'no hosts'!r} is not a host name; e.g. 'node[01-04],gpu7'"
        )
    return hosts


def collect_nodelist(hosts: Sequence[str]) -> str:
    """The Slurm nodelist of `hosts`, sorted and folded into ranges (`n2,n1,n3` -> `n[1-3]`)."""
    import hostlist

    return str(hostlist.collect_hostlist(list(hosts)))


@register
class Slurm(Scheduler):
    """Slurm: its allocation (sbatch, salloc) and its task launcher srun."""

    name = "slurm"
    title = "Slurm"
    printed_id = LazyPattern(r"(\d+)(?:;.*)?")  # sbatch --parsable: JOBID[;CLUSTER]
    launchers_read_hosts = True
    signals_job = signal.SIGTERM  # scancel, a preemption, the time limit: SIGTERM to every process, KillWait later KILL
    clients = ("sbatch",)
    first_on_path = True
    ping = "scontrol ping"
    # Counts only inside a real srun step (`task_step`); its local world size is SLURM_STEP_TASKS_PER_NODE (or
    # SLURM_TASKS_PER_NODE) indexed by SLURM_NODEID (`local_size`).
    ranks = Source(
        "slurm",
        "SLURM_PROCID",
        ("SLURM_NTASKS", "SLURM_NPROCS"),
        "SLURM_LOCALID",
        ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
        "SLURM_NODEID",
        (),
        "srun",
        "SLURM_STEP_NUM_NODES",
    )

    def inside(self, environ: Mapping[str, str]) -> bool:
        """Inside an allocation when it names its nodes (SLURM_JOB_NODELIST)."""
        return "SLURM_JOB_NODELIST" in environ

    def allocation(self, environ: Mapping[str, str]) -> str:
        """'the Slurm allocation node[1-2]'."""
        return f"the Slurm allocation {environ.get('SLURM_JOB_NODELIST', '')}".rstrip()

    def hosts(
        self,
        environ: Mapping[str, str],
        slots: int | None = None,
        read: Callable[[str], str] | None = None,
        ask: Callable[[Sequence[str]], str] | None = None,
    ) -> tuple[HostSlots, ...]:
        """SLURM_JOB_NODELIST with SLURM_TASKS_PER_NODE (or `slots` each); Slurm keeps no host file to `read`."""
        nodelist = environ.get("SLURM_JOB_NODELIST")
        if not nodelist:
            raise UsageError(
                "no hosts given and not inside a Slurm allocation (SLURM_JOB_NODELIST is unset); "
                "give --hosts a,b or --nodelist 'node[01-04]'"
            )
        hosts = expand_nodelist(nodelist, "SLURM_JOB_NODELIST")
        if slots is not None:
            return tuple(HostSlots(h, slots) for h in hosts)
        tasks = environ.get("SLURM_TASKS_PER_NODE")
        if not tasks:
            raise UsageError("SLURM_TASKS_PER_NODE is unset, so the slots per node are unknown; give --slots N")
        try:
            runs = slurm_counts(tasks, "SLURM_TASKS_PER_NODE", len(hosts))
        except UsageError as exc:
            raise UsageError(f"{exc}; or give --slots N") from None
        counts = [count for count, repeat in runs for _ in range(repeat)]  # at most len(hosts) entries
        if len(counts) != len(hosts) or not all(1 <= n <= MAX_COUNT for n in counts):
            raise UsageError(
                f"SLURM_TASKS_PER_NODE={tasks!r} does not match the {len(hosts)} nodes of "
                f"SLURM_JOB_NODELIST={nodelist!r}; give --slots N instead"
            )
        return tuple(HostSlots(h, n) for h, n in zip(hosts, counts, strict=True))

    def spans_hosts(self, environ: Mapping[str, str]) -> bool:
        """A multi-node allocation (SLURM_JOB_NUM_NODES, or the older SLURM_NNODES)."""
        nodes = environ.get("SLURM_JOB_NUM_NODES", environ.get("SLURM_NNODES", "1"))
        return nodes.isdigit() and int(nodes) > 1

    def job_id(self, environ: Mapping[str, str]) -> str | None:
        """SLURM_JOB_ID."""
        return environ.get("SLURM_JOB_ID")

    def submit_argv(self, script: str) -> tuple[str, ...]:
        """`sbatch --parsable SCRIPT`: it prints the job id alone."""
        return ("sbatch", "--parsable", script)

    def task_step(self, environ: Mapping[str, str]) -> str | None:
        """The srun step id, or None outside a real step (no id, or batch/extern/interactive): in an sbatch script or
        a salloc shell SLURM_PROCID=0 and SLURM_NTASKS>1 describe the allocation, yet this is ONE process."""
        step = environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID"))
        number = None if step is None else parse_whole(step)
        if step is None or number is None or step != step.strip() or number > _MAX_NORMAL_STEP_ID:
            return None
        return step

    def same_step(self, environ: Mapping[str, str], world: int) -> bool:
        """A step of another task count started the launcher's per-node daemons (mpirun's prted, Hydra's proxies
        inside sbatch), so its SLURM_PROCID is not our rank. Intel MPI's Hydra passes the batch script's
        SLURM_NTASKS on to its ranks over its proxies' own step; the step's SLURM_STEP_NUM_TASKS still tells
        (measured: SLURM_NTASKS=4 but SLURM_STEP_NUM_TASKS=2 in 4 ranks)."""
        return environ.get("SLURM_STEP_NUM_TASKS", str(world)) == str(world)

    def local_size(self, var: str, text: str, node_id: int) -> int:
        """Entry `node_id` of Slurm's compressed tasks-per-node list `text` (`2(x3),1`), read from `var`.

        The list is walked, never expanded, so `2(x99999999999)` costs nothing.
        """
        first = 0
        for count, repeat in slurm_counts(text, var, MAX_COUNT):
            if node_id < first + repeat:
                if count > MAX_COUNT:
                    raise UsageError(f"{var}={text!r} gives a node more than {MAX_COUNT} tasks; let srun set it")
                return count
            first += repeat
        raise UsageError(
            f"SLURM_NODEID={node_id} is out of range for {var}={text} "
            f"({first} nodes); let srun set both instead of setting them by hand"
        )

    def step_hosts(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """The step's expanded hostnames, empty when Slurm gave no nodelist."""
        import hostlist

        var = next((n for n in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST") if n in environ), None)
        if var is None:
            return ()
        try:
            return tuple(hostlist.expand_hostlist(environ[var]))
        except hostlist.BadHostlist as exc:
            raise UsageError(
                f"{var}={environ[var]!r} is not a valid Slurm nodelist ({exc}); "
                "let srun set it instead of setting it by hand"
            ) from None
