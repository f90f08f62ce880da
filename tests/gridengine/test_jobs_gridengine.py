"""hpcdist under a real Grid Engine (Debian's Son of Grid Engine 8.1.9): a parallel job over two hosts whose
`hpcdist mpirun` reads PE_HOSTFILE, a failing rank told once, a job rescheduled by exit status 99, `qsub -w v`.

The job scripts are hand-written (job_script) with the options `hpcdist gridengine` models, so that each test turns to
the generated script by changing the line that makes it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)  # the first test also waits for apt-get install on a fresh machine

ROOT = Path(__file__).resolve().parents[2]  # this checkout's hpcdist, also when the venv's is another
# each rank adds rank + 1 over all ranks (1 + 2 = 3 on two) and says where it ran
ALLREDUCE = """\
import socket
from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
print(f"rank {comm.Get_rank()} of {comm.Get_size()} on {socket.gethostname()}: allreduce sum {total}", flush=True)
"""
# rank 1 raises once both ranks are in the job; rank 0 waits in the next barrier for a peer that is gone
RAISES = """\
from mpi4py import MPI

comm = MPI.COMM_WORLD
comm.Barrier()
if comm.Get_rank() == 1:
    raise ValueError("rank 1 gives up")
comm.Barrier()
"""
# the first run leaves a file and exits 99 (Grid Engine reschedules the job); the second run exits 0
TWICE = """\
echo "run with RESTARTED=$RESTARTED"
if [ ! -e first-run ]; then
    touch first-run
    exit 99
fi
"""


def job_script(*, name: str, slots: int | None, command: str, minutes: int = 5) -> str:
    """A hand-written Grid Engine job script: `qsub -pe mpi SLOTS` (none: a serial job), -l h_rt, -N, output in
    job.out and job.err of the directory it is submitted from, rerun allowed (-r y), then `command`."""
    lines = [
        "#!/bin/bash",
        f"#$ -N {name}",
        *([f"#$ -pe mpi {slots}"] if slots else []),
        f"#$ -l h_rt=0:{minutes:02d}:00",
        "#$ -cwd",
        "#$ -o job.out",
        "#$ -e job.err",
        "#$ -r y",
        "set -euo pipefail",
        f"export PYTHONPATH={shlex.quote(str(ROOT))}",
        command,
    ]
    return "\n".join(lines) + "\n"


def mpirun(venv: Path, program: Path) -> str:
    """`hpcdist mpirun -- python -m mpi4py PROGRAM`: no -np, the slots come from the job's PE_HOSTFILE."""
    return shlex.join([str(venv / "bin" / "hpcdist"), "mpirun", "--", str(venv / "bin" / "python"), "-m", "mpi4py",
                       str(program)])  # fmt: skip


def test_a_two_slot_job_runs_one_rank_on_each_host_of_its_pe_hostfile(cell, submit, venv: Path, tmp_path: Path) -> None:
    """$round_robin gives the job a slot on n1 and one on n2: hpcdist mpirun reads them from PE_HOSTFILE, and Open
    MPI starts its daemon on n2 through `qrsh -inherit`, so Grid Engine accounts for a task there."""
    (tmp_path / "allreduce.py").write_text(ALLREDUCE)
    result = submit(job_script(name="allreduce", slots=2, command=mpirun(venv, tmp_path / "allreduce.py")))
    assert result.ok, result.describe()
    assert sorted(result.stdout.splitlines()) == [
        "rank 0 of 2 on n1: allreduce sum 3",
        "rank 1 of 2 on n2: allreduce sum 3",
    ], result.describe()
    assert result.stderr.startswith(f"hpcdist mpirun: on the hosts of the Grid Engine job {result.job_id}: n1:1,n2:1\n")
    assert [run["hostname"] for run in result.runs] == ["n1"], result.describe()
    assert [(task["hostname"], task["exit_status"]) for task in result.tasks] == [("n2", "0")], result.tasks
    shown = [(record["hostname"], record["exit_status"]) for record in cell.qacct(result.job_id)]
    assert shown == [("n2", "0"), ("n1", "0")], shown  # the task ended first, then the job script


def test_a_failing_rank_ends_the_job_at_once_told_once_by_rank_and_host(submit, venv: Path, tmp_path: Path) -> None:
    (tmp_path / "raises.py").write_text(RAISES)
    result = submit(job_script(name="raises", slots=2, command=mpirun(venv, tmp_path / "raises.py")), 120)
    assert result.exit_status == 1 and result.runs[-1]["failed"] == "0", result.describe()
    assert result.seconds < 60, f"rank 0 was left waiting for rank 1: {result.describe()}"
    err = result.stderr
    assert err.count("Traceback (most recent call last)") == 1 and "[rank 1] Traceback" in err, result.describe()
    assert err.count("[rank 1] ValueError: rank 1 gives up\n") == 1, result.describe()
    assert err.endswith("hpcdist: first failure: rank 1 on n2 failed with exit code 1\n"), result.describe()


def test_a_job_that_exits_99_is_rescheduled_and_runs_again_with_restarted_set(submit, tmp_path: Path) -> None:
    """Exit status 99 has Grid Engine reschedule the job (sge_conf(5)): it accounts for a first run that failed with
    25 (rescheduling, accounting(5)), then a second run, with RESTARTED=1, that exited 0."""
    result = submit(job_script(name="twice", slots=None, command=TWICE), 120)
    assert result.ok, result.describe()
    assert [(run["failed"], run["exit_status"]) for run in result.runs] == [("25", "99"), ("0", "0")]
    assert result.stdout == "run with RESTARTED=0\nrun with RESTARTED=1\n", result.describe()


def test_qsub_w_v_finds_a_queue_for_the_job_and_none_for_more_slots_than_the_cell_has(
    cell, venv: Path, tmp_path: Path
) -> None:
    """`qsub -w v` checks a script against the cell, as if empty, without submitting it (submit(1))."""
    script = tmp_path / "job.sh"
    script.write_text(job_script(name="verify", slots=2, command=mpirun(venv, tmp_path / "allreduce.py")))
    verified = cell.run("qsub", "-w", "v", str(script), cwd=tmp_path)
    assert (verified.returncode, verified.stdout) == (0, "verification: found suitable queue(s)\n"), verified
    too_many = cell.run("qsub", "-w", "v", "-pe", "mpi", "5", str(script), cwd=tmp_path)
    assert too_many.returncode == 1 and too_many.stdout == "", too_many
    refused = 'cannot run in PE "mpi" because it only offers 4 slots\nverification: no suitable queues\n'
    assert refused in too_many.stderr, too_many
