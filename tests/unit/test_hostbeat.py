"""A host's beat: the lowest rank still beating speaks for the host's ranks, and the next takes over when it stops."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hpcdist.events import Beat, encode, parse_event
from hpcdist.launching.heartbeat import Heartbeats
from hpcdist.rank.hostbeat import FRESH, HostBeat, directory

TOKEN = "0123456789abcdef"


def test_the_lowest_rank_speaks_for_its_host_with_how_each_rank_is_frozen(tmp_path: Path) -> None:
    where = str(tmp_path / "n1")
    notes = {rank: HostBeat(where, rank, 1.0) for rank in (4, 5, 6)}
    assert notes[6].note("") == {6: ""}  # alone so far: it speaks for itself
    assert notes[5].note("stopped (state T)") == {5: "stopped (state T)", 6: ""}
    assert notes[6].note("") is None  # a lower rank beats: it speaks
    assert notes[4].note("") == {4: "", 5: "stopped (state T)", 6: ""}
    assert notes[5].note("") is None


def test_a_leader_whose_beat_went_stale_is_replaced_by_the_next_rank(tmp_path: Path) -> None:
    where = str(tmp_path / "n1")
    leader, next_up = HostBeat(where, 0, 1.0), HostBeat(where, 1, 1.0)
    assert next_up.note("") == {1: ""}
    assert leader.note("") == {0: "", 1: ""} and next_up.note("") is None
    past = time.time() - FRESH - 0.5  # the leader's tagger died or froze: its note is no longer rewritten
    os.utime(os.path.join(where, "0"), (past, past))
    assert next_up.note("") == {1: ""}


def test_a_rank_that_ended_leaves_and_the_last_takes_the_directory(tmp_path: Path) -> None:
    where = str(tmp_path / "n1")
    first, second = HostBeat(where, 0, 1.0), HostBeat(where, 1, 1.0)
    first.note("")
    second.note("")
    first.leave()
    assert second.note("") == {1: ""} and os.listdir(where) == ["1"]
    second.leave()
    assert not os.path.exists(where)


def test_where_the_directory_cannot_be_written_each_rank_speaks_for_itself(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the directory would be
    notes = HostBeat(str(blocked / "n1"), 3, 1.0)
    assert notes.note("in a frozen cgroup") == {3: "in a frozen cgroup"} and not notes.shared


def test_hosts_and_launches_keep_apart() -> None:
    assert len({directory(token, host) for token in (TOKEN, "f" * 16) for host in ("n1", "n2")}) == 4


def test_one_beat_line_marks_every_rank_of_its_host_and_names_the_frozen_ones() -> None:
    beat = Beat.of(4, "n2", {4: "", 5: "stopped (state T)", 6: "", 9: ""})
    heard = parse_event(encode(beat, TOKEN).strip(), TOKEN)
    assert isinstance(heard, Beat) and heard.ranks == "4-6,9"
    assert heard.members() == {4: "", 5: "stopped (state T)", 6: "", 9: ""}
    watch = Heartbeats(30.0)
    for rank, frozen in heard.members().items():
        watch.beat(rank, heard.host, frozen)
    assert watch.silence(5) == "frozen: stopped (state T) for 30 s" and watch.silence(4) == "no heartbeat for 30 s"
