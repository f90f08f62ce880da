"""A rank's tagger: its stdout and stderr go through a forked process that writes whole, tagged lines.

The shim calls `start` before it imports the program. fd 1 and fd 2 become pipes (so children and C
libraries write there too); a forked process reads them to end-of-file and writes each line, in one
`os.write`, as `[host:rank] text` (`[host:rank:N] text` for hpcdist mpirun's router, N counting the rank's
lines over both streams) to the original stdout or stderr, and with a log directory also to DIR/rank-NNN.log.
Being a process, not a thread, it still drains the pipes when the rank segfaults or is killed: the pipes
reach end-of-file only when the rank and its children are gone. A rank that ends without
saying how (no `Done` or `Failed` event: a signal, or os._exit) is then reported `Vanished`. When the contract
asks for beats (its `beat_interval`) it also notes a beat that often, whatever the rank is doing, and the lowest rank
of each host still beating sends its host's beats as one `Beat` event (`hostbeat`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import sys
import time
from collections import deque
from collections.abc import Callable

from ..contract import NUMBERED, RankContract
from ..errors import UsageError, WaitTimeout
from ..events import Beat, Done, Failed, Vanished, parse_event
from ..lines import log_name, split_segments
from ..records import record
from ..values import parse_ranks
from ..waits import Backoff, poll_until
from .budget import Budget
from .frozen import FrozenWatch
from .hostbeat import HostBeat, directory

__all__ = ["DRAIN_SECONDS", "PEER_GRACE_SECONDS", "Tagger", "leave_time_to_peers", "start"]

DRAIN_SECONDS = 2.0  # how long a failing rank waits for its tagger to write its last lines before MPI_Abort
PEER_GRACE_SECONDS = 0.5  # under Hydra, how long a failing rank waits before MPI_Abort for a dead peer's tagger

_MAX_LINE = 1 << 22  # a "line" of 4 MiB without a newline is written out in pieces of that size
_LAST_HELD = 20  # the last lines held back that still go to the launcher when the rank ends (its --tail)
_MAX_HELD_LINE = 4096  # bytes of each of them
_FROZEN_BEATS = 6  # beats (a heartbeat limit: launching.heartbeat.beat_interval) a rank may be frozen under shrink
_IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


@record
class Tagger:
    """This rank's running tagger: its process, and dups of the rank's own stdout and stderr (given back by `drain`)."""

    pid: int
    out: int
    err: int
    drained: bool = False

    def drain(self, timeout: float = DRAIN_SECONDS) -> None:
        """Before this rank ends the job: give fd 1 and 2 back to the rank's own stdout and stderr, and wait (at most
        `timeout` s) until the tagger has written every line it was sent and ended (once).

        MPICH's Hydra makes each rank a process group and SIGKILLs the group on MPI_Abort, tagger included: measured
        with MPICH 5.0.2, a raising rank's last lines and its `Failed` event were lost without this. A child of the
        program that still holds the pipes keeps the tagger going: then the rank stops waiting at `timeout`.
        """
        if self.drained:
            return
        self.drained = True
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, own in ((1, self.out), (2, self.err)):
            os.dup2(own, fd)  # the pipe's last writer goes: the tagger reads to end-of-file, writes the rest, ends
            os.close(own)
        pid = self.pid

        def ended() -> bool:
            try:
                return os.waitpid(pid, os.WNOHANG)[0] == pid
            except ChildProcessError:  # reaped already (by a program's own wait)
                return True

        try:
            poll_until(
                ended,
                time.monotonic() + timeout,
                lambda: (
                    f"the failing rank waited {timeout:g} s for the helper process beside it (pid {pid}) "
                    "to write its last lines"
                ),
                backoff=Backoff(0.001, 0.05),
            )
        except WaitTimeout as exc:
            print(f"hpcdist: warning: {exc}; a child of the program may still hold its output", file=sys.stderr)


def start(contract: RankContract, rank: int, size: int, host: str) -> Tagger | None:
    """Start the tagger when the contract asks for tags, a log directory or a rank filter; None when it does not.

    Raises:
        UsageError: the contract's rank list is no list of this job's ranks, or the log file cannot be written.
    """
    tag, log_dir, ranks = contract.tag, contract.log_dir, contract.ranks
    if tag in ("", "0") and log_dir is None and ranks is None:
        return None
    shown = ranks is None or rank in parse_ranks(ranks, size, contract.variable("ranks"))
    log = _open_log(log_dir, rank, size, contract.restart_count or 0) if log_dir else None
    label = f"{host}:{rank}".encode() if tag in ("1", NUMBERED) else None
    budget = Budget(contract.output_rate) if contract.output_rate else None
    kept = (
        f"every line is in {os.path.join(log_dir, log_name(rank, size))}" if log_dir else "--log-dir keeps every line"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    sinks = {out_read: os.dup(1), err_read: os.dup(2)}
    pid = os.fork()
    if pid == 0:  # the tagger
        status = 0
        gc.freeze()  # the rank's objects, never its: no collection writes to (so copies) their pages
        gc.enable()  # the shim starts with the collector off (worker.py); the tagger runs as long as the job
        try:
            os.close(out_write)
            os.close(err_write)
            for sig in _IGNORED:  # a signal for the rank must not cut its last lines off: they end with EOF
                signal.signal(sig, signal.SIG_IGN)
            pump = _Pump(sinks, label, shown, log, contract)
            pump.numbered = tag == NUMBERED
            pump.beats = _beats(contract, rank, host)
            pump.budget, pump.kept = budget, kept
            pump.run()
            if pump.beats is not None:
                pump.beats[2]()  # its note in the host's beat goes
            if not pump.said:  # the rank ended without saying how: killed by a signal, or os._exit
                contract.tell(Vanished(rank, host=host))
        except BaseException:  # noqa: BLE001 - whatever happens, never return into the rank's code
            status = 1
        finally:
            os._exit(status)
    started = Tagger(pid, os.dup(sinks[out_read]), os.dup(sinks[err_read]))  # os.dup: not inherited
    os.dup2(out_write, 1)
    os.dup2(err_write, 2)
    for fd in (out_read, err_read, out_write, err_write, *sinks.values(), *([log] if log is not None else [])):
        os.close(fd)
    return started


def leave_time_to_peers(seconds: float = PEER_GRACE_SECONDS) -> None:
    """Under Hydra, before this rank ends the job: wait `seconds` so that a peer killed a moment ago is named.

    A rank SIGKILLed is torn down for 30-70 ms (measured with MPICH 5.0.2 and torch, 4 ranks on 2 loaded cores)
    before its pipes close and its tagger can say it `vanished`; gloo on the other ranks sees its sockets close
    sooner, and a peer's MPI_Abort made Hydra end the job before the killed rank's word arrived (1 run in 3).
    Hydra forwards nothing once its ranks are gone, so the word must come before MPI_Abort.
    """
    time.sleep(seconds)


def _beats(contract: RankContract, rank: int, host: str) -> tuple[float, Callable[[], None], Callable[[], None]] | None:
    """(seconds between beats, what sends one, what ends them) when the contract asks for beats, else None.

    Each rank notes its beat in its host's directory, and the lowest rank of the host still beating sends the host's
    in one `Beat` (rank.hostbeat). Each beat says whether the rank (the tagger's parent) is frozen. Under
    --on-failure shrink, a rank frozen for six beats (the heartbeat limit) is said failed and killed, so that its
    peers see it gone and carry on.
    """
    interval = contract.beat_interval
    if interval is None or not 0 < interval < float("inf"):
        return None
    notes = HostBeat(directory(contract.token or "", host), rank, interval)
    watch = FrozenWatch(os.getppid())
    since: float | None = None  # since when the rank has been seen frozen (None: it is not)

    def beat() -> None:
        nonlocal since
        how = watch.look()
        since = (since or time.monotonic()) if how else None
        ranks = notes.note(how)
        if ranks is not None:  # this rank speaks for its host
            contract.tell(Beat.of(rank, host, ranks, interval))
        if how and contract.shrinks and time.monotonic() - (since or 0) >= _FROZEN_BEATS * interval:
            contract.tell(Failed(rank, how=f"frozen: {how} for {_FROZEN_BEATS * interval:g} s", host=host))
            with contextlib.suppress(OSError):
                os.kill(watch.pid, signal.SIGKILL)

    return interval, beat, notes.leave


def _open_log(log_dir: str, rank: int, size: int, restart: int = 0) -> int:
    """Open this rank's log file in `log_dir` (creating the directory): anew, or on a restart appended to."""
    path = os.path.join(log_dir, log_name(rank, size))
    try:
        os.makedirs(log_dir, exist_ok=True)
        fresh = 0 if restart else os.O_TRUNC  # a restart keeps the failed attempt's lines: they say why
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | fresh | os.O_APPEND | os.O_CLOEXEC, 0o644)
        if restart:
            said = f"{RankContract.variable('restart_count')}={restart}"
            os.write(fd, f"hpcdist: attempt {restart + 1} ({said}) starts here\n".encode())
        return fd
    except OSError as exc:
        raise UsageError(
            f"cannot write the log file {path!r}: {exc.strerror or exc}; give --log-dir a directory that every "
            "host can write"
        ) from None


