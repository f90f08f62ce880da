"""NVIDIA's enroot: `enroot start` around each rank's program, started through `enter`.

enroot shares the host's network, IPC and PID namespaces (it isolates the mounts and the user only), and starts the
program with the image's own environment: a host variable goes in with `--env NAME` (enroot's "start" reference:
`enroot start [--env KEY[=VAL]] [--mount FSTAB] [--rw] NAME|IMAGE [COMMAND]`, https://github.com/NVIDIA/enroot/blob/
master/doc/cmd/start.md), one name at a time, so each rank starts `python -m hpcdist.containers.enter --env 2 --
enroot start …`, which adds `--env NAME` for each of its launcher variables. Mounts are fstab lines, colon-separated:
`SRC:DST:none:x-create=dir,bind[,ro]` ("Image format", /etc/fstab). GPUs: enroot's NVIDIA hook mounts those that
NVIDIA_VISIBLE_DEVICES names ("Standard Hooks"). The program starts in the image's working directory: give it
absolute paths. Checked against enroot's documentation, not run here.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import register
from .base import Container, Runtime, entering

__all__ = ["Enroot"]


@register
class Enroot(Runtime):
    """`enter --env 2 -- enroot start --mount … IMAGE PROGRAM`."""

    name = "enroot"
    title = "enroot"
    program = "enroot"
    order = 50
    documented = "https://github.com/NVIDIA/enroot/blob/master/doc/cmd/start.md"

    def wrap(self, container: Container, program: Sequence[str], python: str) -> list[str]:
        """The rank's `enroot start` line, the rank's variables added by `enter` as it starts."""
        argv = [self.program, "start"]
        for src, dst, read_only in container.binds():
            argv += ["--mount", f"{src}:{dst}:none:x-create=dir,bind{',ro' if read_only else ''}"]
        argv += ["--env", "NVIDIA_VISIBLE_DEVICES=all"] if container.gpus else []
        argv += [word for name in container.names() for word in ("--env", name)]
        return entering(python, [*argv, container.image, *program], "--env", 2)
