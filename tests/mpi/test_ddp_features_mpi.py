"""DistributedDataParallel's features and FSDP2 on the mpi backend (hpcdist's mpi4py process group), at any world size.

Every rank builds the same global batch and trains on its slice of it; the reference is a plain model with the same
initial parameters trained in this process on the whole batch, with the loss averaged the way DDP averages it (the
mean over the global batch, since every slice has the same size). Models are float64, so the only difference left
between the two is the order of additions (per-rank means averaged across ranks vs one mean over the global batch):
`_close` allows 1e-10 relative, a million times the float64 rounding, and a million times less than any real error.
Across ranks the parameters must be bit for bit equal: every rank receives the same all-reduced gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import cast

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

pytestmark = pytest.mark.mpi

ROWS = 3  # rows per rank per step
IN, HIDDEN, OUT = 4, 6, 2
LR = 0.1


@pytest.fixture(scope="module")
def session() -> Iterator[object]:
    import hpcdist

    with hpcdist.init("mpi", timeout=120) as session:
        assert dist.get_backend() == "mpi4py"
        yield session


@pytest.fixture(scope="module")
def comm(session):
    from mpi4py import MPI

    return MPI.COMM_WORLD


class Net(nn.Module):
    """A tiny MLP; with `extras`, also a side branch that forward(x, branch=True) adds and a layer never used."""

    def __init__(self, extras: bool = False) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUT))
        if extras:
            self.branch = nn.Linear(IN, OUT)
            self.idle = nn.Linear(IN, OUT)  # unused in every forward

    def forward(self, x: torch.Tensor, branch: bool = False) -> torch.Tensor:
        y = self.body(x)
        return y + self.branch(x) if branch else y


def _model(extras: bool = False) -> Net:
    """The same initial parameters in every process, without touching the global RNG."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Net(extras).double()


def _batch(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A global batch, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, IN, generator=g, dtype=torch.float64), torch.randn(
        rows, OUT, generator=g, dtype=torch.float64
    )


def _slice(t: torch.Tensor, part: int, rows: int = ROWS) -> torch.Tensor:
    return t[part * rows : (part + 1) * rows]


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(out, y)  # mean over the rows


