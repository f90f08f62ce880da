"""The merged timeline end to end: `hpcdist mpirun --trace` writes one Chrome trace; `hpcdist trace` reads it."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path

from launching import PROGRAMS, launch


def _traced(hpcdist: str, path: Path, sleeper: int) -> tuple[dict, str]:
    """Run the traced program on 4 ranks (rank `sleeper` sleeps before each collective; -1: none)."""
    result = launch(
        [
            hpcdist,
            "mpirun",
            "-np",
            "4",
            "--trace",
            str(path),
            "-x",
            f"SLEEPER={sleeper}",
            "--",
            "python",
            str(PROGRAMS / "traced.py"),
        ],
        timeout=150,
        HPCDIST_TIMEOUT="20",
    )
    assert result.returncode == 0, result.stderr
    return json.loads(path.read_text()), result.stderr


def test_a_four_rank_trace_has_a_track_per_rank_with_ordered_calls_on_one_clock(hpcdist: str, tmp_path: Path) -> None:
    doc, stderr = _traced(hpcdist, tmp_path / "trace.json", -1)
    residual = doc["otherData"]["clock_residual_us"]
    assert (
        f"hpcdist: wrote the trace of 4 ranks (84 calls) to {tmp_path / 'trace.json'}; clocks aligned within" in stderr
    )
    stated = re.search(r"clocks aligned within ([0-9]+) us\n", stderr)
    assert stated and abs(int(stated[1]) - residual) <= 1, stderr  # the file's residual, in the end-of-job line
    assert "straggler: none" in stderr, stderr
    events = doc["traceEvents"]
    tracks = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(tracks) == [0, 1, 2, 3] and all(tracks[r].startswith(f"rank {r} (") for r in tracks)
    calls = {r: [e for e in events if e["ph"] == "X" and e["pid"] == r and e["tid"] == 0] for r in tracks}
    for rank, mine in calls.items():  # init's barrier? no: 20 all_reduces and the final barrier, then nothing
        assert [e["name"] for e in mine] == ["all_reduce"] * 20 + ["barrier"], rank
        assert [e["args"]["gseq"] for e in mine] == list(range(1, 22))
        assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in itertools.pairwise(mine))  # blocking: in order
        assert mine[0]["args"]["shape"] == [4] and mine[0]["args"]["dtype"] == "float32"
        regions = [e for e in events if e["ph"] == "X" and e["pid"] == rank and e["tid"] == 1]
        assert [e["name"] for e in regions] == [f"step {i}" for i in range(20)]
    slack = 2 * residual  # each rank's clock is within the residual of rank 0's
    for gseq in range(21):  # no rank leaves an all_reduce before every rank has entered it
        entered = max(calls[r][gseq]["ts"] for r in calls)
        left = min(calls[r][gseq]["ts"] + calls[r][gseq]["dur"] for r in calls)
        assert entered <= left + slack, (gseq, entered, left, slack)


def test_a_rank_that_sleeps_before_its_collectives_is_named_the_straggler(hpcdist: str, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    _, stderr = _traced(hpcdist, path, 2)
    assert "straggler: rank 2 on " in stderr, stderr
    summary = subprocess.run([hpcdist, "trace", str(path), "--summary"], capture_output=True, text=True, timeout=60)
    lines = summary.stdout.splitlines()
    assert summary.returncode == 0
    assert lines[0].split() == [
        "rank",
        "host",
        "collectives",
        "in",
        "collectives",
        "between",
        "arrived",
        "last",
        "mean",
        "lateness",
    ]
    assert lines[3].startswith("2 ") and re.search(r" 2[01]/21 ", lines[3]), summary.stdout  # (barrier: no sleep)
    assert lines[5].startswith("straggler: rank 2 on "), summary.stdout


def test_the_bench_times_tracing_on_beside_off_and_reports_stragglers(hpcdist: str) -> None:
    result = launch(
        [
            hpcdist,
            "mpirun",
            "-np",
            "2",
            "--",
            hpcdist,
            "bench",
            "all_reduce",
            "-b",
            "8",
            "-e",
            "8",
            "-n",
            "50",
            "-w",
            "5",
            "--backend",
            "gloo",
            "--trace-cost",
            "--report",
        ],
        timeout=150,
        HPCDIST_TIMEOUT="20",
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.strip().startswith("8 ")]
    assert [row[-1] for row in rows] == ["torch/gloo", "torch/gloo+trace"] and all(
        row[8] == row[12] == "0" for row in rows
    )
    table = result.stdout.split("\nrank ", 1)[1].splitlines()
    assert [line.split()[0] for line in table[1:3]] == ["0", "1"] and table[3].startswith("straggler: ")
