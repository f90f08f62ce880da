"""A fake MPI family and a fake scheduler, one file each (fake_family.py, fake_scheduler.py), registered here and
driven as hpcdist drives a real one: a dry run through the CLI, banners and exit codes through the watch, the
variables their ranks see. No module of hpcdist names them."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_family import FakeMpi
from fake_scheduler import FakeScheduler

from hpcdist import __version__, families, schedulers
from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.events import Failed, Ready, Vanished, encode
from hpcdist.families.base import Family
from hpcdist.hosts import HostSlots
from hpcdist.launching.exitcodes import ExitCodeWatch
from hpcdist.launching.hostfile import format_hostfile
from hpcdist.launching.output import Console, OutputOptions, OutputRouter
from hpcdist.launching.watch import MpirunWatch
from hpcdist.runtime.env import LaunchEnv

TOKEN = "0123456789abcdef"
SHIM = f"{sys.executable} -m hpcdist.worker --"


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("SLURM_", "HPCDIST_", "FAKE_")):
            monkeypatch.delenv(name)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Family]:
    """The fake family, registered for this test only."""
    families.every()  # every module imported first: the registry is restored as it was, all of it
    monkeypatch.setattr(families._FAMILIES, "by_name", dict(families._FAMILIES.by_name))
    families.register(FakeMpi)
    yield families.lookup("fake")


@pytest.fixture
def fakesched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The fake scheduler, registered for this test only, and a node file of its allocation (n1 x2, n2 x2)."""
    schedulers.every()  # every module imported first: the registry is restored as it was, all of it
    monkeypatch.setattr(schedulers._SCHEDULERS, "by_name", dict(schedulers._SCHEDULERS.by_name))
    schedulers.register(FakeScheduler)
    nodefile = tmp_path / "nodes"
    nodefile.write_text("n1\nn1\nn2\nn2\n")
    yield nodefile


VERSION = f"--env=HPCDIST_VERSION={__version__}"
PER_RUN = "'--env=HPCDIST_CONTROL=<per-launch token>' '--env=HPCDIST_RUN_ID=<per-launch run id>'"  # the fake's form


def _dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["mpirun", "--dry-run", *argv])
    out, err = capsys.readouterr()
    return status, out, err


# -- the fake MPI family --------------------------------------------------------------------------------------------


