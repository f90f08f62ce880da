"""What the launcher says about 10,000 ranks stays a few lines: failures, the failure summary, silent hosts."""

from __future__ import annotations

import pytest

from hpcdist.errors import HeartbeatLost
from hpcdist.events import Beat, Done, Event, Failed, Ready, Usage, encode
from hpcdist.launching import heartbeat
from hpcdist.launching.heartbeat import Heartbeats
from hpcdist.launching.outcome import LaunchOutcome
from hpcdist.launching.output import Console, Failure, OutputOptions, OutputRouter, summary
from hpcdist.launching.watch import MpirunWatch

N = 10_000
TOKEN = "0123456789abcdef"
EIGHT = {rank: f"n{rank // 2 + 1}" for rank in range(8)}  # two ranks on each of n1..n4
HOSTS = {rank: f"n{rank // 8:04d}" for rank in range(N)}  # 8 ranks a host: 1,250 hosts


def test_ten_thousand_failed_ranks_are_named_first_few_then_grouped_by_how_and_host() -> None:
    failed = dict.fromkeys(range(N), "exit code 1") | {17: "killed by SIGKILL"}
    outcome = LaunchOutcome(status=1, failed=failed, hosts=HOSTS, after_peer=frozenset(range(4, N)))
    assert outcome.headline() == (
        "first failure: rank 0 on n0000 failed with exit code 1; rank 1 on n0000 failed with exit code 1; "
        "rank 2 on n0000 failed with exit code 1; rank 3 on n0000 failed with exit code 1; "
        "then ranks 4-9999 failed after it"
    )
    assert outcome.failures() == (
        "rank 0 on n0000 failed with exit code 1; rank 1 on n0000 failed with exit code 1; "
        "rank 2 on n0000 failed with exit code 1; rank 3 on n0000 failed with exit code 1; "
        "ranks 4-16,18-9999 on 1,250 hosts failed with exit code 1; rank 17 on n0002 killed by SIGKILL"
    )


def test_the_failure_summary_shows_eight_ranks_lines_and_counts_the_rest_by_host() -> None:
    failures = [Failure(rank, HOSTS[rank], "exit code 1", (b"boom\n",)) for rank in range(N)]
    text = summary(failures, 20, "logs")
    lines = text.splitlines()
    assert len(lines) == 17  # 8 ranks: a header and their one line each; then one line for the other 9,992
    assert lines[14:16] == ["hpcdist: rank 7 on n0000 failed (exit code 1); its last line:", "boom"]
    assert lines[16] == (
        "hpcdist: and 9,992 more failed ranks, their lines not shown (each rank's log in logs): "
        "ranks 8-9999 on 1,249 hosts failed (exit code 1)"
    )


def test_a_thousand_silent_hosts_are_named_first_four_then_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(heartbeat.time, "monotonic", lambda: now[0])
    beats = Heartbeats(30.0)
    for rank in range(N):
        beats.beat(rank, HOSTS[rank])
    for now[0] in (1010.0, 1020.0):  # the watcher checks as it does between chunks of output
        beats.check()
    now[0] = 1025.0
    for rank in range(8 * 250):  # the first 250 hosts beat on; the other 1,000 fall silent
        beats.beat(rank, HOSTS[rank])
    now[0] = 1031.0  # past the limit since the last beat of 1,000 hosts
    with pytest.raises(HeartbeatLost) as lost:
        beats.check()
    assert str(lost.value) == (
        "host n0250 lost: no heartbeat from ranks 2000-2007 for 30 s; host n0251 lost: no heartbeat from ranks "
        "2008-2015 for 30 s; host n0252 lost: no heartbeat from ranks 2016-2023 for 30 s; host n0253 lost: no "
        "heartbeat from ranks 2024-2031 for 30 s; 996 more hosts lost (ranks 2032-9999): no "
        "heartbeat for 30 s (check that the host is up and reachable; --heartbeat-timeout or "
        "$HPCDIST_HEARTBEAT_TIMEOUT sets the limit)"
    )
    assert len(beats.lost_hosts) == 1000


def test_ten_thousand_ranks_the_jobs_end_reached_are_one_line_by_how_and_host() -> None:
    ended = dict.fromkeys(range(8, 16), "") | dict.fromkeys(range(16, N), "killed by SIGTERM")
    outcome = LaunchOutcome(status=1, hosts=HOSTS, ended=ended)
    assert outcome.ended_line() == (
        "ranks 8-15 on n0001 were ended by the launcher; "
        "ranks 16-9999 on 1,248 hosts were ended by the launcher (killed by SIGTERM)"
    )
    assert (
        LaunchOutcome(status=1, hosts=HOSTS, ended={3: ""}).ended_line() == "rank 3 on n0000 was ended by the launcher"
    )
    assert LaunchOutcome(status=1).ended_line() == ""


