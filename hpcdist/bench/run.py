"""`hpcdist bench`: nccl-tests' collective benchmark on torch.distributed backends side by side, beside raw mpi4py.

`--backend mpi,gloo` runs every size on each backend's group (and with --reference raw mpi4py, torch's floor: each
iteration the same torch call on a group that does nothing, then raw mpi4py's call, and raw mpi4py again, whose
distance from the first is the run's own noise) in interleaved rounds, so machine noise touches them alike;
`hpcdist bench ddp` times a DistributedDataParallel step per backend (see bench/ddp.py).

Torch is imported only when the benchmark runs, so building the CLI parser stays cheap.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

from ..errors import UsageError
from ..runtime.bootstrap import Session
from ..settingtable import FORENSICS
from .describe import describe, device_line
from .fmt import RAW_AGAIN, REFERENCE, Comparison, Result, compare, footer_lines, format_row, header_lines, json_row
from .impl import Implementation
from .plan import COLLECTIVES, BenchPlan, Counts, bandwidths, byte_counts, round_sizes

__all__ = ["Traced", "collective_document", "run_plan"]


def run_plan(plan: BenchPlan, session: Session, out: Any = None) -> int:
    """Run every size with every implementation; rank 0 prints the table (or JSON) and draws --plot. 1 if anything
    was wrong."""
    from .data import expected_values

    out = out or sys.stdout
    rank, nranks = session.rank, session.world_size
    if plan.root >= nranks:
        raise UsageError(f"--root {plan.root} is not a rank of this {nranks}-rank job; give 0 to {nranks - 1}")
    from .groups import backend_groups
    from .impl import FloorImpl, MpiImpl, TorchImpl

    groups = backend_groups(plan.backends, session)
    ledger = (True, False) if plan.without_forensics else (None,)
    impls: list[Implementation] = [TorchImpl(plan, session, group, on) for group in groups for on in ledger]
    if plan.trace_cost:
        impls += [Traced(TorchImpl(plan, session, group)) for group in groups]
        _begin_tracing(session)
    if plan.reference:
        impls += [MpiImpl(plan, session), FloorImpl(plan, session), MpiImpl(plan, session, RAW_AGAIN)]
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
            rows.append(json_row(nbytes, counts.param, plan, impl.name, oop, inp))
    wrong = sum(1 for row in rows for key in ("out_of_place", "in_place") if row[key]["nwrong"])
    average = {name: sum(v) / len(v) if v else 0.0 for name, v in busbw.items()}
    compared = compare(rows, REFERENCE) if plan.reference and plan.collective == "all_reduce" else ()
    for line in footer_lines(plan, wrong, average, compared):
        show(line)
    if rank == 0 and (plan.json or plan.plot):
        doc = collective_document(plan, env, devices, rows, wrong, average, compared)
        if plan.json:
            print(json.dumps(doc, indent=1), file=out, flush=True)
        if plan.plot:
            from .plot import draw

            draw(doc, plan.plot)
    return 1 if wrong else 0


def collective_document(
    plan: BenchPlan,
    env: dict[str, Any],
    devices: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    wrong: int,
    average: dict[str, float],
    compared: tuple[Comparison, ...],
) -> dict[str, Any]:
    """nccl-tests' JSON document of a run (with hpcdist's comparisons), which `--json` prints and `--plot` draws."""
    config = {
        "minimum_bytes": plan.min_bytes,
        "maximum_bytes": plan.max_bytes,
        "warmup_iters": plan.warmup,
        "iterations": plan.iters,
        "rounds": plan.rounds,
        "validation": plan.check,
        "reference": plan.reference,
        "backends": list(plan.backends),
    }
    config["step_factor" if plan.step_factor > 1 else "step_bytes"] = (
        plan.step_factor if plan.step_factor > 1 else plan.step_bytes
    )
    return {
        "version": 1,
        "tool": "hpcdist bench",
        "collective": plan.collective,
        "config": config,
        "environment": {k: v for k, v in env.items() if k != "summary"},
        "devices": devices,
        "results": rows,
        "out_of_bounds": {"count": wrong, "okay": wrong == 0},
        "average_bus_bandwidth": average,
        "comparisons": [c.as_json() for c in compared],
    }


def _measure(
    impls: list[Implementation], plan: BenchPlan, counts: Counts, nbytes: int, in_place: bool, want: Any
) -> list[Result]:
    """Warm every implementation up, time plan.iters runs of each in interleaved rounds (each round starts with a
    barrier and one untimed call; its time is the max over ranks; the median round counts), then refill, run once
    and check each."""
    runs = [impl.prepare(counts, in_place) for impl in impls]
    for impl, run in zip(impls, runs, strict=True):
        _ledger(impl)
        for _ in range(plan.warmup):
            run()
        impl.sync()
    rounds: list[list[float]] = [[] for _ in impls]
    for iters in round_sizes(plan.iters, plan.rounds):
        for impl, run, times in zip(impls, runs, rounds, strict=True):
            if plan.trace_cost:
                _trace(isinstance(impl, Traced))
            _ledger(impl)
            impl.barrier()
            run()  # untimed: the first call after a barrier also absorbs the ranks' skew leaving it
            impl.sync()
            start = time.perf_counter()
            for _ in range(iters):
                run()
            impl.sync()
            times.append(impl.max_over_ranks((time.perf_counter() - start) / iters))
    return [
        _checked(impl, plan, counts, nbytes, in_place, want, times) for impl, times in zip(impls, rounds, strict=True)
    ]


class Traced:
    """A torch implementation timed with tracing on (`hpcdist mpirun --trace`'s recording), named BACKEND+trace."""

    def __init__(self, inner: Implementation) -> None:
        self.inner, self.name, self.nranks = inner, f"{inner.name}+trace", inner.nranks

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _begin_tracing(session: Session) -> None:
    """Align the clocks and set up the trace buffer (collective), for --trace-cost.

    Raises:
        UsageError: the ledger does not record this job's calls, so there is no tracing to time.
    """
    from ..forensics import timeline
    from ..runtime.bootstrap import forensics_enabled

    if not forensics_enabled(session.env):
        raise UsageError(
            "--trace-cost times the recording of hang forensics, which run under an MPI launch unless "
            f"{FORENSICS.name}=0; run it under hpcdist mpirun without {FORENSICS.name}=0"
        )
    timeline.begin(session.timeout)


def _trace(on: bool) -> None:
    """Keep every call (the +trace rows) or not (the others)."""
    from ..forensics import timeline

    timeline.tracing(on)


def _ledger(impl: Implementation) -> None:
    """Turn the ledger on or off for an implementation timed with (or without) it."""
    switch = getattr(impl, "switch_ledger", None)
    if switch is not None:
        switch()


def _checked(
    impl: Implementation, plan: BenchPlan, counts: Counts, nbytes: int, in_place: bool, want: Any, rounds: list[float]
) -> Result:
    """The rounds' median as a Result, with #wrong from fresh buffers run once (None when not checked)."""
    from .data import count_wrong

    wrong = None
    if plan.check and (not in_place or COLLECTIVES[plan.collective].checks_in_place):
        for _ in range(plan.check):
            impl.prepare(counts, in_place)()
            impl.sync()
            wrong = impl.sum_over_ranks(count_wrong(impl.result(), want, plan.dtype, plan.op))
            if wrong:
                break
    seconds = statistics.median(rounds)
    algbw, busbw = bandwidths(plan.collective, nbytes, seconds, impl.nranks)
    return Result(seconds * 1e6, algbw, busbw, wrong, tuple(t * 1e6 for t in rounds))
