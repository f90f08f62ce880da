"""Apptainer (and SingularityCE, its other branch): `apptainer exec` around each rank's program.

The Apptainer user guide's "Apptainer and MPI applications" page calls this the hybrid model: the host's launcher
starts `apptainer exec IMAGE PROGRAM` once per rank, and the MPI inside the image connects back to the launcher
through PMI/PMIx, so the MPI inside must be of the host launcher's family and ABI
(https://apptainer.org/docs/user/main/mpi.html). Apptainer passes the host's environment in (but PATH and
LD_LIBRARY_PATH; "Environment and Metadata", https://apptainer.org/docs/user/main/environment_and_metadata.html),
shares the host's network, PID and IPC namespaces, and binds $HOME, /tmp and the working directory itself (its
"Bind Paths and Mounts" page); `--bind SRC:DST[:ro]` adds the others and `--nv` the NVIDIA driver and devices.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import register
from .base import Container, Runtime

__all__ = ["Apptainer", "Singularity"]


@register
class Apptainer(Runtime):
    """`apptainer exec [--nv] [--bind SRC:DST[:ro]] IMAGE PROGRAM`."""

    name = "apptainer"
    title = "Apptainer"
    program = "apptainer"
    order = 10
    documented = "https://apptainer.org/docs/user/main/mpi.html"

    def wrap(self, container: Container, program: Sequence[str], python: str) -> list[str]:
        """The rank's `apptainer exec` line; /tmp and the working directory are bound by Apptainer itself."""
        argv = [self.program, "exec", *(["--nv"] if container.gpus else [])]
        for src, dst, read_only in container.binds():
            if src not in ("/tmp", container.workdir) or src != dst:
                argv += ["--bind", f"{src}:{dst}{':ro' if read_only else ''}"]
        return [*argv, container.image, *program]


@register
class Singularity(Apptainer):
    """SingularityCE's `singularity exec`, which takes Apptainer's options."""

    name = "singularity"
    title = "SingularityCE"
    program = "singularity"
    order = 20
    documented = "https://docs.sylabs.io/guides/latest/user-guide/mpi.html"
