"""Open MPI's mpirun as `hpcdist mpirun --on-failure shrink` starts it, for tests that run a program directly on 4 ranks
under ULFM: its survivors see a failure, the variable makes them shrink."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["ULFM_MPIRUN"]

ULFM_MPIRUN = [
    *(str(Path(sys.executable).parent / "mpirun"), "--oversubscribe", "--with-ft", "ulfm", "--mca", "btl", "tcp,self"),
    *("--mca", "coll_ftagree_agreement", "1", "-np", "4", "-x", "HPCDIST_ON_FAILURE=shrink"),
    *(["--allow-run-as-root"] if os.geteuid() == 0 else []),  # as hpcdist adds it
]
