"""`hpcdist bench`'s request: sizes, byte counts, bus-bandwidth factors, backends, and the checked options."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import UsageError
from ..records import record
from ..values import BACKENDS, MAX_COUNT

__all__ = [
    "COLLECTIVES",
    "COLLECTIVE_OPTIONS",
    "DTYPES",
    "MAX_BYTES",
    "MAX_SIZES",
    "OPS",
    "BenchOptions",
    "BenchPlan",
    "Collective",
    "Counts",
    "bandwidths",
    "byte_counts",
    "check_counts",
    "parse_backends",
    "parse_rows",
    "parse_size",
    "plan_from_options",
    "round_sizes",
    "size_sweep",
]

# the collective modes' measuring options, (flag, BenchOptions field): refused by the modes that do not measure
COLLECTIVE_OPTIONS = (
    ("-b", "minbytes"),
    ("-e", "maxbytes"),
    ("-f", "stepfactor"),
    ("-i", "stepbytes"),
    ("--rounds", "rounds"),
    ("-c", "check"),
    ("-d", "dtype"),
    ("-o", "op"),
    ("-r", "root"),
)


@record(frozen=True)
class BenchOptions:
    """What `hpcdist bench` asks for (nccl-tests' flags), each field named after its option, unchecked: the plan
    builders (plan_from_options, ddp.ddp_plan_from_options, plot.replot) check them."""

    collective: str | None = None  # a COLLECTIVES name, or "ddp"; None only with `source`
    minbytes: str | None = None  # -b, e.g. "8" or "32M"
    maxbytes: str | None = None  # -e
    stepfactor: int | None = None  # -f
    stepbytes: str | None = None  # -i
    iters: int = 20  # -n
    warmup: int = 5  # -w
    rounds: int | None = None
    check: int | None = None  # -c
    backend: str = "auto"  # a comma list to compare
    dtype: str | None = None  # -d
    op: str | None = None  # -o
    root: int | None = None  # -r
    json: bool = False
    reference: bool = False
    without_forensics: bool = False
    timeout: float | None = None
    plot: str | None = None  # FILE.png
    source: str | None = None  # --from FILE.json
    report: bool = False  # rank 0 prints the straggler table at the end (forensics/stragglers.py)
    trace_cost: bool = False  # also time each backend with tracing on (rows "torch/gloo+trace")
    ranks: str | None = None  # bench startup: the rank counts, e.g. "1,2,4"
    rows: str | None = None  # bench startup: the rows to run, e.g. "hpcdist,mpirun"
    repeats: int | None = None  # bench startup: jobs per row and rank count
    hosts: str | None = None  # bench startup: the hosts each job's ranks spread over, e.g. "n1,n2"


@record(frozen=True)
class Collective:
    """One benchmarked operation: does it reduce, take a root, check its in-place variant; its bus factor."""

    name: str
    reduces: bool
    rooted: bool
    checks_in_place: bool  # nccl-tests reports N/A for in-place alltoall and sendrecv

    def bus_factor(self, nranks: int) -> float:
        """nccl-tests' busbw/algbw: 2(n-1)/n for all_reduce, (n-1)/n for gathers and scatters, else 1."""
        if self.name == "all_reduce":
            return 2.0 * (nranks - 1) / nranks
        if self.name in ("all_gather", "reduce_scatter", "alltoall"):
            return (nranks - 1) / nranks
        return 1.0


COLLECTIVES = {
    c.name: c
    for c in (
        Collective("all_reduce", True, False, True),
        Collective("all_gather", False, False, True),
        Collective("reduce_scatter", True, False, True),
        Collective("broadcast", False, True, True),
        Collective("reduce", True, True, True),
        Collective("alltoall", False, False, False),
        Collective("sendrecv", False, False, False),
    )
}

# canonical name -> (nccl-tests' type name, bytes per element); nccl-tests' names are accepted too
DTYPES = {
    "float32": ("float", 4),
    "float64": ("double", 8),
    "float16": ("half", 2),
    "bfloat16": ("bfloat16", 2),
    "int8": ("int8", 1),
    "uint8": ("uint8", 1),
    "int32": ("int32", 4),
    "int64": ("int64", 8),
}
_DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "bf16": "bfloat16"}
OPS = ("sum", "prod", "min", "max", "avg")
MAX_BYTES = 2**40  # 1 TiB per rank: larger than any device's memory
MAX_SIZES = 1000  # rows of one sweep
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_SIZE = re.compile(r"\s*(?=\.?[0-9])([0-9]*)(?:\.([0-9]*))?\s*([kKmMgG]?)(?:i?[bB])?\s*\Z")


