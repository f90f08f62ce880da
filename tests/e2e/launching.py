"""End-to-end launches: real mpirun, argv lists, a timeout on every run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
BIN = Path(sys.executable).parent
# Open MPI's mpirun itself as `hpcdist mpirun --on-failure shrink` starts it, for tests that run a program directly
# on 4 ranks under ULFM (its survivors see a failure, the variable makes them shrink)
ULFM_MPIRUN = [
    *(str(BIN / "mpirun"), "--oversubscribe", "--with-ft", "ulfm", "--mca", "btl", "tcp,self"),
    *("--mca", "coll_ftagree_agreement", "1", "-np", "4", "-x", "HPCDIST_ON_FAILURE=shrink"),
]


@dataclass(frozen=True)
class Result:
    """A finished launch: status, output and how long it took."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


def launch(argv: list[str], timeout: float = 180, **env: str) -> Result:
    """Run argv from the repository root with extra environment; a hang fails the test after `timeout`."""
    full_env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **env}
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
