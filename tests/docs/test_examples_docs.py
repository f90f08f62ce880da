"""Every untagged example of README.md and docs/**/*.md runs, and prints what the text shows."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from doc_examples import Block
from doc_runner import Run, collect_or_fail, run_example

BLOCKS = collect_or_fail("docs")


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_example(block: Block, docs_runs: Callable[[Block], Run]) -> None:
    """The example runs after its document's earlier ones, and its output and exit status are as shown."""
    run_example(docs_runs, block)


if not BLOCKS:  # no example in this tier: no test (an empty parametrization would be a skip)
    del test_example