def parse_size(text: str, flag: str) -> int:
    """Bytes from nccl-tests' size syntax: 8, 64K, 128M, 1G (binary units, optional B/iB); at most 1 TiB."""
    match = _SIZE.match(text)
    fraction = (match[2] or "") if match else ""
    size, rest = (
        divmod(int(match[1] + fraction) * _UNITS[match[3].lower()], 10 ** len(fraction))  # exact, unlike a float
        if match and len(match[1] + fraction) <= 30
        else (0, 1)
    )
    if rest:
        raise UsageError(
            f"{flag} {text!r} is not a size in bytes; write e.g. {flag} 8, {flag} 64K, {flag} 128M or {flag} 1G"
        )
    if size > MAX_BYTES:
        raise UsageError(f"{flag} {text!r} is more than 1T ({MAX_BYTES} bytes) per rank; give a smaller size")
    return size


def size_sweep(min_bytes: int, max_bytes: int, factor: int, step: int) -> tuple[int, ...]:
    """The sizes nccl-tests visits: multiply by factor when it is > 1, else add step, while <= max_bytes."""
    if min_bytes > max_bytes:
        raise UsageError(f"-b {min_bytes} is larger than -e {max_bytes}; give the smaller size to -b (min bytes)")
    if factor > 1 and min_bytes == 0:
        raise UsageError("-b 0 with -f never grows; start at -b 1 or more, or step with -i BYTES")
    if factor <= 1 and step <= 0:
        raise UsageError(f"-i {step} never grows; step by a positive size (-i 1M) or multiply (-f 2)")
    if factor <= 1 and (max_bytes - min_bytes) // step >= MAX_SIZES:
        raise UsageError(
            f"-b {min_bytes} to -e {max_bytes} in steps of -i {step} is more than {MAX_SIZES} sizes; "
            "step by more (-i) or multiply (-f 2)"
        )
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size = size * factor if factor > 1 else size + step
    return tuple(sizes)


@record(frozen=True)
class Counts:
    """Elements per rank, as nccl-tests' getCollByteCount: sent, received, and the count printed and passed."""

    send: int
    recv: int
    param: int


def byte_counts(collective: str, size: int, elsize: int, nranks: int) -> Counts:
    """Element counts for a `size`-byte row: gathers and scatters round down to a multiple of the ranks."""
    count = size // elsize
    per_rank = count // nranks
    if collective == "all_gather":
        return Counts(per_rank, per_rank * nranks, per_rank)
    if collective == "reduce_scatter":
        return Counts(per_rank * nranks, per_rank, per_rank)
    if collective == "alltoall":
        return Counts(per_rank * nranks, per_rank * nranks, per_rank)
    return Counts(count, count, count)


def bandwidths(collective: str, nbytes: int, seconds: float, nranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes) for `nbytes` (the printed size) moved in `seconds`."""
    algbw = nbytes / 1.0e9 / seconds if seconds > 0 else 0.0
    return algbw, algbw * COLLECTIVES[collective].bus_factor(nranks)


@record(frozen=True)
class BenchPlan:
    """A validated `hpcdist bench` request; checks that need the world size happen after init."""

    collective: str
    sizes: tuple[int, ...]
    min_bytes: int
    max_bytes: int
    step_factor: int
    step_bytes: int
    iters: int
    warmup: int
    rounds: int  # the iterations are timed in this many rounds, interleaved across implementations
    check: int
    backends: tuple[str, ...]  # the first initialises the default group; each further one gets its own group
    dtype: str
    op: str  # "none" for collectives that do not reduce
    root: int  # -1 for collectives without a root
    json: bool
    reference: bool
    plot: str | None = None  # rank 0 draws the results into this file (bench/plot.py)
    trace_cost: bool = False  # each torch backend is timed again with `hpcdist mpirun --trace`'s recording on
    without_forensics: bool = False  # also time each backend with hang forensics off

    @property
    def backend(self) -> str:
        """The backend of the default group (the first of --backend)."""
        return self.backends[0]

    @property
    def type_name(self) -> str:
        """nccl-tests' name for the element type (float, half, …)."""
        return DTYPES[self.dtype][0]

    @property
    def elsize(self) -> int:
        """Bytes per element."""
        return DTYPES[self.dtype][1]


def parse_backends(text: str) -> tuple[str, ...]:
    """`--backend mpi,gloo` -> ("mpi", "gloo"): known names, none twice, at least one."""
    names = tuple(name.strip() for name in text.split(","))
    for name in names:
        if name not in BACKENDS:
            shown = repr(name) if name else "'' (an empty name)"
            raise UsageError(
                f"--backend {text}: unknown backend {shown}; give one or more of {', '.join(BACKENDS)} "
                "separated by commas, e.g. --backend mpi,gloo"
            )
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(f"--backend {text} names {', '.join(twice)} twice; give each backend once")
    return names


