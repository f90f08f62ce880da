"""The compiled mpi backend end to end: its timeout ends the job by name; without a build, the Python one runs."""

from __future__ import annotations

import os

import pytest
from launching import BIN, launch

# Rank 0 all-reduces alone on a group with a 2 s timeout; rank 1 never joins (it sleeps longer than the test waits).
LONE = """
import time
from datetime import timedelta
import torch, torch.distributed as dist
import hpcdist
hpcdist.init(backend="mpi")
g = dist.new_group(backend="mpi4py", timeout=timedelta(seconds=2))
if dist.get_rank() == 0:
    dist.all_reduce(torch.ones(1), group=g)
time.sleep(600)
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

# Each rank's CPUs and the group's decision: blocking MPI calls, or yielding ones where some node is crowded.
PLACED = """
import os, torch.distributed as dist
import hpcdist
from hpcdist import mpi_backend
hpcdist.init(backend="mpi")
sub = dist.new_group([0, 1], backend="mpi4py")
mine = mpi_backend.crowded(sub) if dist.get_rank() < 2 else "-"
print(f"rank {dist.get_rank()} cpus={','.join(map(str, sorted(os.sched_getaffinity(0))))} "
      f"crowded={mpi_backend.crowded()},{mine}")
"""
CPUS = sorted(os.sched_getaffinity(0))


def test_a_blocking_collective_past_its_groups_timeout_ends_the_job_naming_rank_call_and_group(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", "-c", LONE], timeout=150, HPCDIST_MPI_NATIVE="1")
    assert result.returncode != 0
    assert "rank 0: all_reduce on group [0,1] did not complete within 2 s (the group's timeout" in result.stderr, (
        result.stderr
    )  # and the job ended though rank 1 sleeps 600 s: the timeout's abort ended it


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


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs for two ranks of a core each")
@pytest.mark.parametrize(
    ("argv", "crowded"),
    [
        (["-n", "2"], False),  # Open MPI's default for 2 ranks: a core each
        (["-n", "2", "--bind-to", "none"], False),  # both ranks may use every CPU: the kernel spreads them
        (["-n", str(len(CPUS) + 1), "--oversubscribe", "--bind-to", "none"], True),  # one rank more than CPUs
    ],
    ids=["default-binding", "bind-to-none", "a-rank-more-than-cpus"],
)
def test_a_group_yields_only_where_its_ranks_have_fewer_cores_than_ranks(argv: list[str], crowded: bool) -> None:
    result = launch([str(BIN / "mpiexec"), *argv, str(BIN / "python"), "-c", PLACED], timeout=150,
                    HPCDIST_MPI_NATIVE="1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    said = dict(line.split(" ", 2)[1:] for line in result.stdout.splitlines() if line.startswith("rank "))
    assert sorted(map(int, said)) == list(range(int(argv[1]))), result.stdout
    for rank, text in said.items():  # the subgroup [0, 1] yields where the world does: its ranks share the node
        assert text.endswith(f"crowded={crowded},{crowded if int(rank) < 2 else '-'}"), result.stdout
    if argv == ["-n", "2"]:  # a core of its own each: what the old rule took for ranks sharing cores
        cpus = [set(said[rank].split()[0].removeprefix("cpus=").split(",")) for rank in ("0", "1")]
        assert cpus[0] and cpus[1] and not cpus[0] & cpus[1], result.stdout
