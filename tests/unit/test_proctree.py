"""This host's process tree from /proc: a stat line's parent, a process's children and descendants."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdist import proctree


def test_the_parent_is_read_after_the_command_name_whatever_it_holds() -> None:
    assert proctree.parent_pid(b"4242 (a) b (c)) S 17 4242 4242 0 -1 4194560") == 17
    assert proctree.parent_pid(b"1 (systemd) S 0 1 1 0 -1") == 0
    with pytest.raises((ValueError, IndexError)):
        proctree.parent_pid(b"not a stat line")


def test_a_child_and_its_child_are_below_this_process_each_after_its_parent() -> None:
    assert proctree.parent_pid(Path("/proc/self/stat").read_bytes()) == os.getppid()
    program = (
        "import subprocess, sys; "
        "child = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE); "
        "print(child.pid, flush=True); sys.stdin.read(); child.stdin.close(); child.wait()"
    )
    with subprocess.Popen(
        [sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as parent:
        assert parent.stdout is not None and parent.stdin is not None
        grandchild = int(parent.stdout.readline())  # it exists once its parent has printed its pid
        try:
            assert parent.pid in proctree.children()[os.getpid()]
            below = proctree.descendants(os.getpid())
            assert below.index(parent.pid) < below.index(grandchild)
            assert proctree.descendants(grandchild) == []
        finally:
            parent.stdin.close()
    assert parent.returncode == 0


def test_a_zombie_is_not_running_and_a_process_environment_is_read_back() -> None:
    assert proctree.state(b"4242 (a) b (c)) Z 17 4242") == b"Z" and proctree.state(b"1 (init) S 0 1") == b"S"
    program = "import sys; print('ready', flush=True); sys.stdin.read()"
    with subprocess.Popen(
        [sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={"HPCDIST_X": "a=b"}
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline() == b"ready\n"  # it runs Python: its environment is its own now
        assert proctree.running(child.pid)
        assert (proctree.environ(child.pid) or {}).get(b"HPCDIST_X") == b"a=b"  # split at the first '=' only
        child.stdin.close()
        while proctree.state(Path(f"/proc/{child.pid}/stat").read_bytes()) != b"Z":  # ended, not yet reaped
            os.sched_yield()
        assert not proctree.running(child.pid)
    assert proctree.environ(child.pid) is None  # reaped: gone
