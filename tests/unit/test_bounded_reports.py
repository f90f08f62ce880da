"""What the launcher says about 10,000 ranks stays a few lines: failures, the failure summary, silent hosts."""

from __future__ import annotations

import pytest

from hpcdist.errors import HeartbeatLost
from hpcdist.launching import heartbeat
from hpcdist.launching.heartbeat import Heartbeats
from hpcdist.launching.outcome import LaunchOutcome
from hpcdist.launching.output import Failure, summary

N = 10_000
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
        "heartbeat for 30 s"
    )
    assert len(beats.lost_hosts) == 1000
