"""nccl-tests' output format for `hpcdist bench`: rows, header, footer, and the side-by-side summary lines."""

from __future__ import annotations

from typing import Any

from ..records import record
from .plan import BenchPlan

__all__ = [
    "BIG_BYTES",
    "FLOOR",
    "RAW_AGAIN",
    "REFERENCE",
    "Comparison",
    "Result",
    "compare",
    "float_str",
    "footer_lines",
    "format_row",
    "header_lines",
    "human_bytes",
    "json_row",
]


REFERENCE = "raw-mpi4py"  # the impl column of --reference rows: raw mpi4py on numpy buffers
FLOOR = "torch-floor"  # and of its floor rows: torch's call on a group doing nothing, then raw mpi4py's, timed as one
RAW_AGAIN = "raw-again"  # and raw mpi4py's call timed again in each round: raw against itself, the run's own noise


@record(frozen=True)
class Result:
    """One timed variant (out-of-place or in-place): µs per iteration (max over ranks), GB/s, wrong elements."""

    time_us: float
    algbw: float
    busbw: float
    wrong: int | None  # None when not checked (prints N/A)
    rounds_us: tuple[float, ...] = ()  # each round's µs per iteration, in the order run (time is their median)

    def as_json(self) -> dict[str, Any]:
        """nccl-tests' JSON keys, and each round's time (hpcdist's)."""
        return {
            "time": self.time_us,
            "alg_bw": self.algbw,
            "bus_bw": self.busbw,
            "nwrong": self.wrong,
            "rounds": list(self.rounds_us),
        }


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: as many decimals as fit in `width`, else scientific."""
    power, val = 0, 1
    while value >= val:
        power, val = power + 1, val * 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def _body(result: Result) -> str:
    """time algbw busbw #wrong, as nccl-tests' writeBenchmarkLineBody."""
    cells = f"  {float_str(result.time_us, 7)}  {float_str(result.algbw, 6)}  {float_str(result.busbw, 6)}"
    return cells + ("    N/A" if result.wrong is None else f"  {result.wrong:6g}")


def format_row(size: int, count: int, plan: BenchPlan, oop: Result, inp: Result, impl: str | None = None) -> str:
    """One result line; `impl` adds the trailing column that tells the backend from the mpi4py reference."""
    line = f"{size:12d}  {count:12d}  {plan.type_name:>8}  {plan.op:>6}  {plan.root:6d}" + _body(oop) + _body(inp)
    return line + (f"  {impl}" if impl else "")


def json_row(size: int, count: int, plan: BenchPlan, impl: str, oop: Result, inp: Result) -> dict[str, Any]:
    """The same result as format_row, as one of the JSON document's rows (nccl-tests' keys, plus the impl)."""
    return {
        "size": size,
        "count": count,
        "type": plan.type_name,
        "redop": plan.op,
        "root": plan.root,
        "impl": impl,
        "out_of_place": oop.as_json(),
        "in_place": inp.as_json(),
    }


def header_lines(plan: BenchPlan, versions: str, devices: list[str], with_impl: bool) -> list[str]:
    """nccl-tests' preamble and column headers (trailing blanks stripped)."""
    step = f"{plan.step_factor}(factor)" if plan.step_factor > 1 else f"{plan.step_bytes}(bytes)"
    impl = ("  impl", "") if with_impl else ("", "")
    return [
        f"# hpcdist bench {versions}",
        f"# Collective test starting: {plan.collective}",
        f"# nThread 1 nGpus 1 minBytes {plan.min_bytes} maxBytes {plan.max_bytes} step: {step} warmup iters: "
        f"{plan.warmup} iters: {plan.iters} agg iters: 1 validation: {plan.check} graph: 0",
        *(
            [f"# time: median of {plan.rounds} rounds ({plan.iters} iters split), interleaved across implementations"]
            if plan.rounds > 1
            else []
        ),
        "#",
        "# Using devices",
        *devices,
        "#",
        f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       "
        "in-place".rstrip(),
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
        f"{'busbw':>6}  {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}{impl[0]}",
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
        f"{'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}".rstrip(),
    ]


