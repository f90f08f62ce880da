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
    """The examples that are shown but not run: those with a skip marker (and its reason), and the transcripts
    (`$ ` lines) in blocks that are only shown, so that neither goes unnoticed."""
    try:
        blocks = [block for path in documents() for block in parse(path)]
    except ExampleError:
        return  # the collection already failed with the reason
    skipped = [f"{block.where}: {block.skip}" for block in blocks if block.skip]
    transcripts = [
        f"{block.where}: {block.language} block with `$ ` lines"
        for block in blocks
        if block.kind == "shown" and any(line.startswith("$ ") for line in block.source.splitlines())
    ]
    if skipped or transcripts:
        terminalreporter.write_sep("-", "docs examples shown, not run")
        for line in skipped + transcripts:
            terminalreporter.write_line(line)
