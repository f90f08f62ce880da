"""Open MPI's session directories left by killed launchers: which are removed, and which are left alone."""

from __future__ import annotations

import os
import subprocess
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


def test_an_ended_launchers_directory_is_removed(tmp_path: Path) -> None:
    stale = _session(tmp_path, f"ompi.{_ended_pid()}")
    assert clear_stale_sessions(str(tmp_path)) == [stale]
    assert not stale.exists()


def test_a_running_launchers_directory_is_kept(tmp_path: Path) -> None:
    live = _session(tmp_path, f"ompi.{os.getpid()}")
    assert clear_stale_sessions(str(tmp_path)) == []
    assert (live / f"pmix.vm.tool.{os.getpid()}").exists()


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
    others = [_session(tmp_path, name) for name in (f"ompi.{pid}x", f"prte.{pid}", "ompi.")]
    assert clear_stale_sessions(str(tmp_path)) == []
    assert all(path.exists() for path in [target, tmp_path / f"ompi.{pid + 1}", *others])


def test_a_missing_tmpdir_removes_nothing(tmp_path: Path) -> None:
    assert clear_stale_sessions(str(tmp_path / "absent")) == []
