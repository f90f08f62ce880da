"""Kubernetes with Kubeflow's mpi-operator: an MPIJob's hosts and slots from the host file it mounts in its launcher.

An MPIJob (kubeflow.org/v2beta1) mounts `/etc/mpi/hostfile` in its launcher pod, one line per worker pod:
`<job>-worker-0.<job>.<namespace>.svc slots=N` for Open MPI, `…:N` for Intel MPI and MPICH; it names the file in
OMPI_MCA_orte_default_hostfile, I_MPI_HYDRA_HOST_FILE or HYDRA_HOST_FILE by the job's mpiImplementation, and sets
K_MPI_JOB_ROLE=launcher (mpi-operator's pkg/controller/mpi_job_controller.go). Open MPI 5's mpirun no longer reads
the orte_ name, so hpcdist reads the file and passes its hosts on. The ranks' variables are the MPI's own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..hosts import HostSlots
from . import register
from .base import Scheduler, host_lines, read_host_file

__all__ = ["Kubernetes"]

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
        self, environ: Mapping[str, str], slots: int | None = None, read: Callable[[str], str] | None = None
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