def test_a_dry_run_speaks_the_registered_family_s_dialect(fake: Family, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _dry_run(capsys, "--mpi", "fake", "--mpirun", "fakerun", "-np", "2", "--", "python", "x.py")
    assert (status, err) == (0, "")
    ours = "--env=HPCDIST_HEARTBEAT=5 --env=HPCDIST_TAG=numbered --env=HPCDIST_OUTPUT_RATE=4194304"
    ours += " --env=HPCDIST_MPI=fake --env=HPCDIST_SCHEDULER=none"
    assert out == f"fakerun --ranks 2 --hosts localhost:2 {VERSION} {ours} {PER_RUN} -- {SHIM} python x.py\n"


def test_the_registered_family_is_told_by_its_launcher_s_name_and_version(
    fake: Family, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    launcher = tmp_path / "fakerun"
    launcher.write_text("#!/bin/sh\n")
    launcher.chmod(0o755)
    status, out, err = _dry_run(capsys, "--mpirun", str(launcher), "-H", "n1:2,n2:1", "--bare", "--", "x")
    assert (status, out, err) == (0, f"{launcher} --ranks 3 --hosts n1:2,n2:1 {VERSION} {PER_RUN} -- x\n", "")
    assert families.from_version("Fake MPI 1.2 (a made-up one)") is fake
    assert families.identify("Fake MPI 1.2") == ("Fake MPI", "1.2")
    assert families.from_files("/opt/fake/bin/mpirun", ["mpirun", "fake_info"]) is fake


def test_the_registered_family_without_fault_tolerance_refuses_shrink(
    fake: Family, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _dry_run(
        capsys, "--mpi", "fake", "--mpirun", "fakerun", "--on-failure", "shrink", "-np", "2", "--", "x"
    )
    assert (status, out) == (2, "")
    assert err == (
        "hpcdist: error: --on-failure shrink needs an MPI whose survivors are told of a lost rank; the launcher "
        "fakerun is Fake MPI's (as --mpi fake says), which hpcdist cannot start so; drop --on-failure shrink\n"
    )


def test_the_watch_reads_the_registered_family_s_banners(fake: Family) -> None:
    watch = MpirunWatch(TOKEN, family="fake")
    console = Console(watch, OutputRouter(OutputOptions(tag=True), 4))
    shown = console.feed(
        "stderr",
        encode(Ready(0, "n1", 4), TOKEN).encode()
        + b"[n1:0:1] working\n"
        + b"fakerun: rank 3 on n2 killed by signal 9\n"  # hidden: the summary says it
        + b"fakerun: rank 1 aborted\n"
        + b"fakerun: lost host n2\n",
    )
    shown += console.feed("stderr", b"")
    assert shown == b"[n1:0] working\nfakerun: lost host n2\n"
    outcome, problem = watch.outcome(0)
    assert dict(outcome.failed) == {3: "killed by SIGKILL", 1: "called MPI_Abort"}
    assert outcome.hosts == {0: "n1", 3: "n2"} and outcome.lost_hosts == ("n2",) and outcome.status == 1
    assert problem is not None and problem.startswith("mpirun lost contact with host n2, where rank 3 ran ")


def test_a_rank_seen_to_vanish_is_named_as_the_registered_family_says(fake: Family) -> None:
    watch = MpirunWatch(TOKEN, family="fake")  # FakeMpi.names_vanished: its clean-up kills the taggers too
    watch.feed("stderr", encode(Failed(2, "exit code 1", "n1", after_peer=True), TOKEN).encode())
    watch.feed("stderr", encode(Vanished(1, "n1"), TOKEN).encode())
    assert watch.named(1) == {1: "killed or exited abruptly", 2: "exit code 1"}


def test_the_registered_family_s_exit_codes_are_taken_out_and_read(fake: Family) -> None:
    codes = ExitCodeWatch(fake)
    shown = codes.feed("stdout", b"done\nfakerun: exits n1=0,3 n2=0\n") + codes.feed("stdout", b"")
    assert shown == b"done\n"
    assert codes.endings({1: "n1", 2: "n2"}) == {0: "exit code 0", 1: "exit code 3", 2: "exit code 0"}


def test_the_registered_family_s_ranks_and_hostfile(fake: Family) -> None:
    env = LaunchEnv.from_environ({"FAKE_RANK": "1", "FAKE_SIZE": "2", "FAKE_LOCAL_RANK": "1", "FAKE_LOCAL_SIZE": "2"})
    assert (env.launcher, env.rank, env.world_size, env.local_rank, env.is_mpi) == ("fake", 1, 2, 1, True)
    assert format_hostfile([HostSlots("n1", 2)], "fake") == "n1=2\n"


def test_without_registering_it_the_fake_family_is_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    assert "fake" not in families.names()
    status, _, err = _dry_run(capsys, "--mpi", "fake", "-np", "2", "--", "x")
    assert status == 2 and err.startswith("hpcdist: error: --mpi 'fake' is not an MPI hpcdist knows")


# -- the fake scheduler ---------------------------------------------------------------------------------------------


def test_inside_the_registered_scheduler_s_allocation_mpirun_finds_the_hosts(
    fakesched: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NODEFILE", str(fakesched))
    monkeypatch.setenv("FAKE_JOB", "42")
    monkeypatch.setenv("FAKE_NODES", "2")
    status, out, err = _dry_run(capsys, "--mpirun", "mpirun", "--mpi", "openmpi", "-np", "4", "--bare", "--", "x")
    assert (status, err) == (0, "")
    assert out.startswith("mpirun -np 4 -H n1:2,n2:2 --bind-to none ")  # no hosts given: the node file's, read
    assert "--prtemca oob_tcp_keepalive_time 2" in out  # two hosts: a cut link is noticed in seconds
    status, out, err = _dry_run(capsys, "--mpirun", "mpirun", "--include", "n2", "--bare", "--", "x")
    assert (status, err) == (0, "")
    assert out.startswith("mpirun -np 2 -H n2:2 ")  # the node file, read for the selection
    status, out, err = _dry_run(capsys, "--mpirun", "mpirun", "--include", "n9", "--bare", "--", "x")
    assert status == 2 and "the FakeSched job 42" in err


def test_the_registered_scheduler_s_tasks_and_job(fakesched: Path) -> None:
    environ = {
        "FAKE_TASK": "3", "FAKE_TASKS": "4", "FAKE_LOCAL_TASK": "1", "FAKE_LOCAL_TASKS": "2", "FAKE_NODE": "1",
        "FAKE_NODES": "2", "FAKE_JOB": "42",
    }  # fmt: skip
    env = LaunchEnv.from_environ(environ)
    assert (env.launcher, env.rank, env.world_size, env.local_rank, env.local_world_size) == ("fakesched", 3, 4, 1, 2)
    assert (env.node_rank, env.node_count, env.job_id, env.is_mpi) == (1, 2, "42", False)
    scheduler = schedulers.lookup("fakesched")
    assert schedulers.current({"FAKE_NODEFILE": str(fakesched)}) is scheduler
    assert schedulers.job_id(environ) == "42" and schedulers.spans_hosts(environ)
    assert scheduler.submitted("Job <42> is submitted to the default queue.\n") == "42"
    with pytest.raises(UsageError, match="instead of a job id"):
        scheduler.submitted("no queue\n")
