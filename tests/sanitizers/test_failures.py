"""The compiled backend's error paths under each sanitizer, in jobs of their own.

A hang that the watchdog ends, the ranks' ledgers read while a call is blocked; and a ring that loses a rank in its
middle under ULFM (--on-failure shrink), whose survivors complete the ring's requests after the revoke and carry on.
Each job's ranks run the sanitizer's test build (rank_env.py); reports.py judges the logs as the tier's runs are
judged: no report may remain.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rank_env import SANITIZERS, rank_environ
from reports import check, suppressions
from ulfm import ULFM_MPIRUN

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE.parent / "e2e" / "programs"
TIMEOUT = 600  # a whole job under ThreadSanitizer, at 4 ranks on 2 cores


def forwarded(sanitizer: str, logs: Path) -> list[str]:
    """The ranks' variables as mpirun's `-x NAME=VALUE` words: for the ranks only, never mpirun itself."""
    return [word for name, value in rank_environ(sanitizer, logs).items() for word in ("-x", f"{name}={value}")]


def verdict(logs: Path, processes: int, library: Path, sanitizer: str) -> list[str]:
    """The reports left in a job's logs, as the tier judges them (with its suppressions)."""
    listed = HERE / f"{sanitizer}.supp"
    return check(logs, processes, library, suppressions(listed) if listed.exists() else [])[0]


@pytest.mark.parametrize("sanitizer", SANITIZERS)
def test_a_hang_that_the_watchdog_ends(
    sanitizer: str, tmp_path: Path, test_build: Callable[[str | None], Path]
) -> None:
    library = test_build(sanitizer)
    logs = tmp_path / "logs"
    logs.mkdir()
    argv = [sys.executable, "-m", "hpcdist", "mpirun", "-np", "2", *forwarded(sanitizer, logs), "--"]
    environ = {**os.environ, "BACKEND": "mpi", "HANG": "skip", "HPCDIST_TIMEOUT": "20"}
    ran = subprocess.run(
        [*argv, sys.executable, str(PROGRAMS / "hang.py")], env=environ, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert ran.returncode != 0, ran.stderr
    assert "hpcdist: a communication call exceeded the 20 s timeout (HPCDIST_TIMEOUT)" in ran.stderr, ran.stderr
    assert "first divergence: rank 0 waits in all_reduce #2 while rank 1 is not in any" in ran.stderr, ran.stderr
    assert verdict(logs, 2, library, sanitizer) == []


@pytest.mark.parametrize("sanitizer", SANITIZERS)
def test_a_ring_that_loses_a_rank_under_shrink(
    sanitizer: str, tmp_path: Path, test_build: Callable[[str | None], Path]
) -> None:
    library = test_build(sanitizer)
    logs, out = tmp_path / "logs", tmp_path / "out"
    logs.mkdir()
    out.mkdir()
    argv = [*ULFM_MPIRUN, *forwarded(sanitizer, logs), sys.executable, str(PROGRAMS / "shrink_kill.py")]
    ran = subprocess.run([*argv, "mpi", "ring", str(out)], capture_output=True, text=True, timeout=TIMEOUT)
    records = {int(path.stem[4:]): json.loads(path.read_text()) for path in out.glob("rank*.json")}
    assert sorted(records) == [0, 1, 3], ran.stderr[-3000:]
    for record in records.values():  # every step committed once, the last five by the three survivors
        assert [(step, size) for step, size, _ in record["steps"]] == [(s, 4 if s < 3 else 3) for s in range(8)]
        assert "rank 2 was lost" in record["errors"][0][2], record["errors"]
    assert verdict(logs, 4, library, sanitizer) == []  # rank 2's log too: it was written as it started
