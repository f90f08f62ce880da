"""A rank's last word to its PMI server: the `finalize` that MPICH sends from its C exit handler.

MPICH's MPI_Init registers `atexit(MPIR_pmi_finalize_on_exit)`: at process exit the rank tells the server on
its PMI socket (PMI_FD: Hydra's proxy, or Slurm's PMI-2 plugin) that it ended on purpose. The shim leaves with
os._exit (no C++ static destruction), which skips that handler; Hydra's proxy then takes the socket's
end-of-file for a rank that died and SIGKILLs every rank still running, reporting them as exit code 0 or
`killed by SIGKILL` (measured with MPICH 5.0.2: every time a rank outlived a peer's exit by a moment, one job in
10-40 on two loaded cores, their last lines lost). `finalize` sends the same message, once, before os._exit.
"""

from __future__ import annotations

import os
import select
import stat
import sys
import time
from collections.abc import Mapping

__all__ = ["finalize"]

ANSWER_SECONDS = 5.0  # how long a rank waits for the PMI server's answer before it exits anyway
_VERSION_VARS = ("PMI_VERSION", "MPIR_CVAR_PMI_VERSION")  # MPICH's choice of wire protocol, 1 by default
_QUERY = {"1": b"cmd=finalize\n", "2": b"%-6dcmd=finalize;" % len(b"cmd=finalize;")}
_ANSWER = {"1": b"cmd=finalize_ack", "2": b"cmd=finalize-response"}


def finalize(library: str, environ: Mapping[str, str] = os.environ, timeout: float = ANSWER_SECONDS) -> bool:
    """After MPI_Finalize in an MPICH-family rank (`library`: MPI_Get_library_version) with a PMI socket: send
    the PMI `finalize` and wait (at most `timeout` s) for its answer; whether the server answered.

    Another MPI (Open MPI ends PMIx, Intel MPI its PMI socket, inside MPI_Finalize: measured), or no PMI socket
    (PMIx, a singleton): nothing to do. MVAPICH shares MPICH's PMI client.
    """
    fd_text = environ.get("PMI_FD", "")
    version = next((environ[name] for name in _VERSION_VARS if environ.get(name)), "1")
    if not fd_text.isdigit() or version not in _QUERY or not library.startswith(("MPICH", "MVAPICH")):
        return False
    fd = int(fd_text)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):  # closed and its number reused: not the PMI socket
            return False
        os.write(fd, _QUERY[version])
        answer = _read_answer(fd, timeout)
    except OSError:  # the socket is gone (closed by the program, or the server is done with it): nothing to say
        return False
    if answer is None:
        print(
            f"hpcdist: warning: rank {environ.get('PMI_RANK', '?')} had no answer from its PMI server (PMI_FD={fd}) "
            f"to `finalize` within {timeout:g} s; it exits anyway, and its launcher may report it as failed",
            file=sys.stderr,
        )
        return False
    return answer.startswith(_ANSWER[version], 0 if version == "1" else 6)


def _read_answer(fd: int, timeout: float) -> bytes | None:
    """What the server sends on `fd` up to its end of message (a newline for PMI-1, the length for PMI-2) or
    its end-of-file; None when nothing ends within `timeout` s."""
    deadline = time.monotonic() + timeout
    data = b""
    while not _complete(data):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data


def _complete(data: bytes) -> bool:
    """Whether `data` holds a whole PMI-1 line or a whole PMI-2 message."""
    if data.startswith(b"cmd="):
        return data.endswith(b"\n")
    head = data[:6].strip()
    return len(data) >= 6 and head.isdigit() and len(data) >= 6 + int(head)
