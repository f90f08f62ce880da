"""`hpcdist.submit` against real Slurm: values by rank across two nodes, a failing rank, a cancelled job, an array,
and a requeued job whose handle stays valid. Each driver is a Python program run as a client of the test cluster."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)  # the first test also waits for apt-get install on a fresh machine

ROOT = Path(__file__).resolve().parents[2]
PRELUDE = """
import json, os, socket, sys, time
import hpcdist

def say(**fields):
    print(json.dumps(fields), flush=True)

def where(x):
    import torch, torch.distributed as dist
    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"rank {dist.get_rank()} says hello", flush=True)
    return [dist.get_rank(), socket.gethostname(), total.item(), x]
"""


def drive(cluster, venv: Path, workdir: Path, code: str, timeout: float = 300, pythonpath: str = "") -> list[dict]:
    """Run PRELUDE + `code` with the venv's python (this checkout's hpcdist, after `pythonpath` where given) in
    `workdir`; the JSON lines it said."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "driver.py").write_text(PRELUDE + textwrap.dedent(code))
    proc = cluster.run(
        "env",
        f"PYTHONPATH={os.pathsep.join(filter(None, [pythonpath, str(ROOT)]))}",
        str(venv / "bin" / "python"),
        str(workdir / "driver.py"),
        cwd=workdir,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"driver failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_submit_returns_every_ranks_value_from_both_nodes_and_their_logs(cluster, venv: Path, tmp_path: Path) -> None:
    said = drive(
        cluster,
        venv,
        tmp_path,
        """
        job = hpcdist.submit(where, 7, nodes=2, ntasks_per_node=2, time="5", folder="jobs")
        say(job_id=job.job_id, first=job.state())
        say(state=job.wait(timeout=240), rank0=job.result(), ranks=job.result(all_ranks=True),
            log1=job.logs(1), batch=job.logs(None), error=repr(job.exception()), folder=str(job.directory))
        again = hpcdist.Job.attach(job.directory)  # as from another session
        say(job_id=again.job_id, state=again.state(), ranks=again.result(all_ranks=True))
        forgotten = hpcdist.Job("999999", job.directory, 4)  # scontrol: Invalid job id, as after MinJobAge
        say(state=forgotten.state(), ranks=forgotten.result(all_ranks=True))
    """,
    )
    start, end, again, forgotten = said
    assert start["first"] in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "COMPLETED"), said
    assert end["state"] == "COMPLETED" and end["error"] == "None", said
    assert end["rank0"] == [0, "node1", 4.0, 7], said
    assert end["ranks"] == [[0, "node1", 4.0, 7], [1, "node1", 4.0, 7], [2, "node2", 4.0, 7], [3, "node2", 4.0, 7]]
    assert "rank 1 says hello" in end["log1"] and "rank 0" not in end["log1"], said
    folder = Path(end["folder"])
    assert folder.parent == tmp_path / "jobs" and (folder / "job.sbatch").read_text().startswith("#!/bin/bash")
    assert sorted(p.name for p in folder.glob("rank-*.pkl")) == [f"rank-{r}.pkl" for r in range(4)]
    assert json.loads((folder / "job.json").read_text())["job_id"] == start["job_id"]
    assert again == {"job_id": start["job_id"], "state": "COMPLETED", "ranks": end["ranks"]}, said
    assert forgotten == {"state": "COMPLETED", "ranks": end["ranks"]}, said


def test_the_seeds_ray_example_runs_as_a_job_through_submit_and_map(cluster, venv: Path, tmp_path: Path) -> None:
    said = drive(
        cluster,
        venv,
        tmp_path,
        """
        def compute(x):
            return x ** 2

        job = hpcdist.submit(hpcdist.map, compute, range(10), nodes=2, ntasks_per_node=2, time="5", folder="jobs")
        say(results=job.result(timeout=240))
    """,
    )
    assert said == [{"results": [x**2 for x in range(10)]}]


def test_the_seeds_mp_spawn_and_mp_process_examples_run_as_jobs_through_submit(
    cluster, venv: Path, tmp_path: Path
) -> None:
    programs = ROOT / "tests" / "e2e" / "programs"
    seed000 = (programs / "seed000_ddp.py").read_text()  # fixed as hpcdist.launch's hint says (test_launch.py)
    (tmp_path / "seed000_fixed.py").write_text(
        seed000.replace("DistributedDataParallel(model, device_ids=[rank])", "DistributedDataParallel(model)")
    )
    said = drive(
        cluster,
        venv,
        tmp_path,
        f"""
        sys.path[:0] = [{str(programs)!r}, {str(tmp_path)!r}]
        import seed000_fixed, seed004_process
        spawn = hpcdist.submit(seed000_fixed.train, hpcdist.RANK, 2, nodes=2, ntasks_per_node=1, time="5",
                               folder="jobs")  # the default backend: the seeds' own init asks for gloo and gets it
        process = hpcdist.submit(seed004_process.init_process, hpcdist.RANK, 2, seed004_process.run,
                                 ntasks_per_node=2, time="5", folder="jobs")
        say(spawn=spawn.result(timeout=240, all_ranks=True), spawn_logs=[spawn.logs(0), spawn.logs(1)],
            process=process.wait(timeout=240), process_logs=[process.logs(0), process.logs(1)])
    """,
    )
    (end,) = said
    assert end["spawn"] == [None, None] and end["process"] == "COMPLETED", said
    for rank in (0, 1):
        assert f"Rank {rank} finished training." in end["spawn_logs"][rank].splitlines(), said
        assert f"Rank: {rank}, has data: tensor([5., 7., 9.])" in end["process_logs"][rank].splitlines(), said


