"""hpcdist's heartbeat: the limit's settings, the watch of silent ranks, the tagger's beats, and the CLI's errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdist.cli import main
from hpcdist.errors import HeartbeatLost, LauncherStalled, UsageError, WaitTimeout
from hpcdist.events import Beat, Event, Failed, Ready, Started, Vanished, encode, parse_event
from hpcdist.launching import heartbeat
from hpcdist.launching.heartbeat import Heartbeats, beat_interval, heartbeat_limit
from hpcdist.launching.options import MpirunOptions
from hpcdist.launching.plan import plan
from hpcdist.launching.watch import LAUNCHER_GRACE, MpirunWatch
from hpcdist.launching.world import World

TOKEN = "0123456789abcdef"


def _ctl(event: Event) -> bytes:
    return encode(event, TOKEN).encode()


def _beat(rank: int, host: str) -> bytes:
    return _ctl(Beat(rank, host))


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(heartbeat.time, "monotonic", lambda: self.now)


@pytest.mark.parametrize(
    ("option", "environ", "limit"),
    [(None, {}, 30.0), (None, {"HPCDIST_HEARTBEAT_TIMEOUT": "12.5"}, 12.5),
     (8.0, {"HPCDIST_HEARTBEAT_TIMEOUT": "12"}, 8.0),
     (0.0, {}, None), (None, {"HPCDIST_HEARTBEAT_TIMEOUT": "0"}, None)],
)  # fmt: skip
def test_the_limit_is_the_option_else_the_variable_else_30_s_and_0_turns_it_off(
    option: float | None, environ: dict[str, str], limit: float | None
) -> None:
    assert heartbeat_limit(option, environ) == limit


@pytest.mark.parametrize(
    ("option", "environ", "message"),
    [(None, {"HPCDIST_HEARTBEAT_TIMEOUT": "soon"}, "HPCDIST_HEARTBEAT_TIMEOUT='soon' must be a positive number"),
     (None, {"HPCDIST_HEARTBEAT_TIMEOUT": "-3"}, "e.g. HPCDIST_HEARTBEAT_TIMEOUT=30 (0: off)")],
)  # fmt: skip
def test_a_bad_limit_is_a_usage_error_naming_the_setting(
    option: float | None, environ: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        heartbeat_limit(option, environ)


@pytest.mark.parametrize(
    ("option", "message"),
    [(-1.0, "--heartbeat-timeout must be a positive number of seconds, got -1.0"),
     (float("nan"), "--heartbeat-timeout must be a positive number of seconds"),
     (True, "--heartbeat-timeout must be a positive number of seconds, got True")],
)  # fmt: skip
def test_a_bad_option_is_refused_when_the_options_are_made(option: float, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        MpirunOptions(program=("true",), np=1, heartbeat_timeout=option)


def test_ranks_beat_a_sixth_of_the_limit_apart_at_most_5_s() -> None:
    assert (beat_interval(30), beat_interval(6), beat_interval(600)) == (5.0, 1.0, 5.0)
    assert issubclass(HeartbeatLost, WaitTimeout)


def test_a_hosts_silent_ranks_are_named_together_and_a_rank_that_ended_is_not_expected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock(monkeypatch)
    beats = Heartbeats(30)
    for rank, host in ((0, "n1"), (1, "n1"), (2, "n2"), (3, "n2"), (4, "n2")):
        beats.beat(rank, host)
    beats.ended(4)  # said done: its silence is no loss
    for now in (1010.0, 1020.0, 1029.0):
        clock.now = now
        beats.beat(0, "n1")
        beats.beat(1, "n1")
        beats.check()
    clock.now = 1030.5  # 30.5 s of silence
    beats.beat(0, "n1")
    beats.beat(1, "n1")
    with pytest.raises(HeartbeatLost, match=r"^host n2 lost: no heartbeat from ranks 2-3 for 30 s \(check that the "):
        beats.check()
    assert beats.lost_hosts == ["n2"] and beats.silent == {2: "n2", 3: "n2"}
    beats.check()  # said once


def test_one_silent_rank_beside_beating_ones_is_named_alone_and_its_host_is_not_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock(monkeypatch)
    beats = Heartbeats(6)
    beats.beat(0, "n1")
    beats.beat(1, "n1")
    for step in range(1, 15):
        clock.now = 1000.0 + step * 0.5
        beats.beat(0, "n1")
        if clock.now > 1006.0:
            with pytest.raises(HeartbeatLost, match=r"^rank 1 on n1 silent: no heartbeat for 6 s$"):
                beats.check()
            break
        beats.check()
    assert beats.lost_hosts == [] and beats.silent == {1: "n1"}


def _rank_1_late_beside_rank_2(clock: Clock, frozen: str) -> Heartbeats:
    """Four ranks on n1 with a 6 s limit, 6.5 s on: rank 2 `frozen` (else silent) since the start, rank 1's tagger
    starved for the last 4.5 s, ranks 0 and 3 beating."""
    clock.now = 1000.0
    beats = Heartbeats(6)
    for rank in range(4):
        beats.beat(rank, "n1")
    for now, ranks in ((1002.0, (0, 1, 3)), (1004.0, (0, 3)), (1006.5, (0, 3))):
        clock.now = now
        for rank in ranks:
            beats.beat(rank, "n1")
        if frozen:
            beats.beat(2, "n1", frozen)
        if now < 1006:
            beats.check()  # nothing yet: every count within the limit
    return beats


def test_a_frozen_rank_is_named_alone_and_another_s_late_beat_beside_it_is_no_loss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A frozen rank is one process's state: a rank late by two beats goes with a silent rank (its host may be lost),
    not with a frozen one, and under --on-failure shrink the frozen one is left to its helper."""
    clock = Clock(monkeypatch)
    assert _rank_1_late_beside_rank_2(clock, "").fell_silent() == {1: "n1", 2: "n1"}
    assert _rank_1_late_beside_rank_2(clock, "in a frozen cgroup").fell_silent() == {}
    beats = _rank_1_late_beside_rank_2(clock, "in a frozen cgroup")
    with pytest.raises(HeartbeatLost, match=r"^rank 2 on n1 frozen: in a frozen cgroup for 6 s$"):
        beats.check()
    assert beats.silent == {2: "n1"}
    beats = _rank_1_late_beside_rank_2(clock, "")
    with pytest.raises(HeartbeatLost, match=r"^ranks 1-2 on n1 silent: no heartbeat for 6 s$"):
        beats.check()