def plan_from_options(args: BenchOptions) -> BenchPlan:
    """Check the parsed options and turn them into a BenchPlan; every mistake is a UsageError."""
    coll = COLLECTIVES.get(args.collective or "")
    if coll is None:
        raise UsageError(f"bench times one of {', '.join(COLLECTIVES)}, not {args.collective!r}; name one")
    backends = parse_backends(args.backend)
    given = "float32" if args.dtype is None else args.dtype
    dtype = _DTYPE_ALIASES.get(given, given)
    if dtype not in DTYPES:
        raise UsageError(f"unknown --dtype {given!r}; choose one of {', '.join(DTYPES)}")
    if args.op is not None and not coll.reduces:
        raise UsageError(f"--op {args.op}: {coll.name} moves data and does not reduce; drop --op")
    op = (args.op or "sum") if coll.reduces else "none"
    if op not in OPS and op != "none":
        raise UsageError(f"unknown --op {args.op!r} for {coll.name}; choose one of {', '.join(OPS)}")
    if args.root is not None and not coll.rooted:
        raise UsageError(f"--root {args.root}: {coll.name} has no root (only broadcast and reduce do); drop --root")
    root = (args.root or 0) if coll.rooted else -1
    if coll.rooted and root < 0:
        raise UsageError(f"--root {root} is not a rank; give a rank from 0 to the world size - 1")
    check = 1 if args.check is None else args.check
    check_counts((("-n", args.iters, 1), ("-w", args.warmup, 0), ("-c", check, 0), ("-r", root, -1)))
    if args.reference and dtype == "bfloat16":
        raise UsageError(
            "--reference runs raw mpi4py on numpy buffers, and numpy has no bfloat16; "
            "drop --reference or pick another --dtype (e.g. float16)"
        )
    if args.reference and op == "avg":
        raise UsageError("--reference runs raw mpi4py, and MPI has no avg reduction; drop --reference or use --op sum")
    rounds = _rounds(args, len(backends) * (1 + args.without_forensics) + 3 * args.reference)  # raw, floor, raw again
    factor = 1 if args.stepfactor is None else args.stepfactor
    if factor < 1:
        raise UsageError(f"-f {args.stepfactor} must be at least 1 (1 steps by -i bytes, 2 doubles each size)")
    check_counts((("-f", factor, 1),))
    factor, step = (factor, 1024**2) if args.stepbytes is None else (1, _step(args.stepbytes))
    min_bytes, max_bytes = (
        parse_size("32M" if text is None else text, flag)
        for text, flag in ((args.minbytes, "-b"), (args.maxbytes, "-e"))
    )
    return BenchPlan(
        coll.name,
        size_sweep(min_bytes, max_bytes, factor, step),
        min_bytes,
        max_bytes,
        factor,
        step,
        args.iters,
        args.warmup,
        rounds,
        check,
        backends,
        dtype,
        op,
        root,
        args.json,
        args.reference,
        args.plot,
        args.trace_cost,
        args.without_forensics,
    )


def parse_rows(text: str, known: Iterable[str]) -> tuple[str, ...]:
    """`--rows a,b` -> the named rows, each one of `known`, none twice."""
    names, known = tuple(name.strip() for name in text.split(",")), tuple(known)
    for name in names:
        if name not in known:
            raise UsageError(f"--rows {text}: unknown row {name!r}; give one or more of {', '.join(known)}")
    if len(set(names)) != len(names):
        raise UsageError(f"--rows {text} names a row twice; give each row once")
    return names


def check_counts(counts: Iterable[tuple[str, int, int]]) -> None:
    """Raise UsageError for a (flag, value, lowest) whose value is below lowest or above MAX_COUNT."""
    for flag, value, low in counts:
        if value < low:
            raise UsageError(f"{flag} {value} must be at least {low}")
        if value > MAX_COUNT:
            raise UsageError(f"{flag} {value} must be at most {MAX_COUNT}")


def _rounds(args: BenchOptions, implementations: int) -> int:
    """--rounds, or its default: 5 when implementations are compared (at most one per iteration), else 1."""
    if args.rounds is None:
        return min(5, args.iters) if implementations > 1 else 1
    if not 1 <= args.rounds <= args.iters:
        raise UsageError(
            f"--rounds {args.rounds} must be between 1 and -n ({args.iters}): each round times at "
            "least one iteration; raise -n or lower --rounds"
        )
    return args.rounds


def round_sizes(iters: int, rounds: int) -> list[int]:
    """`iters` iterations split into `rounds` nearly equal rounds, e.g. (10, 3) -> [4, 3, 3]."""
    return [iters // rounds + (1 if i < iters % rounds else 0) for i in range(rounds)]


def _step(text: str) -> int:
    """The -i increment in bytes."""
    step = parse_size(text, "-i")
    if step <= 0:
        raise UsageError(f"-i {text} must be a positive number of bytes, e.g. -i 1M")
    return step