def test_a_failing_rank_is_raised_in_the_caller_with_its_traceback(
    cluster, venv: Path, tmp_path: Path, cloudpickle_path: tuple[str, str]
) -> None:
    version, pythonpath = cloudpickle_path  # the job's ranks get the driver's environment (sbatch's --export=ALL)
    said = drive(
        cluster,
        venv,
        tmp_path,
        """
        def fails_on_2(rank):
            import cloudpickle, torch, torch.distributed as dist
            if rank == 2:
                raise ValueError(f"bad shard on {socket.gethostname()} with cloudpickle {cloudpickle.__version__}")
            dist.all_reduce(torch.ones(1))  # the others wait in a collective: the job must still end
            return rank

        job = hpcdist.submit(fails_on_2, hpcdist.RANK, nodes=2, ntasks_per_node=2, time="5", backend="gloo",
                             folder="jobs")
        began = time.monotonic()
        state = job.wait(timeout=240)
        try:
            job.result()
            raised = None
        except hpcdist.RankFailed as exc:
            raised = {"rank": exc.rank, "host": exc.host, "kind": exc.kind, "message": exc.message,
                      "cause": repr(exc.__cause__), "traceback": exc.remote_traceback}
        say(state=state, raised=raised, exception=type(job.exception()).__name__, log2=job.logs(2))
    """,
        pythonpath=pythonpath,
    )
    (end,) = said
    assert end["state"] == "FAILED", said
    raised = end["raised"]
    assert raised and (raised["rank"], raised["host"], raised["kind"]) == (2, "node2", "ValueError"), said
    message = f"bad shard on node2 with cloudpickle {version}"
    assert raised["message"] == message and raised["cause"] == f"ValueError({message!r})", said
    driver = tmp_path / "driver.py"
    source = 'raise ValueError(f"bad shard on {socket.gethostname()} with cloudpickle {cloudpickle.__version__}")'
    line = [row.strip() for row in driver.read_text().splitlines()].index(source) + 1
    assert f'  File "{driver}", line {line}, in fails_on_2\n    {source}\n' in raised["traceback"], said
    assert end["exception"] == "RankFailed", said
    assert "rank 2 on node2 raised ValueError" in end["log2"], said


def test_restarts_keep_the_handle_and_an_earlier_runs_outcomes_are_never_taken_for_this_ones(
    cluster, venv: Path, tmp_path: Path
) -> None:
    said = drive(
        cluster,
        venv,
        tmp_path,
        """
        import signal

        def flaky(rank):
            import torch, torch.distributed as dist
            attempt = hpcdist.restart_count()
            if rank == 1 and attempt == 0:
                raise ValueError("first attempt")
            if rank == 1 and killed:
                os.kill(os.getpid(), signal.SIGKILL)  # leaves no outcome: rank 1's of attempt 0 must not count
            dist.all_reduce(torch.ones(1))
            return attempt

        options = dict(ntasks_per_node=2, time="5", backend="gloo", max_restarts=1, folder="jobs")
        killed = False
        recovers = hpcdist.submit(flaky, hpcdist.RANK, **options)
        killed = True
        dies = hpcdist.submit(flaky, hpcdist.RANK, **options)
        error = dies.exception(timeout=240)
        say(values=recovers.result(timeout=240, all_ranks=True), state=dies.state(), error=str(error),
            batch=dies.logs(None))
    """,
    )
    (end,) = said
    assert end["values"] == [1, 1], said
    assert end["state"] == "FAILED", said
    assert "first attempt" not in end["error"] and "attempt 2/2 ended with exit code" in end["batch"], said


def test_a_cancelled_job_ends_its_handle_with_jobfailed(cluster, venv: Path, tmp_path: Path) -> None:
    said = drive(
        cluster,
        venv,
        tmp_path,
        """
        def sleeps():
            time.sleep(600)

        job = hpcdist.submit(sleeps, nodes=1, ntasks_per_node=2, time="5", backend="gloo", folder="jobs")
        while job.state() != "RUNNING":
            time.sleep(0.5)
        job.cancel()
        state = job.wait(timeout=120)
        error = job.exception()
        try:
            job.result()
        except hpcdist.JobFailed as exc:
            said_by_result = str(exc)
        say(state=state, done=job.done(), kind=type(error).__name__, job=error.job_id, error_state=error.state,
            message=str(error), result=said_by_result)
    """,
    )
    (end,) = said
    assert end["state"] == "CANCELLED" and end["done"], said
    assert (end["kind"], end["error_state"]) == ("JobFailed", "CANCELLED"), said
    assert (
        end["message"].startswith(f"job {end['job']} ended CANCELLED")
        and "ranks 0-1 of 2 returned no value" in end["message"]
    ), said
    assert end["result"] == end["message"], said


