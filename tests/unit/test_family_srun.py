"""Tests for Slurm's srun as a launcher family: its command line, the lines it adds, how it ends a step."""

from __future__ import annotations

import signal

import pytest

from hpcdist import families, records
from hpcdist.errors import UsageError
from hpcdist.families.base import MpirunSpec, RankKilled
from hpcdist.launching.mpirun import build_mpirun_argv
from hpcdist.status import describe_status, status_of

SRUN = families.lookup("srun")
PROG = ("python", "-m", "hpcdist.worker", "--", "train.py")
SPEC = MpirunSpec(program=PROG, np=4, mpirun="srun", family="srun", slurm=True)

# measured: Slurm 22.05.8, a 2-node step of 4 tasks in which task 2 exited 1 (--kill-on-bad-exit=1), then scancel
STEP_ENDED = [
    "srun: error: node2: task 2: Exited with exit code 1",
    "srun: launch/slurm: _step_signal: Terminating StepId=6.0",
    "slurmstepd-node1: error: *** STEP 6.0 ON node1 CANCELLED AT 2026-11-29T18:29:00 ***",
    "srun: error: node2: task 3: Terminated",
    "srun: error: node1: tasks 0-1: Terminated",
    "srun: Force Terminated StepId=6.0",
]
CANCELLED = [
    "srun: got SIGCONT",
    "srun: forcing job termination",
    "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.",
    "slurmstepd: error: *** JOB 9 ON node1 CANCELLED AT 2026-11-29T18:30:22 ***",
    "srun: error: node1: tasks 0-1: Killed",
]


def test_srun_is_the_family_of_a_launcher_named_srun() -> None:
    assert families.from_files("/usr/bin/srun", []) is SRUN
    assert SRUN.title == "Slurm's srun" and not SRUN.fault_tolerance and SRUN.ranks is None


def test_its_command_sets_each_value_before_srun_and_passes_the_whole_environment() -> None:
    spec = records.replace(SPEC, env=(("HPCDIST_CONTROL", "a,b"), ("OMP_NUM_THREADS", None)))
    assert build_mpirun_argv(spec) == [
        "env", "HPCDIST_CONTROL=a,b", "srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--ntasks=4", "--export=ALL", *PROG
    ]  # fmt: skip


def test_ranks_that_bind_themselves_get_every_cpu_of_the_task_else_srun_binds_as_the_site_says() -> None:
    auto = records.replace(SPEC, env=(("HPCDIST_BIND", "auto"),))
    assert "--cpu-bind=none" in build_mpirun_argv(auto) and not any("cpu-bind" in w for w in build_mpirun_argv(SPEC))


def test_its_placement_in_srun_s_words_and_every_slot_of_the_allocation_without_np() -> None:
    spec = records.replace(SPEC, np=None, bind_to="core", map_by="node", oversubscribe=True)
    assert build_mpirun_argv(spec) == [
        "srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--cpu-bind=cores", "--distribution=cyclic", "--overcommit",
        "--export=ALL", *PROG,
    ]  # fmt: skip


@pytest.mark.parametrize(("change", "said"), [
    ({"slurm": False}, "srun starts ranks inside a Slurm allocation"),
    ({"mca": (("btl", "tcp"),)}, "--mca is for an MPI's mpirun, not srun"),
    ({"launch_agent": "ssh"}, "--launch-agent is for an MPI's mpirun, not srun"),
    ({"bind_to": "l3cache"}, "--bind-to 'l3cache' has no srun equivalent"),
    ({"map_by": "ppr:1:socket"}, "--map-by 'ppr:1:socket' has no srun equivalent"),
])  # fmt: skip
def test_what_srun_cannot_do_is_refused_with_what_to_do(change: dict, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        build_mpirun_argv(records.replace(SPEC, **change))


def test_a_task_srun_says_killed_before_the_step_ends_is_a_cause_the_ones_it_ends_are_not() -> None:
    scanner = SRUN.scanner()
    lines = ["srun: error: node2: tasks 2-3: Killed", *STEP_ENDED]
    seen = [found for line in lines for found in scanner.scan("stderr", line)]
    assert seen == [RankKilled(2, "node2", signal.SIGKILL), RankKilled(3, "node2", signal.SIGKILL)]
    scanner = SRUN.scanner()
    assert [found for line in CANCELLED for found in scanner.scan("stderr", line)] == []


def test_srun_s_lines_about_the_step_s_end_are_hidden_the_ranks_own_are_not() -> None:
    assert all(SRUN.hides(line + "\n") for line in [*STEP_ENDED, *CANCELLED])
    assert not SRUN.hides("srun: error: Unable to create step for job 12: Requested node configuration is unavailable")
    assert not SRUN.hides("Terminated")


def test_srun_ends_a_step_on_sigterm() -> None:
    assert SRUN.ends_job == signal.SIGTERM and families.lookup("openmpi").ends_job == signal.SIGINT


@pytest.mark.parametrize("code", [0, 1, 3, 255, -9, -15, -40])
def test_a_status_said_in_words_reads_back_as_a_shell_s_status(code: int) -> None:
    assert status_of(describe_status(code)) == (code if code >= 0 else 128 - code)
    assert status_of(f"failed with {describe_status(code)}") == (code if code >= 0 else 128 - code)


def test_words_that_say_no_status_read_as_none() -> None:
    assert status_of("killed or exited abruptly") is None
