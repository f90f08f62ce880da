"""The compiled mpi backend end to end: its timeout ends the job by name; without a build, the Python one runs."""

from __future__ import annotations

from launching import launch

# Rank 0 all-reduces alone on a group with a 2 s timeout; rank 1 never joins.
LONE = """
import time
from datetime import timedelta
import torch, torch.distributed as dist
import hpcdist
hpcdist.init(backend="mpi")
g = dist.new_group(backend="mpi4py", timeout=timedelta(seconds=2))
if dist.get_rank() == 0:
    dist.all_reduce(torch.ones(1), group=g)
time.sleep(90)
"""

SUM = """
import torch, torch.distributed as dist
import hpcdist
from hpcdist import mpi_backend
hpcdist.init(backend="mpi")
t = torch.full((3,), float(dist.get_rank() + 1))
dist.all_reduce(t)
print(f"rank {dist.get_rank()} native={mpi_backend.native_active()} sum={t.tolist()}")
"""


def test_a_blocking_collective_past_its_groups_timeout_ends_the_job_naming_rank_call_and_group(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", "-c", LONE], timeout=150, HPCDIST_MPI_NATIVE="1")
    assert result.returncode != 0
    assert "rank 0: all_reduce on group [0,1] did not complete within 2 s (the group's timeout" in result.stderr, (
        result.stderr
    )
    assert result.seconds < 60, result.seconds  # the 2 s timeout, start-up and the abort; never rank 1's 90 s sleep


def test_without_a_build_the_python_backend_runs_and_says_why(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", "-c", SUM], timeout=150,
                    HPCDIST_MPI_NATIVE="auto", HPCDIST_CACHE_DIR="/proc/hpcdist-cannot-write-here")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("the native mpi backend is unavailable, using the Python one: no writable cache") == 1
    for rank in (0, 1):
        assert f"rank {rank} native=False sum=[3.0, 3.0, 3.0]" in result.stdout, result.stdout


def test_the_native_backend_runs_where_it_builds_with_the_same_sums(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", "-c", SUM], timeout=150, HPCDIST_MPI_NATIVE="1")
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert f"rank {rank} native=True sum=[3.0, 3.0, 3.0]" in result.stdout, result.stdout


def test_asking_for_the_native_backend_where_it_cannot_be_had_is_a_clear_error(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", "-c", SUM], timeout=150,
                    HPCDIST_MPI_NATIVE="1", HPCDIST_CACHE_DIR="/proc/hpcdist-cannot-write-here")  # fmt: skip
    assert result.returncode != 0
    assert "no writable cache directory" in result.stderr and "set HPCDIST_CACHE_DIR" in result.stderr, result.stderr
