"""Under --on-failure shrink, a rank that hangs instead of dying ends itself at the timeout; the others' call raises."""

from __future__ import annotations

from pathlib import Path

from launching import BIN, PROGRAMS, launch

# What --on-failure shrink starts Open MPI with: ULFM, and TCP between the ranks (with shared memory they hang).
ULFM = [str(BIN / "mpirun"), "--oversubscribe", "--bind-to", "none", "--with-ft", "ulfm", "--mca", "btl", "tcp,self"]


def _run(out: Path, sleep: str) -> tuple[dict[str, str], str]:
    """hung_rank.py on 4 ranks, rank 2 sleeping `sleep` seconds before the second all_reduce: each rank's outcome."""
    exports = {
        "HPCDIST_ON_FAILURE": "shrink",
        "HPCDIST_TIMEOUT": "5",
        "OUT": str(out),
        "BACKEND": "mpi",
        "SLEEP": sleep,
    }
    argv = [
        *ULFM,
        "-np",
        "4",
        *(arg for name in exports for arg in ("-x", name)),
        str(BIN / "python"),
        str(PROGRAMS / "hung_rank.py"),
    ]
    result = launch(argv, timeout=240, **exports)
    return {path.stem: path.read_text().strip() for path in out.glob("rank*.txt")}, result.stderr


def test_a_rank_stuck_in_python_ends_itself_and_the_others_call_raises(tmp_path: Path) -> None:
    outcomes, stderr = _run(tmp_path, "3600")
    assert outcomes == {"rank0": "raised DistBackendError", "rank1": "raised DistBackendError",
                        "rank3": "raised DistBackendError"}, stderr  # fmt: skip
    assert "hpcdist: rank 2 never arrived and ends itself (--on-failure shrink)" in stderr
    said = "hpcdist: rank 2 hung and ends itself (--on-failure shrink): ranks 0-1,3 waited up to "
    assert said in stderr and "in all_reduce #2, past the 5 s timeout (HPCDIST_TIMEOUT)" in stderr, stderr
    assert "    <module> (" + str(PROGRAMS / "hung_rank.py") + ":" in stderr  # its stack, where it sleeps
    assert "MPI_ERR_PROC_FAILED" in stderr  # the survivors' call failed as for a rank that died


def test_a_rank_slower_than_the_others_but_within_the_timeout_is_not_ended(tmp_path: Path) -> None:
    outcomes, stderr = _run(tmp_path, "2")
    assert outcomes == {f"rank{rank}": "sum 4" for rank in range(4)}, stderr
    assert "hpcdist: a communication call exceeded" not in stderr


def test_the_watchdog_carries_on_past_a_failed_rank_and_the_survivors_finish(tmp_path: Path) -> None:
    # under the shim each rank's watchdog answers from the start, and a finished rank waits there for the others
    shim = [str(BIN / "python"), "-m", "hpcdist.shim", "--", "python", str(PROGRAMS / "exits_one.py")]
    exports = {"HPCDIST_ON_FAILURE": "shrink", "OUT": str(tmp_path)}
    argv = [*ULFM, "-np", "4", *(arg for name in exports for arg in ("-x", name)), *shim]
    result = launch(argv, timeout=120, **exports)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["rank0.txt", "rank1.txt", "rank3.txt"], result.stderr
    assert "Traceback" not in result.stderr, result.stderr  # the watchdog thread acknowledged the failure
    assert result.seconds < 60  # not a wait in MPI_Finalize
