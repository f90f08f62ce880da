"""The docs tier: the untagged examples of README.md and docs/**/*.md (tests/doc_examples.py runs them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from doc_examples import Block, ExampleError, documents, parse
from doc_runner import Run, runs


@pytest.fixture(scope="session")
def docs_runs() -> Iterator[Callable[[Block], Run]]:
    """One Run per document, its commands run here in a fresh working directory."""
    yield from runs(lambda argv: argv, "docs")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The examples that are shown but not run, each with its marker's reason."""
    try:
        skipped = [block for path in documents() for block in parse(path) if block.skip]
    except ExampleError:
        return  # the collection already failed with the reason
    if skipped:
        terminalreporter.write_sep("-", "docs examples shown, not run")
        for block in skipped:
            terminalreporter.write_line(f"{block.where}: {block.skip}")
