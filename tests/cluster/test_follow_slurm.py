"""`hpcdist status` and `hpcdist logs` against real Slurm (scontrol, no slurmdbd), on jobs `hpcdist sbatch` made."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest
from test_slurm_cluster import generated

pytestmark = pytest.mark.timeout(600)  # the first test also waits for apt-get install on a fresh machine

ROOT = Path(__file__).resolve().parents[2]
# each rank: a line on stdout, one on stderr, then (given a gate file) a wait until the gate exists, so the job
# runs until the test has seen what it checks while it runs (at most 200 s), then a last line
TALK = """\
import os, sys, time
from pathlib import Path

r = os.environ["RANK"]
print("hello from", r, flush=True)
print("warn", r, file=sys.stderr, flush=True)
deadline = time.monotonic() + 200
while sys.argv[1:] and not Path(sys.argv[1]).exists() and time.monotonic() < deadline:
    time.sleep(0.1)
print("bye", r, flush=True)
"""


def hpcdist(cluster, venv: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """This checkout's `hpcdist ARGS` as a client of the test cluster."""
    return cluster.run("env", f"PYTHONPATH={ROOT}", str(venv / "bin" / "hpcdist"), *args, timeout=timeout)


def _read(fd: int) -> bytes:
    """What a terminal's primary side holds, b"" once its other side is closed and it is read out."""
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the other side is closed
        return b""


def test_logs_follow_status_and_rank_files_of_an_mpirun_job(cluster, venv: Path, tmp_path: Path) -> None:
    (tmp_path / "talk.py").write_text(TALK)
    script = generated(
        venv,
        "--launch",
        "mpirun",
        "--tag",
        "--log-dir",
        "logs",
        "--env",
        f"PYTHONPATH={ROOT}",
        "--output",
        "job-%j.out",
        "--error",
        "job-%j.out",
        program=[venv / "bin" / "python", tmp_path / "talk.py", tmp_path / "gate"],
    )
    job = cluster.sbatch(script, tmp_path)
    start = time.monotonic()
    while cluster.job_fields(job).get("JobState") != "RUNNING":
        assert time.monotonic() - start < 120, cluster.job_fields(job)
        time.sleep(0.25)
    waited = hpcdist(cluster, venv, "status", job, "--wait", "--timeout", "1")  # the ranks wait for the gate
    assert waited.returncode == 1, waited
    assert f"hpcdist waited 1 s for job {job} to end; it is still RUNNING 1; " in waited.stderr, waited
    # while the job runs: `status --wait` with its stderr on a terminal draws a progress line there, and
    # `logs --follow` has printed every rank's first lines
    client = [
        "nsenter",
        f"--net={cluster.state / 'netns'}",
        "--",
        "env",
        f"PYTHONPATH={ROOT}",
        str(venv / "bin" / "hpcdist"),
    ]
    primary, secondary = pty.openpty()
    waiter = subprocess.Popen([*client, "status", job, "--wait"], stdout=subprocess.DEVNULL, stderr=secondary,
                              env=cluster.client_env())  # fmt: skip
    os.close(secondary)
    followed_path = tmp_path / "followed.txt"
    with followed_path.open("w") as followed_file:
        follower = subprocess.Popen([*client, "logs", job, "--follow", "--timeout", "240"], stdout=followed_file,
                                    stderr=subprocess.PIPE, text=True, env=cluster.client_env())  # fmt: skip
    drawn = b""
    try:
        while (
            f"job {job}: 0/1 ended, RUNNING 1 [".encode() not in drawn or followed_path.read_text().count("hello") < 4
        ):
            assert time.monotonic() - start < 200, (drawn, followed_path.read_text())
            if select.select([primary], [], [], 0.25)[0]:
                drawn += _read(primary)
        (tmp_path / "gate").write_text("")
        _, follow_err = follower.communicate(timeout=240)
        waiter.wait(timeout=60)
    finally:
        follower.kill()
        waiter.kill()
    while chunk := _read(primary):
        drawn += chunk
    os.close(primary)
    assert waiter.returncode == 0, drawn
    assert f"job {job}: 1/1 ended, COMPLETED 1 [".encode() in drawn, drawn
    followed = subprocess.CompletedProcess(follower.args, follower.returncode, followed_path.read_text(), follow_err)
    assert followed.returncode == 0, followed.stderr
    fields = cluster.job_fields(job)
    assert fields["JobState"] == "COMPLETED", (fields, followed.stdout)
    # --follow ended by itself when the job did, with every line the job wrote
    lines = followed.stdout.splitlines()
    for rank in range(4):
        for text in (f"hello from {rank}", f"warn {rank}", f"bye {rank}"):
            assert sum(line.endswith(f":{rank}] {text}") for line in lines) == 1, followed.stdout
    assert followed.stdout == (tmp_path / f"job-{job}.out").read_text()
    assert time.monotonic() - start < 200

    status = hpcdist(cluster, venv, "status", job, "--json")
    assert status.returncode == 0, status.stderr
    (row,) = json.loads(status.stdout)
    assert (row["job_id"], row["state"], row["exit_code"], row["nodes"]) == (job, "COMPLETED", "0:0", "node[1-2]")
    assert row["stdout"] == str(tmp_path / f"job-{job}.out")
    table = hpcdist(cluster, venv, "status", job)
    header = ["JOB", "ID", "NAME", "STATE", "EXIT", "CODE", "RUN", "TIME", "NODES", "REASON"]
    assert table.stdout.splitlines()[0].split() == header, table.stdout
    assert table.stdout.splitlines()[1].split()[:3] == [job, "job0.sh", "COMPLETED"], table.stdout

    rank2 = hpcdist(cluster, venv, "logs", job, "--rank", "2")
    assert rank2.returncode == 0 and rank2.stdout == (tmp_path / "logs" / "rank-002.log").read_text(), rank2.stderr
    assert sorted(rank2.stdout.splitlines()) == ["bye 2", "hello from 2", "warn 2"]
    too_far = hpcdist(cluster, venv, "logs", job, "--rank", "4")
    assert too_far.returncode == 2 and f"--rank 4: job {job} has ranks 0 to 3" in too_far.stderr


