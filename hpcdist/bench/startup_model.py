"""A start-up model fitted to `hpcdist bench startup`'s points, and its extrapolation to a cluster (pure).

Each term has a physical meaning and is fitted to what was measured for it, not to the wall time alone:

- `process`: a rank's own start-up CPU (interpreter, imports, MPI_Init, torch), the intercept of the mean CPU
  seconds of the ranks other than 0 against N. Here every rank's is paid on the host's few cores; on a cluster each
  node pays its own.
- `peers`: a rank's CPU that grows with N (reading N peers' records, N-sized exchanges), the slope of that line.
- `rank0_fixed` and `rank0`: rank 0's CPU beyond the others' mean, once (e.g. importing torch to serve the store)
  and per further rank (serving the store, gathering): on the critical path anywhere.
- `launcher`: the launcher's CPU (mpirun and its daemon, hpcdist's supervisor, torchrun's agent) per rank and fixed:
  the job's CPU less its ranks'. On a cluster each node's daemon starts its own ranks, so it counts per node.
- `wait`: the wall time not explained by CPU on these cores (connection retries, polls, a collective's latency),
  fitted as a + b log2 N: on a cluster it is a tree's depth.
- `store`: where torchrun's agent serves torch's TCPStore, the store's CPU per rank lands in the agent's (the
  launcher's) and would count per node; but the store serves every rank from one process, serially. It is taken from
  the rows whose rank 0 serves the same store: the least of their `rank0`, less this row's own `rank0`.

On this host: wall(N) = wait(N) + CPU(N) / min(cores left by other work, N), the other work's CPU seconds read from
/proc/stat during each job (the host is shared); on a cluster of `ranks_per_node` ranks per node, with
`cores_per_node` cores each: wait(N) + process + peers x N + rank0 x N + launcher fixed + launcher per rank x ranks
per node + store x N, the per-rank terms scaled by ceil(ranks per node / cores per node).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..records import asdict, record
from .startup import ROWS

__all__ = [
    "CLUSTERS",
    "REFERENCES",
    "SCALES",
    "STORE_ANCHOR",
    "Cluster",
    "RowModel",
    "check_lines",
    "fit_models",
    "fit_row",
    "model_lines",
    "nonneg_line",
    "store_at",
]

REFERENCES = (
    "MVAPICH starts 229,376 processes through MPI_Init in under 22 s",
    "torch's libuv TCPStore initialises about 96,000 ranks in about 100 s (about 1 ms per rank at the store)",
)
STORE_ANCHOR = 100.0 / 96_000  # seconds per rank at the store, from the second reference


def nonneg_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys against xs with neither below zero (the better fit on the boundary
    when the free one leaves it)."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return max(0.0, mean_y), 0.0
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    intercept = mean_y - slope * mean_x
    if slope >= 0 and intercept >= 0:
        return intercept, slope
    flat = (max(0.0, mean_y), 0.0)
    squares = sum(x * x for x in xs)
    through = (0.0, max(0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / squares)) if squares else flat

    def error(line: tuple[float, float]) -> float:
        return sum((line[0] + line[1] * x - y) ** 2 for x, y in zip(xs, ys, strict=True))

    return min((flat, through), key=error)


@record(frozen=True)
class Cluster:
    """What a cluster gives each node."""

    ranks_per_node: int
    cores_per_node: int

    def describe(self) -> str:
        return f"{self.ranks_per_node} ranks per node, {self.cores_per_node} cores per node"


@record(frozen=True)
class RowModel:
    """One row's fitted terms (seconds; per-rank ones per rank) and how well they reproduce its points here."""

    row: str
    wait: float  # a
    wait_log: float  # b, per doubling of N
    process: float
    peers: float
    rank0_fixed: float
    rank0: float
    launcher: float
    launcher_per_rank: float
    cores: int
    largest: int  # the largest N measured
    worst: float  # the largest relative error of here() against the measured medians
    store: float = 0.0  # the store's serial seconds per rank where the launcher serves it (where rank 0 does: rank0)

    def cpu(self, n: int) -> float:
        """The job's CPU seconds at n ranks, all on one host."""
        alone = n * (self.process + self.peers * n) + self.launcher + self.launcher_per_rank * n
        return alone + (self.rank0_fixed + self.rank0 * (n - 1) if n > 1 else 0.0)

    def here(self, n: int, busy: float = 0.0) -> float:
        """The modelled wall time at n ranks on this host while other work keeps `busy` cores busy."""
        return self.wait + self.wait_log * math.log2(n) + self.cpu(n) / free_cores(self.cores, busy, n)

    def terms(self, n: int, cluster: Cluster) -> dict[str, float]:
        """Each term's seconds at n ranks on `cluster`."""
        crowd = math.ceil(min(cluster.ranks_per_node, n) / cluster.cores_per_node)
        return {
            "wait": self.wait + self.wait_log * math.log2(n),
            "process": self.process * crowd,
            "peers": self.peers * n * crowd,
            "rank0": self.rank0_fixed + self.rank0 * (n - 1),
            "launcher": self.launcher + self.launcher_per_rank * min(cluster.ranks_per_node, n),
            "store": self.store * n,
        }

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def free_cores(cores: int, busy: float, n: int) -> float:
    """The cores a job of n ranks can use: those other work leaves (a quarter of one at least), at most one a rank."""
    return min(max(0.25, cores - busy), n)


