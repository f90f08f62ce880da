"""Podman: `podman run` around each rank's program, in the host's network, IPC, PID and UTS namespaces.

A container of its own would hide the host's launcher from the MPI inside: PMIx's server listens on the host's
loopback and keeps its rendezvous files in the launcher's session directory ($TMPDIR or /tmp), and ranks on one host
share memory through /dev/shm and see each other's processes. So each rank runs with `--network=host --ipc=host
--pid=host --uts=host` (the rank then names its host, not the container), the session directory and the working
directory mounted at the same paths (`-v`, `-w`), and its launcher variables passed in by prefix: `--env 'OMPI_*'`
takes every host variable that starts so ("As a special case, if an environment variable ending in * is specified
without a value, Podman will search the host environment for variables starting with the prefix", podman-run(1),
Podman 4.3). GPUs through the Container Device Interface: `--device nvidia.com/gpu=all` (NVIDIA Container
Toolkit's "Support for Container Device Interface" page). Each rank starts it through `enter`, which passes on
the signal Open MPI's launcher relays for SIGTERM (SIGURG), which Podman does not. Ran for real here with Podman
4.3.1.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import register
from .base import PASSED_NAMES, PASSED_PREFIXES, Container, Runtime, entering

__all__ = ["Podman", "namespaces"]


def namespaces(container: Container, volume: str = "-v") -> list[str]:
    """`run`'s options common to Podman and Docker: the host's namespaces, the mounts and the working directory."""
    argv = ["--rm", "--network=host", "--ipc=host", "--pid=host", "--uts=host"]
    for src, dst, read_only in container.binds():
        argv += [volume, f"{src}:{dst}{':ro' if read_only else ''}"]
    return [*argv, "-w", container.workdir]


@register
class Podman(Runtime):
    """`enter -- podman run --rm --network=host … -e 'OMPI_*' … IMAGE PROGRAM`."""

    name = "podman"
    title = "Podman"
    program = "podman"
    order = 30
    documented = "https://docs.podman.io/en/v4.3/markdown/podman-run.1.html"

    def wrap(self, container: Container, program: Sequence[str], python: str) -> list[str]:
        """The rank's `podman run` line, started through `enter`."""
        argv = [self.program, "run", *namespaces(container)]
        argv += ["--device", "nvidia.com/gpu=all"] if container.gpus else []
        for name in (*(f"{prefix}*" for prefix in PASSED_PREFIXES), *PASSED_NAMES, *container.names()):
            argv += ["-e", name]
        return entering(python, [*argv, container.image, *program])
