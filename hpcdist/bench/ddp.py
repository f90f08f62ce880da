"""`hpcdist bench ddp`: one DistributedDataParallel training step of a fixed MLP, timed on each backend's group.

The model is an MLP 512-1024-1024-512 with ReLU (2,099,712 float32 parameters, 8 MiB of gradients to all-reduce
per step), fed a fixed batch of 32 random samples per rank with an MSE loss and plain SGD, so the all-reduce is
a sizeable part of a step that a laptop core computes in tens of milliseconds. Each backend gets an identical copy
of the model (same seed) wrapped in DDP over its group (`process_group=`); the timed steps run backend after backend,
step by step, so machine noise touches them alike. A step is forward + backward (with DDP's bucketed all-reduce) +
optimizer step, timed after a barrier on its group; its time is the slowest rank's. Afterwards every rank's
parameters must agree, else the run fails.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import time
from typing import Any

from ..errors import UsageError
from ..records import record
from ..runtime.bootstrap import Session
from .plan import BenchOptions, check_counts, parse_backends

__all__ = [
    "BATCH",
    "LAYERS",
    "DdpPlan",
    "DdpResult",
    "ddp_document",
    "ddp_lines",
    "ddp_plan_from_options",
    "mlp_parameters",
    "run_ddp",
]

LAYERS = (512, 1024, 1024, 512)  # widths of the MLP: input, hidden, hidden, output
BATCH = 32  # samples per rank and step
_COLLECTIVE_ONLY = (
    ("-b", "minbytes"),
    ("-e", "maxbytes"),
    ("-f", "stepfactor"),
    ("-i", "stepbytes"),
    ("-c", "check"),
    ("-d", "dtype"),
    ("-o", "op"),
    ("-r", "root"),
    ("--rounds", "rounds"),
)  # ddp interleaves every step


def mlp_parameters(layers: tuple[int, ...] = LAYERS) -> int:
    """Weights and biases of the MLP: sum of in*out + out over its linear layers."""
    return sum(a * b + b for a, b in itertools.pairwise(layers))


@record(frozen=True)
class DdpPlan:
    """A validated `hpcdist bench ddp` request."""

    backends: tuple[str, ...]
    iters: int
    warmup: int
    json: bool
    plot: str | None = None  # rank 0 draws the step times into this file (bench/plot.py)


def ddp_plan_from_options(args: BenchOptions) -> DdpPlan:
    """Check `bench ddp`'s options: the collective-only flags are mistakes here."""
    for flag, name in _COLLECTIVE_ONLY:
        if getattr(args, name, None) is not None:
            raise UsageError(
                f"{flag} is for collective benchmarks; bench ddp takes --backend, -n, -w, --json and "
                f"--timeout, so drop {flag}"
            )
    if args.trace_cost:
        raise UsageError("--trace-cost times a collective with tracing on and off; bench ddp does not, so drop it")
    if args.reference:
        raise UsageError("--reference times raw mpi4py collectives; bench ddp has no raw-MPI step, so drop --reference")
    check_counts((("-n", args.iters, 1), ("-w", args.warmup, 0)))
    return DdpPlan(parse_backends(args.backend), args.iters, args.warmup, args.json, args.plot)


@record(frozen=True)
class DdpResult:
    """One backend's steps: milliseconds per step (slowest rank each), and parameters that differ between ranks."""

    impl: str
    step_ms: tuple[float, ...]
    wrong: int

    @property
    def median(self) -> float:
        return statistics.median(self.step_ms)

    def speedup(self, baseline: DdpResult | None) -> float | None:
        """How many times faster than `baseline` (median over median), or None without one."""
        return baseline.median / self.median if baseline and self.median > 0 else None

    def as_json(self, baseline: DdpResult | None) -> dict[str, Any]:
        ms = self.step_ms
        return {
            "impl": self.impl,
            "mean_ms": statistics.fmean(ms),
            "median_ms": self.median,
            "min_ms": min(ms),
            "max_ms": max(ms),
            "step_ms": list(ms),
            "nwrong": self.wrong,
            "speedup_vs_gloo": self.speedup(baseline),
        }


def _baseline(results: list[DdpResult]) -> DdpResult | None:
    return next((r for r in results if r.impl == "torch/gloo"), None)


