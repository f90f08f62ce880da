"""The job scripts of Grid Engine, PBS and LSF run for real, as each scheduler would run them: on this host, with the
host file and variables it sets, hpcdist mpirun starting the ranks on Open MPI; on the scheduler's notice the ranks
save their work and the script ends as the scheduler needs it to (exit 99 to be requeued; PBS: the ranks' status).
And hpcdist mpirun in a Flux batch script, on the hosts of the allocation's resource set."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from launching import BIN, PROGRAMS, ROOT, launch, wait_for

from hpcdist.jobs.batch import BatchJob
from hpcdist.jobs.gridengine import QsubSpec, render_gridengine
from hpcdist.jobs.lsf import BsubSpec, render_lsf
from hpcdist.jobs.pbs import PbsSpec, render_pbs

pytestmark = pytest.mark.e2e

JOB = BatchJob(
    program=("python", str(PROGRAMS / "save_on_sigterm.py")),
    python=sys.executable,
    mpirun=str(BIN / "mpirun"),
    requeue=True,
)


def run_script(text: str, tmp_path: Path, environ: dict[str, str], notice: signal.Signals, group: bool) -> str:
    """Run the job script `text` under bash in a session of its own with the scheduler's `environ`, send `notice`
    once both ranks are ready (to the whole session when `group`, as PBS does), and return its status and stderr."""
    script = tmp_path / "job.sh"
    script.write_text(text)
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    env.update(MARKERS=str(tmp_path), SAVE_ON="USR1", **environ)
    argv = ["bash", str(script)]
    with subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True) as job:
        try:
            wait_for("both ranks to start", lambda: len(list(tmp_path.glob("ready-*"))) >= 2, job=job)
            if group:
                os.killpg(job.pid, notice)
            else:
                job.send_signal(notice)
            _, err = job.communicate(timeout=90)
        finally:
            job.kill()
    return f"{job.returncode}\n{err}"


def saved(markers: Path) -> dict[int, str]:
    """Each rank that saved its work, and the signal it saved it on."""
    return {int(path.name.split("-")[1]): path.read_text() for path in markers.glob("saved-*")}


@pytest.mark.parametrize("notice", [signal.SIGUSR1, signal.SIGUSR2])
def test_grid_engine_s_notice_saves_the_ranks_work_and_exits_99(notice: signal.Signals, tmp_path: Path) -> None:
    (tmp_path / "pe_hostfile").write_text("localhost 2 all.q@localhost UNDEFINED\n")
    text = render_gridengine(QsubSpec(JOB, pe=("mpi", "2")))
    variables = {"PE_HOSTFILE": str(tmp_path / "pe_hostfile"), "JOB_ID": "7", "SGE_TASK_ID": "undefined"}
    assert run_script(text, tmp_path, {**variables, "NHOSTS": "1", "NSLOTS": "2"}, notice, group=False) == (
        "99\n"
        "hpcdist mpirun: on the hosts of the Grid Engine job 7: localhost:2\n"
        f"hpcdist: Grid Engine's {notice.name} notice received; passing USR1 to the ranks, rescheduling job 7 when "
        "they end\n"
        "hpcdist: the ranks ended with status 0 after the notice; exiting 99 so that Grid Engine reschedules job 7\n"
    )
    assert saved(tmp_path) == dict.fromkeys(range(2), "SIGUSR1")


def test_lsf_s_warning_saves_the_ranks_work_and_exits_99(tmp_path: Path) -> None:
    (tmp_path / "hostfile").write_text("localhost\nlocalhost\n")
    text = render_lsf(BsubSpec(JOB, slots="2"))
    variables = {"LSB_DJOB_HOSTFILE": str(tmp_path / "hostfile"), "LSB_JOBID": "5"}
    assert run_script(text, tmp_path, variables, signal.SIGUSR1, group=False) == (
        "99\n"
        "hpcdist mpirun: on the hosts of the LSF job 5: localhost:2\n"
        "hpcdist: LSF's SIGUSR1 warning received; passing USR1 to the ranks, requeueing job 5 when they end\n"
        "hpcdist: the ranks ended with status 0 after the warning; exiting 99 so that LSF requeues job 5\n"
    )
    assert saved(tmp_path) == dict.fromkeys(range(2), "SIGUSR1")


def test_pbs_s_sigterm_to_the_whole_job_saves_the_ranks_work(tmp_path: Path) -> None:
    (tmp_path / "nodefile").write_text("localhost\nlocalhost\n")
    text = render_pbs(PbsSpec(JOB, resources=("select=1:mpiprocs=2",)))
    variables = {"PBS_NODEFILE": str(tmp_path / "nodefile"), "PBS_JOBID": "12.pbs01"}
    assert run_script(text, tmp_path, variables, signal.SIGTERM, group=True) == (
        "143\n"
        "hpcdist mpirun: on the hosts of the PBS job 12.pbs01: localhost:2\n"
        "hpcdist: SIGTERM received; waiting for the ranks of job 12.pbs01 to end\n"
        "hpcdist: got SIGTERM and passed it on; ended all 2 ranks of the job\n"
        "hpcdist: the ranks ended with status 143 after SIGTERM; PBS requeues job 12.pbs01 if it preempted it\n"
    )
    assert saved(tmp_path) == dict.fromkeys(range(2), "SIGTERM")


def test_open_mpi_in_a_flux_allocation_runs_on_the_hosts_of_its_resource_set(tmp_path: Path) -> None:
    """In a `flux batch` script (its instance's initial program: FLUX_URI set, FLUX_JOB_ID not), hpcdist mpirun asks
    `flux resource R` for the allocation's hosts and starts Open MPI's ranks on them. No Flux instance can run here:
    a stand-in `flux` on PATH prints the RFC 20 resource set one would, this host with two cores."""
    resources = {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0-1"}}],
                                             "nodelist": ["localhost"]}}  # fmt: skip
    (tmp_path / "R.json").write_text(json.dumps(resources))
    flux = tmp_path / "flux"
    flux.write_text(f'#!/bin/sh\n[ "$*" = "resource R" ] && exec cat {tmp_path / "R.json"}\nexit 64\n')
    flux.chmod(0o755)
    code = "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], os.environ['LOCAL_RANK'])"
    argv = [sys.executable, "-m", "hpcdist", "mpirun", "--mpirun", str(BIN / "mpirun"), "--", "python", "-c", code]
    result = launch(argv, FLUX_URI=f"local://{tmp_path}/local-0", PATH=f"{tmp_path}:{os.environ['PATH']}")
    assert result.returncode == 0, result.stderr
    assert (
        result.stderr.splitlines()[0]
        == "hpcdist mpirun: on the hosts of the Flux allocation (flux resource R): localhost:2"
    )
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("rank ")) == [
        "rank 0 of 2 0",
        "rank 1 of 2 1",
    ]
