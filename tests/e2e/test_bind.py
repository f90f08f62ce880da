"""`hpcdist mpirun --bind auto` on this machine: each rank reads back its own CPU set and OMP_NUM_THREADS."""

from __future__ import annotations

import json
import os
import sys

import pytest
from launching import BIN, launch

# Every rank writes what it got; a thread started by the program must have the same CPU set as the rank.
REPORT = (
    "import json, os, threading; got = []; t = threading.Thread(target=lambda: got.append(os.sched_getaffinity(0))); "
    "t.start(); t.join(); open(os.path.join(os.environ['MARKER_DIR'], os.environ['RANK']), 'w').write(json.dumps("
    "[sorted(os.sched_getaffinity(0)), sorted(got[0]), os.environ.get('OMP_NUM_THREADS'), "
    "os.environ['LOCAL_WORLD_SIZE']]))"
)
CPUS = sorted(os.sched_getaffinity(0))


def _reports(directory) -> dict[int, list]:
    return {int(path.name): json.loads(path.read_text()) for path in directory.iterdir()}


@pytest.mark.skipif(len(CPUS) < 2, reason="needs at least two CPUs to split")
def test_two_ranks_get_disjoint_cores_and_one_thread_each(hpcdist: str, tmp_path) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", "2", "--bind", "auto", "--", "python", "-c", REPORT], MARKER_DIR=str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    reports = _reports(tmp_path)
    assert sorted(reports) == [0, 1]
    sets = [set(reports[r][0]) for r in (0, 1)]
    assert not sets[0] & sets[1] and sets[0] | sets[1] == set(CPUS)
    for cpus, thread_cpus, omp, local in reports.values():
        assert thread_cpus == cpus and local == "2"
        assert omp == str(len(cpus)) if len(CPUS) == 2 else omp is not None  # one core each on this 2-core machine


def test_one_rank_gets_every_core(hpcdist: str, tmp_path) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", "1", "--bind", "auto", "--", "python", "-c", REPORT], MARKER_DIR=str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert _reports(tmp_path)[0][0] == CPUS


def test_the_users_omp_num_threads_wins(hpcdist: str, tmp_path) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", "2", "--bind", "auto", "-x", "OMP_NUM_THREADS=3", "--", "python", "-c", REPORT],
        MARKER_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert [r[2] for r in _reports(tmp_path).values()] == ["3", "3"]


def test_bind_none_leaves_every_cpu_and_omp_as_torchrun_does(hpcdist: str, tmp_path) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", "-c", REPORT], MARKER_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    omp = os.environ.get("OMP_NUM_THREADS", "1")  # torchrun's 1 for 2 ranks on a node, unless set
    assert [r[:3] for r in _reports(tmp_path).values()] == [[CPUS, CPUS, omp]] * 2


def test_more_ranks_than_cores_is_a_clear_error(hpcdist: str, tmp_path) -> None:
    np = len(CPUS) + 1
    result = launch(
        [hpcdist, "mpirun", "-np", str(np), "--oversubscribe", "--bind", "auto", "--", "python", "-c", REPORT],
        MARKER_DIR=str(tmp_path),
    )
    assert result.returncode == 2
    assert f"--bind auto: {np} ranks need a core each, but this node has {len(CPUS)} cores" in result.stderr
    assert "--bind none" in result.stderr and "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())  # no program started


@pytest.mark.skipif(len(CPUS) < 2, reason="needs at least two CPUs to split")
def test_torchrun_workers_bind_through_the_shim(tmp_path) -> None:
    """What `hpcdist sbatch --launch torchrun --bind auto` runs on each node: torchrun's workers start in the shim."""
    result = launch(
        [
            str(BIN / "torchrun"),
            "--nproc_per_node",
            "2",
            "--no_python",
            sys.executable,
            "-m",
            "hpcdist.worker",
            "--",
            "python",
            "-c",
            REPORT,
        ],
        MARKER_DIR=str(tmp_path),
        HPCDIST_BIND="auto",
    )
    assert result.returncode == 0, result.stderr
    reports = _reports(tmp_path)
    assert sorted(reports) == [0, 1]
    assert not set(reports[0][0]) & set(reports[1][0])
    assert set(reports[0][0]) | set(reports[1][0]) == set(CPUS)
