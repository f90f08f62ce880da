"""Sharded state under Survivors: FSDP models refused, a ZeroRedundancyOptimizer's shard named, the line a loss says."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer

from hpcdist import TooFewRanks, UsageError
from hpcdist.resilience.membership import Recovery
from hpcdist.resilience.sharded import StateLost, check_model, lost_state, shard_of


@pytest.fixture
def one_rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A gloo group of this process alone, over an in-memory store (fully_shard's first call sets the variable)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "")  # so that monkeypatch puts back its absence
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _model() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))


@pytest.mark.usefixtures("one_rank")
@pytest.mark.parametrize(("shard", "where"), [("", "the model itself"), ("1", "its submodule '1'")])
def test_a_model_sharded_by_fsdp_is_refused_naming_where(shard: str, where: str) -> None:
    model = _model()
    check_model(model)  # unsharded: accepted
    fully_shard(model.get_submodule(shard), mesh=init_device_mesh("cpu", (1,)))
    with pytest.raises(UsageError, match=rf"^hpcdist.Survivors was given a model sharded by FSDP \({where}, a FSDP"):
        check_model(model)


@pytest.mark.usefixtures("one_rank")
def test_a_zero_redundancy_optimizer_holds_a_shard_a_plain_one_all_of_its_state() -> None:
    model = _model()
    assert shard_of(torch.optim.SGD(model.parameters(), lr=0.1)) is None
    zero = ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.1, momentum=0.5)
    assert shard_of(zero) == "ZeroRedundancyOptimizer shard"


@pytest.mark.parametrize(
    ("lost", "checkpoint", "restarts", "text"),
    [
        ((2,), "c.pt", 1, "of rank 2 (S) was lost with it; the job resumes from its checkpoint c.pt"),
        ((1, 3), "c.pt", 0, "of ranks 1, 3 (S) was lost with them; the job ends (hpcdist mpirun --max-restarts N "),
        ((2,), None, 1, "of rank 2 (S) was lost with it; the job ends (give Survivors checkpoint=PATH and "),
        ((), "c.pt", 1, "(Ss) cannot step on the survivors' rebuilt groups; the job resumes from its checkpoint c.pt"),
    ],
)
def test_a_lost_shard_ends_every_survivor_alike(
    lost: tuple[int, ...], checkpoint: str | None, restarts: int, text: str
) -> None:
    recovery = Recovery(lost, dict.fromkeys(lost, "n1"), 4, 4 - len(lost), 1, 0.1, during="commit")
    error = lost_state(recovery, "S", checkpoint, restarts)
    assert isinstance(error, StateLost) and isinstance(error, TooFewRanks)
    gone = f"{'rank 2' if lost == (2,) else 'ranks 1,3'} on n1 lost; " if lost else ""
    assert str(error).startswith(gone + ("the optimizer's state " if lost else "the optimizer ") + text)
    assert error.line() == str(error)  # it says what happens next itself
    assert (error.ranks, error.survivor, error.during) == (lost, 1, "commit")
