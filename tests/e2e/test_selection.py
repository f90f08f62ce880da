"""`hpcdist mpirun --include/--exclude` end to end: real Open MPI ranks on the selected slots only."""

from __future__ import annotations

from launching import launch

# Each rank prints what it got: its rank, the world size, its local rank and the devices of its host.
REPORT = (
    "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], 'local', "
    "os.environ['LOCAL_RANK'], 'devices', os.environ.get('CUDA_VISIBLE_DEVICES', '-'), flush=True)"
)


def _reports(stdout: str) -> set[str]:
    return {line for line in stdout.splitlines() if line.startswith("rank ")}


def test_excluded_slots_leave_two_ranks_on_the_other_two(hpcdist: str) -> None:
    result = launch(
        [hpcdist, "mpirun", "-H", "localhost:4", "--exclude", "localhost:1,3", "--", "python", "-c", REPORT]
    )
    assert result.returncode == 0, result.stderr
    # two ranks, and local rank i uses the i-th selected slot: devices 0 and 2
    assert _reports(result.stdout) == {"rank 0 of 2 local 0 devices 0,2", "rank 1 of 2 local 1 devices 0,2"}


def test_an_included_host_takes_every_rank_with_no_devices_set(hpcdist: str, tmp_path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=3\nfar-away-host slots=8\n")
    result = launch(
        [hpcdist, "mpirun", "--hostfile", str(hostfile), "--include", "localhost", "--", "python", "-c", REPORT]
    )
    assert result.returncode == 0, result.stderr  # far-away-host was left out, or mpirun could not reach it
    assert _reports(result.stdout) == {f"rank {r} of 3 local {r} devices -" for r in range(3)}


def test_excluding_everything_is_a_usage_error_before_any_start(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-H", "localhost:2", "--exclude", "localhost", "--", "python", "-c", REPORT])
    assert result.returncode == 2 and not result.stdout
    assert result.stderr.startswith("hpcdist: error: --exclude 'localhost' leaves no host of -H localhost:2")
