"""Job arrays under real Slurm: `hpcdist sbatch --array` in each launch mode; every task's ranks see their task id."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from conftest import FINAL_STATES, POLL
from test_slurm_cluster import generated

pytestmark = pytest.mark.timeout(600)  # the first test also waits for apt-get install on a fresh machine

ROOT = Path(__file__).resolve().parents[2]
# each rank leaves a marker `task{SLURM_ARRAY_TASK_ID}-rank{RANK}` holding the array's job id and task count
MARK = """\
import os
from pathlib import Path

e = os.environ
name = f"task{e['SLURM_ARRAY_TASK_ID']}-rank{e['RANK']}"
Path(name).write_text(f"{e['SLURM_ARRAY_JOB_ID']} {e['SLURM_ARRAY_TASK_COUNT']}")
"""


def wait_tasks(cluster, job_id: str, count: int, timeout: float) -> dict[str, dict[str, str]]:
    """Poll `scontrol show job -o` until the array's `count` tasks have all ended; {task id: its fields}."""
    start = time.monotonic()
    tasks: dict[str, dict[str, str]] = {}
    while time.monotonic() - start < timeout:
        proc = cluster.run("scontrol", "show", "job", "-o", job_id)
        records = [dict(re.findall(r"(\w+)=(\S*)", line)) for line in proc.stdout.splitlines() if line.strip()]
        tasks = {r.get("ArrayTaskId", "?"): r for r in records}
        if len(tasks) == count and all(r.get("JobState") in FINAL_STATES for r in tasks.values()):
            return tasks
        time.sleep(POLL)
    cluster.run("scancel", job_id)
    pytest.fail(f"array job {job_id} did not end within {timeout:g} s; last seen: {tasks}", pytrace=False)


@pytest.mark.parametrize("launch", ["srun", "mpirun", "torchrun"])
def test_an_array_of_three_tasks_gives_each_rank_its_task_id(cluster, venv: Path, tmp_path: Path, launch: str) -> None:
    (tmp_path / "mark.py").write_text(MARK)  # a file: torchrun runs `python SCRIPT`, not `python -c`
    script = generated(
        venv,
        "--launch",
        launch,
        *(["--opal-prefix"] if launch == "srun" else []),
        "--array",
        "0-2",
        "--env",
        f"PYTHONPATH={ROOT}",
        "--output",
        "job-%A_%a.out",
        "--error",
        "job-%A_%a.err",
        program=[venv / "bin" / "python", tmp_path / "mark.py"],
        nodes=1,
    )
    assert "#SBATCH --array=0-2\n" in script
    job_id = cluster.sbatch(script, tmp_path)
    tasks = wait_tasks(cluster, job_id, 3, 240)
    logs = {p.name: p.read_text() for p in sorted(tmp_path.glob("job-*"))}
    assert sorted(tasks) == ["0", "1", "2"], logs
    assert all(r["JobState"] == "COMPLETED" and r["ExitCode"] == "0:0" for r in tasks.values()), (tasks, logs)
    markers = {p.name: p.read_text() for p in tmp_path.glob("task*-rank*")}
    assert markers == {f"task{t}-rank{r}": f"{job_id} 3" for t in range(3) for r in range(2)}, logs
    # one output file per task, named by Slurm's %A_%a
    assert {f"job-{job_id}_{t}.out" for t in range(3)} <= set(logs), logs
    if launch == "srun":  # hpcdist status: one row per task
        status = cluster.run("env", f"PYTHONPATH={ROOT}", str(venv / "bin" / "hpcdist"), "status", job_id, "--json")
        rows = json.loads(status.stdout)
        assert sorted((r["job_id"], r["state"]) for r in rows) == [(f"{job_id}_{t}", "COMPLETED") for t in range(3)]
        logs = cluster.run("env", f"PYTHONPATH={ROOT}", str(venv / "bin" / "hpcdist"), "logs", job_id)
        assert logs.returncode == 2 and f"job {job_id} is an array of 3 records (" in logs.stderr, logs
        assert f"name one task, e.g. hpcdist logs {job_id}_" in logs.stderr, logs


# a task's ranks: task 1's first run waits for the preemption signal (USR1), every other run just ends
PREEMPTED = """\
import os, signal, sys, time
from pathlib import Path

e = os.environ
task, rank, run = e["SLURM_ARRAY_TASK_ID"], e["RANK"], e.get("SLURM_RESTART_COUNT", "0")
Path(f"started-{task}-{rank}-{run}").write_text(e["SLURM_JOB_ID"])
if task == "1" and run == "0":
    got = []
    signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    deadline = time.monotonic() + 200
    while not got and time.monotonic() < deadline:
        time.sleep(0.1)
    sys.exit(0 if got else 1)
Path(f"done-{task}-{rank}-{run}").write_text("")
"""


