"""hpcdist.submit's checks before anything is submitted (its runs on Slurm: tests/cluster/test_submit_slurm.py)."""

from __future__ import annotations

import functools
import pickle
import threading
from pathlib import Path

import cloudpickle
import pytest

import hpcdist
from hpcdist.jobs.submit import Job


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"nodes": "2"}, "hpcdist.submit's nodes='2' (str): it takes int"),
        ({"ntasks_per_node": 1.5}, "ntasks_per_node=1.5 (float): it takes int or None"),
        ({"requeue": 1}, "requeue=1 (int): it takes bool"),
        ({"env": {"A": 1}, "setup": "module load x"}, "setup='module load x' (str): it takes a sequence of str"),
        ({"bogus": 1}, "hpcdist.submit has no option bogus=; sbatch options are account, array, bind"),
        ({"output": "x.out"}, "hpcdist.submit sets output= itself: the job's output goes to its directory"),
        ({"program": ("a",)}, "hpcdist.submit sets program= itself"),
        ({"launch": "torchrun"}, "not launch='torchrun'; pass launch='srun' (the default) or launch='mpirun'"),
        ({"time": "banana"}, "hpcdist.submit's time= 'banana' is not a Slurm time; use MM, MM:SS"),
        ({"array": "3-1"}, "hpcdist.submit's array= '3-1': the range '3-1' runs backwards"),
        ({"nodes": 0}, "hpcdist.submit's nodes= must be at least 1, got 0"),
        ({"gpus_per_node": 0}, "hpcdist.submit's gpus_per_node= '0': expected COUNT or TYPE:COUNT"),
        ({"backend": "gloo", "mem": "lots"}, "hpcdist.submit's mem= 'lots' is not a Slurm memory size"),
        ({"requeue": True, "requeue_signal": "USR1@600", "time": "5"}, "hpcdist.submit's requeue_signal= 'USR1@600'"),
        (
            {"mpi": "mpich"},
            "hpcdist.submit's mpi= mpich names the dialect of an mpirun line; it needs hpcdist.submit's "
            "launch= mpirun, not srun",
        ),
        ({"launch": "mpirun", "mpi": "lam"}, "hpcdist.submit's mpi= 'lam' is not an MPI hpcdist knows"),
        ({"bind": "all"}, "hpcdist.submit's bind= 'all': use one of"),
    ],
)
def test_wrong_options_are_usage_errors_and_leave_no_directory(tmp_path: Path, options, expected) -> None:
    with pytest.raises(hpcdist.UsageError) as error:
        hpcdist.submit(print, 1, folder=tmp_path / "jobs", scheduler="slurm", **options)
    assert expected in str(error.value)
    assert " --" not in str(error.value), "an error of the Python API names a command-line option"
    assert list((tmp_path / "jobs").iterdir()) == [] if (tmp_path / "jobs").exists() else True


def test_an_unsendable_argument_is_named_and_a_non_function_refused(tmp_path: Path) -> None:
    with pytest.raises(hpcdist.UsageError, match=r"hpcdist.submit cannot send argument 0 of print \(lock\)"):
        hpcdist.submit(print, threading.Lock(), folder=tmp_path, scheduler="slurm")
    with pytest.raises(hpcdist.UsageError, match=r"its first argument is str 'train\.py'; pass the function itself"):
        hpcdist.submit("train.py", folder=tmp_path, scheduler="slurm")  # type: ignore[call-overload]


def test_without_sbatch_on_path_submit_says_so_and_cleans_up(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(hpcdist.UsageError) as error:
        hpcdist.submit(
            functools.partial(print, end=""), 1, folder=tmp_path / "jobs", scheduler="slurm", gpus_per_node=4
        )
    assert str(error.value) == "sbatch not found on PATH; submit from a Slurm login node"  # no CLI flag to drop
    assert list((tmp_path / "jobs").iterdir()) == []
    with pytest.raises(hpcdist.UsageError) as error:
        hpcdist.submit(print, 1, folder=tmp_path / "jobs")
    assert str(error.value).startswith("no scheduler's commands are on PATH (looked for Flux's flux, Grid Engine's ")
    assert str(error.value).endswith("run on a login node, or pass scheduler= one of 'flux', 'gridengine', 'lsf', "
                                     "'pbs', 'slurm'")  # fmt: skip


def test_an_unwritable_folder_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(hpcdist.UsageError, match=r"cannot make its job directory in .*/file/jobs: Not a directory"):
        hpcdist.submit(print, folder=tmp_path / "file" / "jobs", scheduler="slurm")


def test_logs_of_a_rank_outside_the_job_is_a_usage_error(tmp_path: Path) -> None:
    job = Job("42", tmp_path, 2)
    with pytest.raises(hpcdist.UsageError, match=r"job.logs\(2\): job 42 has ranks 0 to 1"):
        job.logs(2)
    assert job.logs(None) == ""  # not started: no output yet
    assert repr(job) == f"<hpcdist.Job 42 (2 ranks) in {tmp_path}>"


def test_array_task_placeholder_loads_as_the_same_object_after_cloudpickle() -> None:
    assert pickle.loads(cloudpickle.dumps([hpcdist.ARRAY_TASK]))[0] is hpcdist.ARRAY_TASK
    assert repr(hpcdist.ARRAY_TASK) == "hpcdist.ARRAY_TASK"


def test_attach_reads_a_job_directory_and_refuses_others(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text('{"job_id": "7", "ranks": 4, "tasks": []}')
    job = Job.attach(tmp_path)
    assert (job.job_id, job.ranks, job.task, job.directory) == ("7", 4, None, tmp_path)
    (tmp_path / "job.json").write_text('{"job_id": "8", "ranks": 2, "tasks": [1, 3]}')
    assert Job.attach(tmp_path, task=3).job_id == "8_3"
    with pytest.raises(hpcdist.UsageError, match=r"job 8 in .* is an array: pass task= one of 1, 3"):
        Job.attach(tmp_path)
    with pytest.raises(hpcdist.UsageError, match=r"no job of hpcdist.submit in .*/nowhere \(no job.json"):
        Job.attach(tmp_path / "nowhere")
