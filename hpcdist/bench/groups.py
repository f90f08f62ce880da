"""The process groups `hpcdist bench` compares: the default group's backend, then one new group per further backend.

`--backend mpi,gloo` initialises the default group on the first backend (hpcdist.init) and makes a group over
every rank for each further one with `dist.new_group(ranks, backend=…)`; every default group hpcdist makes has a
shared store, so groups of any backend can be built beside it.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

from ..errors import UsageError
from ..records import record
from ..runtime.backends import choose_backend
from ..runtime.bootstrap import Session

__all__ = ["BackendGroup", "backend_groups", "fake_group"]


@record(frozen=True)
class BackendGroup:
    """One compared backend: torch's name for it, its process group (None: the default group), its device."""

    name: str
    group: Any
    device: str


def backend_groups(backends: tuple[str, ...], session: Session) -> list[BackendGroup]:
    """The default group (session's backend), then a new group over all ranks for each further backend."""
    groups = [BackendGroup(session.backend, None, session.device)]
    for requested in backends[1:]:
        name = _resolve(requested, session)
        if name in (g.name for g in groups):
            raise UsageError(
                f"--backend {','.join(backends)}: {requested} means {name} on this host, which the "
                "list already has; give each backend once"
            )
        device = f"cuda:{session.env.local_rank}" if name == "nccl" else "cpu"
        groups.append(BackendGroup(name, _new_group(name, session, device), device))
    return groups


def _resolve(requested: str, session: Session) -> str:
    """torch's backend name for a requested one, with hpcdist.init's checks (mpi -> mpi4py on PyPI wheels)."""
    import torch
    import torch.distributed as dist

    return choose_backend(
        requested,
        cuda_devices=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        local_world_size=session.env.local_world_size,
        native_mpi=dist.is_mpi_available(),
        host=socket.gethostname(),
    )


def _new_group(name: str, session: Session, device: str) -> Any:
    """A group over every rank on backend `name`; store-based backends get a shared store if the default has none."""
    import torch
    import torch.distributed as dist

    ranks, timeout = list(range(session.world_size)), timedelta(seconds=session.timeout)
    if name == "mpi4py":
        from .. import mpi_backend

        mpi_backend.register()
    if name == "nccl":
        torch.cuda.set_device(device)
    return dist.new_group(ranks, backend=name, timeout=timeout)


def fake_group(session: Session) -> BackendGroup:
    """A group over every rank on torch's FakeProcessGroup (backend "fake": every call returns at once, moving
    nothing), registered by importing torch's fake_pg module."""
    import torch.distributed as dist
    import torch.testing._internal.distributed.fake_pg  # noqa: F401 - registers the "fake" backend

    ranks, timeout = list(range(session.world_size)), timedelta(seconds=session.timeout)
    return BackendGroup("fake", dist.new_group(ranks, backend="fake", timeout=timeout), "cpu")
