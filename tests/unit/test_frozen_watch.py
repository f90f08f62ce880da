"""A rank's process seen frozen by its tagger (hpcdist.rank.frozen), on real processes: a `sleep` stopped with
SIGSTOP, and frozen through cgroup v2's cgroup.freeze and v1's freezer, each that this machine mounts (as root)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcdist.rank.frozen import FrozenWatch, cgroup_mounts
from hpcdist.waits import poll_until

V2, FREEZER = cgroup_mounts()


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process that sleeps (state S): waiting, not frozen."""
    with subprocess.Popen(["sleep", "120"]) as proc:
        try:
            yield proc
        finally:
            proc.kill()


def seen(watch: FrozenWatch, how: str) -> None:
    """Wait (at most 10 s) until the watch says `how`."""
    poll_until(lambda: watch.look() == how, time.monotonic() + 10, lambda: f"{watch.pid} never seen {how!r}")


def test_a_sleeping_process_is_not_frozen_and_a_stopped_one_is(sleeper: subprocess.Popen[bytes]) -> None:
    watch = FrozenWatch(sleeper.pid)
    assert watch.look() == "" and watch.look() == ""  # asleep, its CPU time flat: waiting is not frozen
    os.kill(sleeper.pid, signal.SIGSTOP)
    seen(watch, "stopped (state T)")
    os.kill(sleeper.pid, signal.SIGCONT)
    seen(watch, "")


def test_a_gone_process_is_not_frozen() -> None:
    assert FrozenWatch(2**22 + 1).look() == ""  # above pid_max's default: no such process


# each freezer this machine mounts: (its root, the file that freezes a cgroup, frozen, thawed)
FREEZERS = [(V2, "cgroup.freeze", "1", "0"), (FREEZER, "freezer.state", "FROZEN", "THAWED")]


def test_a_process_in_a_frozen_cgroup_is_frozen_under_each_freezer_mounted_here() -> None:
    mounted = [freezer for freezer in FREEZERS if freezer[0] is not None]
    assert mounted and os.geteuid() == 0, "no cgroup freezer mounted here, or not root: none can be tried"
    for root, control, frozen, thawed in mounted:
        group = Path(str(root)) / f"hpcdist-test-{uuid.uuid4().hex[:8]}"
        group.mkdir()
        with subprocess.Popen(["sleep", "120"]) as proc:
            try:
                watch = FrozenWatch(proc.pid)
                (group / "cgroup.procs").write_text(str(proc.pid))
                (group / control).write_text(frozen)
                seen(watch, "in a frozen cgroup")  # under v2 its state stays S: only the cgroup says it
                (group / control).write_text(thawed)
                seen(watch, "")
            finally:
                proc.kill()
                proc.wait()
                group.rmdir()


def test_the_cgroup_mounts_are_read_from_mountinfo(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "35 24 0:30 / /sys/fs/cgroup/freezer rw,relatime shared:9 - cgroup cgroup rw,freezer\n"
        "36 24 0:31 / /sys/fs/cgroup/cpu rw,relatime shared:10 - cgroup cgroup rw,cpu\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    )
    assert cgroup_mounts(str(info)) == ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/freezer")
    info.write_text("29 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    assert cgroup_mounts(str(info)) == ("/sys/fs/cgroup", None)
