"""Tests for the launchers of LSF's and Flux's jobs as families: jsrun's and flux run's command lines, what they
refuse, and flux run's lines on a failed task (neither launcher can run here: the argv is checked word for word)."""

from __future__ import annotations

import shlex
import signal

import pytest

from hpcdist import families, records
from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.families.base import AppContext, HostLost, MpirunSpec, RankKilled
from hpcdist.hosts import HostSlots
from hpcdist.launching.mpirun import build_mpirun_argv
from hpcdist.launching.options import MpirunOptions
from hpcdist.launching.plan import plan
from hpcdist.launching.world import World

JSRUN, FLUX = families.lookup("jsrun"), families.lookup("flux")
PROG = ("python", "-m", "hpcdist.worker", "--", "train.py")
JOB = MpirunSpec(program=PROG, np=8, map_by="ppr:4:node", mpirun="jsrun", family="jsrun")
FLUX_JOB = records.replace(JOB, mpirun="flux", family="flux")
# an LSF job on a CSM cluster: its launch node first (OLCF's Summit guide, research notes §2d)
LSF = {"LSB_JOBID": "779469", "LSB_MCPU_HOSTS": "batch1 1 a01n01 42 a01n02 42"}

# flux run's lines when task 1 of `python3` on node2 was killed, formatted as flux-core's src/shell/doom.c
# (the note), src/cmd/job/attach.c (the exception and the shell's log) and src/common/libjob/job.c (the status)
NOTE = "python3: task rank 1 on host node2 failed (Killed) and exit-on-error is set"
EXCEPTION = f"0.532s: job.exception ƒ2Rz4GHd type=exec severity=0 {NOTE}"
FATAL = f"0.532s: flux-shell[0]: FATAL: task-exit: {NOTE}"
STATUS = "flux-job: task(s) Killed"
EXITED = "flux-job: task(s) exited with exit code 1"  # flux-core's flux-shell-plugins(7) shows it
NO_JSRUN = "has no LSF's jsrun equivalent; drop it, or use another --mpi"
PER_NODE = (
    "LSF's jsrun starts the same number of ranks on each node of its job: give the ranks in all and on each node, "
    "e.g. -np 8 --map-by ppr:4:node (two nodes of 4)"
)


def test_jsrun_puts_each_hosts_ranks_and_all_its_cpus_and_gpus_in_one_resource_set() -> None:
    spec = records.replace(JOB, env=(("A", "1 2"), ("B", None)), extra=("--stdio_mode", "prepended"))
    assert shlex.join(build_mpirun_argv(spec)) == (
        "jsrun --nrs 2 --rs_per_host 1 --tasks_per_rs 4 --cpu_per_rs ALL_CPUS --gpu_per_rs ALL_GPUS "
        "--launch_distribution packed --bind none --env 'A=1 2' --stdio_mode prepended python -m hpcdist.worker -- "
        "train.py"
    )


