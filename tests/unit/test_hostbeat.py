"""A host's beat: the lowest rank still beating speaks for the host's ranks, and the next takes over when it stops."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hpcdist.errors import HeartbeatLost
from hpcdist.events import Beat, encode, parse_event
from hpcdist.launching.heartbeat import Heartbeats
from hpcdist.rank.hostbeat import FRESH, HostBeat, directory

TOKEN = "0123456789abcdef"


def _said(notes: dict[int, tuple[float, str]] | None) -> dict[int, str] | None:
    """Who a beat speaks for, with how each is frozen (the ages left out: they are a moment's)."""
    return None if notes is None else {rank: frozen for rank, (_, frozen) in notes.items()}


def _age(where: str, rank: int, seconds: float) -> None:
    """Make `rank`'s note `seconds` old, as if its tagger had stopped writing it then."""
    past = time.time() - seconds
    os.utime(os.path.join(where, str(rank)), (past, past))


def test_the_lowest_rank_speaks_for_its_host_with_how_each_rank_is_frozen(tmp_path: Path) -> None:
    where = str(tmp_path / "n1")
    notes = {rank: HostBeat(where, rank, 1.0) for rank in (4, 5, 6)}
    assert _said(notes[6].note("")) == {6: ""}  # alone so far: it speaks for itself
    assert _said(notes[5].note("stopped (state T)")) == {5: "stopped (state T)", 6: ""}
    assert notes[6].note("") is None  # a lower rank beats: it speaks
    assert _said(notes[4].note("")) == {4: "", 5: "stopped (state T)", 6: ""}
    assert notes[5].note("") is None


def test_a_rank_s_first_beat_is_its_own_though_a_lower_rank_leads(tmp_path: Path) -> None:
    """Its host is heard as it starts: a host lost before the leader's next beat is named with all its ranks."""
    where = str(tmp_path / "n2")
    leader, late = HostBeat(where, 2, 1.0), HostBeat(where, 3, 1.0)
    assert _said(leader.note("")) == {2: ""}
    assert _said(late.note("")) == {3: ""}  # rank 2's note is fresh, yet rank 3 tells itself once
    assert late.note("") is None and _said(leader.note("")) == {2: "", 3: ""}


def test_a_leader_whose_beat_went_stale_is_replaced_by_the_next_rank(tmp_path: Path) -> None:
    where = str(tmp_path / "n1")
    leader, next_up = HostBeat(where, 0, 1.0), HostBeat(where, 1, 1.0)
    assert _said(next_up.note("")) == {1: ""}
    assert _said(leader.note("")) == {0: "", 1: ""} and next_up.note("") is None
    _age(where, 0, FRESH + 0.5)  # the leader's tagger died or froze: its note is no longer rewritten
    heard = next_up.note("")
    assert heard is not None and sorted(heard) == [0, 1] and heard[0][0] == pytest.approx(FRESH + 0.5, abs=0.5)


def test_a_rank_that_ended_leaves_and_the_last_takes_the_directory(tmp_path: Path) -> None:
    where = str(tmp_path / "n1")
    first, second = HostBeat(where, 0, 1.0), HostBeat(where, 1, 1.0)
    first.note("")
    second.note("")
    first.leave()
    assert _said(second.note("")) == {1: ""} and os.listdir(where) == ["1"]
    second.leave()
    assert not os.path.exists(where)


def test_where_the_directory_cannot_be_written_each_rank_speaks_for_itself(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the directory would be
    notes = HostBeat(str(blocked / "n1"), 3, 1.0)
    assert notes.note("in a frozen cgroup") == {3: (0.0, "in a frozen cgroup")} and not notes.shared


def test_hosts_and_launches_keep_apart() -> None:
    assert len({directory(token, host) for token in (TOKEN, "f" * 16) for host in ("n1", "n2")}) == 4


def test_one_beat_line_marks_every_rank_of_its_host_and_names_the_frozen_ones() -> None:
    beat = Beat.of(4, "n2", {4: (0.0, ""), 5: (0.2, "stopped (state T)"), 6: (0.4, ""), 9: (0.0, "")}, 1.0)
    heard = parse_event(encode(beat, TOKEN).strip(), TOKEN)
    assert isinstance(heard, Beat) and (heard.ranks, heard.late) == ("4-6,9", "")
    assert heard.members() == {4: (0.0, ""), 5: (0.0, "stopped (state T)"), 6: (0.0, ""), 9: (0.0, "")}
    watch = Heartbeats(30.0)
    for rank, (age, frozen) in heard.members().items():
        watch.beat(rank, heard.host, frozen, age)
    assert watch.silence(5) == "frozen: stopped (state T) for 30 s" and watch.silence(4) == "no heartbeat for 30 s"


def test_a_late_rank_is_counted_silent_from_its_own_last_beat_not_from_the_leaders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    beat = Beat.of(0, "n1", {0: (0.0, ""), 1: (25.0, ""), 2: (3.0, "")}, 5.0)  # rank 1's helper starved 25 s
    assert (beat.ranks, beat.late) == ("0,2", "1:25.0")
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    watch = Heartbeats(30.0)
    for rank, (age, frozen) in beat.members().items():
        watch.beat(rank, beat.host, frozen, age)
    now[0] += 6.0  # 31 s after rank 1's last beat, 6 s after the others'
    with pytest.raises(HeartbeatLost, match="rank 1 on n1 silent: no heartbeat for 30 s"):
        watch.check()
