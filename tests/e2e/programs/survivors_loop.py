"""A user's script trained through hpcdist.Survivors; ranks named in $VICTIMS stop mid-step for the test to kill.

Usage: survivors_loop.py OUT_DIR BACKEND. $VICTIMS is `RANK:EPOCH:STEP,...` (start ranks; epochs and steps counted
from 0): that rank, about to train that step (once: not again after a restart), writes OUT_DIR/victim-RANK.pid and
sleeps there, inside the step, until the test SIGKILLs it; epoch 3 (past the last) stops it after the final barrier,
as the others shut down. A survivor that meets TooFewRanks prints it and exits. Every rank appends `epoch index` to
OUT_DIR/seen-RANK.txt for each sample of every committed step; rank 0 prints each epoch's loss; at the end every
survivor prints its parameters' digest and the world size, then its default group's description (torch's), and
touches OUT_DIR/past-barrier-RANK once past the final barrier. After a recovery, rank 0 prints the time of the first
step committed since (`first step after recovery at T on N ranks`). Every rank writes its pid to OUT_DIR/pid-RANK
before it makes the loop. $SHARDED `zero` shards the optimizer's state (ZeroRedundancyOptimizer over SGD with
momentum), `fsdp` the model (fully_shard); with `zero`, STEP -1 stops the victim as that epoch's end gathers the
optimizer's shards for the checkpoint. $CHECKPOINT is Survivors' checkpoint=PATH.
"""

import contextlib
import hashlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.utils.data import TensorDataset

import hpcdist

SAMPLES, BATCH, EPOCHS = 480, 8, 3

out = Path(sys.argv[1])
start_rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
pauses = {
    (int(epoch), int(step))
    for rank, epoch, step in (victim.split(":") for victim in os.environ.get("VICTIMS", "").split(",") if victim)
    if int(rank) == start_rank
}


def pause_for_the_kill() -> None:
    """Write OUT_DIR/victim-RANK.pid and sleep until the test SIGKILLs this rank."""
    (out / "pid.tmp").write_text(str(os.getpid()))
    (out / "pid.tmp").rename(out / f"victim-{start_rank}.pid")
    time.sleep(300)  # the behaviour: a rank stopped mid-step, until the kill


@contextlib.contextmanager
def report_too_few() -> Iterator[None]:
    """Say that the survivors are too few, and end this rank with status 3 (with $SHARDED, leave it to hpcdist mpirun,
    which says a lost shard once for the job)."""
    try:
        yield
    except hpcdist.TooFewRanks as error:
        if os.environ.get("SHARDED"):
            raise
        print(f"start rank {start_rank}: {error}", flush=True)
        os._exit(3)


with hpcdist.init(sys.argv[2]):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 8, generator=generator)
    y = x @ torch.randn(8, 1, generator=generator) + 0.01 * torch.randn(SAMPLES, 1, generator=generator)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    sharded = os.environ.get("SHARDED")
    if sharded == "fsdp":
        fully_shard(model, mesh=init_device_mesh("cpu", (dist.get_world_size(),)))
    optimizer: torch.optim.Optimizer
    if sharded == "zero":
        optimizer = ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.05, momentum=0.5)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data, checkpoint = TensorDataset(x, y), os.environ.get("CHECKPOINT")
    (out / f"pid-{start_rank}").write_text(str(os.getpid()))  # a spare waits in Survivors, just below
    loop = hpcdist.Survivors(model, optimizer, data, batch_size=BATCH, seed=1, checkpoint=checkpoint)
    told = 0  # the recoveries whose first step after was told
    if isinstance(optimizer, ZeroRedundancyOptimizer) and any(step == -1 for _, step in pauses):
        consolidate = optimizer.consolidate_state_dict

        def pause_then_consolidate(to: int = 0) -> None:
            """Stop for the kill as the paused epoch's end gathers the shards (once), else gather them."""
            if (loop.epoch, -1) in pauses and not (out / f"victim-{start_rank}.pid").exists():
                pause_for_the_kill()
            consolidate(to)

        setattr(optimizer, "consolidate_state_dict", pause_then_consolidate)  # noqa: B010 - the test's hook in it
    with open(out / f"seen-{start_rank}.txt", "a") as seen, report_too_few():
        for epoch in loop.epochs(EPOCHS):
            totals = torch.zeros(2, dtype=torch.float64)
            for xb, yb in loop.batches():
                with loop.step():
                    if (epoch, loop.epoch_step) in pauses and not (out / f"victim-{start_rank}.pid").exists():
                        pause_for_the_kill()  # once: a restart trains on
                    loss = torch.nn.functional.mse_loss(loop.model(xb), yb)
                    loss.backward()
                if loop.committed and len(loop.recoveries) > told and loop.rank == 0:
                    print(f"first step after recovery at {time.time():.6f} on {loop.world_size} ranks", flush=True)
                if loop.committed:
                    told = len(loop.recoveries)
                    seen.write("".join(f"{epoch} {index}\n" for index in loop.indices))
                    seen.flush()
                    totals += torch.tensor([loss.item() * len(xb), len(xb)], dtype=torch.float64)
            loop.all_reduce(totals)
            if loop.rank == 0:
                print(f"epoch {epoch} loss {(totals[0] / totals[1]).item():.6f}", flush=True)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    print(f"start rank {start_rank}: rank {loop.rank} of {loop.world_size}: parameters {digest}", flush=True)
    print(f"start rank {start_rank}: default group {dist.group.WORLD.group_desc}", flush=True)  # type: ignore[union-attr]
    dist.barrier()
    (out / f"past-barrier-{start_rank}").touch()  # then into the shutdown, or to the kill
    if (EPOCHS, 0) in pauses:
        pause_for_the_kill()