def _control(event: Event) -> bytes:
    return encode(event, TOKEN).encode()


def test_a_host_open_mpi_lost_is_named_with_its_ranks_and_the_others_in_one_line() -> None:
    """PRRTE names the host and ends the other ranks without a word: their hosts come from the ranks' own lines."""
    watch = MpirunWatch(TOKEN)
    watch.feed("stderr", b"".join(_control(Ready(rank, host, 8)) for rank, host in EIGHT.items()))
    watch.feed("stderr", _control(Done(7)))  # it ended well before the loss: not ended by it
    banner = "PRTE has lost communication with a remote daemon.\n  Remote daemon: [prterun-n1-1@0,2] on node n3\n"
    watch.feed("stderr", banner.encode())
    outcome, problem = watch.outcome(0)
    assert problem is not None and problem.startswith("mpirun lost contact with host n3, where ranks 4-5 ran (its ")
    assert outcome.ended == dict.fromkeys([0, 1, 2, 3, 6], "")
    assert outcome.ended_line() == "ranks 0-3,6 on n1, n2, n4 were ended by the launcher"


def test_the_ranks_hpcdist_mpirun_ends_after_a_silent_host_are_said_in_one_line_not_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """n3 falls silent; hpcdist mpirun's SIGTERM reaches the six others, whose shims tell it: one line says it."""
    now = [1000.0]
    monkeypatch.setattr(heartbeat.time, "monotonic", lambda: now[0])
    console = Console(MpirunWatch(TOKEN, heartbeat=6), OutputRouter(OutputOptions(tag=False), 8))

    def beats(hosts: set[str]) -> bytes:  # one beat a host, from its lowest rank, for all its ranks
        on = {host: {r: (0.0, "") for r, h in EIGHT.items() if h == host} for host in hosts}
        return b"".join(_control(Beat.of(min(ranks), host, ranks, 1.0)) for host, ranks in on.items())

    console.feed("stderr", beats(set(EIGHT.values())))
    for now[0] in range(1001, 1007):  # the others beat on, the watcher checks once a second
        console.feed("stderr", beats(set(EIGHT.values()) - {"n3"}))
        console.watch.check()
    now[0] = 1007.0
    shown = console.feed("stderr", b"[n1:0:1] still working\n")
    with pytest.raises(HeartbeatLost, match="host n3 lost: no heartbeat from ranks 4-5 for 6 s"):
        console.watch.check()
    for rank, host in EIGHT.items():
        if host != "n3":  # a shim hpcdist mpirun listens to says nothing of its rank's end: it tells it
            shown += console.feed("stderr", _control(Failed(rank, "killed by SIGTERM", host)))
    shown += console.feed("stderr", b"")
    assert shown == b"still working\n"
    outcome, _ = console.watch.outcome(143)
    assert sorted(outcome.failed) == [4, 5]
    assert outcome.ended_line() == "ranks 0-3,6-7 on n1, n2, n4 were ended by the launcher (killed by SIGTERM)"
    # the silent ranks never printed a line: their host is the one their beats came from
    assert {(failure.rank, failure.host) for failure in console.failures(143)} == {(4, "n3"), (5, "n3")}


def test_a_peers_fatal_error_report_after_a_failure_is_left_out_but_a_first_failures_is_shown() -> None:
    """Rank 0 fails; rank 3's Open MPI report of the closed socket that follows is not shown, rank 1's own first is."""
    report = [
        b"*** An error occurred in Socket closed\n",
        b"*** reported by process [4017684481,3]\n",
        b"*** on a NULL communicator\n",
        b"*** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,\n",
    ]
    first = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=False), 4))
    shown = b"".join(first.feed("stderr", b"[n1:1:%d] " % n + line) for n, line in enumerate(report))
    assert shown == b""  # held: the failure it may follow can still be heard, over another host's path
    assert first.feed("stderr", b"") == b"".join(report)  # mpirun ended and no other failure was heard
    after = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=False), 4))
    shown = after.feed("stderr", _control(Failed(0, "called MPI_Abort", "n1")) + b"[n1:0:1] rank 0 says why\n")
    shown += b"".join(after.feed("stderr", b"[n2:3:%d] " % n + line) for n, line in enumerate(report))
    shown += after.feed("stderr", b"[n2:3:9] its next line\n")
    assert shown == b"rank 0 says why\nits next line\n"


