"""Open MPI's session directories left by killed launchers: which are removed, and which are left alone."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from hpcdist.launching.sessions import clear_stale_sessions


def _ended_pid() -> int:
    """The pid of a process that has ended."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _session(base: Path, name: str) -> Path:
    """A session directory as mpirun leaves it: a PMIx rendezvous file and a job directory."""
    path = base / name
    (path / "1" / "0").mkdir(parents=True)
    (path / f"pmix.vm.tool.{name.split('.')[-1]}").write_text("tcp4://127.0.0.1:1\n")
    return path


def test_an_ended_launchers_and_daemons_directories_are_removed(tmp_path: Path) -> None:
    stale = {_session(tmp_path, f"ompi.{_ended_pid()}"), _session(tmp_path, f"prted.{_ended_pid()}")}
    assert set(clear_stale_sessions(str(tmp_path))) == stale
    assert not any(path.exists() for path in stale)


def test_a_running_launchers_directory_is_kept(tmp_path: Path) -> None:
    live = [_session(tmp_path, f"{name}.{os.getpid()}") for name in ("ompi", "prted")]
    assert clear_stale_sessions(str(tmp_path)) == []
    assert all((path / f"pmix.vm.tool.{os.getpid()}").exists() for path in live)


def test_another_users_directory_is_kept(tmp_path: Path) -> None:
    theirs = _session(tmp_path, f"ompi.{_ended_pid()}")
    os.chown(theirs, 65534, 65534)
    assert clear_stale_sessions(str(tmp_path)) == []
    assert theirs.exists()


def test_only_session_directories_are_touched(tmp_path: Path) -> None:
    pid = _ended_pid()
    target = _session(tmp_path, "elsewhere.1")
    (tmp_path / f"ompi.{pid}").symlink_to(target)
    (tmp_path / f"ompi.{pid + 1}").write_text("a file")
    others = [_session(tmp_path, name) for name in (f"ompi.{pid}x", f"prte.{pid}", "ompi.", f"ompi.vm.{pid}")]
    assert clear_stale_sessions(str(tmp_path)) == []
    assert all(path.exists() for path in [target, tmp_path / f"ompi.{pid + 1}", *others])


def test_a_missing_tmpdir_removes_nothing(tmp_path: Path) -> None:
    assert clear_stale_sessions(str(tmp_path / "absent")) == []


def test_a_killed_launcher_not_yet_reaped_counts_as_ended(tmp_path: Path) -> None:
    zombie = subprocess.Popen(["sleep", "600"])
    zombie.kill()
    try:
        while Path(f"/proc/{zombie.pid}/stat").read_bytes().rsplit(b")", 1)[1][1:2] != b"Z":
            time.sleep(0.01)
        stale = _session(tmp_path, f"prted.{zombie.pid}")
        assert clear_stale_sessions(str(tmp_path)) == [stale]
    finally:
        zombie.wait()
