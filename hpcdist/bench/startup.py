"""`hpcdist bench startup`'s request and results (pure): the rows, the interleaved jobs, the stop rules, the table.

Each row starts one job per rank count on this host, oversubscribed (or with --hosts spread evenly over those
hosts), and times it from launch to exit; each rank also stamps its phases (bench/startup_probe.py). The jobs run
interleaved across rank counts and rows, repeated, so the machine's noise touches every row alike; a row stops at
the first rank count where a job fails, runs past its timeout, or would not fit in memory. bench/startup_run.py runs
the jobs; bench/startup_model.py fits them.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..records import field, record
from .plan import COLLECTIVE_OPTIONS, BenchOptions, check_counts, parse_rows

__all__ = [
    "DEFAULT_RANKS",
    "PHASES",
    "ROWS",
    "Job",
    "Launchers",
    "Point",
    "Row",
    "StartupPlan",
    "Stops",
    "job_argv",
    "memory_verdict",
    "parse_ranks",
    "point_from_ranks",
    "points_from_json",
    "schedule",
    "startup_plan",
    "summarise",
    "table_lines",
]

DEFAULT_RANKS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_RANKS = 4096  # one host: beyond this the operating system's process limits end the row anyway
PHASES = ("start", "mpi", "torch", "init", "barrier", "end")  # in the order a rank passes them
MEMORY_SHARE = 0.6  # a job may take this share of the memory available when it starts (the host is shared)


@record(frozen=True)
class Row:
    """One way of starting N ranks: its launcher, what each rank runs (a probe mode), and what it shows."""

    name: str
    launcher: str  # "hpcdist", "mpirun" or "torchrun"
    mode: str  # the probe's: "pass", "mpi" or "torch"
    label: str


ROWS = {
    row.name: row
    for row in (
        Row("hpcdist", "hpcdist", "pass", "hpcdist mpirun, a program without torch (the rendezvous alone)"),
        Row("mpirun", "mpirun", "mpi", "plain mpirun, `from mpi4py import MPI` (MPI's own floor)"),
        Row("hpcdist-gloo", "hpcdist", "torch", "hpcdist mpirun, init_process_group(gloo) + barrier"),
        Row("mpirun-gloo", "mpirun", "torch", "plain mpirun, MASTER_ADDR/PORT set by hand, gloo + barrier"),
        Row("torchrun-gloo", "torchrun", "torch", "torchrun --standalone, gloo + barrier"),
    )
}


@record(frozen=True)
class StartupPlan:
    """A checked `hpcdist bench startup` request."""

    ranks: tuple[int, ...]
    rows: tuple[str, ...]
    repeats: int
    timeout: float  # seconds one job may take, from launch to exit
    json: bool = False
    plot: str | None = None
    hosts: tuple[str, ...] = ()  # the hosts each job spreads over (none: this host alone)


_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")
_ONE_HOST_ROWS = ("torchrun-gloo", "mpirun-gloo")  # torchrun starts one host at a time; the other's address is local


def parse_hosts(text: str, rows: Sequence[str]) -> tuple[str, ...]:
    """`--hosts n1,n2` -> the host names, each once; refused with a row that runs on one host only."""
    hosts = tuple(name.strip() for name in text.split(","))
    bad = next((name for name in hosts if not _HOST.fullmatch(name)), None)
    if bad is not None or len(set(hosts)) != len(hosts):
        said = f"{bad!r} is no host name" if bad is not None else "it names a host twice"
        raise UsageError(f"--hosts {text}: {said}; give host names, each once, e.g. --hosts n1,n2")
    alone = [row for row in rows if row in _ONE_HOST_ROWS]
    if alone:
        one = len(alone) == 1
        raise UsageError(
            f"--hosts {text}: {'row' if one else 'rows'} {', '.join(alone)} {'starts' if one else 'start'} on one "
            f"host only; leave {'it' if one else 'them'} out with --rows "
            f"{','.join(row for row in rows if row not in _ONE_HOST_ROWS) or 'hpcdist,mpirun'}"
        )
    return hosts


def parse_ranks(text: str) -> tuple[int, ...]:
    """`--ranks 1,2,4` -> (1, 2, 4): whole numbers from 1 to MAX_RANKS, rising, none twice."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise UsageError(f"--ranks {text}: give rank counts as whole numbers separated by commas, e.g. --ranks 1,2,4")
    ranks = tuple(int(part) for part in parts)
    for n in ranks:
        if not 1 <= n <= MAX_RANKS:
            raise UsageError(f"--ranks {text}: {n} is not between 1 and {MAX_RANKS} ranks; give counts in that range")
    if list(ranks) != sorted(set(ranks)):
        raise UsageError(f"--ranks {text}: give each count once, smallest first (e.g. --ranks 1,2,4,8)")
    return ranks


