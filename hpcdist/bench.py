"""`hpcdist bench`: nccl-tests' collective benchmark on torch.distributed backends side by side, beside raw mpi4py.

`--backend mpi,gloo` runs every size on each backend's group (and raw mpi4py with --reference) in interleaved
rounds, so machine noise touches them alike; `hpcdist bench ddp` times a DistributedDataParallel step per backend
(see benchddp).

Torch is imported only when the benchmark runs, so building the CLI parser stays cheap.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from typing import Any

from .benchfmt import (
    COLLECTIVES,
    DTYPES,
    OPS,
    BenchPlan,
    Counts,
    Result,
    bandwidths,
    byte_counts,
    compare,
    footer_lines,
    format_row,
    header_lines,
    plan_from_args,
)
from .benchplan import round_sizes
from .errors import UsageError

__all__ = ["add_bench_parser", "describe", "device_line", "run_bench", "run_plan"]


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `hpcdist bench` to an argparse subparsers object (nccl-tests' flags: -b -e -f -i -n -w -c -d -o -r)."""
    from .bootstrap import BACKENDS

    p = subparsers.add_parser(
        "bench", help="benchmark a collective like nccl-tests (time, algbw, busbw, #wrong), or a DDP step, per backend",
        description="Sizes sweep from -b to -e bytes (K/M/G suffixes), times -f or plus -i. Run it under a "
                    "launcher, e.g. `hpcdist mpirun -np 2 -- hpcdist bench all_reduce -b 8 -e 64M -f 2 --backend "
                    "mpi,gloo --reference`. `bench ddp` times a DDP training step of a fixed MLP on each backend.")
    p.add_argument("collective", choices=[*COLLECTIVES, "ddp"], help="the operation to time, or ddp")
    p.add_argument("-b", "--minbytes", help="smallest size in bytes (default: 32M)")
    p.add_argument("-e", "--maxbytes", help="largest size in bytes (default: 32M)")
    step = p.add_mutually_exclusive_group()
    step.add_argument("-f", "--stepfactor", type=int, help="multiply the size by this (default: 1)")
    step.add_argument("-i", "--stepbytes", help="add this many bytes to the size (default: 1M when -f is 1)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per size or DDP steps (default: 20)")
    p.add_argument("-w", "--warmup", "--warmup_iters", type=int, default=5, help="untimed iterations first (default: 5)")
    p.add_argument("--rounds", type=int, help="split the -n iterations into this many rounds, interleaved across "
                   "backends, and report the median round (default: 5 when comparing, else 1 like nccl-tests)")
    p.add_argument("-c", "--check", type=int, help="result checks per size; 0 skips them (default: 1)")
    p.add_argument("--backend", default="auto", help=f"torch.distributed backend, or a comma list to compare "
                   f"(e.g. mpi,gloo; the first is the default group): {', '.join(BACKENDS)} (default: auto)")
    p.add_argument("-d", "--dtype", "--datatype", help=f"element type: {', '.join(DTYPES)} (default: float32)")
    p.add_argument("-o", "--op", help=f"reduction for all_reduce, reduce_scatter, reduce: {', '.join(OPS)} (default: sum)")
    p.add_argument("-r", "--root", type=int, help="root rank for broadcast and reduce (default: 0)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    p.add_argument("--reference", action="store_true", help="also time raw mpi4py on numpy buffers, row by row")
    p.add_argument("--timeout", type=float, help="seconds any wait may take (default: $HPCDIST_TIMEOUT or 300)")
    return p


def run_bench(args: argparse.Namespace) -> int:
    """`hpcdist bench`: check the options, initialise the first backend, run; 1 if any result was wrong."""
    from .bootstrap import init

    if args.collective == "ddp":
        from .benchddp import ddp_plan_from_args, run_ddp

        ddp = ddp_plan_from_args(args)
        with init(ddp.backends[0], args.timeout) as session:
            return run_ddp(ddp, session)
    plan = plan_from_args(args)
    with init(plan.backend, args.timeout) as session:
        return run_plan(plan, session)


def run_plan(plan: BenchPlan, session: Any, out: Any = None) -> int:
    """Run every size with every implementation; rank 0 prints the table (or JSON). 1 if anything was wrong."""
    from .benchdata import expected_values

    out = out or sys.stdout
    rank, nranks = session.rank, session.world_size
    if plan.root >= nranks:
        raise UsageError(f"--root {plan.root} is not a rank of this {nranks}-rank job; give 0 to {nranks - 1}")
    from .benchgroups import backend_groups
    from .benchimpl import MpiImpl, TorchImpl

    groups = backend_groups(plan.backends, session)
    impls: list[Any] = [TorchImpl(plan, session, group) for group in groups]
    if plan.reference:
        impls.append(MpiImpl(plan, session))
    devices, env = describe(session, [g.name for g in groups], plan.dtype)
    show = (lambda line: print(line, file=out, flush=True)) if rank == 0 and not plan.json else (lambda line: None)
    for line in header_lines(plan, env["summary"], [device_line(d) for d in devices], len(impls) > 1):
        show(line)
    rows: list[dict[str, Any]] = []
    busbw: dict[str, list[float]] = {impl.name: [] for impl in impls}
    for size in plan.sizes:
        counts = byte_counts(plan.collective, size, plan.elsize, nranks)
        nbytes = max(counts.send, counts.recv) * plan.elsize
        want = expected_values(plan.collective, plan.op, rank, nranks, counts, plan.root) if plan.check else None
        oops, inps = (_measure(impls, plan, counts, nbytes, in_place, want) for in_place in (False, True))
        for impl, oop, inp in zip(impls, oops, inps, strict=True):
            busbw[impl.name] += [oop.busbw, inp.busbw]
            show(format_row(nbytes, counts.param, plan, oop, inp, impl.name if len(impls) > 1 else None))
            rows.append({"size": nbytes, "count": counts.param, "type": plan.type_name, "redop": plan.op,
                         "root": plan.root, "impl": impl.name, "out_of_place": oop.as_json(), "in_place": inp.as_json()})
    wrong = sum(1 for row in rows for key in ("out_of_place", "in_place") if row[key]["nwrong"])
    average = {name: sum(v) / len(v) if v else 0.0 for name, v in busbw.items()}
    compared = compare(rows, MpiImpl.name) if plan.reference and plan.collective == "all_reduce" else ()
    for line in footer_lines(plan, wrong, average, compared):
        show(line)
    if rank == 0 and plan.json:
        config = {"minimum_bytes": plan.min_bytes, "maximum_bytes": plan.max_bytes, "warmup_iters": plan.warmup,
                  "iterations": plan.iters, "rounds": plan.rounds, "validation": plan.check, "reference": plan.reference,
                  "backends": list(plan.backends)}
        config["step_factor" if plan.step_factor > 1 else "step_bytes"] = (
            plan.step_factor if plan.step_factor > 1 else plan.step_bytes)
        doc = {"version": 1, "tool": "hpcdist bench", "collective": plan.collective, "config": config,
               "environment": {k: v for k, v in env.items() if k != "summary"}, "devices": devices,
               "results": rows, "out_of_bounds": {"count": wrong, "okay": wrong == 0},
               "average_bus_bandwidth": average, "comparisons": [c.as_json() for c in compared]}
        print(json.dumps(doc, indent=1), file=out, flush=True)
    return 1 if wrong else 0


def _measure(impls: list[Any], plan: BenchPlan, counts: Counts, nbytes: int, in_place: bool, want: Any) -> list[Result]:
    """Warm every implementation up, time plan.iters runs of each in interleaved rounds (each round starts with a
    barrier and one untimed call; its time is the max over ranks; the median round counts), then refill, run once
    and check each."""
    runs = [impl.prepare(counts, in_place) for impl in impls]
    for impl, run in zip(impls, runs, strict=True):
        for _ in range(plan.warmup):
            run()
        impl.sync()
    rounds: list[list[float]] = [[] for _ in impls]
    for iters in round_sizes(plan.iters, plan.rounds):
        for impl, run, times in zip(impls, runs, rounds, strict=True):
            impl.barrier()
            run()  # untimed: the first call after a barrier also absorbs the ranks' skew leaving it
            impl.sync()
            start = time.perf_counter()
            for _ in range(iters):
                run()
            impl.sync()
            times.append(impl.max_over_ranks((time.perf_counter() - start) / iters))
    return [_checked(impl, plan, counts, nbytes, in_place, want, statistics.median(times))
            for impl, times in zip(impls, rounds, strict=True)]


def _checked(impl: Any, plan: BenchPlan, counts: Counts, nbytes: int, in_place: bool, want: Any, seconds: float) -> Result:
    """The timing as a Result, with #wrong from fresh buffers run once (None when not checked)."""
    from .benchdata import count_wrong

    wrong = None
    if plan.check and (not in_place or COLLECTIVES[plan.collective].checks_in_place):
        for _ in range(plan.check):
            impl.prepare(counts, in_place)()
            impl.sync()
            wrong = impl.sum_over_ranks(count_wrong(impl.result(), want, plan.dtype, plan.op))
            if wrong:
                break
    algbw, busbw = bandwidths(plan.collective, nbytes, seconds, impl.nranks)
    return Result(seconds * 1e6, algbw, busbw, wrong)


def describe(session: Any, backends: list[str], dtype: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every rank's host, pid and device (gathered to all), and the versions and settings of this run."""
    import numpy
    import torch
    import torch.distributed as dist

    from . import __version__

    device = session.device
    if device.startswith("cuda"):
        device += f" {torch.cuda.get_device_name(device)}"
    mine = {"rank": session.rank, "host": socket.gethostname(), "pid": os.getpid(), "device": device}
    devices: list[Any] = [None] * session.world_size
    dist.all_gather_object(devices, mine)
    env: dict[str, Any] = {"backend": session.backend, "backends": backends, "world_size": session.world_size,
                           "dtype": dtype, "torch_threads": torch.get_num_threads(),
                           "launcher": session.env.launcher, "hpcdist": __version__, "torch": torch.__version__,
                           "numpy": numpy.__version__, "python": sys.version.split()[0],
                           "mpi4py": None, "mpi_library": None}
    try:
        import mpi4py

        env["mpi4py"] = mpi4py.__version__
    except ImportError:
        pass
    if "mpi4py.MPI" in sys.modules:  # never initialise MPI just to name it
        env["mpi_library"] = sys.modules["mpi4py.MPI"].Get_library_version().split(",")[0].strip()
    parts = [f"{__version__} backend {','.join(backends)} nRanks {session.world_size} torch {torch.__version__}"]
    parts += [f"mpi4py {env['mpi4py']}"] if env["mpi4py"] else []
    parts += [env["mpi_library"]] if env["mpi_library"] else []
    env["summary"] = " ".join(parts)
    return devices, env


def device_line(d: dict[str, Any]) -> str:
    """nccl-tests' `#  Rank  0 Group  0 Pid 12345 on host device …` line."""
    return f"#  Rank {d['rank']:2d} Group  0 Pid {d['pid']:6d} on {d['host']:>10} device {d['device']}"
