"""Kubernetes with Kubeflow's operators: an MPIJob's hosts and slots from the host file mpi-operator mounts in its
launcher, and the variables the Trainer's torch runtime gives a TrainJob's nodes.

An MPIJob (kubeflow.org/v2beta1) mounts `/etc/mpi/hostfile` in its launcher pod, one line per worker pod:
`<job>-worker-0.<job>.<namespace>.svc slots=N` for Open MPI, `…:N` for Intel MPI and MPICH; it names the file in
OMPI_MCA_orte_default_hostfile, I_MPI_HYDRA_HOST_FILE or HYDRA_HOST_FILE by the job's mpiImplementation, and sets
K_MPI_JOB_ROLE=launcher (mpi-operator's pkg/controller/mpi_job_controller.go). Open MPI 5's mpirun no longer reads
the orte_ name, so hpcdist reads the file and passes its hosts on. The ranks' variables are the MPI's own.

A TrainJob's node (kubeflow/trainer's torch plug-in, pkg/runtime/framework/plugins/torch/torch.go) gets PET_NNODES,
PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT, which torchrun reads as its options'
defaults (torch's torchrun documentation: each option's PET_ variable). A program run without torchrun there is the
node's one process: rank PET_NODE_RANK of PET_NNODES, local rank 0 of 1, its rendezvous at PET_MASTER_ADDR and
PET_MASTER_PORT (`runtime.env`). More processes per node are torchrun's to start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..errors import UsageError
from ..hosts import HostSlots
from ..ranksource import Source
from . import register
from .base import Scheduler, host_lines, read_host_file

__all__ = ["KubeflowTrainer", "Kubernetes"]

# where an MPIJob's launcher is told its host file, by mpiImplementation: OpenMPI, Intel, MPICH
_HOST_FILE = ("OMPI_MCA_orte_default_hostfile", "I_MPI_HYDRA_HOST_FILE", "HYDRA_HOST_FILE")


@register
class Kubernetes(Scheduler):
    """An MPIJob of Kubeflow's mpi-operator, seen from its launcher pod."""

    name = "kubernetes"
    title = "Kubernetes MPIJob"
    more_slots = "a worker pod's slots are the MPIJob's spec.slotsPerWorker"

    def inside(self, environ: Mapping[str, str]) -> bool:
        """In an MPIJob's launcher pod (K_MPI_JOB_ROLE=launcher) that names its host file."""
        return environ.get("K_MPI_JOB_ROLE") == "launcher" and any(v in environ for v in _HOST_FILE)

    def allocation(self, environ: Mapping[str, str]) -> str:
        """'the Kubernetes MPIJob's workers'."""
        return "the Kubernetes MPIJob's workers"

    def hosts(
        self,
        environ: Mapping[str, str],
        slots: int | None = None,
        read: Callable[[str], str] | None = None,
        ask: Callable[[Sequence[str]], str] | None = None,
    ) -> tuple[HostSlots, ...]:
        """The host file's worker pods, each with its `slots=N` (Open MPI) or `:N` (Intel MPI, MPICH)."""
        var = next((v for v in _HOST_FILE if environ.get(v)), _HOST_FILE[0])
        where, text = read_host_file(environ, var, self.title, read)
        return host_lines(text, where, "'HOST slots=N' or 'HOST:N'", _worker, slots)


def _worker(line: str) -> tuple[str, str | None] | None:
    """A line of mpi-operator's host file, `HOST slots=N` or `HOST:N` (a `#` starts a comment): (host, N)."""
    text = line.split("#", 1)[0].strip()
    if not text:
        return None
    host, _, count = text.replace(" slots=", ":").partition(":")
    return host, count or None


@register
class KubeflowTrainer(Scheduler):
    """A TrainJob of the Kubeflow Trainer's torch runtime, seen from a node's program run without torchrun."""

    name = "kubeflow-trainer"
    title = "Kubeflow Trainer"
    ranks = Source(
        "kubeflow-trainer",
        "PET_NODE_RANK",
        ("PET_NNODES",),
        None,
        (),
        "PET_NODE_RANK",
        ("PET_NPROC_PER_NODE",),
        "the Kubeflow Trainer's torch runtime",
        "PET_NNODES",
    )

    def task_step(self, environ: Mapping[str, str]) -> str | None:
        """'': each node's container is one task of the TrainJob; None in a worker torchrun started there (the
        variables then describe its node, and torchrun's own say the worker's place)."""
        return None if "TORCHELASTIC_RUN_ID" in environ else ""

    def same_step(self, environ: Mapping[str, str], world: int) -> bool:
        """True: the variables describe this TrainJob."""
        return True

    def node_place(self, environ: Mapping[str, str], rank: int, world: int) -> dict[str, tuple[str, int]]:
        """The node's one process: local rank 0 of 1, node PET_NODE_RANK.

        Raises:
            UsageError: PET_NPROC_PER_NODE asks for more than one process per node, which torchrun starts.
        """
        per_node = environ.get("PET_NPROC_PER_NODE", "1")
        if per_node != "1":
            raise UsageError(
                f"PET_NPROC_PER_NODE={per_node!r}: the Kubeflow Trainer asks for that many processes on each node, "
                "which torchrun starts, and this program runs without it; run it under torchrun (the TrainJob "
                "`hpcdist trainjob` writes does), or give the TrainJob numProcPerNode 1"
            )
        return {
            "local_rank": ("PET_NPROC_PER_NODE=1", 0),
            "local_world_size": ("PET_NPROC_PER_NODE", 1),
            "node_rank": ("PET_NODE_RANK", rank),
        }
