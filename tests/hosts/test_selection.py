"""`hpcdist mpirun --include/--exclude` across the two namespace hosts, on Open MPI and MPICH: the ranks run where
the selection says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from netns_hosts import PROGRAMS, Hosts


@pytest.mark.parametrize(("selection", "host"), [(["--exclude", "n2"], "n1"), (["--include", "n2"], "n2")])
def test_every_rank_runs_on_the_selected_host(
    mpi_cluster: Hosts, tmp_path: Path, selection: list[str], host: str
) -> None:
    program = [sys.executable, str(PROGRAMS / "marked.py"), "-m", "hpcdist", "run", "allreduce", "--backend", "gloo"]
    # the hostfile is `n1 slots=2, n2 slots=2`; one host's two slots are left
    result = mpi_cluster.launch(["-np", "2", *selection, "--", *program], tmp_path).wait(180)
    assert result.returncode == 0, result.stderr
    markers = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("rank*"))]
    assert [(m["rank"], m["host"], m["status"]) for m in markers] == [(0, host, 0), (1, host, 0)], result.stderr


@pytest.mark.parametrize(
    ("variable", "text"),
    [
        ("PBS_NODEFILE", "n1\nn1\nn2\nn2\n"),  # PBS: a chunk's host once for each of its mpiprocs
        ("PE_HOSTFILE", "n1 2 all.q@n1 UNDEFINED\nn2 2 all.q@n2 UNDEFINED\n"),  # Grid Engine: host slots queue binding
    ],
)
def test_inside_a_job_without_a_hostfile_the_ranks_run_on_the_jobs_hosts(
    mpi_cluster: Hosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, text: str
) -> None:
    job_file = tmp_path / "job-hosts"
    job_file.write_text(text)
    job = {"PBS_JOBID": "1234.pbs01"} if variable == "PBS_NODEFILE" else {"JOB_ID": "12", "SGE_TASK_ID": "undefined"}
    for name, value in {variable: str(job_file), **job}.items():  # the job's variables, where hpcdist mpirun runs
        monkeypatch.setenv(name, value)
    program = [sys.executable, str(PROGRAMS / "marked.py"), "-m", "hpcdist", "run", "allreduce", "--backend", "gloo"]
    result = mpi_cluster.launch(["mpirun", "-np", "4", "--", *program], tmp_path, doctor=True).wait(180)
    assert result.returncode == 0, result.stderr
    markers = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("rank*"))]
    assert [(m["rank"], m["host"], m["status"]) for m in markers] == [
        (0, "n1", 0),
        (1, "n1", 0),
        (2, "n2", 0),
        (3, "n2", 0),
    ], result.stderr
    said = "PBS job 1234.pbs01" if variable == "PBS_NODEFILE" else "Grid Engine job 12"
    assert result.stderr.count(f"hpcdist mpirun: on the hosts of the {said}: n1:2,n2:2\n") == 1, result.stderr