# the options of the other modes, which bench startup refuses rather than ignores
_FOREIGN = COLLECTIVE_OPTIONS


def startup_plan(options: BenchOptions) -> StartupPlan:
    """Check `hpcdist bench startup`'s options; every mistake is a UsageError."""
    foreign = [flag for flag, name in _FOREIGN if getattr(options, name) is not None]
    foreign += [flag for flag, on in (("--reference", options.reference), ("--report", options.report)) if on]
    foreign += ["--backend"] if options.backend != "auto" else []
    if foreign:
        raise UsageError(
            f"bench startup times whole jobs, so {', '.join(foreign)} means nothing to it; drop it "
            "(it takes --ranks, --rows, --repeats, --hosts, --timeout, --json and --plot)"
        )
    ranks = DEFAULT_RANKS if options.ranks is None else parse_ranks(options.ranks)
    rows = tuple(ROWS) if options.rows is None else parse_rows(options.rows, ROWS)
    repeats = 3 if options.repeats is None else options.repeats
    check_counts((("--repeats", repeats, 1),))
    timeout = 300.0 if options.timeout is None else options.timeout
    hosts = parse_hosts(options.hosts, rows) if options.hosts is not None else ()
    return StartupPlan(ranks, rows, repeats, timeout, options.json, options.plot, hosts)


@record(frozen=True)
class Job:
    """One launch: which repeat, how many ranks, which row."""

    repeat: int
    ranks: int
    row: str


def schedule(plan: StartupPlan) -> list[Job]:
    """Every job in the order it runs: repeat by repeat, rank counts rising, the rows rotated one place per repeat
    so that no row always runs first (on a cold cache) or last."""
    jobs = []
    for repeat in range(plan.repeats):
        turn = repeat % len(plan.rows)
        rows = plan.rows[turn:] + plan.rows[:turn]
        jobs += [Job(repeat, n, row) for n in plan.ranks for row in rows]
    return jobs


@record
class Stops:
    """Where each row stopped and why: a row that stopped at N runs no job of N ranks or more."""

    at: dict[str, tuple[int, str]] = field(default_factory=dict)
    interrupted: str = ""  # where SIGINT or SIGTERM ended the run ("" when it ran to the end)

    def stopped(self, job: Job) -> bool:
        """Whether `job`'s row has stopped at its rank count or below."""
        return job.row in self.at and self.at[job.row][0] <= job.ranks

    def stop(self, row: str, ranks: int, reason: str) -> None:
        """Stop `row` at `ranks` (at the lowest count, if it stopped twice)."""
        if row not in self.at or ranks < self.at[row][0]:
            self.at[row] = (ranks, reason)


def memory_verdict(
    ranks: int, largest_mb: float | None, total_mb: float, measured_at: int, available_mb: float
) -> str | None:
    """Why a job of `ranks` ranks would not fit, given the largest rank's peak memory and the sum of every rank's,
    measured at `measured_at` ranks (the largest rank once, the others' mean for the rest); None if it fits (or
    nothing was measured yet)."""
    if largest_mb is None:
        return None
    rest = (total_mb - largest_mb) / (measured_at - 1) if measured_at > 1 else largest_mb
    need = largest_mb + (ranks - 1) * rest
    if need <= MEMORY_SHARE * available_mb:
        return None
    return (
        f"{ranks} ranks need about {need / 1024:.1f} GB (the largest rank {largest_mb:.0f} MB, the others "
        f"{rest:.0f} MB each, measured at {measured_at}), more than {100 * MEMORY_SHARE:.0f}% of the "
        f"{available_mb / 1024:.1f} GB available"
    )