def footer_lines(
    plan: BenchPlan, wrong_tests: int, avg_busbw: dict[str, float], comparisons: tuple[Comparison, ...] = ()
) -> list[str]:
    """Out-of-bounds count, average bus bandwidth (the first impl's, then each other's), and the comparisons."""
    lines = [f"# {'Out of bounds values':<20} : {wrong_tests} {'FAILED' if wrong_tests else 'OK'}"]
    for i, (impl, bw) in enumerate(avg_busbw.items()):
        label = "Avg bus bandwidth" if i == 0 else f"Avg bus bw ({impl})"
        lines.append(f"# {label:<20} : {bw:g}")
    lines += [c.line() for c in comparisons]
    return [*lines, "#", f"# Collective test concluded: {plan.collective}", "#"]


BIG_BYTES = 1024**2  # the bandwidth comparison looks at rows of at least this size (or the largest row)


def human_bytes(size: int) -> str:
    """8 B, 4 KiB, 16 MiB: the largest binary unit that divides the size."""
    for unit, name in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} B"


@record(frozen=True)
class Comparison:
    """One implementation against the reference, in place (the same operation on both sides: torch's
    out-of-place rows also pay the copy its in-place API forces): busbw over the large rows, latency at the smallest."""

    impl: str
    reference: str
    busbw_ratio: float | None  # None when the reference moved nothing (0 GB/s)
    from_bytes: int
    latency_bytes: int
    latency_us: float  # in-place time at the smallest size
    reference_latency_us: float
    floor_latency_us: float | None = None  # the torch-floor row's, for a torch backend (None: no floor row)

    def line(self) -> str:
        """`# torch/mpi4py vs raw-mpi4py in place: busbw 97% at >= 1 MiB, 8 B latency 12.3 us vs 3.1 us, 1.07x the
        floor (11.5 us)`."""
        ratio = "n/a" if self.busbw_ratio is None else f"{100 * self.busbw_ratio:.0f}%"
        floor = self.floor_latency_us
        return (
            f"# {self.impl} vs {self.reference} in place: busbw {ratio} at >= {human_bytes(self.from_bytes)}, "
            f"{human_bytes(self.latency_bytes)} latency {self.latency_us:.1f} us vs {self.reference_latency_us:.1f} us"
            + (f", {self.latency_us / floor:.2f}x the floor ({floor:.1f} us)" if floor else "")
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "impl": self.impl,
            "reference": self.reference,
            "bus_bw_ratio": self.busbw_ratio,
            "bus_bw_from_bytes": self.from_bytes,
            "latency_bytes": self.latency_bytes,
            "latency": self.latency_us,
            "reference_latency": self.reference_latency_us,
            "floor_latency": self.floor_latency_us,
        }


def compare(rows: list[dict[str, Any]], reference: str) -> tuple[Comparison, ...]:
    """Each other impl of the JSON `rows` against `reference`, in place: summed busbw over rows of at least
    min(1 MiB, the largest size), and the time at the smallest size (for the torch backends, beside the floor's)."""
    sizes = sorted({row["size"] for row in rows})
    if not sizes or not any(row["impl"] == reference for row in rows):
        return ()
    start, smallest = min(BIG_BYTES, sizes[-1]), sizes[0]

    def busbw(impl: str) -> float:
        return sum(row["in_place"]["bus_bw"] for row in rows if row["impl"] == impl and row["size"] >= start)

    def latency(impl: str) -> float:
        return next(row["in_place"]["time"] for row in rows if row["impl"] == impl and row["size"] == smallest)

    impls = [impl for impl in dict.fromkeys(row["impl"] for row in rows) if impl != reference]
    ref_bw = busbw(reference)
    floor = latency(FLOOR) if FLOOR in impls else None
    return tuple(
        Comparison(
            impl,
            reference,
            busbw(impl) / ref_bw if ref_bw > 0 else None,
            start,
            smallest,
            latency(impl),
            latency(reference),
            None if impl in (FLOOR, RAW_AGAIN) else floor,
        )
        for impl in impls
    )
