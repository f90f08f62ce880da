"""Under --on-failure shrink, a rank that hangs instead of dying ends itself at the timeout; the others recover."""

from __future__ import annotations

from pathlib import Path

from launching import PROGRAMS, Result, launch


def _shrink(hpcdist: str, program: str, out: Path, **env: str) -> tuple[list[str], Result]:
    """`program` on 4 ranks under `hpcdist mpirun --on-failure shrink`: the files the ranks wrote, and the launch."""
    argv = [hpcdist, "mpirun", "--on-failure", "shrink", "-np", "4", "--", "python", str(PROGRAMS / program)]
    result = launch(argv, timeout=240, OUT=str(out), **env)
    return sorted(path.name for path in out.iterdir()), result


def test_a_rank_stuck_in_python_ends_itself_and_the_others_recover(hpcdist: str, tmp_path: Path) -> None:
    _, result = _shrink(hpcdist, "hung_rank.py", tmp_path, HPCDIST_TIMEOUT="5", BACKEND="mpi", SLEEP="3600")
    outcomes = {path.stem: path.read_text().strip() for path in tmp_path.iterdir()}
    # the survivors' call failed as for a rank that died; they recovered and summed over the 3 of them
    assert outcomes == {f"rank{rank}": "raised DistBackendError; sum 3" for rank in (0, 1, 3)}, result.stderr
    assert "hpcdist: rank 2 never arrived and ends itself (--on-failure shrink)" in result.stderr
    said = "hpcdist: rank 2 hung and ends itself (--on-failure shrink): ranks 0-1,3 waited up to "
    assert said in result.stderr and "in all_reduce #2, past the 5 s timeout (HPCDIST_TIMEOUT)" in result.stderr
    assert f"    <module> ({PROGRAMS / 'hung_rank.py'}:" in result.stderr  # its stack, where it sleeps
    assert "failed (hung, ended by the watchdog); 3 ranks carry on (--on-failure shrink)" in result.stderr
    assert " lost (process failed); 3 of 4 ranks carry on (recovered in " in result.stdout, result.stdout  # rank 0
    assert "the job ends instead of shrinking" not in result.stderr  # the failed call is void after the recovery
    assert result.returncode == 0, result.stderr


def test_a_rank_slower_than_the_others_but_within_the_timeout_is_not_ended(hpcdist: str, tmp_path: Path) -> None:
    # 2 s late against a timeout of 20: a margin no loaded machine eats up
    _, result = _shrink(hpcdist, "hung_rank.py", tmp_path, HPCDIST_TIMEOUT="20", BACKEND="mpi", SLEEP="2")
    outcomes = {path.stem: path.read_text().strip() for path in tmp_path.iterdir()}
    assert outcomes == {f"rank{rank}": "sum 4" for rank in range(4)}, result.stderr
    assert "hpcdist: a communication call exceeded" not in result.stderr
    assert result.returncode == 0