@record(frozen=True)
class Launchers:
    """The programs a job starts, found on this machine and passed in."""

    python: str
    hpcdist: str
    mpirun: str
    torchrun: str
    probe: str  # the path of bench/startup_probe.py
    root: bool  # Open MPI refuses root without --allow-run-as-root


def job_argv(row: Row, ranks: int, where: Launchers, folder: str, hosts: Sequence[str] = ()) -> list[str]:
    """The command line of one job: `folder` receives each rank's record; with `hosts`, the ranks spread evenly over
    them (-H, as many slots on each as the most any takes)."""
    program = [where.python, where.probe, row.mode, folder]
    each = math.ceil(ranks / len(hosts)) if hosts else 0
    spread = ["-H", ",".join(f"{host}:{each}" for host in hosts)] if hosts else []
    if row.launcher == "hpcdist":
        return [where.hpcdist, "mpirun", *spread, "--oversubscribe", "-np", str(ranks), "--", *program]
    if row.launcher == "torchrun":
        return [where.torchrun, "--standalone", "--nproc-per-node", str(ranks), *program[1:]]
    root = ["--allow-run-as-root"] if where.root else []
    # without Open MPI's fabric probe (btl ofi), as hpcdist mpirun starts it: the rows then differ by hpcdist alone
    placed = [*spread, "--map-by", "slot", "--bind-to", "none"] if hosts else []  # as hpcdist mpirun places them
    return [where.mpirun, *root, *placed, "--oversubscribe", "--mca", "btl", "^ofi", "-np", str(ranks), *program]


@record(frozen=True)
class Point:
    """One finished job: its wall time, when the last rank passed each phase, and where the CPU time went."""

    row: str
    ranks: int
    repeat: int
    wall: float  # seconds from launch to the launcher's exit
    phases: dict[str, float]  # phase -> seconds from launch until the last rank passed it
    cpu_total: float  # every process of the job, launcher included (the launcher's reaped children's rusage)
    cpu_rank0: float
    cpu_rank_median: float
    cpu_ranks: float  # the ranks' sum
    rss_mb: float  # the largest rank's peak resident memory
    cpu_machine: float = 0.0  # every process on the host while the job ran (/proc/stat), the job's included
    rss_sum_mb: float = 0.0  # every rank's peak resident memory, summed (0: not recorded)
    hosts: int = 1  # the hosts its ranks ran on

    @property
    def others_busy(self) -> float:
        """How many cores other work kept busy, on average, while the job ran."""
        return max(0.0, self.cpu_machine - self.cpu_total) / self.wall if self.cpu_machine else 0.0

    @property
    def cpu_others(self) -> float:
        """The mean CPU seconds of a rank other than 0 (rank 0's alone at one rank)."""
        return (self.cpu_ranks - self.cpu_rank0) / (self.ranks - 1) if self.ranks > 1 else self.cpu_rank0

    @property
    def cpu_launcher(self) -> float:
        """What the launcher and its daemons spent: the job's CPU time less the ranks'."""
        return max(0.0, self.cpu_total - self.cpu_ranks)

    def as_json(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "ranks": self.ranks,
            "repeat": self.repeat,
            "wall": self.wall,
            "phases": self.phases,
            "cpu_total": self.cpu_total,
            "cpu_rank0": self.cpu_rank0,
            "cpu_rank_median": self.cpu_rank_median,
            "cpu_ranks": self.cpu_ranks,
            "rss_mb": self.rss_mb,
            "cpu_machine": self.cpu_machine,
            "rss_sum_mb": self.rss_sum_mb,
            "hosts": self.hosts,
        }


