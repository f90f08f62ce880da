"""`hpcdist bench startup`'s pure parts: the checked options, the interleaved jobs, the stop rules, the fit."""

from __future__ import annotations

import math
import re

import pytest

from hpcdist.bench.startup import (
    DEFAULT_RANKS,
    ROWS,
    Job,
    Launchers,
    Point,
    StartupPlan,
    Stops,
    job_argv,
    memory_verdict,
    point_from_ranks,
    points_from_json,
    schedule,
    startup_plan,
    summarise,
    table_lines,
)
from hpcdist.bench.startup_model import (
    STORE_ANCHOR,
    Cluster,
    RowModel,
    check_lines,
    fit_models,
    fit_row,
    free_cores,
    model_lines,
    nonneg_line,
)
from hpcdist.cli import build_parser, main
from hpcdist.cli.diagnose import bench_options
from hpcdist.errors import UsageError


def _plan(*argv: str) -> StartupPlan:
    return startup_plan(bench_options(build_parser().parse_args(["bench", "startup", *argv])))


def test_the_defaults_are_every_row_at_1_to_256_ranks_three_times() -> None:
    plan = _plan()
    assert plan == StartupPlan(DEFAULT_RANKS, tuple(ROWS), 3, 300.0)
    assert DEFAULT_RANKS == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert _plan("--ranks", "2,8", "--rows", "mpirun,hpcdist", "--repeats", "5", "--timeout", "60") == StartupPlan(
        (2, 8), ("mpirun", "hpcdist"), 5, 60.0
    )


