"""Data-parallel training with DistributedDataParallel on a seeded synthetic data set, with exact resume.

A small MLP learns y = sin(x·w) + noise. Every rank builds the same data set from the seed; a
DistributedSampler gives each rank its share, reshuffled per epoch by (seed, epoch). After every epoch
rank 0 writes DIR/ddp.pt atomically: the model, the optimizer, the number of epochs done, and every
rank's RNG state (dropout and the DataLoader draw from it). The sampler needs only (seed, epoch), so
`--resume` reaches bit for bit the parameters of an uninterrupted run. At the end every rank checks
that its parameters are identical to every other rank's.

Preemption: SIGTERM (what `scontrol requeue`/`scancel` send to a job step) or SIGUSR1 (what the
generated sbatch script passes on from `--signal`) on any rank makes every rank stop at the same step
boundary (a flag is all-reduced every CHECK_EVERY steps); rank 0 then writes a mid-epoch checkpoint
(epoch, step within it, every rank's RNG state and partial loss totals) and the run ends with status 0
(Preempted). `--resume` skips the done batches of that epoch, so the result is still bit for bit.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ..errors import UsageError
from ..forensics.timeline import region, reporting
from ..resilience import checkpoint
from ..runtime.bootstrap import Session, forensics_enabled
from . import WorkloadOptions, steplog
from .preemption import Preempted, StopAtStepBoundary

__all__ = [
    "CHECKPOINT_NAME",
    "Preempted",
    "build_model",
    "check_identical",
    "make_dataset",
    "parameters_digest",
    "run",
    "train",
]

CHECKPOINT_NAME = "ddp.pt"
FEATURES = 16
HIDDEN = 64
LEARNING_RATE = 3e-3
_FORMAT = 1
CHECK_EVERY = 8  # steps between the all-reduces that agree on stopping: 1.1 ms (2 ranks) to 4 ms (4 ranks on
# 2 cores) each here, +10-15 % per step when done every step, lost in the noise every 8th step
_MUST_MATCH = ("world_size", "seed", "samples", "batch_size")  # what exact continuation depends on


def make_dataset(samples: int, seed: int) -> TensorDataset:
    """The same regression data on every rank: x ~ N(0, 1)^16, y = sin(x·w) + 0.05·noise, |w| ≈ 1."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, FEATURES, generator=generator)
    w = torch.randn(FEATURES, 1, generator=generator) / FEATURES**0.5
    y = torch.sin(x @ w) + 0.05 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(x, y)


def build_model(seed: int) -> nn.Module:
    """A small MLP with dropout, initialised from `seed` (the same on every rank)."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN),
        nn.Tanh(),
        nn.Dropout(0.1),
        nn.Linear(HIDDEN, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, 1),
    )


def parameters_digest(model: nn.Module) -> str:
    """SHA-256 of the parameters' bytes: equal digests mean bit-identical parameters."""
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def run(session: Session, options: WorkloadOptions | None = None) -> str | None:
    """`hpcdist run ddp`: train, then check that the parameters are identical on all ranks.

    With `options.report`, every rank's calls are traced and rank 0 prints the straggler table after training.
    With `options.on_failure` "shrink", the survivors of a lost rank carry on (`shrinking`) and are compared.
    """
    if options is not None and options.on_failure == "shrink":  # the survivors of a lost rank carry on
        opts, device = options, torch.device(session.device)
        module = build_model(opts.seed).to(device)
        optimizer = torch.optim.Adam(module.parameters(), lr=LEARNING_RATE)
        dataset = make_dataset(opts.samples, opts.seed)
        from . import shrinking  # not at import: it loads mpi4py.MPI, which MPI_Inits a torchrun or srun worker

        path = str(Path(opts.checkpoint_dir, CHECKPOINT_NAME)) if opts.checkpoint_dir else None
        return check_identical(shrinking.train(session, opts, module, optimizer, dataset, path), session)
    if options is None or not options.report:
        return check_identical(train(session, options), session)
    with reporting(forensics_enabled(session.env), session.timeout):
        model = train(session, options)
    return check_identical(model, session)


