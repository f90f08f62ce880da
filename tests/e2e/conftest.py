"""Fixtures for end-to-end launches, and the rule that no test leaves a process behind for the next one.

This pytest process is made the subreaper of everything its tests start (prctl PR_SET_CHILD_SUBREAPER), so a
process a launch left running (a rank, a daemon, a tagger whose parent died) comes back to it as a child instead
of to init. After each test, a child that was not there before it must end within LEFT_GRACE seconds; one that
does not is killed and the test fails naming it: what a test leaves behind cannot change what the next one measures.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from launching import BIN

PR_SET_CHILD_SUBREAPER = 36
LEFT_GRACE = 10.0  # seconds a test's leftover processes have to end on their own (a launcher's clean-up, a reap)


@pytest.fixture
def hpcdist() -> str:
    """The installed console script."""
    return str(BIN / "hpcdist")


@pytest.fixture(scope="session", autouse=True)
def _subreaper() -> None:
    """Orphans of the tests' processes are re-parented to this process, where _nothing_left finds them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


@pytest.fixture(autouse=True)
def _nothing_left(_subreaper: None) -> Iterator[None]:
    """Fail the test that leaves a process running after it (killing what it left)."""
    before = set(_children())
    yield
    deadline = time.monotonic() + LEFT_GRACE
    while True:
        left = {pid: state for pid, state in _children().items() if pid not in before}
        for pid in [pid for pid, state in left.items() if state == "Z"]:
            _reap(pid)
        alive = [pid for pid, state in left.items() if state != "Z"]
        if not alive:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)  # between two looks at what is left
    said = [f"{pid}: {_command(pid)}" for pid in alive]
    for pid in alive:
        _kill_tree(pid)
    pytest.fail(f"the test left {len(alive)} process(es) running {LEFT_GRACE:g} s after it ended:\n" + "\n".join(said))


def _children() -> dict[int, str]:
    """This process's children: pid -> state (R, S, Z, ...)."""
    me, found = os.getpid(), {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found[int(entry.name)] = fields[0]
    return found


def _reap(pid: int) -> None:
    """Collect a zombie child's status (it is gone already)."""
    with contextlib.suppress(ChildProcessError):  # reaped meanwhile by whoever started it
        os.waitpid(pid, os.WNOHANG)


def _command(pid: int) -> str:
    """A process's command line, for the message."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


def _kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process below it, then reap it."""
    below, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        below += map(int, children)
        frontier += map(int, children)
    for each in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
