"""Docker: `docker run` around each rank's program, as Podman's (`podman.namespaces`), started through `enter`.

`docker run -e NAME` passes one host variable by its exact name and takes no prefix (docker run's reference,
"Set environment variables (-e, --env, --env-file)"), and a rank's launcher variables are known only in the rank:
so each rank starts `python -m hpcdist.containers.enter -e 2 -- docker run …`, which adds `-e NAME` for each of its
variables that a container carries (`base.PASSED_PREFIXES`) and passes on SIGTERM as `podman` does. GPUs: `--gpus
all` (docker run's reference, "Access an NVIDIA GPU"). Checked against Docker's documentation, not run here (no
Docker daemon).
"""

from __future__ import annotations

from collections.abc import Sequence

from . import register
from .base import Container, Runtime, entering
from .podman import namespaces

__all__ = ["Docker"]


@register
class Docker(Runtime):
    """`enter -e 2 -- docker run --rm --network=host … IMAGE PROGRAM`."""

    name = "docker"
    title = "Docker"
    program = "docker"
    order = 40
    documented = "https://docs.docker.com/reference/cli/docker/container/run/"

    def wrap(self, container: Container, program: Sequence[str], python: str) -> list[str]:
        """The rank's `docker run` line, the rank's variables added by `enter` as it starts."""
        argv = [self.program, "run", *namespaces(container), *(["--gpus", "all"] if container.gpus else [])]
        argv += [word for name in container.names() for word in ("-e", name)]
        return entering(python, [*argv, container.image, *program], "-e", 2)