def test_an_array_under_mpirun_gives_one_handle_per_task_and_each_task_its_id_and_logs(
    cluster, venv: Path, tmp_path: Path
) -> None:
    said = drive(
        cluster,
        venv,
        tmp_path,
        """
        def square(task, rank):
            print(f"task {task} rank {rank} on {os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}")
            return task * task + rank / 10

        jobs = hpcdist.submit(square, hpcdist.ARRAY_TASK, hpcdist.RANK, array="1,3,5", ntasks_per_node=2,
                              time="5", backend="gloo", launch="mpirun", folder="jobs")
        say(ids=[job.job_id for job in jobs], values=[job.result(timeout=240, all_ranks=True) for job in jobs],
            states=[job.state() for job in jobs], logs=[job.logs(1) for job in jobs])
    """,
    )
    (end,) = said
    array = end["ids"][0].split("_")[0]
    assert end["ids"] == [f"{array}_1", f"{array}_3", f"{array}_5"], said
    assert end["values"] == [[1.0, 1.1], [9.0, 9.1], [25.0, 25.1]], said
    assert end["states"] == ["COMPLETED"] * 3, said
    for task, job, log in zip((1, 3, 5), end["ids"], end["logs"], strict=True):  # c10d may warn there too
        assert [line for line in log.splitlines() if line.startswith("task ")] == [f"task {task} rank 1 on {job}"]


def test_a_preempted_job_is_requeued_under_the_same_handle_which_returns_the_second_runs_value(
    cluster, venv: Path, tmp_path: Path
) -> None:
    """USR1 reaches the batch script (as `requeue_signal="USR1@60"` makes Slurm do a minute before the time
    limit): every rank stops at a step boundary and leaves by `stop.exit()`, the script requeues the job, and the
    caller's wait() goes on through PENDING to the value of the run that finished."""
    (tmp_path / "driver.py").write_text(
        PRELUDE
        + textwrap.dedent("""
        def train():
            restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
            with hpcdist.StopAtStepBoundary(every=1) as stop:
                for step in range(100000):
                    time.sleep(0.05)
                    if restarts or stop.should_stop(step):
                        break
            if not restarts:
                stop.exit()  # status 0 and no value: the requeued run gives it
            return [restarts, step]

        job = hpcdist.submit(train, nodes=1, ntasks_per_node=2, time="5", backend="gloo", requeue=True,
                             requeue_signal="USR1@60", folder="jobs")
        say(job_id=job.job_id)
        say(state=job.wait(timeout=400), values=job.result(all_ranks=True), job_id=job.job_id,
            batch=job.logs(None))
    """)
    )
    driver = subprocess.Popen(
        [
            "nsenter",
            f"--net={cluster.state / 'netns'}",
            "--",
            "env",
            f"PYTHONPATH={ROOT}",
            str(venv / "bin" / "python"),
            str(tmp_path / "driver.py"),
        ],
        cwd=tmp_path,
        env=cluster.client_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdout is not None  # stdout=PIPE
        job_id = json.loads(driver.stdout.readline())["job_id"]
        start = time.monotonic()
        while cluster.job_fields(job_id).get("JobState") != "RUNNING":
            assert time.monotonic() - start < 120, cluster.job_fields(job_id)
            time.sleep(0.25)
        time.sleep(3)  # the ranks are in their loop
        signalled = cluster.run("scancel", "--signal=USR1", "--batch", job_id)
        assert signalled.returncode == 0, signalled.stderr
        while (fields := cluster.job_fields(job_id)).get("Restarts") != "1" or fields.get("JobState") != "PENDING":
            assert time.monotonic() - start < 240, f"job {job_id} was not requeued: {fields}"
            time.sleep(0.25)
        # Slurm holds a requeued job (BeginTime) ~2 minutes; let it start once its nodes are free (see
        # test_slurm_cluster's requeue test for why)
        while "comp" in cluster.run("sinfo", "-h", "-o", "%T").stdout:
            assert time.monotonic() - start < 240, "nodes still completing the first run"
            time.sleep(0.25)
        time.sleep(2.5)
        cluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
        out, err = driver.communicate(timeout=400)
    finally:
        driver.kill()
    assert driver.returncode == 0, out + err
    (end,) = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert (end["state"], end["job_id"]) == ("COMPLETED", job_id), out + err
    assert end["values"] == [[1, 0], [1, 0]], out + err
    assert f"requeueing job {job_id}" in end["batch"], out + err
