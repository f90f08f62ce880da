"""The container plug-in: what a rank's container is (`Container`), the variables it carries in, and the base class.

Every rank's environment holds what its launcher set for it (Open MPI's `OMPI_*`, PMIx's `PMIX_*`, Hydra's and
Slurm's `PMI_*`, …) and hpcdist's contract (`HPCDIST_*`); the MPI inside the image needs the first to meet the host's
launcher, and hpcdist's shim inside the second. `PASSED_PREFIXES` and `PASSED_NAMES` are the variables a runtime
carries in: all of them, and never the host's PATH, HOME or LD_LIBRARY_PATH, which would point at the host's files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

from ..contract import PREFIX
from ..errors import UsageError
from ..records import record

__all__ = [
    "PASSED_NAMES",
    "PASSED_PREFIXES",
    "PYTHON",
    "Container",
    "Runtime",
    "entering",
    "parse_mounts",
    "passed",
    "with_environment",
]

# a rank's launcher variables (Open MPI/PRRTE, PMIx, Hydra and PMI-1/2, Intel MPI, MVAPICH, MPICH, Cray PALS,
# libfabric and UCX settings, Slurm), then hpcdist's and torch's
PASSED_PREFIXES = (
    "OMPI_", "PMIX_", "PRTE_", "PMI_", "HYDRA_", "MPIR_", "I_MPI_", "MV2_", "MPICH_", "PALS_", "FI_", "UCX_", "SLURM_",
    PREFIX, "TORCHELASTIC_", "NCCL_", "GLOO_", "TORCH_",
)  # fmt: skip
PASSED_NAMES = ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "THP_MEM_ALLOC_ENABLE")
ENTER = "hpcdist.containers.enter"  # the rank's host side of a runtime (enter.py), run with `python -m`
PYTHON = "python3"  # the image's Python on its PATH: it runs hpcdist's shim inside (hpcdist installed there)
_MOUNT = re.compile(r"(?P<src>/[^:,]*):(?P<dst>/[^:,]*)(?::(?P<mode>ro|rw))?")


@record(frozen=True)
class Container:
    """The image every rank runs in, and how: its runtime, the host directories mounted in, GPUs or not.

    `workdir` (the launch's working directory) and `tmpdir` (where the launcher keeps its session directory and
    PMIx's rendezvous files: $TMPDIR or /tmp) are mounted at the same paths, so a relative path means the same
    inside and the MPI inside reaches the host's launcher.
    """

    image: str
    runtime: str
    mounts: tuple[tuple[str, str, bool], ...] = ()  # (host path, path inside, read-only)
    gpus: bool = False  # NVIDIA GPUs, the runtime's own way (apptainer --nv, podman's CDI device, docker --gpus)
    exported: tuple[str, ...] = ()  # the names `-x` exports to the ranks: they go in too
    workdir: str = "/"
    tmpdir: str = "/tmp"

    def names(self) -> tuple[str, ...]:
        """The names a runtime is given one by one (`-e NAME`): the exported ones that no prefix carries in."""
        return tuple(
            n for n in dict.fromkeys(self.exported) if not (n.startswith(PASSED_PREFIXES) or n in PASSED_NAMES)
        )

    def binds(self) -> tuple[tuple[str, str, bool], ...]:
        """Every mount: the session directory's, the working directory's (each once, never /), then the user's."""
        own = {(path, path, False): None for path in (self.tmpdir, self.workdir) if path != "/"}
        return (*own, *(m for m in self.mounts if m not in own))


def parse_mounts(texts: Sequence[str], where: str = "--container-mounts") -> tuple[tuple[str, str, bool], ...]:
    """`SRC:DST[:ro|rw][,SRC:DST…]` items (pyxis's form, absolute paths) as (SRC, DST, read-only) triples.

    Raises:
        UsageError: an item that is not two absolute paths and an optional mode.
    """
    mounts = []
    for text in texts:
        for item in text.split(","):
            found = _MOUNT.fullmatch(item)
            if found is None:
                raise UsageError(
                    f"{where} {item!r}: expected SRC:DST or SRC:DST:ro, both absolute paths without ':' or ',', "
                    "e.g. --container-mounts /data:/data:ro"
                )
            mounts.append((found["src"], found["dst"], found["mode"] == "ro"))
    return tuple(mounts)


def passed(environ: Mapping[str, str]) -> list[str]:
    """The names of `environ` a rank carries into its container (sorted)."""
    return sorted(n for n in environ if n.startswith(PASSED_PREFIXES) or n in PASSED_NAMES)


def entering(python: str, argv: Sequence[str], flag: str | None = None, at: int = 0) -> list[str]:
    """The rank's command that starts the runtime's `argv` through `python -m hpcdist.containers.enter` (`python`:
    the host's), which adds `flag NAME` after `at` words for each of the rank's variables when `flag` is given."""
    return [python, "-m", ENTER, *([flag, str(at)] if flag is not None else []), "--", *argv]


def with_environment(argv: Sequence[str], flag: str, at: int, environ: Mapping[str, str]) -> list[str]:
    """`argv` with `flag NAME` after its first `at` words for each name of `environ` a container carries."""
    added = [word for name in passed(environ) for word in (flag, name)]
    return [*argv[:at], *added, *argv[at:]]


class Runtime:
    """One container runtime; a subclass registered with `hpcdist.containers.register` is one --container-runtime."""

    name: ClassVar[str] = ""  # what --container-runtime takes
    title: ClassVar[str] = ""  # as hpcdist shows it: 'Apptainer'
    program: ClassVar[str] = ""  # its command
    order: ClassVar[int] = 100  # where `installed` tries it
    launcher_only: ClassVar[bool] = False  # its words go on the launcher's command line (pyxis: srun's), no wrapper
    documented: ClassVar[str] = ""  # where its run line is documented

    def wrap(self, container: Container, program: Sequence[str], python: str) -> list[str]:
        """Each rank's command: `program` run inside `container` (`python`: the host's, for `enter`)."""
        raise NotImplementedError

    def launcher_options(self, container: Container) -> list[str]:
        """The launcher's own options that put each rank in `container` (pyxis: srun's); none for a wrapper."""
        return []

    def probe(self, container: Container, program: Sequence[str], python: str) -> list[str]:
        """The command that runs `program` once inside `container`, outside any launch (the doctor's)."""
        return self.wrap(container, program, python)
