"""Which torch backend and which store a job uses, and the refusals of those that cannot work on this host."""

from __future__ import annotations

import os

from ..errors import UsageError
from ..hosts import this_host
from ..settingtable import STORE
from ..values import BACKENDS, STORES

__all__ = ["check_nccl", "choose_backend", "choose_store"]


def choose_backend(
    requested: str,
    *,
    cuda_devices: int,
    local_world_size: int,
    native_mpi: bool,
    host: str,
    mpi_launch: bool = False,
    on_cpu: str = "use --backend gloo on CPU",
) -> str:
    """The torch backend to use, or a clear error when the request cannot work on this host.

    `auto` is nccl when every local rank has a GPU; on CPU under an MPI launch it is the mpi backend,
    which `hpcdist bench` measures faster than gloo here (see README); gloo otherwise. `on_cpu` is the fix that
    nccl without GPUs suggests.
    """
    _check_backend_name(requested)
    if requested == "auto":
        if 0 < local_world_size <= cuda_devices:
            return "nccl"
        return ("mpi" if native_mpi else "mpi4py") if mpi_launch else "gloo"
    if requested == "nccl":
        if cuda_devices == 0:
            raise UsageError(
                f"backend nccl needs CUDA GPUs, but torch sees none on host {host} "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}); "
                f"{on_cpu}"
            )
        if cuda_devices < local_world_size:
            raise UsageError(
                f"{local_world_size} ranks run on host {host} but torch sees only {cuda_devices} GPU(s): ranks would "
                "share a GPU and NCCL fails with 'Duplicate GPU detected'; start at most "
                f"{cuda_devices} ranks per host (slots, -np, --ntasks-per-node) or expose more GPUs"
            )
    if requested == "mpi" and not native_mpi:
        return "mpi4py"  # PyPI wheels have no native MPI: hpcdist's process group on mpi4py
    return requested


def check_nccl(local_world_size: int) -> None:
    """Refuse a program's own init_process_group("nccl") that cannot work here: no GPU, or fewer than the local ranks.

    Raises:
        UsageError: saying what torch sees on this host and what to change.
    """
    import torch

    choose_backend(
        "nccl",
        cuda_devices=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        local_world_size=local_world_size,
        native_mpi=False,
        host=this_host(),
        on_cpu='call init_process_group("gloo") on CPU, or run on hosts with GPUs',
    )


def _check_backend_name(requested: str) -> None:
    """Reject a backend name hpcdist does not know."""
    if requested not in BACKENDS:
        raise UsageError(f"unknown backend {requested!r}; choose one of {', '.join(BACKENDS)}")


def choose_store(requested: str, backend: str, *, mpi_launch: bool) -> str:
    """Where torch's store lives: "mpi" or "tcp"; "auto" is "mpi" for the mpi backend under an MPI launch.

    gloo and nccl take the store over MPI when asked: it carries their start-up (gloo's addresses, nccl's
    unique id) over MPI, but gloo and nccl still open their own sockets (docs/scale.md).

    Raises:
        UsageError: an unknown store, or "mpi" where no MPI launch connects the ranks.
    """
    if requested not in STORES:
        raise UsageError(f"unknown store {requested!r}; choose one of {', '.join(STORES)} (store= or {STORE.name})")
    if requested == "auto":
        return "mpi" if mpi_launch and backend in ("mpi", "mpi4py") else "tcp"
    if requested == "mpi" and not mpi_launch:
        raise UsageError(
            "store 'mpi' needs the ranks started by mpirun/mpiexec (or srun with PMIx), but this launch is not MPI's; "
            "use store='tcp', or launch with hpcdist mpirun"
        )
    return requested