def point_from_ranks(
    job: Job, wall: float, cpu_total: float, records: Sequence[dict[str, Any]], cpu_machine: float = 0.0
) -> Point:
    """A Point from the ranks' records (one per rank, as the probe writes them)."""
    by_rank = sorted(records, key=lambda record: record["rank"])
    phases = {
        phase: max(record["phases"][phase] for record in by_rank) for phase in PHASES if phase in by_rank[0]["phases"]
    }
    cpus = [record["cpu"] for record in by_rank]
    return Point(
        job.row,
        job.ranks,
        job.repeat,
        wall,
        phases,
        cpu_total,
        cpus[0],
        statistics.median(cpus),
        sum(cpus),
        max(record["rss_mb"] for record in by_rank),
        cpu_machine,
        sum(record["rss_mb"] for record in by_rank),
        len({record.get("host", "") for record in by_rank}),
    )


def summarise(points: Sequence[Point]) -> dict[tuple[str, int], dict[str, Any]]:
    """(row, ranks) -> the medians over repeats (wall, phases, CPU), the wall's spread and the repeat count."""
    groups: dict[tuple[str, int], list[Point]] = {}
    for point in points:
        groups.setdefault((point.row, point.ranks), []).append(point)
    out = {}
    for key, group in groups.items():
        walls = [p.wall for p in group]
        phases = [phase for phase in PHASES if all(phase in p.phases for p in group)]
        out[key] = {
            "wall": statistics.median(walls),
            "low": min(walls),
            "high": max(walls),
            "repeats": len(group),
            "phases": {phase: statistics.median(p.phases[phase] for p in group) for phase in phases},
            "cpu_total": statistics.median(p.cpu_total for p in group),
            "cpu_rank0": statistics.median(p.cpu_rank0 for p in group),
            "cpu_rank_median": statistics.median(p.cpu_rank_median for p in group),
            "cpu_others": statistics.median(p.cpu_others for p in group),
            "cpu_launcher": statistics.median(p.cpu_launcher for p in group),
            "rss_mb": max(p.rss_mb for p in group),
            "others_busy": statistics.median(p.others_busy for p in group),
        }
    return out


def table_lines(
    rows: Sequence[str], ranks: Sequence[int], points: Sequence[Point], stops: dict[str, tuple[int, str]]
) -> list[str]:
    """The plain-text table: per row and rank count the median wall time and its spread, the last rank's time to
    each phase, the job's CPU seconds, the median rank's and the largest rank's memory; then where each row stopped
    and why."""
    summary = summarise(points)
    phase_names = [phase for phase in PHASES if any(phase in s["phases"] for s in summary.values())]
    lines = [
        "# hpcdist bench startup: seconds from launch; wall = launch to exit (median of the repeats, min-max);",
        "# a phase = when the last rank passed it (start: its program runs; under hpcdist mpirun, after the",
        "# rendezvous); cpu = every process of the job, launcher included; rank ms = the median rank's CPU, its",
        "# helper beside it included; rss = the largest rank's peak",
        f"# {'row':<14} {'ranks':>5} {'wall':>8} {'min-max':>15} "
        + " ".join(f"{phase:>7}" for phase in phase_names)
        + f" {'cpu':>8} {'rank ms':>7} {'rss MB':>7} {'n':>2}",
    ]
    for row in rows:
        for n in ranks:
            s = summary.get((row, n))
            if s is None:
                continue
            cells = " ".join(
                f"{s['phases'][phase]:7.2f}" if phase in s["phases"] else f"{'-':>7}" for phase in phase_names
            )
            lines.append(
                f"  {row:<14} {n:>5} {s['wall']:8.2f} {s['low']:7.2f}-{s['high']:<7.2f} {cells} "
                f"{s['cpu_total']:8.2f} {1000 * s['cpu_rank_median']:7.0f} {s['rss_mb']:7.0f} {s['repeats']:>2}"
            )
    for row in rows:
        if row in stops:
            lines.append(f"# {row} stopped at {stops[row][0]} ranks: {stops[row][1]}")
    return lines


def points_from_json(rows: Sequence[dict[str, Any]]) -> list[Point]:
    """The Points of a saved document's "points"."""
    return [Point(**{**row, "phases": dict(row["phases"])}) for row in rows]
