"""The heartbeat across the four namespace hosts: what `mpirun` forwards grows with the hosts, not the ranks.

The job is the line `hpcdist mpirun --dry-run` prints, run with a launch token of its own, so that its ranks' beat
lines reach this test (hpcdist mpirun would read them and show none). Each host's lowest rank still beating speaks
for the host: one beat line per host and interval, however many ranks the host runs.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest
from netns_hosts import FOUR_HOSTS, Hosts, ranks_on

from hpcdist.contract import DRY_RUN_TOKEN
from hpcdist.events import Beat, Event, Started, parse_event

TOKEN = "0123456789abcdef"
LIMIT = 3.0  # --heartbeat-timeout: a beat every 0.5 s
SLEEP = 6.0  # how long each rank runs once started


def events_heard(cluster: Hosts, tmp_path: Path, per_host: int) -> tuple[list[Event], float, dict[int, str]]:
    """Run `per_host` sleeping ranks on each host; the event lines mpirun forwarded, the run's seconds, and each
    rank's host."""
    slots = dict.fromkeys(FOUR_HOSTS, per_host)
    program = [sys.executable, "-c", f"import time; time.sleep({SLEEP})"]
    printed = cluster.launch(["--dry-run", "--heartbeat-timeout", str(LIMIT), "--", *program], tmp_path, slots=slots)
    line = printed.wait(60).stdout.strip().splitlines()[-1]
    argv = [word.replace(DRY_RUN_TOKEN, TOKEN) for word in shlex.split(line)]
    result = cluster.on_n1(argv, tmp_path).wait(240)
    assert result.returncode == 0, result.stderr
    heard = [parse_event(text, TOKEN) for text in result.stderr.splitlines()]
    return [event for event in heard if event is not None], result.seconds, ranks_on(slots)


@pytest.mark.parametrize("per_host", [4, 16])
def test_each_host_beats_once_an_interval_for_all_its_ranks(cluster: Hosts, tmp_path: Path, per_host: int) -> None:
    events, seconds, hosts = events_heard(cluster, tmp_path, per_host)
    beats = [event for event in events if isinstance(event, Beat)]
    assert {beat.rank for beat in beats} == set(hosts)  # each rank's first beat is its own: its host is heard at once
    # rank 0 says once that every rank is past MPI_Init: from then on silence is judged by the heartbeat limit
    assert [event.rank for event in events if isinstance(event, Started)] == [0]
    for beat in beats:  # a beat speaks for ranks of its own host only
        assert {hosts[rank] for rank in beat.members()} == {beat.host}, beat
    spoke_for = {rank for beat in beats for rank in beat.members()}
    assert spoke_for == set(hosts), sorted(set(hosts) - spoke_for)
    assert max(len(beat.members()) for beat in beats) == per_host  # once all ran, one beat held the host's ranks
    # one line a host each 0.5 s while its ranks run, and a few more while they start (each its own first, alone)
    assert len(beats) <= len(FOUR_HOSTS) * (seconds / (LIMIT / 6) + per_host), (len(beats), seconds)
    print(f"{per_host * 4} ranks on 4 hosts: {len(beats)} beat lines in {seconds:.1f} s, {len(beats) / seconds:.1f}/s")


SLOW_START = """\
import os, pathlib, time
if os.environ.get("OMPI_COMM_WORLD_RANK") == "7":  # the last rank comes late: the others wait in MPI_Init
    marks = pathlib.Path(os.environ["HPCDIST_MARKER_DIR"])
    (marks / "late").touch()
    deadline = time.monotonic() + 120
    while not (marks / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
"""


def test_a_host_whose_daemon_forwards_nothing_while_the_job_starts_is_not_lost(cluster: Hosts, tmp_path: Path) -> None:
    """n2's daemon stopped for three heartbeat limits while rank 7 has not yet reached MPI_Init: no loss, since until
    every rank is past MPI_Init silence is judged by the ranks' start-up wait (as with a daemon busy wiring up
    hundreds of ranks); the job then runs to its end."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_START)
    args = ["--heartbeat-timeout", "3", "-x", f"PYTHONPATH={site}", "--", sys.executable, "-c", "print('done')"]
    launch = cluster.launch(args, tmp_path, slots=dict.fromkeys(FOUR_HOSTS, 2))
    launch.wait_for_markers(tmp_path, "late", 1, 120)
    first: dict[Path, float] = {}  # each of n2's beat notes, with when it was first seen written
    deadline = time.monotonic() + 60
    while sum(_written(note) > when for note, when in first.items()) < 2:
        assert launch.running() and time.monotonic() < deadline, launch.err.read_text()
        for note in Path("/dev/shm").glob("hpcdist-beats-*-n2/*"):
            first.setdefault(note, _written(note))
        time.sleep(0.1)  # until ranks 2 and 3 on n2 have beaten again: hpcdist mpirun has heard their first beats
    daemon = [pid for pid in cluster.pids("n2") if Path(f"/proc/{pid}/comm").read_text().strip() == "prted"]
    assert daemon, "no prted on n2"
    for pid in daemon:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(3 * 3)  # the fault: n2 forwards nothing for three limits
    finally:
        for pid in daemon:
            os.kill(pid, signal.SIGCONT)
    (tmp_path / "go").touch()
    result = launch.wait(120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("done") == 8 and "no heartbeat" not in result.stderr, result.stderr


def _written(note: Path) -> float:
    """When a rank's beat note was last written (0 once it is gone)."""
    try:
        return note.stat().st_mtime
    except OSError:
        return 0.0
