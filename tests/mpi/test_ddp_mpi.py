"""The ddp workload under a real `mpiexec -n N` (any N): identical parameters, checkpoints, exact resume."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from hpcdist.errors import UsageError
from hpcdist.workloads import WorkloadOptions

pytestmark = pytest.mark.mpi

SMALL = {"samples": 256, "batch_size": 16}  # a few steps per epoch at any world size


@pytest.fixture(scope="module")
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture(scope="module")
def session(comm):
    import hpcdist

    with hpcdist.init("gloo", timeout=120) as session:
        yield session


@pytest.fixture
def shared_dir(comm) -> Iterator[str]:
    """One temporary directory for the whole job (all ranks run on this host), removed afterwards."""
    path = comm.bcast(tempfile.mkdtemp(prefix="hpcdist-ddp-") if comm.rank == 0 else None, root=0)
    yield path
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


def _options(**changes: Any) -> WorkloadOptions:
    return WorkloadOptions(**{**SMALL, **changes})


def _digests(comm, module) -> list[str]:
    from hpcdist.workloads.ddp import parameters_digest

    return comm.allgather(parameters_digest(module))


def test_training_leaves_identical_parameters_on_every_rank_and_learns(comm, session, shared_dir, capsys) -> None:
    from hpcdist.workloads.ddp import check_identical, train

    module = train(session, _options(epochs=3, checkpoint_dir=shared_dir))
    out = capsys.readouterr().out
    assert len(set(_digests(comm, module))) == 1
    assert check_identical(module, session) is None
    comm.Barrier()
    if comm.rank == 0:
        from hpcdist.resilience import checkpoint

        assert os.listdir(shared_dir) == ["ddp.pt"]  # rank 0 alone writes, and no temporary file is left
        state = checkpoint.load(os.path.join(shared_dir, "ddp.pt"))
        assert (state["epoch"], state["world_size"], len(state["rng"])) == (3, comm.size, comm.size)
        assert state["losses"][-1] < state["losses"][0]  # it learns
        assert [line.split(" loss ")[0] for line in out.splitlines() if " loss " in line] == [
            f"rank 0: epoch {e}/3" for e in (1, 2, 3)
        ]
    else:
        assert out.splitlines() == []  # progress is rank 0's


def test_a_resumed_run_ends_with_exactly_the_parameters_of_an_uninterrupted_run(comm, session, shared_dir) -> None:
    from hpcdist.workloads.ddp import train

    whole = _digests(comm, train(session, _options(epochs=3, checkpoint_dir=os.path.join(shared_dir, "a"))))
    cut = os.path.join(shared_dir, "b")
    stopped = _digests(comm, train(session, _options(epochs=3, checkpoint_dir=cut, stop_after_epoch=2)))
    resumed = _digests(comm, train(session, _options(epochs=3, checkpoint_dir=cut, resume=True)))
    assert stopped != whole  # the cut really stopped early
    assert resumed == whole


def test_resuming_with_a_different_batch_size_is_refused_on_every_rank(comm, session, shared_dir) -> None:
    from hpcdist.workloads.ddp import train

    train(session, _options(epochs=1, checkpoint_dir=shared_dir))
    with pytest.raises(UsageError, match=r"batch_size=16, this run has batch_size=8; .* pass --batch-size 16"):
        train(session, _options(epochs=2, checkpoint_dir=shared_dir, resume=True, batch_size=8))


def test_resume_without_a_checkpoint_starts_afresh(comm, session, shared_dir, capsys) -> None:
    from hpcdist.workloads.ddp import train

    fresh = _digests(comm, train(session, _options(epochs=1)))
    resumed = _digests(comm, train(session, _options(epochs=1, checkpoint_dir=shared_dir, resume=True)))
    assert fresh == resumed
    if comm.rank == 0:
        assert "no checkpoint at" in capsys.readouterr().out


@pytest.mark.world_size(min=2)
def test_the_final_check_catches_a_rank_whose_parameters_differ(comm, session) -> None:
    import torch

    from hpcdist.workloads.ddp import build_model, check_identical

    module = build_model(0)
    if comm.rank == comm.size - 1:
        with torch.no_grad():
            next(module.parameters())[0, 0] += 1e-6
    problem = check_identical(module, session)
    assert (
        problem == f"rank {comm.rank}: 1 of {sum(p.numel() for p in module.parameters())} parameters differ "
        f"across the {comm.size} ranks"
    )


def test_the_final_check_passes_parameters_alike_on_every_rank(comm, session) -> None:
    from hpcdist.workloads.ddp import build_model, check_identical

    assert check_identical(build_model(0), session) is None


def test_a_signal_to_one_rank_stops_all_at_one_step_and_the_resume_is_exact(
    comm, session, shared_dir, monkeypatch
) -> None:
    """SIGUSR1 reaches only the last rank, in the middle of epoch 2: every rank stops after the same step, rank 0
    checkpoints mid-epoch, and the resumed run ends bit for bit where an uninterrupted one does."""
    import signal

    import torch
    from torch.utils.data import TensorDataset

    from hpcdist.resilience import checkpoint
    from hpcdist.workloads import ddp

    monkeypatch.setattr(ddp, "CHECK_EVERY", 1)
    whole = _digests(comm, ddp.train(session, _options(epochs=3, checkpoint_dir=os.path.join(shared_dir, "a"))))
    steps = -(-SMALL["samples"] // comm.size // SMALL["batch_size"])  # batches per epoch on each rank
    fetches = {"n": 0}

    class Signalling(TensorDataset):
        """The data set; the last rank signals itself while fetching the first sample of epoch 2's second batch."""

        def __getitem__(self, index):
            fetches["n"] += 1
            if comm.rank == comm.size - 1 and fetches["n"] == (steps + 1) * SMALL["batch_size"] + 1:
                os.kill(os.getpid(), signal.SIGUSR1)
            return super().__getitem__(index)

    made = ddp.make_dataset
    monkeypatch.setattr(ddp, "make_dataset", lambda samples, seed: Signalling(*made(samples, seed).tensors))
    cut = os.path.join(shared_dir, "b")
    previous = signal.getsignal(signal.SIGUSR1)
    with pytest.raises(ddp.Preempted) as preempted:
        ddp.train(session, _options(epochs=3, checkpoint_dir=cut))
    assert signal.getsignal(signal.SIGUSR1) is previous  # the handler is put back
    assert (preempted.value.code, preempted.value.epoch, preempted.value.step) == (0, 1, 2)
    if comm.rank == 0:
        state = checkpoint.load(os.path.join(cut, "ddp.pt"))
        assert (state["epoch"], state["step"], len(state["rng"]), len(state["totals"])) == (1, 2, comm.size, comm.size)
        assert all(isinstance(t, torch.Tensor) for t in state["totals"])
    monkeypatch.setattr(ddp, "make_dataset", made)
    resumed = _digests(comm, ddp.train(session, _options(epochs=3, checkpoint_dir=cut, resume=True)))
    assert resumed == whole
