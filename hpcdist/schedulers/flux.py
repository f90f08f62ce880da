"""Flux: the variables `flux run` gives each task, and the job's id.

A Flux task sees FLUX_TASK_RANK, FLUX_TASK_LOCAL_ID, FLUX_JOB_SIZE and FLUX_JOB_NNODES (flux-core's
flux-environment(7)), but no count of its node's tasks nor its node's index: those are in the job's task map
(`flux job taskmap`). Flux places tasks in blocks, a node's together, unless `--taskmap` asks otherwise; so where
every node runs the same number of tasks (`flux run -N2 --tasks-per-node=4`, as torchrun's LOCAL_WORLD_SIZE needs)
that number is FLUX_JOB_SIZE / FLUX_JOB_NNODES, and a task's node is its rank divided by it, which its
FLUX_TASK_LOCAL_ID confirms.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ..errors import UsageError
from ..ranksource import Source
from ..values import parse_whole
from . import register
from .base import Scheduler

__all__ = ["BATCH_OPTIONS", "Flux"]

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


@register
class Flux(Scheduler):
    """Flux: its jobs and `flux run`, their task launcher."""

    name = "flux"
    title = "Flux"
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
