"""`hpcdist.submit(scheduler="gridengine")` against the real Grid Engine cell: a function's values by rank from both
hosts of a 2-slot parallel job, a raising rank told by rank and host, a cancelled job. hpcdist.submit runs in this
process and finds qsub, qstat and qdel on PATH (the cell's own, run on n1 as a login node's would be); Grid Engine
forgets a job as it ends, so each handle reads the end from the job's files.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

import hpcdist
from hpcdist.jobs.submit import Job

pytestmark = pytest.mark.timeout(600)  # the first test also waits for apt-get install on a fresh machine

ROOT = Path(__file__).resolve().parents[2]  # this checkout's hpcdist, for the job's ranks
ENV = {"PYTHONPATH": str(ROOT)}  # qsub passes no variable of ours to the job (no -V)


def where(x: int) -> list[object]:
    """This rank, its host, the sum of a one over both ranks (gloo), and `x`."""
    import torch
    import torch.distributed as dist

    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"rank {dist.get_rank()} says hello", flush=True)
    return [dist.get_rank(), socket.gethostname(), total.item(), x]


def fails_on_1(rank: int) -> int:
    """Rank 1 raises; rank 0 waits in a collective for it, so the job must end it."""
    import torch
    import torch.distributed as dist

    if rank == 1:
        raise ValueError(f"bad shard on {socket.gethostname()}")
    dist.all_reduce(torch.ones(1))
    return rank


def sleeps() -> None:
    """Runs until cancelled."""
    time.sleep(600)


def hosts(job: Job) -> list[str]:
    """The job's hosts in rank order, a slot each, as hpcdist mpirun said it read them from PE_HOSTFILE (Grid Engine
    picks the master host, rank 0's, by load: n1 or n2)."""
    first = job.logs(None).splitlines()[0]
    said = f"hpcdist mpirun: on the hosts of the Grid Engine job {job.job_id}: "
    assert first.startswith(said), job.logs(None)
    found = [slot.removesuffix(":1") for slot in first.removeprefix(said).split(",")]
    assert sorted(found) == ["n1", "n2"], first  # $round_robin: one slot on each host
    return found


@pytest.fixture
def on_path(cell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Grid Engine's commands on this process's PATH; the folder for the jobs' directories."""
    monkeypatch.setenv("PATH", cell.clients(tmp_path / "bin"))
    return tmp_path / "jobs"


def test_a_function_on_two_slots_returns_each_ranks_value_from_both_hosts(cell, on_path: Path) -> None:
    job = hpcdist.submit(where, 7, scheduler="gridengine", pe=("mpi", "2"), backend="gloo", env=ENV, folder=on_path)
    assert (job.ranks, job.scheduler.name) == (2, "gridengine")
    assert job.state() in ("PENDING", "RUNNING")
    assert job.wait(timeout=120) == "COMPLETED", job.logs(None)
    first, second = hosts(job)
    assert job.result(all_ranks=True) == [[0, first, 2.0, 7], [1, second, 2.0, 7]], job.logs(None)
    assert job.result() == [0, first, 2.0, 7] and job.done() and job.exception() is None
    assert cell.run("qstat", "-j", job.job_id).returncode == 1  # Grid Engine has forgotten it: read from files
    assert job.logs(1) == "rank 1 says hello\n"
    again = Job.attach(job.directory)  # anew, as another session would
    assert (again.job_id, again.scheduler.name, again.state()) == (job.job_id, "gridengine", "COMPLETED")
    assert again.result(all_ranks=True) == [[0, first, 2.0, 7], [1, second, 2.0, 7]]
    runs = [(record["hostname"], record["exit_status"]) for record in cell.accounting(job.job_id)]
    assert sorted(runs) == [("n1", "0"), ("n2", "0")], runs  # the job script on n1, the daemon's task on n2


def test_a_raising_rank_is_raised_in_the_caller_by_rank_and_host(on_path: Path) -> None:
    job = hpcdist.submit(
        fails_on_1, hpcdist.RANK, scheduler="gridengine", pe=("mpi", "2"), backend="gloo", env=ENV, folder=on_path
    )
    began = time.monotonic()
    assert job.wait(timeout=120) == "FAILED", job.logs(None)
    assert time.monotonic() - began < 60, f"rank 0 was left waiting for rank 1: {job.logs(None)}"
    with pytest.raises(hpcdist.RankFailed) as raised:
        job.result()
    failed, host = raised.value, hosts(job)[1]
    assert (failed.rank, failed.host, failed.kind, failed.message) == (1, host, "ValueError", f"bad shard on {host}")
    assert repr(failed.__cause__) == f"ValueError('bad shard on {host}')"
    assert type(job.exception()) is hpcdist.RankFailed
    assert f"rank 1 on {host} raised ValueError" in job.logs(1), job.logs(1)


def test_a_cancelled_job_leaves_the_queue_and_ends_its_handle_with_jobfailed(cell, on_path: Path) -> None:
    job = hpcdist.submit(sleeps, scheduler="gridengine", pe=("mpi", "2"), backend="gloo", env=ENV, folder=on_path)
    deadline = time.monotonic() + 120
    while job.state() != "RUNNING":
        assert time.monotonic() < deadline, f"job {job.job_id} did not start within 120 s: {job.logs(None)}"
        time.sleep(0.2)
    job.cancel()
    assert job.wait(timeout=120) == "CANCELLED"
    assert cell.run("qstat", "-j", job.job_id).returncode == 1, "Grid Engine still knows the cancelled job"
    error = job.exception()
    assert isinstance(error, hpcdist.JobFailed) and (error.job_id, error.state) == (job.job_id, "CANCELLED")
    assert str(error).startswith(f"job {job.job_id} ended CANCELLED; ranks 0-1 of 2 returned no value"), error
    with pytest.raises(hpcdist.JobFailed, match=f"job {job.job_id} ended CANCELLED"):
        job.result()
