"""SIGTERM and SIGHUP to `hpcdist mpirun`, as a scheduler sends them on cancel or preemption: every rank gets SIGTERM
and time to save its work (settings.kill_wait), one line, status 128 + the signal; on Open MPI and on MPICH."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from launching import PROGRAMS, ROOT, crowded, wait_for

pytestmark = pytest.mark.e2e

PROGRAM = str(PROGRAMS / "save_on_sigterm.py")


def stopped(python: Path | str, np: int, signum: int, markers: Path, **env: str) -> tuple[int, str]:
    """Run `hpcdist mpirun -np NP` of the program with `python` (its venv decides the MPI), send `signum` to it once
    every rank is ready, and return its status and its stderr."""
    argv = [str(python), "-m", "hpcdist", "mpirun", "-np", str(np), "--", "python", PROGRAM]
    full_env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    full_env.update(MARKERS=str(markers), **env)
    with subprocess.Popen(argv, cwd=ROOT, env=full_env, stderr=subprocess.PIPE, text=True) as job:
        try:
            wait_for(f"the {np} ranks to start", lambda: len(list(markers.glob("ready-*"))) >= np, job=job)
            job.send_signal(signum)
            _, err = job.communicate(timeout=90)
        finally:
            job.kill()
    return job.returncode, err


def saved(markers: Path) -> dict[int, str]:
    """Each rank that saved its work, and the signal it saved it on."""
    return {int(path.name.split("-")[1]): path.read_text() for path in markers.glob("saved-*")}


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_sigterm_reaches_every_rank_which_saves_its_work_then_one_line_and_status_143(
    mpi: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    python = sys.executable if mpi == "openmpi" else request.getfixturevalue("mpich_python")
    status, err = stopped(python, 4, signal.SIGTERM, tmp_path)
    assert (status, err) == (143, f"{crowded(4)}hpcdist: got SIGTERM and passed it on; ended all 4 ranks of the job\n")
    assert saved(tmp_path) == dict.fromkeys(range(4), "SIGTERM")


def test_sighup_is_passed_on_as_sigterm_and_ends_with_status_129(tmp_path: Path) -> None:
    status, err = stopped(sys.executable, 2, signal.SIGHUP, tmp_path)
    assert (status, err) == (129, "hpcdist: got SIGHUP and passed SIGTERM on; ended all 2 ranks of the job\n")
    assert saved(tmp_path) == dict.fromkeys(range(2), "SIGTERM")


def test_ranks_that_do_not_end_within_the_kill_wait_are_killed_and_that_is_said(tmp_path: Path) -> None:
    status, err = stopped(sys.executable, 2, signal.SIGTERM, tmp_path, IGNORE="1", HPCDIST_KILL_WAIT="1")
    assert status == 143
    assert err == (
        "hpcdist: the ranks did not end within 1 s of SIGTERM (HPCDIST_KILL_WAIT); killing them\n"
        "hpcdist: got SIGTERM and passed it on; ended all 2 ranks of the job\n"
    )
    assert saved(tmp_path) == {}