def train(session: Session, options: WorkloadOptions | None = None) -> nn.Module:
    """Train (resuming from the checkpoint if asked), checkpoint each epoch; return the trained model.

    `options` are those of `hpcdist run` (WorkloadOptions, checked when made); None means the defaults.
    On SIGTERM or SIGUSR1 every rank stops at the same step boundary, rank 0 writes a mid-epoch
    checkpoint (with --checkpoint-dir), and Preempted (a SystemExit with status 0) is raised.
    """
    opts = options if options is not None else WorkloadOptions()
    rank, size, device = session.rank, session.world_size, torch.device(session.device)
    path = Path(opts.checkpoint_dir, CHECKPOINT_NAME) if opts.checkpoint_dir else None
    config = {"world_size": size, "seed": opts.seed, "samples": opts.samples, "batch_size": opts.batch_size}

    dataset = make_dataset(opts.samples, opts.seed)
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset, num_replicas=size, rank=rank, shuffle=True, seed=opts.seed
    )
    loader = DataLoader(dataset, batch_size=opts.batch_size, sampler=sampler)
    module = build_model(opts.seed).to(device)
    optimizer = torch.optim.Adam(module.parameters(), lr=LEARNING_RATE)
    model = DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)
    _settle_buckets(model, device)
    torch.manual_seed(opts.seed + 1 + rank)  # each rank its own dropout masks

    bar = _progress_bar(session) and rank == 0
    done, step, losses, partial = 0, 0, [], None
    state = _read_checkpoint(path, rank) if opts.resume else None
    if state is not None:
        _check_same_run(state, config, path)
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        done, step, losses = state["epoch"], state.get("step", 0), list(state["losses"])
        if step:  # mid-epoch: the RNG state is restored after the epoch's DataLoader iterator drew its seed
            partial = (state["rng"][rank], state["totals"][rank])
        else:
            _set_rng(state["rng"][rank], device)
    _say(rank, _describe(session, opts, done, step, path if opts.resume else None, state is not None))

    with StopAtStepBoundary(CHECK_EVERY, device=device, label="ddp") as preemption:
        for epoch in range(done, opts.epochs):
            sampler.set_epoch(epoch)
            label = f"epoch {epoch + 1}/{opts.epochs}"
            logged = functools.partial(steplog.record, opts.step_log, rank, size, epoch + 1)
            result = _train_epoch(model, loader, optimizer, device, bar, label, step, partial, preemption, logged)
            step, partial = 0, None
            if isinstance(result, _Stop):
                _stop(session, module, optimizer, config, losses, path, epoch, result, preemption)
            loss, seconds, count = result
            losses.append(loss)
            saved = ""
            if path is not None:
                rng = [None] * size
                dist.all_gather_object(rng, _get_rng(device))
                if rank == 0:
                    checkpoint.save(
                        {
                            "format": _FORMAT,
                            **config,
                            "epoch": epoch + 1,
                            "step": 0,
                            "losses": losses,
                            "rng": rng,
                            "model": module.state_dict(),
                            "optimizer": optimizer.state_dict(),
                        },
                        path,
                    )
                    saved = f", saved {path}"
            _say(rank, f"epoch {epoch + 1}/{opts.epochs} loss {loss:.6f} samples/s {count / seconds:.0f}{saved}")
            if preemption.stopping and epoch + 1 < opts.epochs:  # agreed on the epoch's last step: stop here
                _stop(session, module, optimizer, config, losses, path, epoch + 1, None, preemption)
            if opts.stop_after_epoch == epoch + 1 and epoch + 1 < opts.epochs:
                _say(rank, f"stopping after epoch {epoch + 1} as asked (--stop-after-epoch)")
                break
    return module


class _Stop:
    """Where an epoch was interrupted: the steps done in it and this rank's loss totals so far."""

    def __init__(self, step: int, totals: torch.Tensor) -> None:
        self.step, self.totals = step, totals


