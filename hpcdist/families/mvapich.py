"""MVAPICH's `mpiexec`: MPICH's Hydra, so its command line, banners and exit codes are Hydra's; its ranks and name."""

from __future__ import annotations

import re

from ..plugins import LazyPattern
from ..ranksource import Source
from . import register
from .mpich import Hydra

__all__ = ["Mvapich"]


@register
class Mvapich(Hydra):
    """MVAPICH's Hydra `mpiexec`; its ranks see MV2_COMM_WORLD_* beside Hydra's PMI_*, and those are read first."""

    name = "mvapich"
    title = "MVAPICH"
    order = 40
    identity = LazyPattern(r"MVAPICH2?\b.*?(\d+\.\d+[\w.]*)", re.S)
    markers = ("mpiname",)  # MVAPICH's `mpiname -a` tells its version and build
    launcher_names = ()
    wheel = None
    ranks = Source(
        "mvapich2",
        "MV2_COMM_WORLD_RANK",
        ("MV2_COMM_WORLD_SIZE",),
        "MV2_COMM_WORLD_LOCAL_RANK",
        ("MV2_COMM_WORLD_LOCAL_SIZE",),
        None,
        (),
        "MVAPICH2's mpirun_rsh/mpiexec",
    )
