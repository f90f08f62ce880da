"""128 ranks on the four namespace hosts (32 on each, no torch): a failing rank is named with its host, and every
rank's log is written, as at four ranks. `make test-hosts-256` runs it at 256 ranks (SCALE_RANKS=256), outside
`make test`: on this 2-core machine the ranks' start-up alone then takes minutes (plain mpirun's MPI_Init: 92 s)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from netns_hosts import FOUR_HOSTS, PROGRAMS, Hosts, ranks_on

NP = int(os.environ.get("SCALE_RANKS", "128"))  # a multiple of 4
SLOTS = dict.fromkeys(FOUR_HOSTS, NP // 4)
FAILING = NP - 27  # on n4: 101 of 128, 229 of 256


def test_at_128_ranks_the_failing_rank_is_named_with_its_host_and_every_rank_logs(
    cluster: Hosts, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    args = [
        "--heartbeat-timeout",
        "120",
        "--log-dir",
        str(logs),
        "-x",
        f"FAIL_RANK={FAILING}",
        "--",
        sys.executable,
        str(PROGRAMS / "scale_fail.py"),
    ]
    result = cluster.launch(args, tmp_path, slots=SLOTS).wait(400)
    hosts = ranks_on(SLOTS)
    assert result.returncode == 1, result.stderr
    first = f"hpcdist: first failure: rank {FAILING} on {hosts[FAILING]} failed"
    assert first in result.stderr, result.stderr
    assert f"ValueError: deliberate failure on rank {FAILING}" in result.stderr, result.stderr
    assert sorted(path.name for path in logs.iterdir()) == [f"rank-{rank:03d}.log" for rank in range(NP)]
    for rank in range(NP):
        assert f"line {rank}" in (logs / f"rank-{rank:03d}.log").read_text().splitlines(), rank
    print(f"{NP} ranks on 4 hosts: {result.seconds:.1f} s")
