"""`hpcdist mpirun --on-failure shrink` on real ranks: one rank dies, the survivors shrink and finish, status 0."""

from __future__ import annotations

from pathlib import Path

import pytest
from launching import PROGRAMS, launch

SURVIVORS = str(PROGRAMS / "survivors.py")


HOWS = [("kill", "lost (killed or exited abruptly)"), ("raise", "failed (exit code 1)")]


@pytest.mark.parametrize(("how", "said"), HOWS)
def test_a_rank_that_dies_is_named_once_and_the_three_survivors_shrink_and_finish(
    hpcdist: str, tmp_path: Path, how: str, said: str
) -> None:
    argv = [hpcdist, "mpirun", "--on-failure", "shrink", "-np", "4", "--oversubscribe", "--", "python", SURVIVORS]
    result = launch([*argv, str(tmp_path), "2", how], timeout=180)
    assert result.returncode == 0, result.stderr
    markers = {path.name: path.read_text() for path in tmp_path.glob("rank-*")}
    assert markers == dict.fromkeys(("rank-0.txt", "rank-1.txt", "rank-3.txt"), "3 4\n")  # 3 ranks, 0 + 1 + 3
    named = [line for line in result.stderr.splitlines() if line.startswith("hpcdist:") and "rank 2 " in line]
    assert len(named) == 1, result.stderr
    assert named[0].startswith("hpcdist: rank 2 on ") and named[0].endswith(
        f"{said}; 3 ranks carry on (--on-failure shrink)"
    ), named[0]
    if how == "raise":  # the rank's own traceback, and no MPI_Abort that would have ended the others
        assert "[rank 2] RuntimeError: rank 2 fails on purpose" in result.stderr
        assert "MPI_ABORT" not in result.stderr.upper()


def test_under_mpich_shrink_is_refused_before_anything_starts(mpich_python: Path, tmp_path: Path) -> None:
    argv = [str(mpich_python), "-m", "hpcdist", "mpirun", "--on-failure", "shrink", "-np", "2", "--"]
    result = launch([*argv, "python", SURVIVORS, str(tmp_path), "1", "kill"], timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        "hpcdist: error: --on-failure shrink needs Open MPI's fault tolerance (ULFM); the launcher "
    ), result.stderr
    assert "is MPICH's (as the files beside it say)" in result.stderr and "run Open MPI's mpirun" in result.stderr
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []  # no rank started


def test_ddp_on_gloo_that_loses_no_rank_ends_cleanly_under_shrink(hpcdist: str) -> None:
    """No failure: the survivors' loop trains on gloo and every thread hpcdist started over MPI (the failure detector,
    the watchdog) stops before MPI_Finalize, so Open MPI reports no call after it."""
    training = [hpcdist, "run", "ddp", "--backend", "gloo", "--epochs", "1", "--samples", "256"]
    result = launch([hpcdist, "mpirun", "--on-failure", "shrink", "-np", "2", "--", *training], timeout=180)
    assert result.returncode == 0, result.stderr
    assert "identical on all 2 ranks" in result.stdout, result.stdout
    assert "MPI_FINALIZE" not in result.stdout + result.stderr, result.stdout + result.stderr


def test_a_rank_lost_before_the_process_group_is_made_ends_the_job_at_once(hpcdist: str) -> None:
    """With no group to shrink yet, the others leave at once (MPI's barrier before torch's init fails), where gloo's
    init waited for the lost rank until the start-up timeout (measured: past 180 s)."""
    program = str(PROGRAMS / "lost_before_init.py")
    argv = [hpcdist, "mpirun", "--on-failure", "shrink", "-np", "4", "--oversubscribe", "--", "python", program]
    result = launch(argv, timeout=120, HPCDIST_TIMEOUT="300")
    assert result.returncode == 1 and result.stdout == "", result.stdout + result.stderr
    assert result.seconds < 60, f"the others waited for the lost rank: {result.stderr}"
    lines = result.stderr.splitlines()
    assert lines[0].startswith("hpcdist: rank 3 on ") and lines[0].endswith(
        "lost (killed or exited abruptly); 3 ranks carry on (--on-failure shrink)"
    ), result.stderr
    assert all("left after a peer's loss (exit code 1)" in line for line in lines[1:-1]), result.stderr
    assert (
        lines[-1].startswith("hpcdist: first failure: rank 3 on ")
        and " killed or exited abruptly; then rank" in (lines[-1])
    ), result.stderr