PLAIN_MPIRUN = ["/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "^ofi", "-np", "4"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ranks", "1,x"], "--ranks 1,x: give rank counts as whole numbers separated by commas"),
        (["--ranks", "0,2"], "--ranks 0,2: 0 is not between 1 and 4096 ranks"),
        (["--ranks", "4,2"], "--ranks 4,2: give each count once, smallest first"),
        (["--ranks", "2,2"], "--ranks 2,2: give each count once"),
        (["--rows", "hpcdist,srun"], "--rows hpcdist,srun: unknown row 'srun'; give one or more of hpcdist, mpirun"),
        (["--rows", "mpirun,mpirun"], "names a row twice"),
        (["-b", "8"], "bench startup times whole jobs, so -b means nothing to it; drop it"),
        (["--backend", "mpi", "--reference"], "so --reference, --backend means nothing to it"),
        (["--hosts", "n1,n1"], "--hosts n1,n1: it names a host twice; give host names, each once"),
        (["--hosts", "n1,-x"], "--hosts n1,-x: '-x' is no host name"),
        (
            ["--hosts", "n1,n2"],
            "rows mpirun-gloo, torchrun-gloo start on one host only; leave them out with --rows "
            "hpcdist,mpirun,hpcdist-gloo$",
        ),
    ],
)
def test_mistakes_are_usage_errors_that_say_how_to_fix_them(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _plan(*argv)


def test_the_cli_refuses_startup_options_for_a_collective_and_a_run_under_a_launcher(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["bench", "all_reduce", "--ranks", "2"]) == 2
    assert "hpcdist: error: --ranks belong to `hpcdist bench startup`" in capsys.readouterr().err
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert main(["bench", "startup", "--ranks", "1"]) == 2
    assert "launches its own jobs; run it directly, not under a launcher" in capsys.readouterr().err


def test_jobs_interleave_rank_counts_and_rows_rotating_the_rows_each_repeat() -> None:
    plan = StartupPlan((1, 4), ("a", "b", "c"), 3, 10.0)
    order = [(job.repeat, job.ranks, job.row) for job in schedule(plan)]
    assert order == [
        *[(0, 1, r) for r in "abc"],
        *[(0, 4, r) for r in "abc"],
        *[(1, 1, r) for r in "bca"],
        *[(1, 4, r) for r in "bca"],
        *[(2, 1, r) for r in "cab"],
        *[(2, 4, r) for r in "cab"],
    ]


def test_a_row_that_stopped_runs_nothing_at_or_above_that_count_and_keeps_the_lowest_stop() -> None:
    stops = Stops()
    stops.stop("a", 8, "failed")
    assert [stops.stopped(Job(0, n, "a")) for n in (4, 8, 16)] == [False, True, True]
    assert not stops.stopped(Job(0, 16, "b"))
    stops.stop("a", 16, "later")
    stops.stop("a", 4, "timeout")
    assert stops.at == {"a": (4, "timeout")}


def test_memory_stops_a_job_that_would_take_more_than_its_share_of_what_is_available() -> None:
    assert memory_verdict(64, None, 0.0, 0, 1000.0) is None  # nothing measured yet
    assert memory_verdict(32, 250.0, 4000.0, 16, 16_000.0) is None  # 8,000 MB of 9,600 allowed
    verdict = memory_verdict(64, 250.0, 8000.0, 32, 16_000.0)
    assert verdict == (
        "64 ranks need about 15.6 GB (the largest rank 250 MB, the others 250 MB each, measured at 32), "
        "more than 60% of the 15.6 GB available"
    )
    # one large rank 0 (torch for the store) and small others: the others' mean scales, rank 0 counts once
    assert memory_verdict(256, 240.0, 240.0 + 31 * 30.0, 32, 16_000.0) is None  # 240 + 255 x 30 = 7,890 MB
    assert memory_verdict(1024, 240.0, 240.0 + 31 * 30.0, 32, 16_000.0) is not None


WHERE = Launchers("/py", "/bin/hpcdist", "/bin/mpirun", "/bin/torchrun", "/p/probe.py", root=True)


@pytest.mark.parametrize(
    ("row", "argv"),
    [
        (
            "hpcdist",
            ["/bin/hpcdist", "mpirun", "--oversubscribe", "-np", "4", "--", "/py", "/p/probe.py", "pass", "/d"],
        ),
        (
            "mpirun",
            [*PLAIN_MPIRUN, "/py", "/p/probe.py", "mpi", "/d"],
        ),
        (
            "hpcdist-gloo",
            ["/bin/hpcdist", "mpirun", "--oversubscribe", "-np", "4", "--", "/py", "/p/probe.py", "torch", "/d"],
        ),
        (
            "mpirun-gloo",
            [*PLAIN_MPIRUN, "/py", "/p/probe.py", "torch", "/d"],
        ),
        ("torchrun-gloo", ["/bin/torchrun", "--standalone", "--nproc-per-node", "4", "/p/probe.py", "torch", "/d"]),
    ],
)
def test_each_row_starts_its_launcher_oversubscribed_on_this_host(row: str, argv: list[str]) -> None:
    assert job_argv(ROWS[row], 4, WHERE, "/d") == argv


def test_over_hosts_each_row_spreads_its_ranks_evenly_and_plain_mpirun_places_them_as_hpcdist_does() -> None:
    plan = _plan("--hosts", "n1,n2,n3,n4", "--rows", "hpcdist,mpirun")
    assert plan.hosts == ("n1", "n2", "n3", "n4")
    spread = ["-H", "n1:3,n2:3,n3:3,n4:3"]  # 10 ranks: 3 slots on each, the last host takes 1
    assert job_argv(ROWS["hpcdist"], 10, WHERE, "/d", plan.hosts)[:7] == [
        "/bin/hpcdist", "mpirun", *spread, "--oversubscribe", "-np", "10"
    ]  # fmt: skip
    assert job_argv(ROWS["mpirun"], 10, WHERE, "/d", plan.hosts)[:8] == [
        "/bin/mpirun", "--allow-run-as-root", *spread, "--map-by", "slot", "--bind-to", "none"
    ]  # fmt: skip


def test_plain_mpirun_asks_for_root_only_as_root() -> None:
    user = Launchers("/py", "/h", "/bin/mpirun", "/t", "/p.py", root=False)
    assert job_argv(ROWS["mpirun"], 2, user, "/d")[:2] == ["/bin/mpirun", "--oversubscribe"]


def _record(rank: int, cpu: float, **phases: float) -> dict:
    return {"rank": rank, "size": 3, "phases": phases, "cpu": cpu, "rss_mb": 100.0 + rank}


def test_a_point_takes_the_last_rank_at_each_phase_and_splits_the_cpu() -> None:
    records = [
        _record(2, 1.0, start=0.5, mpi=0.9, end=1.0),
        _record(0, 3.0, start=0.4, mpi=1.2, end=1.3),
        _record(1, 2.0, start=0.7, mpi=0.8, end=0.9),
    ]
    point = point_from_ranks(Job(1, 3, "mpirun"), 2.5, 7.5, records)
    assert point.phases == {"start": 0.7, "mpi": 1.2, "end": 1.3}
    assert (point.cpu_rank0, point.cpu_rank_median, point.cpu_ranks, point.rss_mb) == (3.0, 2.0, 6.0, 102.0)
    assert (point.cpu_others, point.cpu_launcher) == (1.5, 1.5)
    assert points_from_json([point.as_json()]) == [point]


def _point(row: str, n: int, repeat: int, wall: float) -> Point:
    return Point(row, n, repeat, wall, {"start": wall / 2, "end": wall}, 2.0 * n, 1.0, 1.0, 1.0 * n, 50.0)


def test_the_table_shows_medians_their_spread_and_where_rows_stopped() -> None:
    points = [_point("hpcdist", 2, r, wall) for r, wall in enumerate((3.0, 1.0, 2.0))] + [_point("mpirun", 2, 0, 0.5)]
    summary = summarise(points)
    assert summary[("hpcdist", 2)]["wall"] == 2.0
    assert (summary[("hpcdist", 2)]["low"], summary[("hpcdist", 2)]["high"], summary[("hpcdist", 2)]["repeats"]) == (
        1.0,
        3.0,
        3,
    )
    assert summary[("hpcdist", 2)]["phases"] == {"start": 1.0, "end": 2.0}
    lines = table_lines(["hpcdist", "mpirun"], [2, 4], points, {"mpirun": (4, "ran past the 9 s timeout per job")})
    body = [line.split() for line in lines if not line.startswith("#")]
    assert body == [
        ["hpcdist", "2", "2.00", "1.00-3.00", "1.00", "2.00", "4.00", "1000", "50", "3"],
        ["mpirun", "2", "0.50", "0.50-0.50", "0.25", "0.50", "4.00", "1000", "50", "1"],
    ]
    assert lines[-1] == "# mpirun stopped at 4 ranks: ran past the 9 s timeout per job"


@pytest.mark.parametrize(
    ("xs", "ys", "line"),
    [
        ([1, 2, 3], [3.0, 5.0, 7.0], (1.0, 2.0)),  # the free fit
        ([1, 2, 3], [3.0, 2.0, 1.0], (2.0, 0.0)),  # falling: flat at the mean
        ([1, 2, 3], [0.0, 2.0, 4.0], (0.0, 16 / 14)),  # a negative intercept: through the origin
        ([5, 5], [1.0, 3.0], (2.0, 0.0)),  # one x: the mean
    ],
)
def test_lines_are_least_squares_with_no_term_below_zero(xs: list[int], ys: list[float], line: tuple) -> None:
    assert nonneg_line(xs, ys) == pytest.approx(line)


TRUE = RowModel("hpcdist", 0.5, 0.25, 0.3, 0.001, 1.2, 0.01, 0.2, 0.004, 2, 256, 0.0)


def _summary_of(model: RowModel, ns: list[int]) -> dict[int, dict[str, float]]:
    """What a run would measure if the machine were exactly the model."""
    out = {}
    for n in ns:
        others = model.process + model.peers * n
        extra = model.rank0_fixed + model.rank0 * (n - 1) if n > 1 else 0.0
        launcher = model.launcher + model.launcher_per_rank * n
        total = n * others + extra + launcher
        assert total == pytest.approx(model.cpu(n))
        out[n] = {
            "wall": model.wait + model.wait_log * math.log2(n) + total / min(2, n),
            "cpu_total": total,
            "cpu_rank0": others + extra,
            "cpu_others": others,
            "cpu_launcher": launcher,
        }
    return out


def test_the_fit_recovers_the_terms_that_made_the_points() -> None:
    got = fit_row("hpcdist", _summary_of(TRUE, [1, 2, 4, 8, 16, 32, 64, 128, 256]), 2)
    assert got is not None
    assert got.as_json() == pytest.approx({**TRUE.as_json(), "worst": 0.0}, abs=1e-9)
    assert fit_row("hpcdist", _summary_of(TRUE, [4]), 2) is None  # one count fits nothing


def test_the_check_predicts_the_largest_count_from_a_quarter_of_it() -> None:
    summary = {("hpcdist", n): s for n, s in _summary_of(TRUE, [1, 2, 4, 8, 16, 32, 64, 256]).items()}
    summary["hpcdist", 256] = {**summary["hpcdist", 256], "wall": summary["hpcdist", 256]["wall"] * 1.25}
    summary["mpirun", 4] = summary["hpcdist", 4]  # one count: nothing to check
    head, line = check_lines(["hpcdist", "mpirun"], summary, 2)
    assert head == "# check: the model fitted to the smaller counts, against the largest"
    found = re.fullmatch(r"  hpcdist +fitted to 1-64 ranks, predicts (\S+) s at 256; measured (\S+) s \(-20%\)", line)
    assert found is not None, line
    assert [float(found[1]), float(found[2])] == pytest.approx([TRUE.here(256), TRUE.here(256) * 1.25], abs=0.01)


def test_on_a_cluster_per_rank_costs_are_paid_per_node_and_rank_0_s_serially() -> None:
    terms = TRUE.terms(10_000, Cluster(8, 64))
    assert terms == pytest.approx(
        {
            "wait": 0.5 + 0.25 * math.log2(10_000),
            "process": 0.3,
            "peers": 0.001 * 10_000,
            "rank0": 1.2 + 0.01 * 9_999,
            "launcher": 0.2 + 0.004 * 8,
            "store": 0.0,
        }
    )
    assert TRUE.terms(4, Cluster(128, 32))["process"] == 0.3  # 4 ranks on one node's 32 cores
    assert TRUE.terms(256, Cluster(128, 32))["process"] == pytest.approx(0.3 * 4)  # 128 ranks on 32 cores
    lines = model_lines([TRUE], [10_000], {"hpcdist": Cluster(8, 64)})
    total, rest = sum(terms.values()), sum(terms.values()) - terms["peers"]
    assert lines[-1] == (
        f"  hpcdist          10000 ranks (8 ranks per node, 64 cores per node): {total:.1f} s, rank0 "
        f"{100 * terms['rank0'] / total:.0f}%; without peers {rest:.1f} s, rank0 {100 * terms['rank0'] / rest:.0f}%"
    )


def test_other_work_on_the_host_leaves_the_job_fewer_cores() -> None:
    point = Point("mpirun", 4, 0, 2.0, {}, 3.0, 1.0, 1.0, 2.0, 50.0, cpu_machine=5.0)
    assert point.others_busy == 1.0  # 2 CPU seconds of other work in 2 s
    assert Point("mpirun", 4, 0, 2.0, {}, 3.0, 1.0, 1.0, 2.0, 50.0).others_busy == 0.0  # not measured
    assert [free_cores(2, busy, n) for busy, n in ((0.0, 4), (1.0, 4), (0.0, 1), (5.0, 4))] == [2, 1.0, 1, 0.25]
    quiet, busy = TRUE.here(64), TRUE.here(64, busy=1.0)
    assert busy - quiet == pytest.approx(TRUE.cpu(64) / 1 - TRUE.cpu(64) / 2)


def test_the_store_torchrun_s_agent_serves_is_serial_on_a_cluster_at_what_rank_0_pays_to_serve_it() -> None:
    ns = [1, 2, 4, 8, 16, 32]
    rows = {  # rank 0's per-rank cost: where it serves the store (1.0 and 1.2 ms), and where the agent does (0.2 ms)
        "hpcdist-gloo": RowModel("hpcdist-gloo", 0.1, 0.1, 1.0, 0.001, 0.02, 0.0010, 0.1, 0.04, 2, 32, 0.0),
        "mpirun-gloo": RowModel("mpirun-gloo", 0.1, 0.1, 1.0, 0.001, 0.02, 0.0012, 0.1, 0.47, 2, 32, 0.0),
        "torchrun-gloo": RowModel("torchrun-gloo", 0.6, 0.1, 1.0, 0.001, 0.0, 0.0002, 1.3, 0.47, 2, 32, 0.0),
    }
    summary = {(row, n): s for row, model in rows.items() for n, s in _summary_of(model, ns).items()}
    got = {m.row: m for m in fit_models(list(rows), summary, 2)}
    assert got["torchrun-gloo"].store == pytest.approx(0.0010 - 0.0002)  # the least rank-0 cost, less its own
    assert got["hpcdist-gloo"].store == got["mpirun-gloo"].store == 0.0  # theirs is in rank0 already
    torchrun = got["torchrun-gloo"].terms(100_000, Cluster(8, 64))
    assert torchrun["store"] == pytest.approx(0.0008 * 100_000)  # every rank, not the agent's node's 8
    assert torchrun["launcher"] == pytest.approx(1.3 + 0.47 * 8)
    alone = {m.row: m for m in fit_models(["torchrun-gloo"], summary, 2)}
    assert alone["torchrun-gloo"].store == 0.0  # nothing measured it: no store term
    lines = model_lines(list(got.values()), [10_000], {row: Cluster(8, 64) for row in rows})
    assert "  torchrun-gloo   8.00e-04" in lines
    assert lines[-1].startswith("  torchrun-gloo    10000 ranks (8 ranks per node, 64 cores per node): ")
    assert lines[-1].endswith(f"; anchor {STORE_ANCHOR * 10_000:.1f} s")  # the published figure, beside the model's
    assert pytest.approx(100.0) == STORE_ANCHOR * 96_000
    plain = model_lines([TRUE], [10_000], {"hpcdist": Cluster(128, 128)})
    assert not any("anchor" in line for line in plain if line.startswith("  "))  # no store, no anchor
