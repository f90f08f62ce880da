"""The heartbeat across the four namespace hosts: what `mpirun` forwards grows with the hosts, not the ranks.

The job is the line `hpcdist mpirun --dry-run` prints, run with a launch token of its own, so that its ranks' beat
lines reach this test (hpcdist mpirun would read them and show none). Each host's lowest rank still beating speaks
for the host: one beat line per host and interval, however many ranks the host runs.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from netns_hosts import FOUR_HOSTS, Hosts, ranks_on

from hpcdist.contract import DRY_RUN_TOKEN
from hpcdist.events import Beat, parse_event

TOKEN = "0123456789abcdef"
LIMIT = 3.0  # --heartbeat-timeout: a beat every 0.5 s
SLEEP = 6.0  # how long each rank runs once started


def beats_heard(cluster: Hosts, tmp_path: Path, per_host: int) -> tuple[list[Beat], float, dict[int, str]]:
    """Run `per_host` sleeping ranks on each host; the beat lines mpirun forwarded, the run's seconds, and each
    rank's host."""
    slots = dict.fromkeys(FOUR_HOSTS, per_host)
    program = [sys.executable, "-c", f"import time; time.sleep({SLEEP})"]
    printed = cluster.launch(["--dry-run", "--heartbeat-timeout", str(LIMIT), "--", *program], tmp_path, slots=slots)
    line = printed.wait(60).stdout.strip().splitlines()[-1]
    argv = [word.replace(DRY_RUN_TOKEN, TOKEN) for word in shlex.split(line)]
    result = cluster.on_n1(argv, tmp_path).wait(240)
    assert result.returncode == 0, result.stderr
    heard = [parse_event(text, TOKEN) for text in result.stderr.splitlines()]
    return [event for event in heard if isinstance(event, Beat)], result.seconds, ranks_on(slots)


@pytest.mark.parametrize("per_host", [4, 16])
def test_each_host_beats_once_an_interval_for_all_its_ranks(cluster: Hosts, tmp_path: Path, per_host: int) -> None:
    beats, seconds, hosts = beats_heard(cluster, tmp_path, per_host)
    for beat in beats:  # a beat speaks for ranks of its own host only
        assert {hosts[rank] for rank in beat.members()} == {beat.host}, beat
    spoke_for = {rank for beat in beats for rank in beat.members()}
    assert spoke_for == set(hosts), sorted(set(hosts) - spoke_for)
    assert max(len(beat.members()) for beat in beats) == per_host  # once all ran, one beat held the host's ranks
    # one line a host each 0.5 s while its ranks run, and a few more while they start (each its own first, alone)
    assert len(beats) <= len(FOUR_HOSTS) * (seconds / (LIMIT / 6) + per_host), (len(beats), seconds)
    print(f"{per_host * 4} ranks on 4 hosts: {len(beats)} beat lines in {seconds:.1f} s, {len(beats) / seconds:.1f}/s")
