"""Open MPI's session directories: those that killed launchers left behind are removed before a launch.

Open MPI's mpirun keeps its PMIx rendezvous files in `$TMPDIR/ompi.<its pid>`, and its daemon on each other host in
`prted.<its pid>`; each removes its directory as it exits. One that was killed (SIGKILL, a lost host, an
out-of-memory kill) leaves it. When a later mpirun or daemon is given the same pid, PMIx 5.0 (in Open MPI 5.0.x)
refuses to overwrite the old rendezvous file, and that launcher or daemon ends at once ("The PMIx server's listener
thread failed to start", status 213). Where pids wrap at 32768 that happens within hours on a busy node. Only this
host's directories are reached: a daemon's on another host is not.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from .. import proctree

__all__ = ["clear_stale_sessions"]

_SESSION = re.compile(r"(?:ompi|prted)\.(\d+)")


def clear_stale_sessions(tmpdir: str | None = None) -> list[Path]:
    """Remove this user's `ompi.<pid>` and `prted.<pid>` directories in `tmpdir` (Open MPI's: $TMPDIR, else /tmp)
    whose process has ended; return those removed. A directory of a running process, or of another user, is kept."""
    base = Path(tmpdir or tempfile.gettempdir())
    try:
        names = os.listdir(base)
    except OSError:
        return []
    removed = []
    for name in names:
        match = _SESSION.fullmatch(name)
        if match is None or proctree.running(int(match.group(1))):
            continue
        path = base / name
        try:
            if path.lstat().st_uid != os.getuid() or not path.is_dir() or path.is_symlink():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
