"""Sharing an epoch's samples among whatever ranks are left: every sample once, whatever shrinks happen when."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hpcdist.errors import UsageError
from hpcdist.resilience.sharding import epoch_order, share, step_size, steps_left


def _train(samples: int, batch: int, worlds: list[tuple[int, int]]) -> tuple[list[list[int]], list[list[int]]]:
    """Run an epoch's steps: worlds[i] = (steps, world size), the last one until the end; (samples seen, sizes)."""
    order = epoch_order(samples, seed=7, epoch=2)
    seen: list[list[int]] = []
    sizes: list[list[int]] = []
    cursor, phase, done_in_phase = 0, 0, 0
    while cursor < samples:
        if phase + 1 < len(worlds) and done_in_phase == worlds[phase][0]:
            phase, done_in_phase = phase + 1, 0
        world = worlds[phase][1]
        size = step_size(samples - cursor, world, batch)
        runs = [[order[p] for p in share(cursor, size, world, rank)] for rank in range(world)]
        seen.extend(runs)
        sizes.append([len(run) for run in runs])
        cursor += size
        done_in_phase += 1
    return seen, sizes


def test_the_order_depends_on_seed_and_epoch_only() -> None:
    assert epoch_order(100, 3, 1) == epoch_order(100, 3, 1)
    assert sorted(epoch_order(100, 3, 1)) == list(range(100))
    assert len({tuple(epoch_order(100, seed, epoch)) for seed in (0, 1) for epoch in (0, 1)}) == 4


@pytest.mark.parametrize(
    ("samples", "batch", "worlds"),
    [
        (512, 32, [(3, 4), (0, 3)]),  # 4 ranks, one lost after 3 steps
        (512, 32, [(3, 4), (2, 3), (0, 2)]),  # two failures one after the other
        (1000, 7, [(0, 4)]),  # no failure, a remainder
        (1000, 7, [(35, 4), (0, 1)]),  # down to one rank at the epoch's end
        (103, 5, [(1, 8), (1, 5), (0, 3)]),
        (9, 1, [(1, 4), (0, 3)]),
    ],
)
def test_every_sample_is_seen_exactly_once_and_every_rank_has_at_least_one(
    samples: int, batch: int, worlds: list[tuple[int, int]]
) -> None:
    seen, sizes = _train(samples, batch, worlds)
    flat = [index for run in seen for index in run]
    assert sorted(flat) == list(range(samples))
    assert all(1 <= size <= batch + 1 for step in sizes for size in step)
    assert all(max(step) - min(step) <= 1 for step in sizes)


def test_the_global_batch_goes_from_b_times_w_to_b_times_the_survivors() -> None:
    _, sizes = _train(512, 32, [(3, 4), (0, 3)])
    assert [sum(step) for step in sizes] == [128, 128, 128, 96, 32]
    assert sizes[3] == [32, 32, 32] and sizes[4] == [10, 11, 11]


def test_the_last_step_takes_a_remainder_too_small_for_another_step() -> None:
    assert step_size(130, 4, 32) == 130  # 2 left after a full step: fewer than the 4 ranks
    assert step_size(132, 4, 32) == 128  # 4 left: one each in a last step
    assert [len(share(0, 130, 4, rank)) for rank in range(4)] == [32, 33, 32, 33]
    assert steps_left(512, 4, 32) == 4 and steps_left(384, 3, 32) == 4 and steps_left(130, 4, 32) == 1


def test_fewer_samples_than_ranks_is_a_clear_error() -> None:
    with pytest.raises(UsageError, match="3 samples for 4 ranks: every rank needs at least one sample per step"):
        step_size(3, 4, 32)


def test_the_ddp_workload_loads_no_mpi_unless_it_shrinks() -> None:
    """Importing the ddp workload must not load mpi4py.MPI (it MPI_Inits a torchrun or srun worker, which then waits
    for PMIx peers that never come): only its --on-failure shrink path, which runs under mpirun, loads it."""
    code = "import sys, hpcdist.workloads.ddp; print('mpi4py.MPI' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False", done.stderr