@pytest.mark.parametrize("hide", [True, False])
def test_open_mpis_event_warning_about_a_lost_peers_socket_is_left_out_unless_debugging(hide: bool) -> None:
    """A survivor's `[warn] Epoll ADD(4) on fd 19 failed …: Bad file descriptor` is shown under HPCDIST_DEBUG only;
    a rank's own line that starts the same way is always shown."""
    warning = (
        b"[warn] Epoll ADD(4) on fd 19 failed. Old events were 0; read change was 0 (none); write change was 1 (add);"
        b" close change was 0 (none): Bad file descriptor\n"
    )
    own = b"[warn] Epoll ADD(4) on fd 19 failed. the loss is nan\n"
    router = OutputRouter(OutputOptions(tag=False), 4, hide_banners=hide)
    console = Console(MpirunWatch(TOKEN, shrink=True, np=4), router)
    shown = b"".join(console.feed("stderr", b"[n1:0:%d] " % n + line) for n, line in enumerate([warning, own]))
    assert shown == (own if hide else warning + own)


def test_libnbcs_line_about_a_collective_a_lost_rank_ended_goes_with_its_blank_line() -> None:
    """A survivor's `NBC_Progress: an error 75 …` and the blank line after it, and `Error in NBC_Start_round() (-1)`
    after a revoke, are left out; its own blank lines stay."""
    lines = [
        b"NBC_Progress: an error 75 was found during schedule 0x41bce290 at row-offset 106 - aborting the schedule\n",
        b"\n",
        b"NBC_Progress: an error 75 was found during schedule 0x20855720 at row-offset 0 - aborting the schedule\n",
        b"Error in NBC_Start_round() (-1)\n",
        b"NBC_Progress: an error 75 was found during schedule 0x20855728 at row-offset 0 - aborting the schedule\n",
        b"\n",
        b"its own line\n",
        b"\n",
    ]
    router = OutputRouter(OutputOptions(tag=False), 4, hide_banners=True)
    console = Console(MpirunWatch(TOKEN, shrink=True, np=4), router)
    shown = b"".join(console.feed("stderr", b"[n1:0:%d] " % n + line) for n, line in enumerate(lines))
    assert shown == b"its own line\n\n"


def test_a_peers_fatal_error_report_that_came_before_the_failure_it_follows_is_left_out() -> None:
    """Rank 3's report of its closed socket (on n2) came before rank 0's failure (on n1) was heard: measured on the
    namespace hosts, as rank 0 told a usage error and called MPI_Abort."""
    report = b"".join(
        b"[n2:3:%d] *** " % n + words + b"\n"
        for n, words in enumerate([b"An error occurred in Socket closed", b"on a NULL communicator"])
    )
    console = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=False), 4))
    shown = console.feed("stderr", report)
    shown += console.feed("stderr", _control(Failed(0, "exit code 2", "n1")) + b"[n1:0:1] rank 0 says why\n")
    shown += console.feed("stderr", b"")
    assert shown == b"rank 0 says why\n"


def test_a_peers_fatal_error_report_before_a_usage_error_is_left_out_though_the_peer_is_heard_to_fail() -> None:
    """Rank 3's report of its closed socket, tagged as its own, came first; then rank 0 told a usage error, and rank 3
    was heard to fail too: the usage error is the job's one story, rank 3's report its echo."""
    report = b"".join(
        b"[n2:3:%d] *** " % n + words + b"\n"
        for n, words in enumerate([b"An error occurred in Socket closed", b"on a NULL communicator"])
    )
    console = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=False), 4))
    shown = console.feed("stderr", report)
    shown += console.feed("stderr", _control(Usage(0, "the rendezvous is unreachable")))
    shown += console.feed("stderr", _control(Failed(3, "exit code 14", "n2")))
    shown += console.feed("stderr", b"")
    assert b"Socket closed" not in shown
    assert b"NULL communicator" not in shown