def test_a_pause_of_the_watcher_itself_is_no_silence_of_the_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    beats = Heartbeats(6)
    beats.beat(0, "n1")
    beats.check()
    clock.now += 60  # hpcdist mpirun was stopped (Ctrl-Z) or starved: the beats wait in the pipe
    beats.check()  # raises nothing: the count starts afresh
    assert (beats.problem, beats.silent, beats.lost_hosts) == (None, {}, [])
    for _ in range(6):  # checked every second again: 6 s since the watcher woke is still within the limit
        clock.now += 1
        beats.check()
    clock.now += 1  # and a rank silent past the limit since then is found as ever
    with pytest.raises(HeartbeatLost, match=r"^host n1 lost: no heartbeat from rank 0 for 6 s \(check that the host "):
        beats.check()


def test_the_watch_takes_beats_out_and_its_outcome_names_the_lost_host(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    watch = MpirunWatch(TOKEN, vanished_named=True, heartbeat=6)
    shown = watch.feed("stderr", b"".join(_beat(rank, "n2" if rank > 1 else "n1") for rank in range(4)) + b"work\n")
    assert shown == b"work\n"
    for _ in range(6):  # the watcher checks often (every 50 ms at most in spawn): here once a second
        clock.now += 1
        watch.feed("stderr", _beat(0, "n1") + _beat(1, "n1"))
        watch.check()
    clock.now += 1
    with pytest.raises(HeartbeatLost, match="host n2 lost: no heartbeat from ranks 2-3 for 6 s"):
        watch.check()
    # what follows hpcdist mpirun's SIGTERM is its consequence: rank 0's shim names its child's signal
    watch.feed("stderr", b"[n1:0] " + _ctl(Failed(0, "killed by SIGTERM", "n1")))
    outcome, problem = watch.outcome(143)
    assert outcome.status == 143 and outcome.lost_hosts == ("n2",)
    assert problem is None  # said as hpcdist mpirun ended the job (the HeartbeatLost above), not again
    assert watch.named(143) == {2: "no heartbeat for 6 s", 3: "no heartbeat for 6 s"}
    assert outcome.failures() == "rank 2 on n2 failed with no heartbeat for 6 s; rank 3 on n2 failed with no " \
        "heartbeat for 6 s"  # fmt: skip
    assert MpirunWatch(TOKEN).outcome(0)[0].status == 0  # no limit given: nothing watched


def test_until_every_rank_is_past_mpi_init_silence_is_judged_by_the_start_up_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host's launcher daemon busy wiring up its ranks forwards nothing for tens of seconds: no loss at start-up."""
    clock = Clock(monkeypatch)
    watch = MpirunWatch(TOKEN, heartbeat=6, startup=60)
    watch.feed("stderr", _beat(0, "n1") + _beat(1, "n2"))
    for _ in range(59):  # n2 silent for 59 s while the job starts: within the start-up wait
        clock.now += 1
        watch.feed("stderr", _beat(0, "n1"))
        watch.check()
    clock.now += 2
    watch.feed("stderr", _beat(0, "n1"))
    lost = r"^host n2 lost: no heartbeat from rank 1 for 60 s while the job started \(check .* \$HPCDIST_STARTUP_"
    with pytest.raises(HeartbeatLost, match=lost):
        watch.check()


def test_once_rank_0_says_every_rank_is_past_mpi_init_the_limit_counts_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    watch = MpirunWatch(TOKEN, heartbeat=6, startup=60)
    watch.feed("stderr", _beat(0, "n1") + _beat(1, "n2"))
    clock.now += 40  # n2's beats held up 40 s, then every rank is past MPI_Init
    watch.feed("stderr", _beat(0, "n1") + _ctl(Started(0)))
    watch.check()  # n2's silence is counted from now, by the limit
    for _ in range(6):
        clock.now += 1
        watch.feed("stderr", _beat(0, "n1"))
        watch.check()
    clock.now += 1
    with pytest.raises(HeartbeatLost, match=r"^host n2 lost: no heartbeat from rank 1 for 6 s \(check that the host"):
        watch.check()


def test_with_the_user_s_own_rendezvous_the_start_up_ends_when_every_rank_s_group_is_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rank 0 says `Started` after hpcdist's rendezvous over MPI; with MASTER_ADDR and MASTER_PORT given, there is
    none, and every rank's `Ready` ends the start-up instead."""
    Clock(monkeypatch)
    watch = MpirunWatch(TOKEN, heartbeat=6, startup=60)
    watch.feed("stderr", _ctl(Ready(0, "n1", world=2)))
    assert watch.heartbeats.window == 60
    watch.feed("stderr", _ctl(Ready(1, "n2", world=2)))
    assert watch.heartbeats.window == 6
    assert Heartbeats(6).window == 6 and Heartbeats(None, 60).window is None  # no start-up given; no heartbeat


@pytest.mark.parametrize(
    ("mpi", "environ", "startup"),
    [
        ("openmpi", {}, 300.0),  # the ranks' start-up wait: HPCDIST_TIMEOUT's default, longer than the start-up's
        ("mpich", {"HPCDIST_STARTUP_TIMEOUT": "900"}, 900.0),
        ("srun", {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2"}, None),
        ("flux", {"FLUX_URI": "local:///run/flux/local"}, None),
    ],
)
def test_the_start_up_s_limit_is_given_where_rank_0_will_say_every_rank_is_past_mpi_init(
    mpi: str, environ: dict[str, str], startup: float | None
) -> None:
    """Ranks that meet over MPI (rank 0 then says `Started`) get the start-up wait; srun's and flux run's, which meet
    without MPI, are held to the limit from the start."""
    options = MpirunOptions(
        program=("python", "train.py"),
        np=16,
        oversubscribe=True,
        mpi=mpi,
        mpirun=None if mpi in ("srun", "flux") else mpi,
    )
    launch = plan(options, World(environ=environ))
    assert (launch.heartbeat, launch.startup) == (30.0, startup)


def test_a_launcher_that_leaves_the_job_running_after_a_rank_failed_is_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    # Measured under Hydra: rank 1's os._exit(3) left ranks 0, 2, 3 running in 2 runs of 4
    clock = Clock(monkeypatch)
    watch = MpirunWatch(TOKEN, vanished_named=True)  # no heartbeat limit: this watch holds all the same
    watch.feed("stderr", _ctl(Vanished(1, "n1")))
    clock.now += LAUNCHER_GRACE - 0.5
    watch.check()  # the launcher's own time to end the job
    clock.now += 1
    with pytest.raises(LauncherStalled, match=r"^rank 1 on n1 failed \(killed or exited abruptly\) and the MPI "):
        watch.check()
    watch.check()  # said once
    watch.feed("stderr", _ctl(Failed(2, "killed by SIGTERM", "n1")))  # its consequence
    outcome, problem = watch.outcome(143)
    assert watch.named(143) == {1: "killed or exited abruptly"}
    assert problem == (
        f"rank 1 on n1 failed (killed or exited abruptly) and the MPI launcher had not ended the job "
        f"{LAUNCHER_GRACE:g} s later; hpcdist mpirun ended it"
    )
    assert outcome.status == 143 and outcome.lost_hosts == ()


def test_a_launcher_that_ends_the_job_itself_is_left_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    watch = MpirunWatch(TOKEN)
    watch.feed("stderr", _ctl(Failed(0, "exit code 3", "n1")))
    clock.now += LAUNCHER_GRACE - 0.5
    watch.check()
    _outcome, problem = watch.outcome(3)  # the launcher ended within its grace
    assert problem is None and watch.named(3) == {0: "exit code 3"}


BUSY = """
import os, sys, time
from hpcdist.contract import RankContract
from hpcdist.rank.tagger import start

start(RankContract.from_environ(os.environ), 1, 2, "h")
print("busy", flush=True)
t = time.monotonic()
while time.monotonic() - t < 1.0:
    pass  # holds the GIL: the tagger is a process of its own
"""


def test_the_tagger_beats_while_the_rank_holds_the_gil_and_the_log_has_no_beat(tmp_path: Path) -> None:
    env = {**os.environ, "HPCDIST_CONTROL": TOKEN, "HPCDIST_TAG": "1", "HPCDIST_HEARTBEAT": "0.1",
           "HPCDIST_LOG_DIR": str(tmp_path)}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", BUSY], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout == "[h:1] busy\n"
    beats = done.stderr.splitlines()
    alone = Beat(1, "h", ranks="1")  # the host's only rank speaks for itself
    assert {parse_event(beat, TOKEN) for beat in beats} <= {alone, Vanished(1, "h")}, beats
    assert [parse_event(beat, TOKEN) for beat in beats].count(alone) >= 6  # ~10 in the second it was busy
    assert (tmp_path / "rank-001.log").read_text() == "busy\n"


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [(["--heartbeat-timeout", "-5"], {}, "--heartbeat-timeout '-5' is not a number of seconds"),
     (["--heartbeat-timeout", "-5", "--dry-run"], {}, "--heartbeat-timeout '-5' is not a number of seconds"),
     ([], {"HPCDIST_HEARTBEAT_TIMEOUT": "later"}, "HPCDIST_HEARTBEAT_TIMEOUT='later' must be a positive number")],
)  # fmt: skip
def test_the_cli_refuses_a_bad_limit_before_it_starts_anything(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], environ: dict[str, str],
    message: str,
) -> None:  # fmt: skip
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert (
        main(["mpirun", "-np", "1", "--mpirun", "/bin/true", "--mpi", "mpich", *argv, "--", "python", "-c", "1"]) == 2
    )
    assert f"hpcdist: error: {message}" in capsys.readouterr().err


def test_at_ten_thousand_hosts_the_default_limit_keeps_the_launcher_to_a_thousand_beats_a_second() -> None:
    limit = heartbeat_limit(None, {}, 10_000)
    assert (limit, beat_interval(60.0, 10_000)) == (60.0, 10.0)  # 10,000 hosts / 10 s
    assert heartbeat_limit(None, {}, 4) == 30.0 and beat_interval(30.0, 4) == 5.0
    assert beat_interval(30.0, 10_000) == 5.0  # a limit the user set is kept: a sixth of it, at most 5 s
