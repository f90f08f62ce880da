"""Flux: an allocation's hosts and slots from its resource set R, the variables `flux run` gives each task, the job's
id, what `flux batch` prints, and a job's status.

A batch script (`flux batch`) or `flux alloc`'s shell is the initial program of the job's own Flux instance: Flux
sets FLUX_URI there and unsets FLUX_JOB_ID and the task variables (flux-environment(7)). `flux resource R` prints
the instance's resources as an RFC 20 resource set (flux-resource(1)): `execution.R_lite` gives each broker rank's
cores (`children.core`, an RFC 22 idset), and `execution.nodelist` the ranks' hosts in rank order (RFC 29
hostlists); a host's slots are its cores.

A Flux task sees FLUX_TASK_RANK, FLUX_TASK_LOCAL_ID, FLUX_JOB_SIZE and FLUX_JOB_NNODES (flux-core's
flux-environment(7)), but no count of its node's tasks nor its node's index: those are in the job's task map
(`flux job taskmap`). Flux places tasks in blocks, a node's together, unless `--taskmap` asks otherwise; so where
every node runs the same number of tasks (`flux run -N2 --tasks-per-node=4`, as torchrun's LOCAL_WORLD_SIZE needs)
that number is FLUX_JOB_SIZE / FLUX_JOB_NNODES, and a task's node is its rank divided by it, which its
FLUX_TASK_LOCAL_ID confirms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ..errors import UsageError
from ..hosts import HOST_NAME, HostSlots
from ..plugins import LazyPattern
from ..ranksource import Source
from ..values import MAX_COUNT, parse_whole
from . import register
from .base import Scheduler, failed_command

__all__ = ["BATCH_OPTIONS", "RESOURCES", "Flux", "resource_hosts"]

RESOURCES = ("flux", "resource", "R")  # prints the instance's resource set, RFC 20 (flux-resource(1))
_IDSET = LazyPattern(r"\[?([0-9]{1,10}(?:-[0-9]{1,10})?(?:,[0-9]{1,10}(?:-[0-9]{1,10})?)*)\]?")  # RFC 22: 0-3,7
_FIX = "give --hostfile or -H"

# flux batch's long options (flux-core 0.88, flux-batch(1)) that `hpcdist flux` does not model, by what each takes (as
# SBATCH_OPTIONS): they go into the script as `# flux:` lines. Not here: --env, --env-file and --env-remove (hpcdist's
# own --env and --env-file set the job's variables), --wrap and --dry-run, and the options it models.
BATCH_OPTIONS: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(
            ("add-file", "begin-time", "broker-opts", "conf", "cwd", "dependency", "flags", "input", "requires"),
            "value",
        ),
        **dict.fromkeys(("rlimit", "setattr", "setopt", "signal", "urgency"), "value"),
        "dump": "optional",
        "unbuffered": "flag",
    }
)

# a job id in RFC 19's F58 form, as flux batch prints it: ƒ (f where the locale has no UTF-8) and base58 digits
_F58 = LazyPattern(r"([ƒf][1-9A-HJ-NP-Za-km-z]+)")
# flux-jobs(1)'s {status}, a job's state and result in one word (flux-core, "JOB STATUS"): Flux spells CANCELED
_STATUS = {status: status for status in ("PENDING", "RUNNING", "COMPLETED", "FAILED", "TIMEOUT")}
_STATUS["CANCELED"] = "CANCELLED"


@register
class Flux(Scheduler):
    """Flux: its jobs and `flux run`, their task launcher."""

    name = "flux"
    title = "Flux"
    printed_id = _F58  # flux batch: the job's id in F58
    more_slots = "a host's slots are the job's cores there: flux batch -N 2 --exclusive gives it two whole nodes"
    # flux cancel signals the job's shells, which pass SIGTERM on to their tasks, SIGKILL kill-timeout later
    # (flux-cancel(1), flux-config-exec(5)): in a batch job, the instance's brokers, not the processes of its script
    signals_job = None
    ranks = Source(
        "flux",
        "FLUX_TASK_RANK",
        ("FLUX_JOB_SIZE",),
        "FLUX_TASK_LOCAL_ID",
        (),
        None,
        (),
        "Flux's flux run",
        "FLUX_JOB_NNODES",
    )
    clients = ("flux",)
    ping = "flux uptime"

    def inside(self, environ: Mapping[str, str]) -> bool:
        """Inside a job's Flux instance, in its initial program (a batch script, flux alloc's shell): FLUX_URI set,
        FLUX_JOB_ID not (a task of a job has both, and FLUX_URI names the instance that runs it, not its own)."""
        return "FLUX_URI" in environ and "FLUX_JOB_ID" not in environ

    def allocation(self, environ: Mapping[str, str]) -> str:
        """'the Flux allocation (flux resource R)'."""
        return f"the Flux allocation ({' '.join(RESOURCES)})"

    def hosts(
        self,
        environ: Mapping[str, str],
        slots: int | None = None,
        read: Callable[[str], str] | None = None,
        ask: Callable[[Sequence[str]], str] | None = None,
    ) -> tuple[HostSlots, ...]:
        """The hosts and cores of the resource set `flux resource R` prints, through `ask` (or `slots` each)."""
        if ask is None:
            raise UsageError(f"hpcdist cannot run {' '.join(RESOURCES)} here; {_FIX}")
        return resource_hosts(ask(RESOURCES), slots)

    def job_id(self, environ: Mapping[str, str]) -> str | None:
        """FLUX_JOB_ID, in a task of a Flux job (its F58 form, `ƒM7Zq9AKHno`)."""
        return environ.get("FLUX_JOB_ID") if "FLUX_TASK_RANK" in environ else None

    def node_place(self, environ: Mapping[str, str], rank: int, world: int) -> dict[str, tuple[str, int]]:
        """The tasks per node, FLUX_JOB_SIZE / FLUX_JOB_NNODES, which must divide evenly; the node, rank divided by
        it; FLUX_TASK_LOCAL_ID, which must be the rank's place in its node's block."""
        nodes_text = environ.get("FLUX_JOB_NNODES", "")
        nodes = parse_whole(nodes_text)
        if nodes is None or not 1 <= nodes <= world:
            raise UsageError(
                f"FLUX_JOB_NNODES={nodes_text!r} is not a node count from 1 to FLUX_JOB_SIZE={world}; "
                "let flux run set it"
            )
        if world % nodes:
            raise UsageError(
                f"flux run placed FLUX_JOB_SIZE={world} tasks on FLUX_JOB_NNODES={nodes} nodes, not the same "
                "number on each, which torch's LOCAL_WORLD_SIZE needs; run them with flux run -N NODES "
                "--tasks-per-node=N"
            )
        per_node = world // nodes
        local_text = environ.get("FLUX_TASK_LOCAL_ID", "")
        local = parse_whole(local_text)
        if local != rank % per_node:
            raise UsageError(
                f"FLUX_TASK_RANK={rank} has FLUX_TASK_LOCAL_ID={local_text!r}, but in blocks of {per_node} tasks a "
                f"node it is {rank % per_node}: the tasks are not placed a node's together, which hpcdist needs "
                "to tell each task's node; drop flux run's --taskmap"
            )
        size = "FLUX_JOB_SIZE/FLUX_JOB_NNODES"
        return {
            "local_rank": ("FLUX_TASK_LOCAL_ID", local),
            "local_world_size": (size, per_node),
            "node_rank": (f"FLUX_TASK_RANK/({size})", rank // per_node),
        }

    def submit_argv(self, script: str) -> tuple[str, ...]:
        """`flux batch SCRIPT`."""
        return ("flux", "batch", script)

    def state_argv(self, job_id: str) -> tuple[str, ...]:
        """`flux jobs -n -o {status} JOB_ID`: the job's status alone, without a header; inactive jobs too."""
        return ("flux", "jobs", "-n", "-o", "{status}", job_id)

    def job_state(self, job_id: str, status: int, out: str, err: str) -> str | None:
        """The status flux jobs printed; None when it knows no such job (purged from its list)."""
        if status != 0:
            if "not found" in err or "unknown" in err.lower():
                return None
            raise failed_command(self.state_argv(job_id), status, err, self.ping)
        word = out.strip()
        if word not in _STATUS:
            raise UsageError(f"`{' '.join(self.state_argv(job_id))}` printed {word!r}, not a status of flux-jobs(1)")
        return _STATUS[word]

    def cancel_argv(self, job_id: str) -> tuple[str, ...]:
        """`flux cancel JOB_ID`."""
        return ("flux", "cancel", job_id)


