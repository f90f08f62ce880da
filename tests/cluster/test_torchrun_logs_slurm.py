"""`hpcdist logs JOBID --rank N` of torchrun-mode jobs under real Slurm: each node's torchrun files, found again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_arrays_slurm import wait_tasks
from test_follow_slurm import TALK, hpcdist
from test_slurm_cluster import generated

pytestmark = pytest.mark.timeout(600)  # the first test also waits for apt-get install on a fresh machine

ROOT = Path(__file__).resolve().parents[2]
# each rank: the script's restart count (HPCDIST_RESTART_COUNT) and its rank; every rank fails on the first run
RESTARTED = """\
import os, sys
run, rank = os.environ["HPCDIST_RESTART_COUNT"], os.environ["RANK"]
print("run", run, "rank", rank, "task", os.environ["SLURM_ARRAY_TASK_ID"], flush=True)
print("err", run, rank, file=sys.stderr, flush=True)
sys.exit(1 if run == "0" else 0)
"""


def test_logs_rank_and_follow_read_each_nodes_torchrun_files(cluster, venv: Path, tmp_path: Path) -> None:
    (tmp_path / "talk.py").write_text(TALK)
    script = generated(venv, "--launch", "torchrun", "--log-dir", "my logs", "--env", f"PYTHONPATH={ROOT}",
                       program=[venv / "bin" / "python", tmp_path / "talk.py"])  # fmt: skip
    job = cluster.sbatch(script, tmp_path)
    start = time.monotonic()
    # started while the job is pending or starting: the files appear under the follower
    followed = hpcdist(cluster, venv, "logs", job, "--rank", "3", "--follow", "--timeout", "240", timeout=300)
    assert followed.returncode == 0, followed.stderr
    assert cluster.job_fields(job)["JobState"] == "COMPLETED", followed
    assert followed.stdout.splitlines() == ["hello from 3", "bye 3"], followed
    assert "warn 3" in followed.stderr.splitlines(), followed.stderr
    assert time.monotonic() - start < 200

    # rank 3 is local rank 1 of node 1; rank 0 local rank 0 of node 0; one torchrun run each, named by the job id
    (run3,) = (tmp_path / "my logs" / "node-1").glob(f"{job}_*/attempt_0/1")
    (run0,) = (tmp_path / "my logs" / "node-0").glob(f"{job}_*/attempt_0/0")
    rank0 = hpcdist(cluster, venv, "logs", job, "--rank", "0")
    assert rank0.returncode == 0, rank0.stderr
    assert rank0.stdout == (run0 / "stdout.log").read_text() and rank0.stdout.splitlines() == ["hello from 0", "bye 0"]
    assert rank0.stderr == (run0 / "stderr.log").read_text() and "warn 0" in rank0.stderr.splitlines()
    assert followed.stdout == (run3 / "stdout.log").read_text()
    too_far = hpcdist(cluster, venv, "logs", job, "--rank", "4")
    assert too_far.returncode == 2 and f"--rank 4: job {job} has ranks 0 to 3" in too_far.stderr, too_far


def test_logs_rank_of_an_array_task_shows_its_latest_restart(cluster, venv: Path, tmp_path: Path) -> None:
    (tmp_path / "restarted.py").write_text(RESTARTED)
    script = generated(venv, "--launch", "torchrun", "--log-dir", "logs", "--array", "0-1", "--max-restarts", "1",
                       "--env", f"PYTHONPATH={ROOT}", "--output", "job-%A_%a.out", "--error", "job-%A_%a.err",
                       program=[venv / "bin" / "python", tmp_path / "restarted.py"])  # fmt: skip
    job = cluster.sbatch(script, tmp_path)
    tasks = wait_tasks(cluster, job, 2, 300)
    assert all(r["JobState"] == "COMPLETED" for r in tasks.values()), tasks
    for task in ("0", "1"):
        shown = hpcdist(cluster, venv, "logs", f"{job}_{task}", "--rank", "3")
        assert shown.returncode == 0, shown.stderr
        # the second run of the script's restart loop; the first one is left where it was, and named
        assert shown.stdout.splitlines() == [f"run 1 rank 3 task {task}"], shown
        assert "err 1 3" in shown.stderr.splitlines(), shown.stderr
        note = f"hpcdist: job {job}_{task} rank 3: the latest of 2 torchrun runs on node-1 ({tasks[task]['JobId']}_"
        assert shown.stderr.startswith(note), shown.stderr
        own_id = tasks[task]["JobId"]  # each task's own id is its SLURM_JOB_ID, torchrun's run id
        assert len(list((tmp_path / "logs" / "node-1").glob(f"{own_id}_*/attempt_0/1/stdout.log"))) == 2
