"""Intel MPI's Hydra `mpiexec.hydra`: its placement, pinning, exit codes and identity (a kind of MPICH's Hydra)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence

from .. import records
from ..errors import UsageError
from ..hosts import HostSlots, hosts_text
from ..plugins import LazyPattern
from ..status import describe_status
from . import register
from .base import AppContext, MpirunSpec
from .mpich import Hydra

__all__ = ["Intel"]

# `-print-all-exitcodes` (impi-rt 2021.19): exit codes, not wait statuses (137 after a SIGKILL), hosts as `host:N`:
#     [mpiexec@vm] Exit codes: [localhost:0] 3,3,3,3
# printed for every rank after MPI_Abort or a kill (`1,1,1,1`, `137,137,137,137`), so a rank's own failure is told
# only where the statuses differ.
_CODES = LazyPattern(r"^\[(?P<host>[^\]\s:]+):\d+\] (?P<codes>-?\d+(?:,-?\d+)*)$")


@register
class Intel(Hydra):
    """Intel MPI's Hydra `mpiexec.hydra`.

    Measured with impi-rt 2021.18.1: `-hosts a:2` is read as a host named "a:2" (the bootstrap fails), so equal
    slots are `-hosts a,b -ppn 2` and others one app context per host (`-n 2 -host a PROG : …`); `-f FILE`
    reads `host:N` lines. It pins every rank to one core by default (I_MPI_PIN): `--bind-to none` turns that
    off, and other values name the pinning domain. Its ranks see Hydra's PMI_* variables.
    """

    name = "intel"
    title = "Intel MPI"
    order = 30
    identity = LazyPattern(r"Intel\(R\) MPI Library\D*?(\d{4}(?:\.\d+)*)")
    # measured in the PyPI wheel (impi-rt 2021.18.1); it ships Hydra's proxies too, so it is tested before MPICH
    markers = ("impi_info", "hydra_bstrap_proxy", "mpitune", "mpitune_fast")
    launcher_names = ()
    wheel = "impi-rt"

    def launcher(self, path: str, runnable: Callable[[str], bool]) -> str:
        """Intel MPI's `mpirun` is a shell script that runs `mpiexec.hydra` from PATH (measured: "mpiexec.hydra: not
        found" when its directory is not on PATH); the binary beside it runs wherever it is."""
        hydra = os.path.join(os.path.dirname(path), "mpiexec.hydra")
        if os.path.basename(path) == "mpirun" and os.sep in path and runnable(hydra):
            return hydra
        return path

    def placement(self, spec: MpirunSpec) -> list[str]:
        """The hostfile, else the hosts and their common number of slots per host (per-host contexts otherwise)."""
        if spec.hostfile is not None or not spec.hosts:
            return super().placement(spec)
        return ["-hosts", ",".join(h.host for h in spec.hosts), "-ppn", str(spec.hosts[0].slots)]

    def binding(self, spec: MpirunSpec) -> list[str]:
        """I_MPI_PIN=0 for no binding, else I_MPI_PIN_DOMAIN; Intel MPI places ranks by -ppn, not -map-by."""
        if spec.map_by != "slot":
            raise UsageError(
                f"--map-by {spec.map_by} is not Intel MPI's; it places ranks by host and slots (-H a:2,b:2) and "
                "pins them by I_MPI_PIN_* variables: drop --map-by, or pass -x I_MPI_PIN_ORDER=..."
            )
        if any(name.startswith("I_MPI_PIN") for name, _ in spec.env):
            return []  # the user's own pinning variables decide
        if spec.bind_to == "none":
            return ["-genv", "I_MPI_PIN", "0"]
        return ["-genv", "I_MPI_PIN_DOMAIN", spec.bind_to]

    def command(self, spec: MpirunSpec) -> list[str]:
        """Hosts of unequal slots become one app context per host, each with its `-host`."""
        if not spec.contexts and spec.hostfile is None and len({h.slots for h in spec.hosts}) > 1:
            spec = records.replace(spec, contexts=_fill(spec.hosts, spec.np))
        return super().command(spec)

    def app_contexts(self, spec: MpirunSpec) -> list[str]:
        """One context per host: its ranks, its `-host` and its own variables."""
        argv: list[str] = []
        for index, context in enumerate(spec.contexts):
            argv += [*([":"] if index else []), "-n", str(context.np), "-host", context.host.host]
            for name, value in context.env:
                argv += ["-env", name, value]
            argv += spec.program
        return argv

    def exit_code_host(self, line: str) -> re.Match[str] | None:
        """A host line of the block: `[localhost:0] 3,3`."""
        return _CODES.match(line)

    def ending(self, status: int) -> str:
        """Intel MPI reports exit codes as a shell does: 128 + N after signal N."""
        return describe_status(128 - status if 128 < status < 160 else status)


def _fill(hosts: Sequence[HostSlots], np: int | None) -> tuple[AppContext, ...]:
    """One context per host, the ranks filling each host's slots in turn (all slots when np is None).

    Raises:
        UsageError: more ranks than slots (Intel MPI's per-host contexts cannot oversubscribe).
    """
    left = sum(h.slots for h in hosts) if np is None else np
    if left > sum(h.slots for h in hosts):
        raise UsageError(
            f"-np {left} is more than the {sum(h.slots for h in hosts)} slots of hosts "
            f"{hosts_text(hosts)}; Intel MPI gets hosts of unequal slots as one app "
            "context per host, which cannot oversubscribe: lower -np or give every host the same slots"
        )
    contexts = []
    for host in hosts:
        take = min(left, host.slots)
        left -= take
        if take:
            contexts.append(AppContext(host, take))
    return tuple(contexts)
