"""`hpcdist mpirun --trace` across two hosts (network namespaces n1, n2): one track per rank, named by its host."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from netns_hosts import ROOT, Hosts


def test_a_trace_across_two_hosts_names_each_ranks_host(cluster: Hosts, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    program = [sys.executable, str(ROOT / "tests" / "e2e" / "programs" / "traced.py")]
    result = cluster.launch(["--trace", str(path), "-x", "SLEEPER=3", "--", *program], tmp_path).wait(240)
    assert result.returncode == 0, result.stderr
    doc = json.loads(path.read_text())
    tracks = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert tracks == {0: "rank 0 (n1)", 1: "rank 1 (n1)", 2: "rank 2 (n2)", 3: "rank 3 (n2)"}
    assert sorted(doc["otherData"]["ranks"]) == ["0", "1", "2", "3"]
    assert "straggler: rank 3 on n2 " in result.stderr, result.stderr
