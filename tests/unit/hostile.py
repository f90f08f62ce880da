"""Hostile values for the job scripts' tests: each would leave a mark in a test's directory if a shell ever ran it."""

from __future__ import annotations

import shlex
from pathlib import Path

from test_render import bash_words

__all__ = ["hostile", "launch_words"]


def hostile(tmp_path: Path) -> str:
    """A value with command substitutions, quotes, `;` and `#`, harmless if run: it only touches tmp_path/ran."""
    mark = tmp_path / "ran"
    return f"$(touch {mark}) `touch {mark}`; echo 'x\" # not a comment"


def launch_words(text: str, start: str, tmp_path: Path) -> list[str]:
    """The words of the script's launch (the line beginning `start` and its program line), as bash reads them;
    bash must run nothing while reading them."""
    lines = text.splitlines()
    first = next(number for number, line in enumerate(lines) if line.startswith(start))
    command = lines[first].removesuffix("\\") + lines[first + 1]
    words = bash_words(command)
    assert words == shlex.split(command)
    assert not (tmp_path / "ran").exists()
    return words