def test_jsrun_binds_a_rank_to_a_core_and_passes_open_mpis_settings_to_spectrum_mpi() -> None:
    spec = records.replace(JOB, np=2, map_by="ppr:1:node", bind_to="core", mca=(("pml", "ucx"), ("btl", "^vader")))
    assert build_mpirun_argv(spec)[:14] == [
        "jsrun", "--nrs", "2", "--rs_per_host", "1", "--tasks_per_rs", "1", "--cpu_per_rs", "ALL_CPUS", "--gpu_per_rs",
        "ALL_GPUS", "--launch_distribution", "packed", "--bind",
    ]  # fmt: skip
    assert build_mpirun_argv(spec)[14:] == ["packed:1", "--smpiargs", "-mca pml ucx -mca btl ^vader", *PROG]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"hosts": (HostSlots("a01n01", 4),)}, f"--hostfile or -H {NO_JSRUN}"),
        ({"launch_agent": "ssh"}, f"--launch-agent {NO_JSRUN}"),
        ({"contexts": (AppContext(HostSlots("a", 2), 2),)}, f"--include/--exclude with slot lists {NO_JSRUN}"),
        ({"fault_tolerance": True}, f"--on-failure shrink {NO_JSRUN}"),
        ({"oversubscribe": True}, f"--oversubscribe {NO_JSRUN}"),
        ({"bind_to": "socket"}, "--bind-to 'socket' has no jsrun --bind; use one of none, core"),
        ({"mca": (("btl", "tcp self"),)}, "--mca 'btl' 'tcp self': jsrun passes Spectrum MPI's options in one "
                                          "--smpiargs string, split at blanks; give a key and a value without blanks"),
        ({"map_by": "slot"}, f"{PER_NODE}; got --map-by slot"),
        ({"map_by": "ppr:0:node"}, f"{PER_NODE}; got --map-by ppr:0:node"),
        ({"np": None}, PER_NODE),
        ({"np": 6}, "-np 6 is not a whole number of nodes of 4 ranks (--map-by ppr:4:node); give an -np that 4 "
                    "divides, e.g. -np 4"),
    ],
)  # fmt: skip
def test_what_jsrun_has_no_word_for_is_a_clear_error(given: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as refused:
        build_mpirun_argv(records.replace(JOB, **given))
    assert str(refused.value) == message


def test_flux_run_places_a_block_of_ranks_on_each_node_and_its_values_are_set_by_env_as_they_are() -> None:
    spec = records.replace(FLUX_JOB, env=(("A", "$HOME {{tmpdir}}"), ("B", None)))  # flux's --env would expand
    assert build_mpirun_argv(spec) == [
        "env", "A=$HOME {{tmpdir}}", "flux", "run", "-N", "2", "--tasks-per-node=4", "-o", "cpu-affinity=off", "-o",
        "exit-on-error", *PROG,
    ]  # fmt: skip
    bound = records.replace(FLUX_JOB, bind_to="core", np=3, map_by="ppr:3:node")
    assert build_mpirun_argv(bound)[2:7] == ["-N", "1", "--tasks-per-node=3", "-o", "cpu-affinity=per-task"]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"mca": (("btl", "tcp"),)}, "--mca has no Flux's flux run equivalent; drop it, or use another --mpi"),
        ({"hostfile": "hosts"}, "--hostfile or -H has no Flux's flux run equivalent; drop it, or use another --mpi"),
        ({"bind_to": "hwthread"}, "--bind-to 'hwthread' has no flux run cpu-affinity; use one of none, core"),
        ({"map_by": "node"}, "Flux's flux run starts the same number of ranks on each node of its job: give the ranks "
                             "in all and on each node, e.g. -np 8 --map-by ppr:4:node (two nodes of 4); got --map-by "
                             "node"),
    ],
)  # fmt: skip
def test_what_flux_run_has_no_word_for_is_a_clear_error(given: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as refused:
        build_mpirun_argv(records.replace(FLUX_JOB, **given))
    assert str(refused.value) == message


def test_flux_runs_lines_on_a_killed_task_are_read_once_and_left_to_hpcdists_summary() -> None:
    scanner = FLUX.scanner()
    assert scanner.scan("stderr", FATAL + "\n") == []  # the same note as the exception: read there
    assert scanner.scan("stderr", EXCEPTION + "\n") == [RankKilled(1, "node2", signal.SIGKILL)]
    assert all(FLUX.hides(line) for line in (FATAL, EXCEPTION, STATUS, EXITED))


def test_flux_run_says_a_lost_node_and_a_task_that_exited_with_a_status() -> None:
    lost = EXCEPTION.replace("task rank 1 on host node2 failed (Killed)", "shell rank 1 on host node2 failed")
    exited = EXCEPTION.replace("(Killed)", "(Exit 3)")
    assert FLUX.scanner().scan("stderr", lost) == [HostLost("node2")]
    assert FLUX.scanner().scan("stderr", exited) == [] and FLUX.hides(exited)


def test_flux_runs_exit_timeout_line_and_a_programs_own_lines_are_shown() -> None:
    timeout = "0.9s: job.exception f1 type=exec severity=0 python3: task rank 0 on host n1 exited (Exit 0) and "
    assert not FLUX.hides(timeout + "exit-timeout=30s has expired")  # why the other ranks were ended
    assert not FLUX.hides("task(s) exited with exit code 1") and FLUX.scanner().scan("stdout", NOTE) == []


def test_each_is_the_family_of_its_launcher_and_reports_as_it_does() -> None:
    assert families.from_files("/opt/ibm/jsm/bin/jsrun", []) is JSRUN
    assert families.from_files("/usr/bin/flux", []) is FLUX
    assert (JSRUN.job_hosts, JSRUN.ends_job) == ("LSF", signal.SIGINT)
    assert (FLUX.job_hosts, FLUX.ends_job) == ("Flux", signal.SIGHUP)


# -- hpcdist mpirun inside the job: the launcher reads its hosts ----------------------------------------------------


def test_inside_an_lsf_job_jsrun_gets_no_hosts_and_no_line_about_them() -> None:
    options = MpirunOptions(program=("train.py",), np=8, map_by="ppr:4:node", mpi="jsrun", bare=True)
    launch = plan(options, World(environ=LSF))
    assert (launch.spec.hosts, launch.spec.hostfile, launch.note) == ((), None, "")
    assert build_mpirun_argv(launch.spec)[:3] == ["jsrun", "--nrs", "2"]


def test_flux_run_is_not_held_to_this_machines_cpus() -> None:
    options = MpirunOptions(program=("train.py",), np=64, map_by="ppr:8:node", mpi="flux", bare=True)
    assert plan(options, World(environ={"FLUX_URI": "local:///run/flux/local"})).spec.hosts == ()


@pytest.mark.parametrize(
    ("argv", "dropped"),
    [(["-H", "a01n01:4"], "-H"), (["--hostfile", "hosts", "--exclude", "a01n01"], "--hostfile and --exclude")],
)
def test_hosts_given_to_a_launcher_that_reads_its_jobs_own_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], dropped: str
) -> None:
    status = main(["mpirun", "--dry-run", "--mpi", "jsrun", "-np", "8", *argv, "--", "train.py"])
    assert (status, capsys.readouterr()) == (
        2,
        (
            "",
            "hpcdist: error: LSF's jsrun starts the ranks on the hosts of the LSF job it runs in, which it reads "
            f"itself: drop {dropped}, or use another --mpi\n",
        ),
    )
