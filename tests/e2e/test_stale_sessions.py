"""A killed mpirun's session directory: it stops a later mpirun given the same pid, and hpcdist mpirun removes it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from launching import BIN, launch, wait_for

from hpcdist import proctree


def _killed_launchers_directory() -> Path:
    """Start a real mpirun, SIGKILL it once its PMIx rendezvous file exists; the directory it left behind."""
    proc = subprocess.Popen(
        [str(BIN / "mpirun"), "--oversubscribe", "-np", "1", "sleep", "60"],
        env={**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"},
        start_new_session=True,
    )
    session = Path(tempfile.gettempdir()) / f"ompi.{proc.pid}"
    wait_for(f"mpirun's rendezvous file in {session}", lambda: list(session.glob("pmix.*.tool*")), 60, proc)
    # its daemon's rank (sleep) is in a process group of its own, and may start after the rendezvous file appears
    wait_for(
        f"mpirun {proc.pid}'s rank, sleep 60",
        lambda: any(_named(pid, "sleep") for pid in proctree.descendants(proc.pid)),
        60,
        proc,
    )
    below = proctree.descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pid in below:  # the rank a killed mpirun leaves running goes too: the test leaves no process behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert session.is_dir()
    return session


def test_a_killed_launchers_directory_stops_the_next_with_its_pid_and_hpcdist_clears_it(hpcdist: str) -> None:
    left = _killed_launchers_directory()
    try:
        # the same directory under the pid of the mpirun that bash becomes: that mpirun cannot start
        reused = launch(["bash", "-c", f'cp -r {left} "${{TMPDIR:-/tmp}}/ompi.$$" && exec {BIN / "mpirun"} -np 1 true'])
        assert reused.returncode != 0, reused.stderr
        assert "listener thread failed to start" in reused.stderr, reused.stderr

        result = launch([hpcdist, "mpirun", "-np", "2", "--", sys.executable, "-c", "pass"], timeout=120)
        assert result.returncode == 0, result.stderr
        assert not left.exists()
    finally:
        shutil.rmtree(left, ignore_errors=True)


def _named(pid: int, name: str) -> bool:
    """Whether process `pid` runs the program `name` (its /proc comm); False once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == name
    except OSError:
        return False