def fit_row(row: str, summary: Mapping[int, Mapping[str, float]], cores: int) -> RowModel | None:
    """Fit a row's terms to its per-N medians (as startup.summarise gives them); None under two rank counts."""
    ns = sorted(summary)
    if len(ns) < 2:
        return None
    s = [summary[n] for n in ns]
    process, peers = nonneg_line(ns, [p["cpu_others"] for p in s])
    several = [(n - 1, p["cpu_rank0"] - p["cpu_others"]) for n, p in zip(ns, s, strict=True) if n > 1]
    rank0_fixed, rank0 = nonneg_line(*zip(*several, strict=True)) if several else (0.0, 0.0)
    launcher, per_rank = nonneg_line(ns, [p["cpu_launcher"] for p in s])
    rest = [
        p["wall"] - p["cpu_total"] / free_cores(cores, p.get("others_busy", 0.0), n) for n, p in zip(ns, s, strict=True)
    ]
    wait, wait_log = nonneg_line([math.log2(n) for n in ns], rest)
    terms = (wait, wait_log, process, peers, rank0_fixed, rank0, launcher, per_rank, cores, ns[-1])
    model = RowModel(row, *terms, 0.0)
    worst = max(
        abs(model.here(n, p.get("others_busy", 0.0)) - p["wall"]) / p["wall"] for n, p in zip(ns, s, strict=True)
    )
    return RowModel(row, *terms, worst)


def model_lines(models: Sequence[RowModel], scales: Sequence[int], clusters: Mapping[str, Cluster]) -> list[str]:
    """The fitted terms per row, then each row at each scale on its cluster: the total and the dominant term."""
    lines = [
        "# model: wall = wait + b log2 N + CPU / min(free cores, N); CPU = N (process + peers N) + r0 + rank0 (N-1)",
        "#   + launch + l/rank N; seconds, per-rank terms per rank; worst: the largest error against the medians",
        f"# {'row':<14} {'wait':>6} {'b':>6} {'process':>8} {'peers':>9} {'r0':>6} {'rank0':>9} {'launch':>7} "
        f"{'l/rank':>9} {'worst':>6}",
    ]
    for m in models:
        lines.append(
            f"  {m.row:<14} {m.wait:6.2f} {m.wait_log:6.3f} {m.process:8.3f} {m.peers:9.2e} {m.rank0_fixed:6.2f} "
            f"{m.rank0:9.2e} "
            f"{m.launcher:7.2f} {m.launcher_per_rank:9.2e} {100 * m.worst:5.0f}%"
        )
    agent = [f"  {m.row:<14} {m.store:9.2e}" for m in models if store_at(m.row) == "launcher"]
    store_head = [
        "# store: where the launcher serves torch's store (torchrun's agent), the store's serial seconds per rank,",
        "#   measured: rank 0's per-rank cost where rank 0 serves it (the least of those rows, less this row's",
        "#   own rank0)",
    ]
    lines += store_head if agent else []
    lines += [
        *agent,
        "# extrapolated: seconds at N ranks on a cluster, the dominant term and its share; then the same without",
        "#   peers, whose CPU here includes ranks spinning while they wait (MPI and gloo poll), an upper bound; for",
        f"#   a row with a store, the published anchor beside it: the store alone at {1000 * STORE_ANCHOR:.2f} ms a "
        "rank x N",
    ]
    for m in models:
        cluster = clusters[m.row]
        for n in scales:
            terms = m.terms(n, cluster)
            rest = {name: value for name, value in terms.items() if name != "peers"}
            anchor = f"; anchor {STORE_ANCHOR * n:.1f} s" if store_at(m.row) else ""
            lines.append(
                f"  {m.row:<14} {n:>7} ranks ({cluster.describe()}): {_dominant(terms)}; without peers "
                f"{_dominant(rest)}{anchor}"
            )
    return lines