def _flat(module: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def _identical_across_ranks(comm, module: nn.Module) -> torch.Tensor:
    flat = _flat(module)
    everyone = comm.allgather(flat)
    for rank, other in enumerate(everyone):
        assert torch.equal(other, flat), f"rank {comm.rank}: parameters differ from rank {rank}'s"
    return flat


def _close(actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-10, atol: float = 1e-12) -> None:
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


def _step(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def _train_ddp(
    comm,
    ddp: DistributedDataParallel,
    steps: int,
    branch: Callable[[int, int], bool] = lambda s, r: False,
    first: int = 0,
) -> None:
    """Steps first .. first + steps - 1 of the data sequence the reference sees."""
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    for s in range(first, first + steps):
        x, y = _batch(ROWS * comm.size, seed=100 + s)
        _step(opt, _loss(ddp(_slice(x, comm.rank), branch(s, comm.rank)), _slice(y, comm.rank)))


def _train_reference(
    size: int, steps: int, branch: Callable[[int, int], bool] | None = None, extras: bool = False
) -> Net:
    """The whole global batch in one process; with `branch`, each rank's slice goes its own way, losses averaged."""
    model = _model(extras)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for s in range(steps):
        x, y = _batch(ROWS * size, seed=100 + s)
        if branch is None:
            loss = _loss(model(x), y)
        else:
            loss = cast(
                torch.Tensor, sum(_loss(model(_slice(x, r), branch(s, r)), _slice(y, r)) for r in range(size)) / size
            )
        _step(opt, loss)
    return model


def test_ddp_matches_a_single_process_run_on_the_concatenated_batch(comm) -> None:
    ddp = DistributedDataParallel(_model())
    _train_ddp(comm, ddp, steps=4)
    _close(_identical_across_ranks(comm, ddp.module), _flat(_train_reference(comm.size, 4)))


def test_ddp_find_unused_parameters_with_a_branch_some_ranks_skip_on_some_steps(comm) -> None:
    """The branch runs where step + rank is even: at 1 rank on every other step, at more on some ranks each step."""

    def branch(s: int, r: int) -> bool:
        return (s + r) % 2 == 0

    ddp = DistributedDataParallel(_model(extras=True), find_unused_parameters=True)
    _train_ddp(comm, ddp, steps=4, branch=branch)
    flat = _identical_across_ranks(comm, ddp.module)
    reference = _train_reference(comm.size, 4, branch, extras=True)
    _close(flat, _flat(reference))
    initial = _model(extras=True)
    assert not torch.equal(ddp.module.branch.weight, initial.branch.weight)  # the branch did train
    assert torch.equal(ddp.module.idle.weight, initial.idle.weight)  # the idle layer did not


def test_ddp_static_graph(comm) -> None:
    """The same graph every step, with layers that are never used: static_graph finds them in step 1 by itself."""
    ddp = DistributedDataParallel(_model(extras=True), static_graph=True)
    _train_ddp(comm, ddp, steps=4)
    _close(_identical_across_ranks(comm, ddp.module), _flat(_train_reference(comm.size, 4, extras=True)))


def test_no_sync_gradient_accumulation_equals_the_accumulated_batch(comm) -> None:
    """Each step: `micro` micro-batches per rank, the first ones under no_sync(); the reference takes all at once."""
    micro, steps = 3, 2
    ddp = DistributedDataParallel(_model())
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    for s in range(steps):
        x, y = _batch(ROWS * micro * comm.size, seed=200 + s)  # rank r's rows: slice r of size ROWS * micro
        xr, yr = _slice(x, comm.rank, ROWS * micro), _slice(y, comm.rank, ROWS * micro)
        opt.zero_grad(set_to_none=True)
        for m in range(micro):
            if m < micro - 1:
                with ddp.no_sync():
                    (_loss(ddp(_slice(xr, m)), _slice(yr, m)) / micro).backward()
            else:
                (_loss(ddp(_slice(xr, m)), _slice(yr, m)) / micro).backward()
        opt.step()
    reference = _model()
    ropt = torch.optim.SGD(reference.parameters(), lr=LR)
    for s in range(steps):
        x, y = _batch(ROWS * micro * comm.size, seed=200 + s)
        _step(ropt, _loss(reference(x), y))
    _close(_identical_across_ranks(comm, ddp.module), _flat(reference))


def test_join_with_uneven_inputs_does_not_hang_and_ends_equal(comm) -> None:
    """Rank r trains on 2 + r batches. Ranks that have run out shadow the all-reduces with zeros, and DDP divides by
    the initial world size, so step s is the sum of the active ranks' mean losses over the world size."""
    steps = [2 + r for r in range(comm.size)]
    ddp = DistributedDataParallel(_model())
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    with ddp.join():
        for s in range(steps[comm.rank]):
            x, y = _batch(ROWS * comm.size, seed=300 + s)
            _step(opt, _loss(ddp(_slice(x, comm.rank)), _slice(y, comm.rank)))
    reference = _model()
    ropt = torch.optim.SGD(reference.parameters(), lr=LR)
    for s in range(max(steps)):
        x, y = _batch(ROWS * comm.size, seed=300 + s)
        active = [r for r in range(comm.size) if s < steps[r]]
        _step(ropt, sum(_loss(reference(_slice(x, r)), _slice(y, r)) for r in active) / comm.size)
    _close(_identical_across_ranks(comm, ddp.module), _flat(reference))


def _bf16_compress_hook(state, bucket):
    """torch's bf16_compress_hook under another name (see the test below for why)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.bf16_compress_hook(state, bucket)


@pytest.mark.parametrize(
    "name, rtol, atol",
    [
        ("allreduce_hook", 1e-10, 1e-12),
        # Gradients rounded to float16 (11 significant bits) or bfloat16 (8) before the sum: after 4 steps the
        # parameters are off by ~2e-5 and ~4e-4 (they moved by ~0.1; a wrong average would be off by that much):
        # ~10x margin.
        ("fp16_compress_hook", 0, 2e-4),
        ("bf16_compress_hook", 0, 3e-3),
    ],
)
def test_builtin_comm_hooks(comm, name: str, rtol: float, atol: float) -> None:
    """DDP.register_comm_hook refuses bf16_compress_hook *by its name* unless torch has CUDA+NCCL or XPU+XCCL, although
    the hook is only casts and an all_reduce: it runs torch's own hook function under another name."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp = DistributedDataParallel(_model())
    hook = _bf16_compress_hook if name == "bf16_compress_hook" else getattr(default_hooks, name)
    ddp.register_comm_hook(None, hook)  # state None: the default group
    _train_ddp(comm, ddp, steps=4)
    flat = _identical_across_ranks(comm, ddp.module)
    reference = _flat(_train_reference(comm.size, 4))
    _close(flat, reference, rtol, atol)
    if name != "allreduce_hook":
        assert not torch.equal(flat, reference)  # the compression really happened


def test_registering_bf16_compress_hook_is_refused_by_torch_without_cuda_nccl_or_xpu_xccl(comm) -> None:
    """torch's check, not the backend's: it looks at the hook's __name__ and the build, never at the process group."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp = DistributedDataParallel(_model())
    gpu_build = (torch.version.cuda is not None or torch.version.hip is not None) and dist.is_nccl_available()
    xpu = dist.is_xccl_available() and torch.xpu.is_available()
    if gpu_build or xpu:
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    else:
        with pytest.raises(TypeError, match=r"BF16 all reduce communication hook required CUDA 11\+ and NCCL 2\.10\+"):
            ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)


def test_powersgd_hook_rank_1(comm) -> None:
    """PowerSGD all-reduces plainly for the first `start` - 1 steps (equal to the reference there), then compresses the
    weight matrices to rank 1, which is lossy: from then on the ranks must agree, and the compressed updates must track
    the exact ones (here cosine 0.96-0.98 and a remaining distance of 0.2-0.3 of the way, at 1, 2 and 4 ranks)."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    start = 3
    state = powersgd.PowerSGDState(
        process_group=None,
        matrix_approximation_rank=1,
        start_powerSGD_iter=start,
        min_compression_rate=0.5,
        use_error_feedback=True,
        warm_start=True,
        random_seed=0,
    )
    ddp = DistributedDataParallel(_model())
    ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    _train_ddp(comm, ddp, steps=start - 1)
    _close(_identical_across_ranks(comm, ddp.module), _flat(_train_reference(comm.size, start - 1)))
    mid = _flat(ddp.module)
    _train_ddp(comm, ddp, steps=8, first=start - 1)
    flat = _identical_across_ranks(comm, ddp.module)
    reference = _flat(_train_reference(comm.size, start - 1 + 8))
    assert not torch.allclose(flat, reference, rtol=0, atol=1e-3)  # the compression really happened
    assert nn.functional.cosine_similarity(flat - mid, reference - mid, dim=0) > 0.9
    assert (flat - reference).norm() < 0.5 * (mid - reference).norm()


def test_fsdp2_fully_shard_on_cpu_matches_a_single_process_run(comm) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    mesh = init_device_mesh("cpu", (comm.size,))
    assert dist.get_backend(mesh.get_group()) == "mpi4py"
    model = _model()
    for layer in model.body:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for s in range(4):
        x, y = _batch(ROWS * comm.size, seed=100 + s)
        _step(opt, _loss(model(_slice(x, comm.rank)), _slice(y, comm.rank)))
    assert all(isinstance(p, DTensor) for p in model.parameters())
    full = torch.cat([cast(DTensor, p).full_tensor().reshape(-1) for p in model.parameters()])
    everyone = comm.allgather(full)
    assert all(torch.equal(other, full) for other in everyone)
    _close(full, _flat(_train_reference(comm.size, 4)))
    for p, q in zip(model.parameters(), _model().parameters(), strict=True):  # each rank holds only its dim-0 chunk
        chunks = torch.chunk(q, comm.size, dim=0)
        assert cast(DTensor, p).to_local().numel() == (chunks[comm.rank].numel() if comm.rank < len(chunks) else 0)
