"""A rank's Python stacks (every thread) through faulthandler, and every rank's stacks grouped into one report.

`capture` dumps this process's threads with `faulthandler.dump_traceback`, which reads the frames without
running them (a main thread blocked in C, holding or not the GIL, is dumped as it stands). `parse` turns
faulthandler's text into plain tuples that travel between ranks and compare equal when two ranks stand at
the same lines: thread ids become thread names, hpcdist's own threads (the watchdog, MPI progress) are left
out, the shim's runner frames under the program are dropped, and so are hpcdist's own frames (its wrappers around
torch's calls, its waits), which the settings' DEBUG keeps. `report` merges identical stacks, as
"ranks 0-6,8", smallest group first, since the rank that stands apart is the one to read first.
"""

from __future__ import annotations

import faulthandler
import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from .. import settings
from ..ranklist import ranks_text
from .ledger import FINISHED

__all__ = ["Stacks", "capture", "frame", "in_answers", "normalised", "own", "parse", "report"]

# A rank's stacks: (thread name, frames most recent first), the main thread first.
Stacks = tuple[tuple[str, tuple[str, ...]], ...]

_HEADER = re.compile(r"^(?:Current thread|Thread) 0x([0-9a-f]+) \(most recent call first\):$")
_FRAME = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')
_PACKAGES = re.compile(r"^.*/(?:site|dist)-packages/")
_RUNNER = ("hpcdist/worker.py", "hpcdist/runtime/pycall.py", "<frozen runpy>")  # under the program, not the user's
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # hpcdist's own directory
# hpcdist's frames, as frame() writes them: its files (in place, or in site-packages) and its generated wrappers
_OWN = re.compile(rf"\((?:{re.escape(_PACKAGE)}/|hpcdist/)[^()]*:\d+\)$|\(<hpcdist [^()]*\)$")
_INTERNAL = "hpcdist-"  # hpcdist's threads are named so; they are the same on every rank and not the program's
_MAX_FRAMES = 40  # per thread; faulthandler itself stops at 100
_MAX_GROUPS = 12  # distinct stacks shown; the others' ranks are named


def capture() -> str:
    """faulthandler's dump of every thread of this process (most recent call first), as text."""
    import tempfile  # a hang's report alone takes stacks

    with tempfile.TemporaryFile() as handle:
        faulthandler.dump_traceback(handle, all_threads=True)
        handle.seek(0)
        return handle.read().decode(errors="replace")


def thread_names() -> dict[int, str]:
    """Thread id (as faulthandler prints it) -> the thread's name, for the threads Python knows."""
    return {thread.ident: thread.name for thread in threading.enumerate() if thread.ident is not None}


def own() -> Stacks:
    """This rank's stacks now, normalised for grouping."""
    return parse(capture(), thread_names())


def parse(text: str, names: Mapping[int, str]) -> Stacks:
    """faulthandler's text as Stacks: threads named through `names` ('thread' when unknown), hpcdist's left out.

    A thread dumped twice (two dumps in one text) keeps its last dump.
    """
    threads: dict[str, tuple[str, list[str]]] = {}
    frames: list[str] | None = None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            ident = int(header.group(1), 16)
            frames = []
            threads[header.group(1)] = (names.get(ident, "thread"), frames)
        elif frames is not None and line.startswith("  "):
            row = _FRAME.match(line)
            frames.append(frame(*row.groups()) if row else line.strip())
    return normalised(list(threads.values()))


def normalised(threads: Sequence[tuple[str, list[str]]]) -> Stacks:
    """Threads as Stacks: hpcdist's left out, the runner's frames dropped, the main thread first, then by name."""
    own = settings.debug(os.environ)  # DEBUG: hpcdist's own frames stay, to debug hpcdist
    kept = [
        (name, [row for row in _without_runner(rows) if own or not _OWN.search(row)])
        for name, rows in threads
        if not name.startswith(_INTERNAL)
    ]
    kept.sort(key=lambda thread: (not thread[0].startswith("MainThread"), thread[0], thread[1]))  # same on every rank
    return tuple((name, tuple(rows)) for name, rows in kept)


def frame(path: str, line: str, function: str) -> str:
    """One frame as '<function> (<file>:<line>)', an installed package's file named from its package."""
    return f"{function} ({_PACKAGES.sub('', path)}:{line})"


def _without_runner(frames: list[str]) -> list[str]:
    """The frames without the shim's and runpy's at the bottom, so a program's stack starts at its own code."""
    while frames and any(f"({runner}:" in frames[-1] or f"/{runner}:" in frames[-1] for runner in _RUNNER):
        frames.pop()
    return frames


def in_answers(answers: Mapping[int, Mapping[str, Any]]) -> tuple[dict[int, Stacks], list[int]]:
    """The stacks in the watchdog's answers, and the ranks whose programs had finished (only hpcdist's wait is left)."""
    finished = sorted(rank for rank, answer in answers.items() if answer["phase"][0] == FINISHED)
    found = {rank: answer["stacks"] for rank, answer in answers.items() if "stacks" in answer and rank not in finished}
    return found, finished


def group(stacks: Mapping[int, Stacks]) -> list[tuple[list[int], Stacks]]:
    """Ranks with identical stacks together; the smallest group first (ties: the lowest rank first)."""
    groups: dict[Stacks, list[int]] = {}
    for rank in sorted(stacks):
        groups.setdefault(stacks[rank], []).append(rank)
    return sorted(((ranks, stack) for stack, ranks in groups.items()), key=lambda item: (len(item[0]), item[0]))


def report(
    stacks: Mapping[int, Stacks], missing: Sequence[int] = (), headline: str = "", finished: Sequence[int] = ()
) -> str:
    """Every rank's stacks, identical ones merged: 'ranks 0,2-3:' then the threads, each frame on its own line.

    `finished`: ranks whose programs had ended; `missing`: ranks that did not answer; both named at the end.
    """
    lines = [headline or "hpcdist: every rank's Python stacks (most recent call first; identical stacks merged):"]
    groups = group(stacks)
    for ranks, stack in groups[:_MAX_GROUPS]:
        lines.append(f"{ranks_text(ranks)}:")
        for name, frames in stack:
            lines.append(f"  thread {name}:")
            lines.extend(f"    {frame}" for frame in frames[:_MAX_FRAMES])
            if len(frames) > _MAX_FRAMES:
                lines.append(f"    … {len(frames) - _MAX_FRAMES} more frames")
        if not stack:
            lines.append("  no Python thread")
    rest = [rank for ranks, _ in groups[_MAX_GROUPS:] for rank in ranks]
    if rest:
        lines.append(f"{ranks_text(rest)}: {len(groups) - _MAX_GROUPS} more distinct stacks, not shown")
    if finished:
        lines.append(f"{ranks_text(finished)}: finished, no stack")
    if missing:
        lines.append(
            f"{ranks_text(missing)}: did not answer, no stack (dead, or its main thread holds the GIL in C code)"
        )
    return "\n".join(lines)