# The clusters the rows are extrapolated to: a program without torch as a CPU MPI job, one rank per core of a
# 128-core node; the torch rows as GPU jobs, one rank per GPU of an 8-GPU node with 64 cores.
CLUSTERS = {"pass": Cluster(128, 128), "mpi": Cluster(128, 128), "torch": Cluster(8, 64)}
SCALES = (10_000, 100_000)


def fit_models(
    rows: Sequence[str], summary: Mapping[tuple[str, int], Mapping[str, float]], cores: int
) -> list[RowModel]:
    """Each row's model, from startup.summarise's medians; rows with under two rank counts are left out. A row whose
    launcher serves the store gets `store`: the least per-rank cost of rank 0 where rank 0 serves the same store,
    less its own rank 0's."""
    models = []
    for row in rows:
        mine = {n: s for (name, n), s in summary.items() if name == row}
        model = fit_row(row, mine, cores)
        if model is not None:
            models.append(model)
    served = [m.rank0 for m in models if store_at(m.row) == "rank0"]
    return [
        RowModel(**{**m.as_json(), "store": max(0.0, min(served) - m.rank0)})
        if served and store_at(m.row) == "launcher"
        else m
        for m in models
    ]


def store_at(row: str) -> str:
    """Which process serves a row's torch store: "launcher" (torchrun's agent), "rank0", or "" (no store)."""
    known = ROWS.get(row)
    if known is None or known.mode != "torch":
        return ""
    return "launcher" if known.launcher == "torchrun" else "rank0"


def check_lines(rows: Sequence[str], summary: Mapping[tuple[str, int], Mapping[str, float]], cores: int) -> list[str]:
    """The model checked against a count it was not fitted to: each row fitted to the counts up to a quarter of its
    largest, its prediction of the largest beside the measured median (rows with too few counts left out)."""
    lines = []
    for row in rows:
        mine = {n: s for (name, n), s in summary.items() if name == row}
        if not mine:
            continue
        largest = max(mine)
        model = fit_row(row, {n: s for n, s in mine.items() if n <= largest // 4}, cores)
        if model is None:
            continue
        measured = mine[largest]
        predicted = model.here(largest, measured.get("others_busy", 0.0))
        lines.append(
            f"  {row:<14} fitted to {min(mine)}-{model.largest} ranks, predicts {predicted:.2f} s at {largest}; "
            f"measured {measured['wall']:.2f} s ({100 * (predicted - measured['wall']) / measured['wall']:+.0f}%)"
        )
    return ["# check: the model fitted to the smaller counts, against the largest", *lines] if lines else []


def _dominant(terms: Mapping[str, float]) -> str:
    """`64.8 s, rank0 94%`: the total and the largest term's share of it."""
    total = sum(terms.values())
    top = max(terms, key=lambda name: terms[name])
    return f"{total:.1f} s, {top} {100 * terms[top] / total:.0f}%"