def ddp_lines(plan: DdpPlan, versions: str, devices: list[str], results: list[DdpResult]) -> list[str]:
    """The table: a preamble like nccl-tests', one row per backend, the verdict and each speed-up over gloo."""
    base = _baseline(results)
    layers = "-".join(map(str, LAYERS))
    lines = [
        f"# hpcdist bench ddp {versions}",
        f"# DDP step: MLP {layers} ReLU ({mlp_parameters()} parameters, {mlp_parameters() * 4 / 2**20:.1f} MiB of "
        f"float32 gradients), batch {BATCH} per rank, MSE loss, SGD",
        f"# warmup iters: {plan.warmup} iters: {plan.iters}; a step is forward+backward+optimizer step, timed as "
        "the slowest rank, backends interleaved step by step",
        "#",
        "# Using devices",
        *devices,
        "#",
        f"# {'impl':>14}  {'mean':>8}  {'median':>8}  {'min':>8}  {'max':>8}  {'#wrong':>6}  {'vs gloo':>7}",
        f"# {'':>14}  {'(ms)':>8}  {'(ms)':>8}  {'(ms)':>8}  {'(ms)':>8}",
    ]
    for r in results:
        speedup = r.speedup(base)
        ratio = "-" if speedup is None else f"{speedup:.2f}x"
        lines.append(
            f"  {r.impl:>14}  {statistics.fmean(r.step_ms):8.2f}  {r.median:8.2f}  {min(r.step_ms):8.2f}  "
            f"{max(r.step_ms):8.2f}  {r.wrong:6d}  {ratio:>7}"
        )
    wrong = sum(r.wrong for r in results)
    lines.append(f"# Parameters agree on every rank: {'OK' if not wrong else f'{wrong} values differ, FAILED'}")
    for r in results:
        if base is not None and r is not base:
            lines.append(
                f"# {r.impl} vs {base.impl}: DDP step speed-up {r.speedup(base):.2f}x "
                f"(median {r.median:.2f} ms vs {base.median:.2f} ms)"
            )
    return [*lines, "#"]


def ddp_document(
    plan: DdpPlan, env: dict[str, Any], devices: list[dict[str, Any]], results: list[DdpResult]
) -> dict[str, Any]:
    """The JSON document of a run, which `--json` prints and `--plot` draws."""
    base = _baseline(results)
    return {
        "version": 1,
        "tool": "hpcdist bench ddp",
        "model": {
            "layers": list(LAYERS),
            "parameters": mlp_parameters(),
            "batch_per_rank": BATCH,
            "loss": "mse",
            "optimizer": "sgd",
        },
        "config": {"warmup_iters": plan.warmup, "iterations": plan.iters, "backends": list(plan.backends)},
        "environment": env,
        "devices": devices,
        "results": [r.as_json(base) for r in results],
        "okay": not any(r.wrong for r in results),
    }


def run_ddp(plan: DdpPlan, session: Session, out: Any = None) -> int:
    """Time the DDP step on every backend; rank 0 prints the table (or JSON) and draws --plot. 1 if parameters
    disagree."""
    import torch
    import torch.distributed as dist

    from .describe import describe, device_line
    from .groups import backend_groups

    out = out or sys.stdout
    groups = backend_groups(plan.backends, session)
    devices, env = describe(session, [g.name for g in groups], "float32")
    steps = [_stepper(g, session.rank) for g in groups]
    for _ in range(plan.warmup):
        for step in steps:
            step()
    times = torch.zeros(len(groups), plan.iters, dtype=torch.float64)
    for i in range(plan.iters):
        for j, (g, step) in enumerate(zip(groups, steps, strict=True)):
            dist.barrier(group=g.group)
            start = time.perf_counter()
            step()
            times[j, i] = (time.perf_counter() - start) * 1e3
    times = times.to(groups[0].device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    results = [
        DdpResult(f"torch/{g.name}", tuple(times[j].tolist()), _disagreeing(step.model, g.group))
        for j, (g, step) in enumerate(zip(groups, steps, strict=True))
    ]
    summary = env.pop("summary")
    if session.rank == 0 and not plan.json:
        print("\n".join(ddp_lines(plan, summary, [device_line(d) for d in devices], results)), file=out, flush=True)
    if session.rank == 0 and (plan.json or plan.plot):
        doc = ddp_document(plan, env, devices, results)
        if plan.json:
            print(json.dumps(doc, indent=1), file=out, flush=True)
        if plan.plot:
            from .plot import draw

            draw(doc, plan.plot)
    return 1 if any(r.wrong for r in results) else 0


def _stepper(group: Any, rank: int) -> Any:
    """A callable running one training step of a fresh (seed 0) MLP in DDP over `group`; `.model` is the DDP."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(LAYERS):
        layers += [nn.Linear(a, b), nn.ReLU()]
    device = torch.device(group.device)
    model = nn.Sequential(*layers[:-1]).to(device)
    ids = [device] if device.type == "cuda" else None
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids, process_group=group.group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1000 + rank)
    x, y = (torch.randn(BATCH, n, generator=gen).to(device) for n in (LAYERS[0], LAYERS[-1]))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    step.model = ddp  # type: ignore[attr-defined]
    return step


def _disagreeing(ddp: Any, group: Any) -> int:
    """Parameter values that differ between ranks (beyond float32 rounding), summed over the group."""
    import torch
    import torch.distributed as dist

    flat = torch.cat([p.detach().flatten() for p in ddp.parameters()]).double()
    high, low = flat.clone(), flat.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(low, op=dist.ReduceOp.MIN, group=group)
    bad = torch.tensor([int(((high - low).abs() > 1e-6 * (1 + high.abs())).sum())], device=flat.device)
    dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=group)
    return int(bad.item())
