"""NVIDIA's pyxis: srun's own container options (a Slurm SPANK plug-in over enroot), no wrapper around the rank.

Under `--mpi srun`, srun starts each task inside the image itself: `srun --container-image=IMAGE
--container-mounts=SRC:DST[:FLAGS][,…] --container-workdir=PATH` (pyxis's "Usage" page,
https://github.com/NVIDIA/pyxis/wiki/Usage). The task's environment, Slurm's and PMIx's variables included, goes in
through enroot's hooks (enroot's `50-slurm-pmi.sh` also mounts PMIx's server directory), and GPUs are the job's
Slurm allocation. Checked against pyxis's documentation, not run here.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import register
from .base import Container, Runtime

__all__ = ["Pyxis"]


@register
class Pyxis(Runtime):
    """`srun --container-image=IMAGE --container-mounts=… --container-workdir=…`."""

    name = "pyxis"
    title = "pyxis"
    program = "srun"
    order = 60
    launcher_only = True
    documented = "https://github.com/NVIDIA/pyxis/wiki/Usage"

    def wrap(self, container: Container, program: Sequence[str], python: str) -> list[str]:
        """The program as it is: srun puts the task in the image (`launcher_options`)."""
        return list(program)

    def launcher_options(self, container: Container) -> list[str]:
        """srun's pyxis options: the image, the mounts (flags joined by '+'), the working directory."""
        mounts = ",".join(f"{src}:{dst}{':ro' if ro else ''}" for src, dst, ro in container.binds() if src != "/tmp")
        return [f"--container-image={container.image}", *([f"--container-mounts={mounts}"] if mounts else []),
                f"--container-workdir={container.workdir}"]  # fmt: skip

    def probe(self, container: Container, program: Sequence[str], python: str) -> list[str]:
        """One task under srun, in the image."""
        return ["srun", "--ntasks=1", *self.launcher_options(container), *program]
