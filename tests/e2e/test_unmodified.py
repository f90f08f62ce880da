"""Unmodified torchrun-style scripts under `hpcdist mpirun` get hpcdist.init's timeouts, hang reports and abort."""

from __future__ import annotations

import socket

import pytest
from launching import PROGRAMS, launch

PLAIN = str(PROGRAMS / "plain.py")
ON = ["on-gloo", "on-mpi"]  # not the bare id "mpi": pytest-mpi would take it for its marker and skip the test
BACKENDS = [("gloo", "gloo"), ("mpi", "mpi4py")]  # what the script asks for, what it gets on a PyPI wheel


def _plain(hpcdist: str, **env: str):
    return launch([hpcdist, "mpirun", "-np", "2", "--", "python", PLAIN], timeout=180, **env)


@pytest.mark.parametrize(("backend", "runs_on"), BACKENDS)
def test_an_unmodified_script_that_works_still_works(hpcdist: str, backend: str, runs_on: str) -> None:
    result = _plain(hpcdist, BACKEND=backend, HPCDIST_TIMEOUT="100")
    assert result.returncode == 0, result.stderr
    # (1 + 2) summed over 2 ranks, twice; torch's own timeout is hpcdist's backstop: 100 s + 15 s
    assert {f"rank {r}: backend {runs_on} timeout 115 result [6.0, 6.0, 6.0, 6.0]" for r in (0, 1)} <= set(
        result.stdout.splitlines()
    ), result.stdout


def test_a_timeout_the_script_passes_is_kept(hpcdist: str) -> None:
    result = _plain(hpcdist, BACKEND="gloo", USER_TIMEOUT="42")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("backend gloo timeout 42 result [6.0, 6.0, 6.0, 6.0]") == 2, result.stdout


@pytest.mark.parametrize("backend", ["gloo", "mpi"], ids=ON)
def test_a_rank_stuck_before_its_all_reduce_is_reported_at_the_timeout(hpcdist: str, backend: str) -> None:
    result = _plain(hpcdist, BACKEND=backend, HANG="sleep", HPCDIST_TIMEOUT="10")
    assert result.returncode != 0
    assert "hpcdist: a communication call exceeded the 10 s timeout (HPCDIST_TIMEOUT)" in result.stderr
    assert "  rank 0: waiting in all_reduce #1 shape=[4] dtype=float32 on group world for 1" in result.stderr
    assert (
        "first divergence: rank 0 waits in all_reduce #1 while rank 1 is not in any communication call "
        "(its stack below shows where it is)" in result.stderr
    ), result.stderr  # and the job ended, though rank 1 sleeps 600 s: the abort ended it


@pytest.mark.parametrize("backend", ["gloo", "mpi"], ids=ON)
def test_a_rank_whose_program_ended_early_is_named(hpcdist: str, backend: str) -> None:
    result = _plain(hpcdist, BACKEND=backend, HANG="exit", HPCDIST_TIMEOUT="10")
    assert result.returncode != 0
    assert "  rank 1: finished its program " in result.stderr, result.stderr
    assert "first divergence: rank 0 waits in all_reduce #2 while rank 1 finished its program" in result.stderr


@pytest.mark.parametrize("backend", ["gloo", "mpi"], ids=ON)
def test_a_rank_that_never_initialises_is_named(hpcdist: str, backend: str) -> None:
    result = _plain(hpcdist, BACKEND=backend, HANG="noinit", HPCDIST_TIMEOUT="10", HPCDIST_STARTUP_TIMEOUT="20")
    assert result.returncode != 0
    # ranks reach init_process_group after their own start-up, so it gets the longer start-up timeout
    headline = "hpcdist: init_process_group waited longer than its 20 s start-up timeout (HPCDIST_STARTUP_TIMEOUT)"
    assert headline in result.stderr, result.stderr
    assert "  rank 1: running its program, which has not called init_process_group" in result.stderr
    assert "first divergence: rank 0 waits in init_process_group while rank 1 never initialised" in result.stderr, (
        result.stderr
    )  # and the job ended, though rank 1 sleeps 600 s


def test_a_master_addr_that_does_not_resolve_is_reported_at_once(hpcdist: str) -> None:
    result = _plain(hpcdist, MASTER_ADDR="no-such-host.invalid")
    assert result.returncode == 2, result.stderr
    assert f"MASTER_ADDR=no-such-host.invalid does not resolve on host {socket.gethostname()} " in result.stderr, (
        result.stderr
    )
    assert "correct the name (a typo?)" in result.stderr  # hpcdist's own check, before torch's store would try