class _Pump:
    """The tagger's loop: read both pipes to end-of-file and write each whole line where it belongs."""

    def __init__(
        self, sinks: dict[int, int], label: bytes | None, shown: bool, log: int | None, contract: RankContract
    ) -> None:
        self.sinks = sinks
        self.label = label  # b"host:rank" of the tag, None: untagged
        self.numbered = False  # whether each tag carries the line's number, for hpcdist mpirun's router
        self.count = 0  # the lines (and progress bar redraws) tagged so far, over both streams
        self.shown = shown
        self.log = log
        self.token = contract.token or ""
        self.dead: set[int] = set()  # sinks that refused a write (e.g. a closed pipe): still drained, not written
        self.said = False  # whether the rank said how it ended (a `Done` or `Failed` event passed)
        self.beats: tuple[float, Callable[[], None], Callable[[], None]] | None = None  # (interval, beat, end)
        self._next_beat = time.monotonic()
        self.budget: Budget | None = None  # what of the rank's output may go to the launcher (None: all of it)
        self.kept = ""  # where the lines the budget held back are kept, said when they are counted
        # the last lines held back since a line was shown: (sink, line, its size), for the end
        self._last_held: deque[tuple[int, bytes, int]] = deque(maxlen=_LAST_HELD)

    def run(self) -> None:
        """Until both pipes are at end-of-file."""
        partial = dict.fromkeys(self.sinks, b"")
        poller = select.poll()
        for fd in self.sinks:
            poller.register(fd, select.POLLIN)
        while partial:
            for fd, _ in poller.poll(self._beat()):
                if fd not in partial:
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    poller.unregister(fd)
                    rest = partial.pop(fd)
                    if rest:
                        self.line(self.sinks[fd], rest)
                    continue
                segments, rest = split_segments(partial[fd] + chunk)
                while len(rest) >= _MAX_LINE:
                    segments.append((rest[:_MAX_LINE], b"\n"))
                    rest = rest[_MAX_LINE:]
                partial[fd] = rest
                for text, end in segments:
                    if end == b"\n":
                        self.line(self.sinks[fd], text)
                    elif text and self.shown and self._fits(self.sinks[fd], len(text) + 1):  # a bar redrawn:
                        self.write(self.sinks[fd], self.tag() + text + b"\r")  # to the console now, not the log
        self._say_held_back(list(self.sinks.values())[-1], final=True)  # on the rank's stderr, then its last lines

    def _fits(self, sink: int, size: int) -> bool:
        """Whether `size` more bytes of the rank's output may go to the launcher now (first saying what did not)."""
        if self.budget is None:
            return True
        if not self.budget.take(size):
            return False
        self._last_held.clear()  # what was held back came before this line: counted, not shown
        self._say_held_back(sink)
        return True

    def _say_held_back(self, sink: int, final: bool = False) -> None:
        """Tell the launcher, as a line of the rank's, how much of its output the budget held back since last said.

        At the end (`final`), the last lines held back follow it: a failing rank's traceback is its last words.
        """
        if self.budget is None:
            return
        last = list(self._last_held) if final else []
        for _, _, size in last:
            self.budget.lines, self.budget.bytes = self.budget.lines - 1, self.budget.bytes - size
        said = self.budget.held_back(self.kept, final)
        if said:
            self.write(sink, self.tag() + said + (b"; its last lines follow" if last else b"") + b"\n")
        for fd, line, _ in last:
            self.write(fd, self.tag() + line + b"\n")

    def _beat(self) -> int | None:
        """Beat when it is time; how long (ms) poll may wait until the next beat (None: no beats, no limit)."""
        if self.beats is None:
            return None
        interval, beat, _ = self.beats
        now = time.monotonic()
        if now >= self._next_beat:
            beat()
            self._next_beat = now + interval
        return max(1, round((self._next_beat - now) * 1000))

    def line(self, sink: int, text: bytes) -> None:
        """One line (without its newline): to the console when shown or a control line, to the log file if not."""
        event = parse_event(text.decode(errors="replace"), self.token) if b"@@hpcdist:" in text else None
        control = event is not None
        self.said = self.said or isinstance(event, (Done, Failed))
        if control or (self.shown and self._fits(sink, len(text) + 1)):
            self.write(sink, self.tag() + text + b"\n")
        elif self.shown:
            self._last_held.append((sink, text[:_MAX_HELD_LINE], len(text) + 1))
        if self.log is not None and not control:
            self.write(self.log, text + b"\n")

    def tag(self) -> bytes:
        """The next tag: `[host:rank] `, `[host:rank:N] ` when numbered (N counts from 1), b"" when untagged."""
        if self.label is None:
            return b""
        self.count += 1
        return b"[%s:%d] " % (self.label, self.count) if self.numbered else b"[%s] " % self.label

    def write(self, fd: int, data: bytes) -> None:
        """All of `data` to `fd` (one write unless the pipe takes it in parts); a failing sink is dropped."""
        view = memoryview(data)
        while view and fd not in self.dead:
            try:
                view = view[os.write(fd, view) :]
            except OSError:
                self.dead.add(fd)