def _stop(
    session: Session,
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    config: dict[str, Any],
    losses: list[float],
    path: Path | None,
    epoch: int,
    where: _Stop | None,
    preemption: StopAtStepBoundary,
) -> NoReturn:
    """Save the checkpoint at this step boundary (rank 0, atomically), wait for it on every rank, raise Preempted."""
    rank, device = session.rank, next(module.parameters()).device
    step = where.step if where is not None else 0
    saved = "no --checkpoint-dir, nothing saved"
    if path is not None:
        mine = (_get_rng(device), where.totals.cpu() if where is not None else None)
        gathered: list[Any] = [None] * session.world_size
        dist.all_gather_object(gathered, mine)
        if rank == 0:
            state = {
                "format": _FORMAT,
                **config,
                "epoch": epoch,
                "step": step,
                "losses": losses,
                "rng": [rng for rng, _ in gathered],
                "model": module.state_dict(),
                "optimizer": optimizer.state_dict(),
            }
            if step:
                state["totals"] = [totals for _, totals in gathered]
            checkpoint.save(state, path)
            saved = f"saved {path}"
        dist.barrier()  # no rank exits before the checkpoint is on disk
    where_text = f"epoch {epoch + 1} step {step}" if step else f"the end of epoch {epoch}"
    _say(
        rank,
        f"preempted ({preemption.signal_name}): stopped at {where_text}, {saved}; run again with --resume to continue",
    )
    preemption.exit(epoch, step, path)


def _train_epoch(
    model: nn.Module,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    bar: bool,
    label: str,
    skip: int = 0,
    partial: tuple[Any, torch.Tensor] | None = None,
    preemption: StopAtStepBoundary | None = None,
    logged: Callable[[int], None] | None = None,
) -> tuple[float, float, int] | _Stop:
    """One pass over this rank's share: (mean loss over all ranks, seconds, samples over all ranks).

    `skip` batches done before a mid-epoch checkpoint are passed over; `partial` is that checkpoint's
    (RNG state, loss totals) for this rank. A _Stop is returned when the ranks agree to stop early.
    `logged(step)` is called after each optimizer step (the --step-log line).
    """
    model.train()
    start = time.perf_counter()
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # sum of loss * n, n
    batches = iter(loader)  # draws the epoch's base seed from the global RNG
    if partial is not None:
        _set_rng(partial[0], device)  # the state after that draw and the done steps' dropout
        totals += partial[1].to(device)
    for _ in range(skip):  # the sampler's order depends only on (seed, epoch): skip what was done
        next(batches)
    steps = len(loader)
    progress = None
    if bar:
        from tqdm import tqdm

        # A rank's pseudo-terminal under Open MPI reports 0 x 0, and tqdm would draw nothing: size it here.
        columns, lines = shutil.get_terminal_size()  # falls back to 80 x 24
        progress = tqdm(
            total=steps,
            initial=skip,
            desc=label,
            unit="batch",
            leave=False,
            file=sys.stdout,
            ncols=columns,
            nrows=lines,
        )
    for step, (x, y) in enumerate(batches, start=skip + 1):
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad(set_to_none=True)
        with region("forward"):  # marked on the rank's track when the job is traced; nothing otherwise
            loss = nn.functional.mse_loss(model(x), y)
        with region("backward"):
            loss.backward()
        with region("optimizer"):
            optimizer.step()
        if logged is not None:
            logged(step)
        totals[0] += loss.detach().double() * len(x)
        totals[1] += len(x)
        if progress is not None:
            progress.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
            progress.update()
        # a collective every CHECK_EVERY steps and on the epoch's last step
        agreed = preemption is not None and preemption.should_stop(None if step == steps else step)
        if agreed and step < steps:  # on the last step the epoch ends as usual and train() stops after it
            if progress is not None:
                progress.close()
            return _Stop(step, totals)
    if progress is not None:
        progress.close()
    dist.all_reduce(totals)
    seconds = time.perf_counter() - start
    return (totals[0] / totals[1]).item(), seconds, int(totals[1].item())


