"""`hpcdist bench` for real under `mpiexec -n N` (any N): every collective is right, and the output says so."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics

import pytest

from hpcdist.bench.plan import COLLECTIVES, BenchOptions, plan_from_options
from hpcdist.bench.run import run_plan
from hpcdist.cli import build_parser
from hpcdist.cli.diagnose import bench as run_bench
from hpcdist.cli.diagnose import bench_options
from hpcdist.errors import UsageError

pytestmark = pytest.mark.mpi

SMALL = ["-b", "4", "-e", "4K", "-f", "8", "-n", "2", "-w", "1"]  # 4, 32, 256, 2048 bytes


def _namespace(*argv: str) -> argparse.Namespace:
    """`hpcdist bench ARGV` parsed, as the CLI hands it to its bench command."""
    return build_parser().parse_args(["bench", *argv])


def _args(*argv: str) -> BenchOptions:
    return bench_options(_namespace(*argv))


@pytest.fixture(scope="module")
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def test_backend_mpi_runs_through_hpcdist_init(comm) -> None:
    """Runs before the gloo session below exists: --backend mpi goes through hpcdist.init like any backend."""
    assert run_bench(_namespace("all_reduce", *SMALL, "--backend", "mpi")) == 0


def _bench(*argv: str) -> tuple[int, str]:
    """`hpcdist bench …` in this process (its own init and shutdown), with rank 0's output captured."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_bench(_namespace(*argv))
    return code, out.getvalue()


def test_mpi_and_gloo_side_by_side_with_raw_mpi4py(comm) -> None:
    """The default group on mpi4py, a gloo group beside it, and raw mpi4py: every row right, every impl in the JSON."""
    code, text = _bench(
        "all_reduce",
        "-b",
        "4",
        "-e",
        "1M",
        "-f",
        "16",
        "-n",
        "2",
        "-w",
        "1",
        "--backend",
        "mpi,gloo",
        "--reference",
        "--json",
    )
    assert code == 0
    if comm.rank != 0:
        assert text == ""
        return
    doc = json.loads(text)
    impls = ["torch/mpi4py", "torch/gloo", "raw-mpi4py", "torch-floor", "raw-again"]
    sizes = (4, 64, 1024, 16384, 262144)
    assert [(row["size"], row["impl"]) for row in doc["results"]] == [(size, impl) for size in sizes for impl in impls]
    # every row checked, the floor's too: its torch call moves nothing, its raw mpi4py call moves the data
    assert all(row["out_of_place"]["nwrong"] == 0 == row["in_place"]["nwrong"] for row in doc["results"])
    assert doc["out_of_bounds"] == {"count": 0, "okay": True}
    # each row's time is the median of its rounds, kept in the order run (-n 2: two rounds of one iteration)
    for row in doc["results"]:
        for kind in ("out_of_place", "in_place"):
            rounds = row[kind]["rounds"]
            assert len(rounds) == 2 and all(t > 0 for t in rounds)
            assert row[kind]["time"] == pytest.approx(statistics.median(rounds))
    assert list(doc["average_bus_bandwidth"]) == impls
    assert (doc["environment"]["backend"], doc["environment"]["backends"]) == ("mpi4py", ["mpi4py", "gloo"])
    assert doc["config"]["backends"] == ["mpi", "gloo"]
    assert [(c["impl"], c["reference"], c["latency_bytes"]) for c in doc["comparisons"]] == [
        ("torch/mpi4py", "raw-mpi4py", 4),
        ("torch/gloo", "raw-mpi4py", 4),
        ("torch-floor", "raw-mpi4py", 4),
        ("raw-again", "raw-mpi4py", 4),
    ]
    assert all(c["bus_bw_ratio"] is None or c["bus_bw_ratio"] > 0 for c in doc["comparisons"])
    floor = doc["comparisons"][2]["latency"]
    assert floor > 0 and [c["floor_latency"] for c in doc["comparisons"]] == [floor, floor, None, None]


def test_the_side_by_side_table_has_an_impl_column_and_comparison_lines(comm) -> None:
    code, text = _bench(
        "all_reduce", "-b", "8", "-e", "8", "-n", "2", "-w", "1", "--backend", "mpi,gloo", "--reference"
    )
    assert code == 0
    if comm.rank == 0:
        lines = text.splitlines()
        assert [line.split()[-1] for line in lines if not line.startswith("#")] == [
            "torch/mpi4py",
            "torch/gloo",
            "raw-mpi4py",
            "torch-floor",
            "raw-again",
        ]
        compared = [line for line in lines if " vs raw-mpi4py in place: busbw " in line]
        assert [line.split(":")[0] for line in compared] == [
            "# torch/mpi4py vs raw-mpi4py in place",
            "# torch/gloo vs raw-mpi4py in place",
            "# torch-floor vs raw-mpi4py in place",
            "# raw-again vs raw-mpi4py in place",
        ]
        assert [" the floor (" in line for line in compared] == [True, True, False, False]
        assert "# time: median of 2 rounds (2 iters split), interleaved across implementations" in lines


def test_bench_ddp_times_a_step_on_both_backends(comm) -> None:
    # DDP's 8 MiB of gradients go through the ring all-reduce with several buckets in flight at once.
    code, text = _bench("ddp", "--backend", "mpi,gloo", "-n", "2", "-w", "1", "--json")
    assert code == 0
    if comm.rank != 0:
        assert text == ""
        return
    doc = json.loads(text)
    assert doc["tool"] == "hpcdist bench ddp" and doc["model"]["parameters"] == 2099712
    assert [r["impl"] for r in doc["results"]] == ["torch/mpi4py", "torch/gloo"]
    for r in doc["results"]:
        assert len(r["step_ms"]) == 2 and all(ms > 0 for ms in r["step_ms"]) and r["nwrong"] == 0
    assert doc["results"][1]["speedup_vs_gloo"] == 1.0 and doc["results"][0]["speedup_vs_gloo"] > 0
    assert doc["okay"] is True


