"""The docs' examples marked `<!-- example: tier=cluster -->`, run against the session's real Slurm cluster: their
commands run inside the cluster's network namespace with SLURM_CONF set (tests/doc_examples.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from doc_examples import Block
from doc_runner import Run, collect_or_fail, run_example, runs

if TYPE_CHECKING:  # only its type: the hosts tier's conftest is `conftest` too when both tiers are collected
    from conftest import Cluster

BLOCKS = collect_or_fail("cluster")


@pytest.fixture(scope="module")
def slurm_runs(slurm_cluster: Cluster) -> Iterator[Callable[[Block], Run]]:
    """One Run per document, its commands run as a login shell on the cluster would (sbatch, srun, squeue work)."""
    netns = slurm_cluster.state / "netns"
    yield from runs(
        lambda argv: ["nsenter", f"--net={netns}", "--", *argv], "cluster", {"SLURM_CONF": str(slurm_cluster.conf)}
    )


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_example(block: Block, slurm_runs: Callable[[Block], Run]) -> None:
    """The example runs after its document's earlier cluster ones, and its output and exit status are as shown."""
    run_example(slurm_runs, block)


if not BLOCKS:  # no example in this tier: no test (an empty parametrization would be a skip)
    del test_example