def _settle_buckets(model: nn.Module, device: torch.device) -> None:
    """One forward and backward with a zero loss, so that DDP lays out its buckets before the first real step.

    DDP's first step puts every gradient in one bucket in parameter order; then it rebuilds the buckets
    in the order the gradients became ready. An all-reduce's rounding depends on where a value sits in
    its bucket, so without this a resumed run's first step would round differently from the same step
    of an uninterrupted run. Only zeros are all-reduced and the optimizer does not step.
    """
    model(torch.zeros(1, FEATURES, device=device)).sum().mul(0).backward()
    model.zero_grad(set_to_none=True)


def _progress_bar(session: Session) -> bool:
    """Whether to draw a tqdm bar: the contract's `progress` decides (hpcdist mpirun sets it when its own output is a
    terminal, and passes on a user's); else only when stdout is a terminal.

    Under Open MPI every rank's stdout is a pseudo-terminal wherever mpirun's own output goes, so a
    rank started by an MPI launcher cannot tell; there the bar needs the contract's word.
    """
    if session.contract.progress is not None:
        return session.contract.progress
    return not session.env.is_mpi and sys.stdout.isatty()


def _read_checkpoint(path: Path | None, rank: int) -> dict[str, Any] | None:
    """Rank 0 reads the checkpoint (or finds none) and broadcasts it, so only rank 0 needs the file."""
    box: list[Any] = [None]
    if rank == 0 and path is not None and path.exists():
        box[0] = checkpoint.load(path)
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _check_same_run(state: dict[str, Any], config: dict[str, Any], path: Path | None) -> None:
    """Exact continuation needs the same ranks, seed, data and batch size: say which one differs."""
    if state.get("format") != _FORMAT:
        raise UsageError(f"{path} has checkpoint format {state.get('format')!r}, this hpcdist writes {_FORMAT}")
    for key in _MUST_MATCH:
        if state[key] != config[key]:
            flag = "-np" if key == "world_size" else "--" + key.replace("_", "-")
            raise UsageError(
                f"{path} was written with {key}={state[key]}, this run has {key}={config[key]}; an exact "
                f"continuation needs the same value: pass {flag} {state[key]}, or start afresh without --resume"
            )


def _get_rng(device: torch.device) -> dict[str, Any]:
    """This rank's RNG state: the CPU generator, and the CUDA one when training on a GPU."""
    return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def _set_rng(state: dict[str, Any], device: torch.device) -> None:
    """Restore what _get_rng saved."""
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"], device)


def check_identical(module: nn.Module, session: Session) -> str | None:
    """Compare the parameters bit for bit across ranks (MIN and MAX of their int32 view); None if all agree."""
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()]).float().contiguous()
    bits = flat.view(torch.int32)
    low, high = bits.clone(), bits.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    differ = int((low != high).sum().item())
    digest = parameters_digest(module)
    rank, size = dist.get_rank(), dist.get_world_size()  # the session's, or fewer after a shrink
    if differ:
        print(f"rank {rank}: parameters sha256 {digest} DIFFER across ranks")
        return f"rank {rank}: {differ} of {flat.numel()} parameters differ across the {size} ranks"
    print(f"rank {rank}: parameters sha256 {digest} identical on all {size} ranks")
    return None


def _describe(session: Session, opts: WorkloadOptions, done: int, step: int, resume: Path | None, resumed: bool) -> str:
    """The run's first line: ranks, backend, data, and where training starts."""
    todo = f"epochs {done + 1}..{opts.epochs}" if done < opts.epochs else f"all {opts.epochs} epochs done already"
    after = f"step {step} of epoch {done + 1}" if step else f"epoch {done}"
    start = (
        f", resumed from {resume} after {after}"
        if resumed
        else f", no checkpoint at {resume}: starting at epoch 1"
        if resume
        else ""
    )
    return (
        f"ddp: {session.world_size} ranks, backend {session.backend}, device {session.device}, "
        f"{opts.samples} samples, batch {opts.batch_size} per rank, {todo}{start}"
    )


def _say(rank: int, line: str) -> None:
    """Print a progress line on rank 0 only."""
    if rank == 0:
        print(f"rank 0: {line}", flush=True)