def test_a_peers_fatal_error_report_without_its_tag_is_its_own_not_rank_0s() -> None:
    """Rank 3 gave its stderr back before MPI_Abort and Open MPI then reported its closed socket with its own
    `[n2:00000] ` (measured on the namespace hosts): not rank 0's report, so rank 0's usage error is the one story;
    with nothing heard, the report is rank 3's and shown at the end."""
    report = b"".join(
        b"[n2:00000] *** " + words + b"\n"
        for words in [b"An error occurred in Socket closed", b"reported by process [748486657,3]", b"Unknown error"]
    )
    console = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=False), 4))
    shown = console.feed("stderr", _control(Usage(0, "the rendezvous is unreachable")) + report)
    shown += console.feed("stderr", b"[n1:0:1] rank 0 says why\n")
    assert shown + console.feed("stderr", b"") == b"rank 0 says why\n"
    alone = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=False), 4))
    assert alone.feed("stderr", report + b"[n1:0:1] rank 0 says why\n") == b"rank 0 says why\n"
    assert alone.feed("stderr", b"") == report
    only_0 = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=False, ranks="0"), 4))
    assert only_0.feed("stderr", report) + only_0.feed("stderr", b"") == b""


@pytest.mark.parametrize("banner_first", [True, False])
def test_a_rank_its_mpi_ended_for_a_peers_closed_socket_is_named_after_the_rank_that_failed_first(
    banner_first: bool,
) -> None:
    """Rank 1 (n2) raised and called MPI_Abort; rank 0 (n1), in a barrier, saw its socket close, and Open MPI's
    errors-are-fatal handler ended it, which prterun reported as rank 0's abort, before or after rank 1's word came
    over n2's daemon (seen in a Grid Engine job of two hosts, 2026-12-01). Rank 1 is the first failure, rank 0 failed
    after it, and rank 0's report is left out."""
    report = b"".join(
        b"[n1:00000] *** " + words + b"\n"
        for words in [
            b"An error occurred in Socket closed",
            b"reported by process [1332019201,0]",
            b"on a NULL communicator",
            b"Unknown error",
            b"MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,",
            b"   and MPI will try to terminate your MPI job as well)",
        ]
    )
    banner = b'prterun has exited due to process rank 0 with PID 0 on node n1 calling\n"abort". This may have\n'
    own = _control(Failed(1, "exit code 1", "n2", at=1.0)) + b"[n2:1:1] ValueError: rank 1 gives up\n"
    console = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=False), 2))
    shown = b"".join(console.feed("stderr", part) for part in ([banner, own] if banner_first else [own, banner]))
    shown += console.feed("stderr", report) + console.feed("stderr", b"")
    assert b"ValueError: rank 1 gives up\n" in shown and b"***" not in shown
    outcome, _ = console.watch.outcome(1)
    assert outcome.headline() == "first failure: rank 1 on n2 failed with exit code 1; then rank 0 failed after it"


def test_a_rank_reported_ended_for_a_lost_peer_that_said_how_it_failed_keeps_its_own_word() -> None:
    """A rank that told its own failure (not after a peer) stays a cause whatever its MPI's report says after."""
    report = b"[n1:0:2] *** An error occurred in Socket closed\n[n1:0:3] *** reported by process [1332019201,0]\n"
    console = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=False), 2))
    console.feed("stderr", _control(Failed(0, "called MPI_Abort", "n1", at=1.0)) + report)
    console.feed("stderr", _control(Failed(1, "exit code 1", "n2", at=2.0)))  # another cause, after it
    console.feed("stderr", b"")
    assert console.watch.outcome(1)[0].headline() == (
        "first failure: rank 0 on n1 failed with called MPI_Abort; rank 1 on n2 failed with exit code 1"
    )  # not `first failure: rank 1 …; then rank 0 failed after it`, as the report alone would have it


def test_a_rank_left_off_the_console_keeps_its_own_fatal_error_report_for_the_summary() -> None:
    """Under --ranks 0, rank 3's report of its own error (the first failure) is not on the console, but its lines
    in the failure summary end with it."""
    report = [b"*** An error occurred in MPI_Send\n", b"*** reported by process [4017684481,3]\n"]
    console = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=False, ranks="0"), 4))
    shown = console.feed("stderr", b"[n2:3:1] sending\n")
    shown += b"".join(console.feed("stderr", b"[n2:3:%d] " % (n + 2) + line) for n, line in enumerate(report))
    shown += console.feed("stderr", _control(Failed(3, "called MPI_Abort", "n2"))) + console.feed("stderr", b"")
    assert shown == b""
    (failure,) = console.failures(1)
    assert failure.tail == (b"sending\n", *report) and not failure.seen
