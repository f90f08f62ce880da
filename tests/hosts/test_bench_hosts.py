"""`hpcdist bench startup --hosts` across the four namespace hosts: each row's jobs run on every host."""

from __future__ import annotations

import json
from pathlib import Path

from netns_hosts import BIN, FOUR_HOSTS, Hosts


def test_bench_startup_spreads_each_job_over_the_hosts(cluster: Hosts, tmp_path: Path) -> None:
    argv = [str(BIN / "hpcdist"), "bench", "startup", "--hosts", ",".join(FOUR_HOSTS), "--rows", "hpcdist,mpirun"]
    result = cluster.on_n1([*argv, "--ranks", "4,8", "--repeats", "1", "--json"], tmp_path).wait(240)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["config"]["hosts"] == list(FOUR_HOSTS) and doc["stops"] == [], doc
    assert sorted((point["row"], point["ranks"], point["hosts"]) for point in doc["results"]) == [
        ("hpcdist", 4, 4), ("hpcdist", 8, 4), ("mpirun", 4, 4), ("mpirun", 8, 4)
    ]  # fmt: skip
