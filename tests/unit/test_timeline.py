"""The merged timeline's pure parts: the ledger's trace buffer, the Chrome-trace document, the straggler rule."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

import hpcdist
from hpcdist import records
from hpcdist.cli import build_parser
from hpcdist.cli.launch import mpirun_options
from hpcdist.commcall import Call
from hpcdist.errors import UsageError
from hpcdist.forensics import timeline
from hpcdist.forensics.chrome import RankTrace, Trace, build_document, load_trace, parse_document
from hpcdist.forensics.ledger import Ledger
from hpcdist.forensics.stragglers import format_summary, summarize
from hpcdist.launching.options import MpirunOptions
from hpcdist.launching.plan import plan
from hpcdist.launching.world import World


def _job(starts: list[list[float]], residual: float = 5e-6, exits: float = 0.0) -> Trace:
    """A trace of len(starts) ranks, each calling all_reduce at its listed start times; all leave 1 ms after the
    last arrives, rank r another r * `exits` seconds later."""
    ends = [max(column) + 1e-3 for column in zip(*starts, strict=True)]
    return Trace(
        tuple(
            RankTrace(
                rank,
                "n1",
                residual if rank else 0.0,
                tuple(
                    Call("all_reduce", "", (4,), "float32", "world", i + 1, t, ends[i] + rank * exits, True, seq=i + 1)
                    for i, t in enumerate(s)
                ),
            )
            for rank, s in enumerate(starts)
        )
    )


def test_the_ledger_keeps_every_call_in_the_trace_buffer_only_while_tracing() -> None:
    ledger, trace = Ledger(size=2), deque[Call](maxlen=3)
    ledger.start("barrier", "", (), "", "world").finish()
    ledger.keep(trace)
    calls = [ledger.start("all_reduce", "", (4,), "float32", "world") for _ in range(4)]
    calls[0].finish()
    ledger.keep(None)
    ledger.start("barrier", "", (), "", "world")
    assert [e.seq for e in trace] == [3, 4, 5]  # the latest three of the four traced calls
    assert [e.seq for e in ledger.entries] == [5, 6]  # the ring keeps its own size either way
    ended = calls[0].ended
    assert calls[0].done and ended is not None and ended >= calls[0].started and calls[1].ended is None
    with hpcdist.region("forward"):  # not traced: it does nothing, and keeps nothing
        pass
    assert timeline._TIMELINE.regions is None


def test_a_trace_becomes_a_chrome_document_and_back(tmp_path: Path) -> None:
    calls = (
        Call("all_reduce", "", (4,), "float32", "world", 1, 0.001, 0.003, True, seq=1),
        Call("recv", "src=0", (2, 2), "int64", "[0, 1]", 0, 0.004, None, seq=2),
    )
    trace = Trace((RankTrace(0, "n1", 0.0, calls[:1]), RankTrace(1, "n2", 2e-5, calls, (("forward", 0.0, 0.01),), 7)))
    doc = build_document(trace)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {0: "rank 0 (n1)", 1: "rank 1 (n2)"}
    first = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1 and e["tid"] == 0)
    assert (first["name"], first["ts"], first["dur"], first["args"]["group"]) == ("all_reduce", 1000.0, 2000.0, "world")
    instant = next(e for e in doc["traceEvents"] if e["ph"] == "i")
    assert instant["name"] == "recv (end not recorded)"
    assert doc["otherData"]["clock_residual_us"] == 20.0
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    assert load_trace(str(path)) == trace
    with pytest.raises(ValueError, match="not a trace written by hpcdist mpirun --trace"):
        parse_document({"traceEvents": []}, "other.json")


def test_a_rank_last_at_most_collectives_by_more_than_the_noise_is_the_straggler() -> None:
    steps = [0.01 * i for i in range(12)]
    late = _job([steps, steps, [t + 0.005 for t in steps], steps])
    summary = summarize(late)
    assert summary.straggler == 2
    assert [(r.last, r.compared) for r in summary.rows][2] == (12, 12)
    assert summary.rows[2].lateness == pytest.approx(0.005)
    assert format_summary(summary)[-1].startswith("straggler: rank 2 on n1 (arrived last at 12 of 12 collectives")


@pytest.mark.parametrize(
    "starts",
    [
        [[0.01 * i + 1e-6 * ((i + r) % 4) for i in range(12)] for r in range(4)],  # last in turn: nobody stands out
        [[0.01 * i + (5e-5 if r == 1 else 0) for i in range(12)] for r in range(4)],  # always last, by 50 us: noise
        [[0.01 * i + (0.005 if r == 1 else 0) for i in range(9)] for r in range(4)],  # too few collectives to say
        [[0.01 * i + 0.002 * r for i in range(12)] for r in range(2)],  # last only as it left the previous one last
    ],
)
def test_no_straggler_is_named_when_no_rank_stands_out(starts: list[list[float]]) -> None:
    summary = summarize(_job(starts, exits=0.002 if len(starts) == 2 else 0.0))
    assert summary.straggler is None
    assert format_summary(summary)[-1].startswith("straggler: none")


def test_trace_reaches_every_rank_as_an_absolute_path_and_needs_the_shim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    options = MpirunOptions(program=("python", "t.py"), np=2, mpirun="/bin/true", mpi="openmpi", trace="t.json")
    assert ("HPCDIST_TRACE", str(tmp_path / "t.json")) in plan(options, World()).spec.env
    with pytest.raises(UsageError, match="--trace is recorded by hpcdist's wrapper around each rank"):
        plan(records.replace(options, bare=True), World())
    with pytest.raises(UsageError, match=r"--trace no/t\.json: its directory does not exist"):
        plan(records.replace(options, trace="no/t.json"), World())
    parsed = build_parser().parse_args(["mpirun", "-np", "2", "--trace", "t.json", "--", "python", "t.py"])
    assert mpirun_options(parsed).trace == "t.json"


def test_hpcdist_trace_summarises_and_draws_a_file_without_torch(tmp_path: Path) -> None:
    path, picture = tmp_path / "trace.json", tmp_path / "trace.png"
    steps = [0.01 * i for i in range(12)]
    path.write_text(json.dumps(build_document(_job([steps, [t + 0.005 for t in steps]]))))
    code = (
        "import sys; from hpcdist.cli import main; status = main(sys.argv[1:]); "
        "print('torch' in sys.modules, 'mpi4py.MPI' in sys.modules); sys.exit(status)"
    )
    argv = [sys.executable, "-c", code, "trace", str(path), "--summary", "--plot", str(picture)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert lines[-3].startswith("straggler: rank 1 on n1 (arrived last at 12 of 12 collectives")
    assert lines[-2:] == [f"hpcdist trace: drew {picture}", "False False"]
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = subprocess.run([*argv[:3], "trace", str(tmp_path / "none.json")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.startswith(f"hpcdist: error: cannot read {tmp_path / 'none.json'}: No such file or directory")