def resource_hosts(text: str, slots: int | None = None) -> tuple[HostSlots, ...]:
    """The hosts of an RFC 20 resource set `text` (JSON) in the order of their broker ranks, each with its cores as
    its slots (or `slots` each); a host named for several ranks has their cores summed.

    Raises:
        UsageError: `text` is no version 1 resource set with an R_lite and a nodelist whose hosts match its ranks.
    """
    import json  # here: a rank, which imports every scheduler, never reads a resource set

    where = f"the resource set {' '.join(RESOURCES)} printed"
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    execution = found.get("execution") if isinstance(found, dict) and found.get("version") == 1 else None
    lite, nodelist = (execution.get("R_lite"), execution.get("nodelist")) if isinstance(execution, dict) else (0, 0)
    if not isinstance(lite, list) or not isinstance(nodelist, list) or not all(isinstance(n, str) for n in nodelist):
        raise UsageError(f"{where} is not an RFC 20 resource set of version 1 with R_lite and nodelist; {_FIX}")
    hosts = [host for entry in nodelist for host in _hostlist(entry, where)]
    cores: dict[int, int] = {}
    for entry in lite:
        ranks, count = _rank_cores(entry, where)
        if len(cores) + sum(last - first + 1 for first, last in ranks) > len(hosts):
            raise UsageError(f"{where} has more ranks in R_lite than the {len(hosts)} hosts of its nodelist; {_FIX}")
        for first, last in ranks:
            for rank in range(first, last + 1):
                cores[rank] = cores.get(rank, 0) + count
    if len(cores) != len(hosts):
        raise UsageError(f"{where} names {len(hosts)} hosts in its nodelist for {len(cores)} ranks in R_lite; {_FIX}")
    counts: dict[str, int] = {}
    for host, rank in zip(hosts, sorted(cores), strict=True):
        counts[host] = min(counts.get(host, 0) + cores[rank], MAX_COUNT)
    return tuple(HostSlots(host, slots if slots is not None else n) for host, n in counts.items())


