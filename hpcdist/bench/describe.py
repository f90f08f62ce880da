"""Who ran a benchmark where: every rank's host, pid and device, and the versions of everything involved."""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from .._version import __version__
from ..runtime.bootstrap import Session

__all__ = ["describe", "device_line"]


def describe(session: Session, backends: list[str], dtype: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every rank's host, pid and device (gathered to all), and the versions and settings of this run."""
    import numpy
    import torch
    import torch.distributed as dist

    device = session.device
    if device.startswith("cuda"):
        device += f" {torch.cuda.get_device_name(device)}"
    mine = {"rank": session.rank, "host": socket.gethostname(), "pid": os.getpid(), "device": device}
    devices: list[Any] = [None] * session.world_size
    dist.all_gather_object(devices, mine)
    env: dict[str, Any] = {
        "backend": session.backend,
        "backends": backends,
        "world_size": session.world_size,
        "dtype": dtype,
        "torch_threads": torch.get_num_threads(),
        "launcher": session.env.launcher,
        "hpcdist": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": sys.version.split()[0],
        "mpi4py": None,
        "mpi_library": None,
    }
    try:
        import mpi4py

        env["mpi4py"] = mpi4py.__version__
    except ImportError:
        pass
    if "mpi4py.MPI" in sys.modules:  # never initialise MPI just to name it
        text = sys.modules["mpi4py.MPI"].Get_library_version().strip()  # MPICH's runs over lines, Open MPI's over ','
        env["mpi_library"] = " ".join(text.splitlines()[0].split(",")[0].split()) if text else None
    parts = [f"{__version__} backend {','.join(backends)} nRanks {session.world_size} torch {torch.__version__}"]
    parts += [f"mpi4py {env['mpi4py']}"] if env["mpi4py"] else []
    parts += [env["mpi_library"]] if env["mpi_library"] else []
    env["summary"] = " ".join(parts)
    return devices, env


def device_line(d: dict[str, Any]) -> str:
    """nccl-tests' `#  Rank  0 Group  0 Pid 12345 on host device …` line."""
    return f"#  Rank {d['rank']:2d} Group  0 Pid {d['pid']:6d} on {d['host']:>10} device {d['device']}"
