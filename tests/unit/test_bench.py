"""`hpcdist bench`'s pure parts: sizes, byte counts, bus factors, nccl-tests' exact lines, checked values."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from typing import cast

import numpy as np
import pytest

from hpcdist.bench.data import count_wrong, expected_values, send_values
from hpcdist.bench.ddp import (
    DdpPlan,
    DdpResult,
    ddp_lines,
    ddp_plan_from_options,
    mlp_parameters,
)
from hpcdist.bench.fmt import (
    FLOOR,
    RAW_AGAIN,
    Comparison,
    Result,
    compare,
    float_str,
    footer_lines,
    format_row,
    header_lines,
    human_bytes,
)
from hpcdist.bench.plan import (
    COLLECTIVES,
    BenchOptions,
    Counts,
    bandwidths,
    byte_counts,
    parse_backends,
    parse_size,
    plan_from_options,
    round_sizes,
    size_sweep,
)
from hpcdist.cli import build_parser
from hpcdist.cli.diagnose import bench_options
from hpcdist.errors import UsageError


def _args(*argv: str) -> BenchOptions:
    return bench_options(build_parser().parse_args(["bench", *argv]))


def _plan(*argv: str):
    return plan_from_options(_args(*argv))


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("8", 8),
        ("0", 0),
        ("1K", 1024),
        ("64k", 65536),
        ("128M", 128 * 2**20),
        ("1G", 2**30),
        ("1.5K", 1536),
        ("64KiB", 65536),
        ("16B", 16),
        (" 2M ", 2 * 2**20),
        (".5K", 512),
    ],
)
def test_sizes_use_nccl_tests_binary_units(text: str, size: int) -> None:
    assert parse_size(text, "-b") == size


@pytest.mark.parametrize("text", ["12Q", "", "-1", "1.3", "K", "1e3", "2 M B"])
def test_a_bad_size_says_which_flag_and_what_to_write(text: str) -> None:
    with pytest.raises(UsageError, match=r"-e .* is not a size in bytes; write e\.g\. -e 8, -e 64K"):
        parse_size(text, "-e")


@pytest.mark.parametrize(
    ("args", "sizes"),
    [
        ((8, 128, 2, 0), (8, 16, 32, 64, 128)),
        ((8, 100, 2, 0), (8, 16, 32, 64)),
        ((1, 100, 10, 0), (1, 10, 100)),
        ((0, 3000, 1, 1000), (0, 1000, 2000, 3000)),
        ((10, 35, 1, 10), (10, 20, 30)),
        ((32 * 2**20, 32 * 2**20, 1, 2**20), (32 * 2**20,)),
    ],
)
def test_the_size_sweep_multiplies_or_adds_like_nccl_tests(args: tuple[int, ...], sizes: tuple[int, ...]) -> None:
    assert size_sweep(*args) == sizes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((128, 8, 2, 0), "-b 128 is larger than -e 8; give the smaller size to -b"),
        ((0, 8, 2, 0), "-b 0 with -f never grows"),
        ((0, 8, 1, 0), "-i 0 never grows"),
    ],
)
def test_a_sweep_that_cannot_work_is_a_usage_error(args: tuple[int, ...], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        size_sweep(*args)


@pytest.mark.parametrize(
    ("collective", "counts"),
    [
        ("all_reduce", Counts(25, 25, 25)),
        ("all_gather", Counts(6, 24, 6)),
        ("reduce_scatter", Counts(24, 6, 6)),
        ("broadcast", Counts(25, 25, 25)),
        ("reduce", Counts(25, 25, 25)),
        ("alltoall", Counts(24, 24, 6)),
        ("sendrecv", Counts(25, 25, 25)),
    ],
)
def test_byte_counts_follow_get_coll_byte_count(collective: str, counts: Counts) -> None:
    assert byte_counts(collective, 100, 4, 4) == counts


@pytest.mark.parametrize(
    ("collective", "factors"),
    [
        ("all_reduce", (0.0, 1.0, 1.5, 1.75)),
        ("all_gather", (0.0, 0.5, 0.75, 0.875)),
        ("reduce_scatter", (0.0, 0.5, 0.75, 0.875)),
        ("alltoall", (0.0, 0.5, 0.75, 0.875)),
        ("broadcast", (1.0, 1.0, 1.0, 1.0)),
        ("reduce", (1.0, 1.0, 1.0, 1.0)),
        ("sendrecv", (1.0, 1.0, 1.0, 1.0)),
    ],
)
def test_bus_bandwidth_factors_are_nccl_tests(collective: str, factors: tuple[float, ...]) -> None:
    assert tuple(COLLECTIVES[collective].bus_factor(n) for n in (1, 2, 4, 8)) == factors


def test_bandwidths_are_bytes_per_nanosecond() -> None:
    assert bandwidths("all_reduce", 2 * 10**9, 2.0, 4) == (1.0, 1.5)
    assert bandwidths("all_gather", 10**9, 0.5, 2) == (2.0, 1.0)
    assert bandwidths("sendrecv", 0, 1e-6, 2) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("value", "width", "text"),
    [
        (0.0, 6, "  0.00"),
        (0.004, 6, "  0.00"),
        (12.345, 7, "  12.35"),
        (627.97, 7, " 627.97"),
        (55497.44, 7, "55497.4"),
        (146686.2, 7, " 146686"),
        (1234567.0, 7, "1234567"),
        (12345678.0, 7, "1.2e+07"),
        (1234.56, 6, "1234.6"),
        (123456.0, 6, "123456"),
        (1234567.0, 6, " 1e+06"),
    ],
)
def test_numbers_print_like_get_float_str(value: float, width: int, text: str) -> None:
    assert float_str(value, width) == text


def test_a_row_is_nccl_tests_line_with_the_impl_column_only_when_comparing() -> None:
    plan = _plan("all_reduce", "-b", "8", "-e", "64M", "-f", "2")
    oop, inp = Result(627.97, 0.0, 0.0, 0), Result(1078.48, 0.0, 0.0, 0)
    assert format_row(8, 2, plan, oop, inp, "torch/gloo") == (
        "           8             2     float     sum      -1   627.97    0.00    0.00       0"
        "  1078.48    0.00    0.00       0  torch/gloo"
    )
    big = Result(214101.3, 0.3134, 0.3134, 0), Result(145672.0, 0.4607, 0.4607, 3)
    assert format_row(67108864, 16777216, plan, *big) == (
        "    67108864      16777216     float     sum      -1   214101    0.31    0.31       0"
        "   145672    0.46    0.46       3"
    )


def test_unchecked_in_place_prints_na_and_rooted_collectives_print_their_root() -> None:
    plan = _plan("alltoall", "-b", "1K", "-e", "1K", "-d", "half")
    assert format_row(1024, 128, plan, Result(10.0, 0.1, 0.05, 0), Result(9.5, 0.11, 0.055, None)) == (
        "        1024           128      half    none      -1    10.00    0.10    0.05       0"
        "     9.50    0.11    0.06    N/A"
    )
    plan = _plan("reduce", "-o", "max", "-r", "1", "-d", "int8")
    assert format_row(4, 4, plan, Result(1.0, 0.0, 0.0, 0), Result(1.0, 0.0, 0.0, 0)).startswith(
        "           4             4      int8     max       1"
    )


def test_header_lines_are_nccl_tests() -> None:
    plan = _plan("all_gather", "-b", "8", "-e", "128M", "-f", "2", "-n", "20", "-w", "5")
    lines = header_lines(
        plan, "0.1.0 backend gloo nRanks 2", ["#  Rank  0 Group  0 Pid     42 on       node device cpu"], False
    )
    assert lines == [
        "# hpcdist bench 0.1.0 backend gloo nRanks 2",
        "# Collective test starting: all_gather",
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 1 graph: 0",
        "#",
        "# Using devices",
        "#  Rank  0 Group  0 Pid     42 on       node device cpu",
        "#",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw"
        "  #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)"
        "  (GB/s)",
    ]
    stepped = header_lines(_plan("broadcast", "-b", "0", "-e", "3K", "-i", "1K"), "v", [], True)
    assert "step: 1024(bytes)" in stepped[2] and stepped[7].endswith("#wrong  impl")


def test_footer_lines_are_nccl_tests_plus_one_line_per_reference() -> None:
    plan = _plan("all_reduce")
    assert footer_lines(plan, 0, {"torch/gloo": 0.192857}) == [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 0.192857",
        "#",
        "# Collective test concluded: all_reduce",
        "#",
    ]
    assert footer_lines(plan, 2, {"torch/gloo": 1.5, "raw-mpi4py": 2.25})[:3] == [
        "# Out of bounds values : 2 FAILED",
        "# Avg bus bandwidth    : 1.5",
        "# Avg bus bw (raw-mpi4py) : 2.25",
    ]


def test_the_defaults_are_nccl_tests() -> None:
    plan = _plan("all_reduce")
    assert (plan.sizes, plan.iters, plan.warmup, plan.check, plan.op, plan.root) == ((32 * 2**20,), 20, 5, 1, "sum", -1)
    assert (plan.dtype, plan.type_name, plan.elsize, plan.backend) == ("float32", "float", 4, "auto")
    assert (_plan("broadcast").op, _plan("broadcast").root, _plan("reduce", "-o", "min").op) == ("none", 0, "min")
    assert _plan("all_reduce", "-d", "double").dtype == "float64"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["all_gather", "--op", "sum"], "--op sum: all_gather moves data and does not reduce; drop --op"),
        (["all_reduce", "--root", "1"], "--root 1: all_reduce has no root .*; drop --root"),
        (["broadcast", "--root", "-2"], "--root '-2' is not a whole number"),
        (["all_reduce", "--op", "xor"], "unknown --op 'xor' for all_reduce; choose one of sum, prod, min, max, avg"),
        (["all_reduce", "-d", "uint64"], "unknown --dtype 'uint64'; choose one of float32, float64"),
        (["all_reduce", "-d", "bfloat16", "--reference"], "numpy has no bfloat16"),
        (["all_reduce", "-o", "avg", "--reference"], "MPI has no avg reduction"),
        (["all_reduce", "-b", "1M", "-e", "8"], "-b 1048576 is larger than -e 8"),
        (["all_reduce", "-b", "lots"], "--minbytes 'lots' is not a size in bytes"),
        (["all_reduce", "-n", "0"], "--iters must be at least 1, got 0"),
        (["all_reduce", "-f", "0"], "--stepfactor must be at least 1, got 0"),
        (["all_reduce", "-i", "0"], "-i 0 must be a positive number of bytes"),
        (
            ["all_reduce", "-n", "4", "--rounds", "5"],
            "--rounds 5 must be between 1 and -n \\(4\\).*raise -n or lower --rounds",
        ),
        (["all_reduce", "--rounds", "0"], "--rounds must be at least 1, got 0"),
    ],
)
def test_mistakes_are_usage_errors_that_say_how_to_fix_them(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _plan(*argv)


@pytest.mark.parametrize(
    ("argv", "rounds"),
    [
        ((), 1),
        (("--backend", "mpi,gloo"), 5),
        (("--reference",), 5),
        (("--reference", "-n", "3"), 3),
        (("--rounds", "4"), 4),
        (("--backend", "mpi,gloo", "--rounds", "1"), 1),
        (("--without-forensics",), 5),
    ],
)
def test_rounds_default_to_five_only_when_implementations_are_compared(argv: tuple[str, ...], rounds: int) -> None:
    assert _plan("all_reduce", *argv).rounds == rounds


def test_rounds_split_the_iterations_nearly_evenly_and_the_header_says_so() -> None:
    assert round_sizes(10, 3) == [4, 3, 3]
    assert round_sizes(20, 5) == [4] * 5
    assert round_sizes(1, 1) == [1]
    lines = header_lines(_plan("all_reduce", "-n", "10", "--rounds", "3"), "v", [], False)
    assert "# time: median of 3 rounds (10 iters split), interleaved across implementations" in lines
    assert not any(line.startswith("# time:") for line in header_lines(_plan("all_reduce"), "v", [], False))


def test_importing_the_bench_module_does_not_import_torch() -> None:
    code = (
        "import sys, hpcdist.bench.run, hpcdist.bench.fmt, hpcdist.bench.plan, hpcdist.bench.ddp, "
        "hpcdist.bench.groups, hpcdist.bench.impl; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize(
    ("text", "backends"),
    [
        ("auto", ("auto",)),
        ("mpi,gloo", ("mpi", "gloo")),
        ("gloo, mpi", ("gloo", "mpi")),
        ("nccl,gloo,mpi", ("nccl", "gloo", "mpi")),
    ],
)
def test_backend_takes_a_comma_list_whose_first_is_the_default_group(text: str, backends: tuple[str, ...]) -> None:
    assert parse_backends(text) == backends
    plan = _plan("all_reduce", "--backend", text)
    assert (plan.backends, plan.backend) == (backends, backends[0])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "mpi,foo",
            "--backend mpi,foo: unknown backend 'foo'; give one or more of auto, gloo, nccl, mpi separated by "
            "commas, e.g. --backend mpi,gloo",
        ),
        ("mpi,,gloo", "--backend mpi,,gloo: unknown backend '' (an empty name); give one or more of"),
        ("gloo,mpi,gloo", "--backend gloo,mpi,gloo names gloo twice; give each backend once"),
    ],
)
def test_a_bad_backend_list_is_a_usage_error(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        _plan("all_reduce", "--backend", text)


def test_each_size_prints_one_row_per_implementation() -> None:
    plan = _plan("all_reduce", "-b", "8", "-e", "16M", "-f", "4", "--backend", "mpi,gloo", "--reference")
    rows = [
        format_row(1048576, 262144, plan, Result(412.5, 2.542, 2.542, 0), Result(398.1, 2.634, 2.634, 0), impl)
        for impl in ("torch/mpi4py", "torch/gloo", "raw-mpi4py")
    ]
    floor = Result(401.0, 2.615, 2.615, None)  # a row not checked (-c 0) says N/A
    rows.append(format_row(1048576, 262144, plan, floor, floor, FLOOR))
    assert rows == [
        "     1048576        262144     float     sum      -1   412.50    2.54    2.54       0   398.10    2.63    2.63"
        "       0  torch/mpi4py",
        "     1048576        262144     float     sum      -1   412.50    2.54    2.54       0   398.10    2.63    2.63"
        "       0  torch/gloo",
        "     1048576        262144     float     sum      -1   412.50    2.54    2.54       0   398.10    2.63    2.63"
        "       0  raw-mpi4py",
        "     1048576        262144     float     sum      -1   401.00    2.62    2.62    N/A   401.00    2.62    2.62"
        "    N/A  torch-floor",
    ]


def _row(size: int, impl: str, time_us: float, busbw: float) -> dict:
    """In place as given; out of place 3x slower, which the comparison must ignore."""
    slower = Result(3 * time_us, busbw / 3, busbw / 3, 0).as_json()
    return {"size": size, "impl": impl, "out_of_place": slower, "in_place": Result(time_us, busbw, busbw, 0).as_json()}


def test_the_comparison_is_in_place_busbw_over_large_rows_and_latency_at_the_smallest() -> None:
    rows = [
        _row(size, impl, time_us, bw)
        for size, times in (
            (8, {"torch/mpi4py": (12.34, 0.0), "torch/gloo": (350.0, 0.0), "raw-mpi4py": (3.06, 0.0)}),
            (262144, {"torch/mpi4py": (200.0, 1.0), "torch/gloo": (900.0, 0.2), "raw-mpi4py": (80.0, 9.0)}),
            (1048576, {"torch/mpi4py": (400.0, 2.91), "torch/gloo": (1500.0, 0.6), "raw-mpi4py": (380.0, 3.0)}),
            (4194304, {"torch/mpi4py": (1400.0, 3.0), "torch/gloo": (5000.0, 0.7), "raw-mpi4py": (1300.0, 3.1)}),
        )
        for impl, (time_us, bw) in times.items()
    ]
    mpi, gloo = compare(rows, "raw-mpi4py")
    ratio = cast(float, pytest.approx(5.91 / 6.1))  # compares as the float it approximates
    assert mpi == Comparison("torch/mpi4py", "raw-mpi4py", ratio, 1048576, 8, 12.34, 3.06)
    assert mpi.line() == "# torch/mpi4py vs raw-mpi4py in place: busbw 97% at >= 1 MiB, 8 B latency 12.3 us vs 3.1 us"
    assert gloo.line() == "# torch/gloo vs raw-mpi4py in place: busbw 21% at >= 1 MiB, 8 B latency 350.0 us vs 3.1 us"
    assert mpi.as_json() == {
        "impl": "torch/mpi4py",
        "reference": "raw-mpi4py",
        "bus_bw_ratio": pytest.approx(0.9689, abs=1e-4),
        "bus_bw_from_bytes": 1048576,
        "latency_bytes": 8,
        "latency": 12.34,
        "reference_latency": 3.06,
        "floor_latency": None,
    }
    small = [row for row in rows if row["size"] <= 262144]  # no row reaches 1 MiB: compare at the largest
    assert compare(small, "raw-mpi4py")[0].line() == (
        "# torch/mpi4py vs raw-mpi4py in place: busbw 11% at >= 256 KiB, 8 B latency 12.3 us vs 3.1 us"
    )
    assert compare([row for row in rows if row["impl"] != "raw-mpi4py"], "raw-mpi4py") == ()
    idle = [_row(8, "torch/gloo", 5.0, 0.0), _row(8, "raw-mpi4py", 2.0, 0.0)]
    assert (
        compare(idle, "raw-mpi4py")[0].line()
        == "# torch/gloo vs raw-mpi4py in place: busbw n/a at >= 8 B, 8 B latency 5.0 us vs 2.0 us"
    )


def test_the_torch_backends_latency_is_also_given_against_the_floor_and_raw_again_is_raw_against_itself() -> None:
    rows = [
        _row(size, impl, time_us, bw)
        for size, times in (
            (
                8,
                {
                    "torch/mpi4py": (7.0, 0.0),
                    "torch/gloo": (350.0, 0.0),
                    "raw-mpi4py": (1.3, 0.0),
                    FLOOR: (6.3, 0.0),
                    RAW_AGAIN: (1.4, 0.0),
                },
            ),
            (
                1048576,
                {
                    "torch/mpi4py": (400.0, 2.9),
                    "torch/gloo": (1500.0, 0.6),
                    "raw-mpi4py": (380.0, 3.0),
                    FLOOR: (384.0, 2.95),
                    RAW_AGAIN: (390.0, 2.91),
                },
            ),
        )
        for impl, (time_us, bw) in times.items()
    ]
    mpi, gloo, floor, again = compare(rows, "raw-mpi4py")
    assert mpi.line() == (
        "# torch/mpi4py vs raw-mpi4py in place: busbw 97% at >= 1 MiB, 8 B latency 7.0 us vs 1.3 us, "
        "1.11x the floor (6.3 us)"
    )
    assert gloo.line().endswith("8 B latency 350.0 us vs 1.3 us, 55.56x the floor (6.3 us)")
    assert floor.line() == "# torch-floor vs raw-mpi4py in place: busbw 98% at >= 1 MiB, 8 B latency 6.3 us vs 1.3 us"
    assert (mpi.as_json()["floor_latency"], floor.as_json()["floor_latency"]) == (6.3, None)
    assert again.line() == "# raw-again vs raw-mpi4py in place: busbw 97% at >= 1 MiB, 8 B latency 1.4 us vs 1.3 us"
    assert again.as_json()["floor_latency"] is None


def test_the_footer_gives_every_impl_its_average_then_the_comparisons() -> None:
    plan = _plan("all_reduce", "--backend", "mpi,gloo", "--reference")
    comparisons = (
        Comparison("torch/mpi4py", "raw-mpi4py", 0.97, 1048576, 8, 12.34, 3.06),
        Comparison("torch/gloo", "raw-mpi4py", 0.2, 1048576, 8, 350.0, 3.06),
    )
    assert footer_lines(plan, 0, {"torch/mpi4py": 0.777, "torch/gloo": 0.163, "raw-mpi4py": 1.65}, comparisons) == [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 0.777",
        "# Avg bus bw (torch/gloo) : 0.163",
        "# Avg bus bw (raw-mpi4py) : 1.65",
        "# torch/mpi4py vs raw-mpi4py in place: busbw 97% at >= 1 MiB, 8 B latency 12.3 us vs 3.1 us",
        "# torch/gloo vs raw-mpi4py in place: busbw 20% at >= 1 MiB, 8 B latency 350.0 us vs 3.1 us",
        "#",
        "# Collective test concluded: all_reduce",
        "#",
    ]


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (8, "8 B"),
        (1000, "1000 B"),
        (4096, "4 KiB"),
        (1536, "1536 B"),
        (2**20, "1 MiB"),
        (16 * 2**20, "16 MiB"),
        (2**30, "1 GiB"),
    ],
)
def test_sizes_in_summaries_are_binary_units(size: int, text: str) -> None:
    assert human_bytes(size) == text


def test_the_ddp_model_is_a_fixed_two_million_parameter_mlp() -> None:
    assert mlp_parameters() == 512 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 512 + 512 == 2099712
    assert mlp_parameters((4, 3, 2)) == 4 * 3 + 3 + 3 * 2 + 2


def test_bench_ddp_options() -> None:
    assert ddp_plan_from_options(_args("ddp", "--backend", "mpi,gloo", "-n", "2", "-w", "0")) == DdpPlan(
        ("mpi", "gloo"), 2, 0, False
    )
    assert ddp_plan_from_options(_args("ddp", "--json")) == DdpPlan(("auto",), 20, 5, True)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["-b", "8"],
            "-b is for collective benchmarks; bench ddp takes --backend, -n, -w, --json and --timeout, so drop -b",
        ),
        (["-f", "2"], "-f is for collective benchmarks"),
        (["-d", "float32"], "-d is for collective benchmarks"),
        (["--rounds", "2"], "--rounds is for collective benchmarks"),
        (["--reference"], "--reference times raw mpi4py collectives; bench ddp has no raw-MPI step"),
        (["-n", "0"], "--iters must be at least 1, got 0"),
        (["--backend", "mpi,mpi"], "names mpi twice"),
    ],
)
def test_bench_ddp_mistakes_are_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        ddp_plan_from_options(_args("ddp", *argv))


def test_the_ddp_table_has_a_row_per_backend_and_the_speed_up_over_gloo() -> None:
    results = [DdpResult("torch/mpi4py", (20.0, 22.0, 30.0), 0), DdpResult("torch/gloo", (26.0, 28.6, 25.0), 0)]
    lines = ddp_lines(
        DdpPlan(("mpi", "gloo"), 3, 1, False),
        "0.1.0 backend mpi4py,gloo nRanks 2",
        ["#  Rank  0 Group  0 Pid     42 on       node device cpu"],
        results,
    )
    assert lines == [
        "# hpcdist bench ddp 0.1.0 backend mpi4py,gloo nRanks 2",
        "# DDP step: MLP 512-1024-1024-512 ReLU (2099712 parameters, 8.0 MiB of float32 gradients), batch 32 per "
        "rank, MSE loss, SGD",
        "# warmup iters: 1 iters: 3; a step is forward+backward+optimizer step, timed as the slowest rank, backends "
        "interleaved step by step",
        "#",
        "# Using devices",
        "#  Rank  0 Group  0 Pid     42 on       node device cpu",
        "#",
        "#           impl      mean    median       min       max  #wrong  vs gloo",
        "#                     (ms)      (ms)      (ms)      (ms)",
        "    torch/mpi4py     24.00     22.00     20.00     30.00       0    1.18x",
        "      torch/gloo     26.53     26.00     25.00     28.60       0    1.00x",
        "# Parameters agree on every rank: OK",
        "# torch/mpi4py vs torch/gloo: DDP step speed-up 1.18x (median 22.00 ms vs 26.00 ms)",
        "#",
    ]
    assert results[0].as_json(results[1]) == {
        "impl": "torch/mpi4py",
        "mean_ms": 24.0,
        "median_ms": 22.0,
        "min_ms": 20.0,
        "max_ms": 30.0,
        "step_ms": [20.0, 22.0, 30.0],
        "nwrong": 0,
        "speedup_vs_gloo": pytest.approx(26.0 / 22.0),
    }


def test_without_gloo_there_is_no_speed_up_and_disagreement_fails() -> None:
    lines = ddp_lines(DdpPlan(("mpi",), 1, 0, False), "v", [], [DdpResult("torch/mpi4py", (5.0,), 3)])
    assert lines[-3:] == [
        "    torch/mpi4py      5.00      5.00      5.00      5.00       3        -",
        "# Parameters agree on every rank: 3 values differ, FAILED",
        "#",
    ]


_REDUCE: dict[str, Callable[..., np.ndarray]] = {
    "sum": np.sum,
    "prod": np.prod,
    "min": np.min,
    "max": np.max,
    "avg": np.mean,
}


def _simulate(collective: str, op: str, n: int, counts: Counts, root: int) -> list[np.ndarray | None]:
    """Every rank's output, by doing the collective on every rank's send_values in numpy."""
    sends, c = [send_values(collective, op, r, n, counts) for r in range(n)], counts.param
    outputs: list[np.ndarray | None] = []
    for r in range(n):
        if collective in ("all_reduce", "reduce"):
            out = _REDUCE[op](np.stack(sends), axis=0) if collective == "all_reduce" or r == root else None
        elif collective == "reduce_scatter":
            out = _REDUCE[op](np.stack([s[r * c : (r + 1) * c] for s in sends]), axis=0)
        elif collective == "all_gather":
            out = np.concatenate(sends)
        elif collective == "broadcast":
            out = sends[root]
        elif collective == "alltoall":
            out = np.concatenate([s[r * c : (r + 1) * c] for s in sends])
        else:
            out = sends[(r - 1) % n]
        outputs.append(out)
    return outputs


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize(
    ("collective", "op"),
    [
        *[(c, op) for c in ("all_reduce", "reduce_scatter", "reduce") for op in _REDUCE],
        *[(c, "none") for c in ("all_gather", "broadcast", "alltoall", "sendrecv")],
    ],
)
def test_expected_values_are_what_the_collective_gives(collective: str, op: str, n: int) -> None:
    counts = byte_counts(collective, 4 * 211, 4, n)
    root = n - 1
    for rank, out in enumerate(_simulate(collective, op, n, counts, root)):
        want = expected_values(collective, op, rank, n, counts, root)
        if out is None:
            assert want is None
            continue
        assert want is not None and want.shape == (counts.recv,)
        np.testing.assert_allclose(want, out, rtol=1e-12)
        assert count_wrong(out.astype(np.float32), want, "float32", op) == 0


def test_inputs_differ_between_ranks_so_a_mixup_is_seen() -> None:
    counts = Counts(64, 64, 64)
    for collective in ("all_reduce", "all_gather"):
        values = [send_values(collective, "sum", r, 3, counts) for r in range(3)]
        assert not np.array_equal(values[0], values[1]) and not np.array_equal(values[1], values[2])


def test_count_wrong_counts_each_wrong_element() -> None:
    want = np.array([1.0, 2.0, 3.0, 4.0])
    assert count_wrong(want + np.array([0, 0, 1, 0]), want, "float32", "sum") == 1
    assert count_wrong(want * (1 + 1e-3), want, "float16", "sum") == 0  # within half precision
    assert count_wrong(want * (1 + 1e-2), want, "float16", "sum") == 4
    assert count_wrong(np.array([np.nan, 2.0, 3.0, 4.0]), want, "float64", "sum") == 1
    assert count_wrong(want[:3], want, "float32", "sum") == 4
    assert count_wrong(want, None, "float32", "sum") == 0


def test_integer_sums_wrap_like_the_dtype() -> None:
    assert count_wrong(np.array([-106.0, 44.0]), np.array([150.0, 300.0]), "int8", "sum") == 0
    assert count_wrong(np.array([44.0]), np.array([300.0]), "uint8", "sum") == 0
    assert count_wrong(np.array([2.0]), np.array([2.5]), "int32", "avg") == 0