def _rank_cores(entry: Any, where: str) -> tuple[list[tuple[int, int]], int]:
    """An R_lite entry's broker ranks, as ranges, and the cores each has.

    Raises:
        UsageError: no `rank` idset, or no `children.core` idset.
    """
    children = entry.get("children") if isinstance(entry, dict) else None
    core = children.get("core") if isinstance(children, dict) else None
    ranks = _idset(entry.get("rank") if isinstance(entry, dict) else None)
    cores = _idset(core)
    if ranks is None or cores is None:
        import json

        raise UsageError(
            f"{where}: R_lite entry {json.dumps(entry)[:200]} lacks a rank or a children.core idset; {_FIX}"
        )
    return ranks, min(sum(last - first + 1 for first, last in cores), MAX_COUNT)


def _idset(value: object) -> list[tuple[int, int]] | None:
    """An RFC 22 idset (`0-47`, `[1-3,5]`) as its ranges (first, last), or None when `value` is none."""
    found = _IDSET.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        return None
    ranges = [(int(a), int(b or a)) for a, _, b in (item.partition("-") for item in found[1].split(","))]
    return ranges if all(first <= last for first, last in ranges) else None


def _hostlist(entry: str, where: str) -> list[str]:
    """The host names of a nodelist entry, a host name or an RFC 29 hostlist (`node[186-189]`): python-hostlist.

    Raises:
        UsageError: it is neither.
    """
    import hostlist

    try:
        hosts = hostlist.expand_hostlist(entry)
    except hostlist.BadHostlist:
        hosts = []
    if not hosts or not all(HOST_NAME.match(host) and "@" not in host for host in hosts):
        raise UsageError(f"{where}: {entry!r} in its nodelist is not a hostlist such as 'node[186-189]'; {_FIX}")
    return list(hosts)
