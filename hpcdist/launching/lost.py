"""The hosts a launcher lost (its family's scanner tells them), and the status and error a lost host makes (pure).

Open MPI's launcher exits 0 and leaves the job unfinished when a host's daemon dies or its link is cut; hpcdist
mpirun's status is then non-zero, and its error names the host and the ranks that ran there.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..families.base import AgentFailed, HostLost
from ..ranklist import ranks_text
from .outcome import LOST_HOST_STATUS

__all__ = ["LostHosts"]


class LostHosts:
    """Whether and which hosts the launcher lost, and the status of a launch agent that could not start a daemon."""

    def __init__(self) -> None:
        self.lost = False
        self.hosts: list[str] = []
        self.agent_status: int | None = None  # the launch agent's status, when a daemon failed to report back

    def note(self, seen: HostLost | AgentFailed) -> None:
        """Note what the family's scanner found."""
        if isinstance(seen, AgentFailed):
            self.agent_status = seen.status
            return
        self.lost = True
        if seen.host is not None and seen.host not in self.hosts:
            self.hosts.append(seen.host)

    def verdict(self, returncode: int, hosts: Mapping[int, str] | None = None) -> tuple[int, str | None]:
        """hpcdist mpirun's exit status for mpirun's `returncode`, and an error message when a host was lost (naming
        the ranks that ran there, where `hosts`, rank -> host, knows them)."""
        if not self.lost:
            return returncode, None
        names, lost = ", ".join(self.hosts), list(self.hosts)
        status = returncode if returncode != 0 else LOST_HOST_STATUS
        returned = f"although mpirun returned {returncode}" if returncode == 0 else f"(mpirun returned {returncode})"
        if self.agent_status and names:
            first = names.split(", ")[0]
            return status, (
                f"mpirun could not start its daemon on host {names} (its launch agent, ssh unless --launch-agent "
                f"names another, ended with status {self.agent_status}), so the job did not run {returned}; check "
                f"that `ssh {first} true` works from here without a password, and that this Python environment "
                "exists there at the same path"
            )
        who, check = (f"host {names}", names) if names else ("a remote host (it names none)", "every host")
        there = [rank for rank, host in (hosts or {}).items() if host in lost]
        who += f", where {ranks_text(there)} ran" if there else ""
        return status, (
            f"mpirun lost contact with {who} (its daemon died or the network link was cut), so the job "
            f"did not finish {returned}; check that {check} is up and reachable"
        )