def test_a_preempted_array_task_requeues_itself_alone(cluster, venv: Path, tmp_path: Path) -> None:
    """USR1 to task 1's batch script (as --signal=B:USR1@60 would): the trap passes it on, the script runs
    `scontrol requeue ARRAYID_1`, and task 1 alone runs again; task 0 is untouched. (Task 1's SLURM_JOB_ID is the
    array's own id, 1 below task 0's: `scontrol requeue $SLURM_JOB_ID` would requeue both tasks.)"""
    (tmp_path / "preempted.py").write_text(PREEMPTED)
    script = generated(
        venv,
        "--opal-prefix",
        "--array",
        "0-1",
        "--requeue",
        "--requeue-signal",
        "USR1@60",
        "--env",
        f"PYTHONPATH={ROOT}",
        "--output",
        "job-%A_%a.out",
        "--error",
        "job-%A_%a.err",
        program=[venv / "bin" / "python", tmp_path / "preempted.py"],
        nodes=1,
    )
    start = time.monotonic()
    job_id = cluster.sbatch(script, tmp_path)
    task1 = f"{job_id}_1"
    while not all((tmp_path / f"started-1-{rank}-0").exists() for rank in range(2)):
        assert time.monotonic() - start < 240, f"task {task1} did not start within 240 s"
        time.sleep(0.2)
    signalled = cluster.run("scancel", "--signal=USR1", "--batch", task1)
    assert signalled.returncode == 0, signalled.stderr
    while (fields := cluster.job_fields(task1)).get("Restarts") != "1" or fields.get("JobState") != "PENDING":
        assert time.monotonic() - start < 240, f"task {task1} was not requeued: {fields}"
        time.sleep(0.2)
    # as in test_slurm_cluster's requeue test: let the revoked credential age, then start the task now
    while "comp" in (states := cluster.run("sinfo", "-h", "-o", "%T").stdout):
        assert time.monotonic() - start < 240, f"nodes still completing task {task1}'s first run: {states}"
        time.sleep(0.2)
    time.sleep(2.5)
    cluster.run("scontrol", "update", f"JobId={task1}", "StartTime=now")
    tasks = wait_tasks(cluster, job_id, 2, 300)
    logs = {p.name: p.read_text() for p in sorted(tmp_path.glob("job-*"))}
    assert all(r["JobState"] == "COMPLETED" and r["ExitCode"] == "0:0" for r in tasks.values()), (tasks, logs)
    assert (tasks["0"]["Restarts"], tasks["1"]["Restarts"]) == ("0", "1"), tasks
    # by ARRAYID_TASK: task 1's own SLURM_JOB_ID is the array's id here, and requeueing that requeues every task
    assert f"requeueing job {task1}" in logs[f"job-{job_id}_1.err"], logs
    done = sorted(p.name for p in tmp_path.glob("done-*"))
    assert done == ["done-0-0-0", "done-0-1-0", "done-1-0-1", "done-1-1-1"], (done, logs)


@pytest.mark.parametrize("launch", ["srun", "mpirun"])
def test_log_dir_gives_each_array_task_its_rank_files_and_logs_finds_them(
    cluster, venv: Path, tmp_path: Path, launch: str
) -> None:
    (tmp_path / "mark.py").write_text(MARK + "print('rank', e['RANK'], 'of task', e['SLURM_ARRAY_TASK_ID'])\n")
    script = generated(
        venv,
        "--launch",
        launch,
        *(["--opal-prefix"] if launch == "srun" else []),
        "--array",
        "0-1",
        "--log-dir",
        "logs",
        "--env",
        f"PYTHONPATH={ROOT}",
        program=[venv / "bin" / "python", tmp_path / "mark.py"],
        nodes=1,
    )
    job_id = cluster.sbatch(script, tmp_path)
    tasks = wait_tasks(cluster, job_id, 2, 240)
    assert all(r["JobState"] == "COMPLETED" for r in tasks.values()), tasks
    for task in range(2):
        for rank in range(2):
            text = (tmp_path / "logs" / f"{job_id}_{task}" / f"rank-00{rank}.log").read_text()
            assert f"rank {rank} of task {task}" in text, text
    shown = cluster.run(
        "env", f"PYTHONPATH={ROOT}", str(venv / "bin" / "hpcdist"), "logs", f"{job_id}_1", "--rank", "1"
    )
    assert shown.returncode == 0 and "rank 1 of task 1" in shown.stdout, shown