def test_logs_rank_picks_one_ranks_labelled_lines_of_an_srun_job(cluster, venv: Path, tmp_path: Path) -> None:
    (tmp_path / "talk.py").write_text(TALK)
    script = generated(
        venv,
        "--launch",
        "srun",
        "--opal-prefix",
        "--tag",
        "--env",
        f"PYTHONPATH={ROOT}",
        program=[venv / "bin" / "python", tmp_path / "talk.py"],
    )
    job = cluster.sbatch(script, tmp_path)
    waited = hpcdist(cluster, venv, "status", job, "--wait", "--timeout", "170", timeout=200)
    # the job's own table once it ended; no progress line on a pipe
    assert waited.returncode == 0 and waited.stderr == "", waited
    assert waited.stdout.splitlines()[1].split()[:3] == [job, "job0.sh", "COMPLETED"], waited.stdout
    assert cluster.job_fields(job)["JobState"] == "COMPLETED"
    out = hpcdist(cluster, venv, "logs", job, "--rank", "3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["hello from 3", "bye 3"] and out.stderr.splitlines() == ["warn 3"], out


def test_an_unknown_or_malformed_job_id_is_a_clear_error(cluster, venv: Path) -> None:
    unknown = hpcdist(cluster, venv, "status", "999999")
    assert unknown.returncode == 2 and unknown.stderr.startswith("hpcdist: error: Slurm knows no job 999999"), unknown
    malformed = hpcdist(cluster, venv, "logs", "12;rm")
    assert malformed.returncode == 2 and "job id '12;rm' is not a Slurm job id" in malformed.stderr, malformed
