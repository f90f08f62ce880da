"""Read mpirun's output as it streams for failures mpirun does not report in its exit status (pure)."""

from __future__ import annotations

import re
import threading

__all__ = ["LOST_HOST_STATUS", "LostHostWatch"]

LOST_HOST_STATUS = 1  # hpcdist mpirun's status when mpirun returned 0 although a host was lost

# Open MPI 5 (PRRTE) and 4 (ORTE) exit 0 and leave the job unfinished when a node's daemon dies or its
# link is cut. Measured with Open MPI 5.0.11, each banner names the node a few lines further down:
# - daemon gone or link cut (TCP keepalive), on stderr:
#     PRTE has lost communication with a remote daemon.
#       HNP daemon   : [prterun-n1-16000@0,0] on node n1
#       Remote daemon: [prterun-n1-16000@0,1] on node n2
# - the launch agent's process (ssh) on that node killed while the job runs, on STDOUT:
#     A daemon failed to report back after being spawned. …
#       Local host:    n1
#       Remote host:   n2
_BANNERS = re.compile(
    r"\b(?:PRTE|ORTE) has lost communication with a remote daemon|\bA daemon failed to report back after being spawned"
)
_HOST = re.compile(r"Remote daemon\s*:\s*\S+\s+on node\s+(\S+)|Remote host\s*:\s*(\S+)")


class LostHostWatch:
    """Fed mpirun's stdout and stderr in chunks of any size; remembers whether and which hosts were lost."""

    def __init__(self) -> None:
        self.lost = False
        self.hosts: list[str] = []
        self._partial: dict[str, str] = {}
        self._lock = threading.Lock()

    def feed(self, stream: str, chunk: bytes) -> None:
        """Scan the complete lines of a chunk of `stream`; a partial last line waits for the next chunk."""
        with self._lock:
            text = self._partial.get(stream, "") + chunk.decode(errors="replace")
            *lines, self._partial[stream] = text.split("\n")
            for line in lines:
                self._scan(line)

    def _scan(self, line: str) -> None:
        """Note a lost-daemon banner and the host it names."""
        if _BANNERS.search(line):
            self.lost = True
        match = _HOST.search(line)
        if match and self.lost:
            host = match.group(1) or match.group(2)
            if host not in self.hosts:
                self.hosts.append(host)

    def mid_line(self, stream: str) -> bool:
        """Whether `stream` ended without a newline (PRRTE ends its banners with a NUL byte)."""
        with self._lock:
            return bool(self._partial.get(stream, "").strip("\0 \t\r"))

    def verdict(self, returncode: int) -> tuple[int, str | None]:
        """hpcdist mpirun's exit status for mpirun's `returncode`, and an error message when a host was lost."""
        with self._lock:
            for partial in self._partial.values():
                self._scan(partial)
            self._partial.clear()
            if not self.lost:
                return returncode, None
            hosts = ", ".join(self.hosts) or "a remote host"
        status = returncode if returncode != 0 else LOST_HOST_STATUS
        return status, (
            f"mpirun lost contact with host {hosts} (its daemon died or the network link was cut), so the job "
            f"did not finish although mpirun returned {returncode}; check that {hosts} is up and reachable"
        )