@pytest.fixture(scope="module")
def session(comm):
    import hpcdist

    with hpcdist.init("gloo", timeout=120) as session:
        yield session


def _run(session, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = run_plan(plan_from_options(_args(*argv)), session, out)
    return code, out.getvalue()


@pytest.mark.parametrize("collective", list(COLLECTIVES))
def test_every_collective_is_right_beside_raw_mpi4py(session, comm, collective: str, expected_launcher: str) -> None:
    root = ["--root", str(comm.size - 1)] if COLLECTIVES[collective].rooted else []
    code, text = _run(session, collective, *SMALL, *root, "--backend", "gloo,mpi", "--reference", "--json")
    assert code == 0
    if comm.rank != 0:
        assert text == ""  # only rank 0 prints
        return
    doc = json.loads(text)
    assert (doc["version"], doc["tool"], doc["collective"]) == (1, "hpcdist bench", collective)
    assert doc["config"] == {
        "minimum_bytes": 4,
        "maximum_bytes": 4096,
        "step_factor": 8,
        "warmup_iters": 1,
        "iterations": 2,
        "rounds": 2,
        "validation": 1,
        "reference": True,
        "backends": ["gloo", "mpi"],
    }
    env = doc["environment"]
    assert (env["backend"], env["world_size"], env["dtype"], env["launcher"]) == (
        "gloo",
        comm.size,
        "float32",
        expected_launcher,
    )
    assert env["torch"] and env["mpi4py"] and env["mpi_library"] and env["hpcdist"]
    assert [d["rank"] for d in doc["devices"]] == list(range(comm.size))
    impls = ["torch/gloo", "torch/mpi4py", "raw-mpi4py", "torch-floor", "raw-again"]
    assert [r["impl"] for r in doc["results"]] == impls * 4
    for row in doc["results"]:  # the floor's rows too: its raw mpi4py call moves the data it is checked on
        assert set(row) == {"size", "count", "type", "redop", "root", "impl", "out_of_place", "in_place"}
        assert (row["type"], row["redop"]) == ("float", "sum" if COLLECTIVES[collective].reduces else "none")
        assert row["root"] == (comm.size - 1 if COLLECTIVES[collective].rooted else -1)
        assert row["out_of_place"]["nwrong"] == 0
        assert row["in_place"]["nwrong"] == (0 if COLLECTIVES[collective].checks_in_place else None)
        for variant in ("out_of_place", "in_place"):
            assert row[variant]["time"] > 0 and row[variant]["alg_bw"] >= 0 and row[variant]["bus_bw"] >= 0
    assert doc["out_of_bounds"] == {"count": 0, "okay": True}
    assert list(doc["average_bus_bandwidth"]) == impls
    assert len(doc["comparisons"]) == (4 if collective == "all_reduce" else 0)


@pytest.mark.parametrize(
    ("collective", "op", "dtype"),
    [
        ("all_reduce", "prod", "float16"),
        ("all_reduce", "min", "int8"),
        ("all_reduce", "avg", "float64"),
        ("reduce_scatter", "max", "int32"),
        ("reduce_scatter", "avg", "bfloat16"),
        ("reduce", "sum", "uint8"),
    ],
)
def test_ops_and_dtypes_are_right(session, comm, collective: str, op: str, dtype: str) -> None:
    code, text = _run(session, collective, *SMALL, "--op", op, "--dtype", dtype, "--json")
    assert code == 0
    if comm.rank == 0:
        assert all(
            row["out_of_place"]["nwrong"] == 0 == row["in_place"]["nwrong"] for row in json.loads(text)["results"]
        )


def test_the_table_is_nccl_tests_layout_on_rank_0_only(session, comm) -> None:
    code, text = _run(session, "all_gather", "-b", "1K", "-e", "3K", "-i", "1K", "-n", "2", "-w", "1")
    assert code == 0
    if comm.rank != 0:
        assert text == ""
        return
    lines = text.splitlines()
    assert lines[1] == "# Collective test starting: all_gather"
    assert sum(line.startswith("#  Rank ") for line in lines) == comm.size
    rows = [line.split() for line in lines if not line.startswith("#")]
    per_rank = [1024 // 4 // comm.size, 2048 // 4 // comm.size, 3072 // 4 // comm.size]
    assert [(int(r[0]), int(r[1])) for r in rows] == [(c * comm.size * 4, c) for c in per_rank]
    assert all(r[2:5] == ["float", "none", "-1"] and r[8] == "0" and r[12] == "0" for r in rows)
    assert "# Out of bounds values : 0 OK" in lines
    assert any(line.startswith("# Avg bus bandwidth    : ") for line in lines)


def test_a_wrong_result_is_counted_and_fails_the_run(session, comm, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcdist.bench.impl import TorchImpl

    real = TorchImpl.result
    monkeypatch.setattr(TorchImpl, "result", lambda self: real(self) + (comm.rank == 0))
    code, text = _run(session, "all_reduce", "-b", "64", "-e", "64", "-n", "1", "-w", "0")
    assert code == 1
    if comm.rank == 0:
        row = next(line.split() for line in text.splitlines() if not line.startswith("#"))
        assert (row[8], row[12]) == ("16", "16")
        assert "# Out of bounds values : 2 FAILED" in text.splitlines()


def test_a_root_outside_the_job_is_a_usage_error_on_every_rank(session, comm) -> None:
    with pytest.raises(UsageError, match=f"--root {comm.size} is not a rank of this {comm.size}-rank job"):
        _run(session, "broadcast", *SMALL, "--root", str(comm.size))
