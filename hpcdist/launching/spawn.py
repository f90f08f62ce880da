"""The supervisor's one module that starts processes it watches: mpirun for a launch, a job's submit command
(sbatch, qsub, bsub, flux batch), `bash -n`.

A launch's process gets the World's environment, and its output goes to the World's streams (launching/world.py). A
tool whose output is only read (scontrol, the doctor's probes) runs through `proctree.capture`, which the rank side
shares.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import IO

from .. import families, proctree, schedulers, settings, settingtable
from ..errors import JobEnding, UsageError, WaitTimeout
from ..families.base import HELD
from ..lines import log_name
from ..waits import Backoff, poll_until
from .exitcodes import ExitCodeWatch, describe_exit_codes
from .outcome import LaunchOutcome
from .output import Console, OutputRouter, summary
from .sessions import clear_stale_sessions
from .watch import MpirunWatch
from .world import World

__all__ = ["run_mpirun", "shell_syntax_errors", "submit_sbatch", "submit_script"]

_DRAIN_SECONDS = 2.0  # after mpirun exits, how long its output may take to reach end-of-file
_SYNTAX_SECONDS = 30.0  # how long `bash -n` may take to read a generated script
_END_SECONDS = 10.0  # after a timeout: how long mpirun may take to end its ranks on SIGTERM before SIGKILL


def _spawn(
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    what: str,
    watch: Callable[[str, bytes], bytes] | None = None,
    received: list[int] | None = None,
    timeout: float | None = None,
    check: Callable[[], None] | None = None,
    handlers: Mapping[int, Callable[[subprocess.Popen[bytes]], None]] | None = None,
    world: World | None = None,
    end: int = signal.SIGTERM,
) -> int:
    """Run argv to completion, passing on the signals this process receives (noted in `received`); return its status.

    `handlers`: signals handled by a call with the process instead (not passed on, not noted).

    Raises:
        WaitTimeout: it ran longer than `timeout` seconds; it was ended (`end`, then SIGKILL) first.

    `check`, called while it runs, raises JobEnding to have it ended (the same way) and its status returned.

    With `watch`, each chunk of the child's stdout and stderr goes through `watch("stdout" | "stderr", chunk)`
    as it arrives, and what that returns is copied to `world`'s (b"" after the last chunk asks for what it held).
    """
    pipe = subprocess.PIPE if watch else None
    proc = proctree.start(argv, what, env=None if env is None else dict(env), stdout=pipe, stderr=pipe)
    pumps = []
    writing: set[str] = set()  # the pumps now writing to our own output (blocked there when nobody reads it)
    if watch is not None:
        sinks = (world.stdout, world.stderr) if world is not None else (None, None)
        for name, stream, sink in (("stdout", proc.stdout, sinks[0]), ("stderr", proc.stderr, sinks[1])):
            pump = threading.Thread(
                target=_tee, args=(stream, name, watch, writing, sink), name=f"hpcdist-{name}", daemon=True
            )
            pump.start()
            pumps.append(pump)

    def forward(signum: int, frame: FrameType | None) -> None:
        if handlers and signum in handlers:
            handlers[signum](proc)
            return
        if received is not None:
            received.append(signum)
        proc.send_signal(signum)

    main = threading.current_thread() is threading.main_thread()  # only the main thread may set handlers
    forwarded = (*proctree.FORWARDED, *(handlers or {}))
    previous = {sig: signal.signal(sig, forward) for sig in forwarded} if main else {}
    try:
        code = proc.wait(timeout) if check is None else _wait_checking(proc, timeout, check, writing, world)
    except (subprocess.TimeoutExpired, WaitTimeout) as exc:
        _end(proc, end)
        if not isinstance(exc, JobEnding):
            raise WaitTimeout(f"{what} {argv[0]!r} ran longer than {timeout:g} s; it was ended") from None
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    deadline = time.monotonic() + _DRAIN_SECONDS
    for pump in pumps:
        # A process left behind on a lost host (e.g. the remote launch agent) may keep a pipe open:
        # take what is there, but never wait for it to close.
        pump.join(max(0.0, deadline - time.monotonic()))
    return code


def _wait_checking(
    proc: subprocess.Popen[bytes],
    timeout: float | None,
    check: Callable[[], None],
    writing: set[str],
    world: World | None,
) -> int:
    """Wait for `proc` as Popen.wait does (polls 1 to 50 ms apart), calling `check` between polls.

    Not while a pump is writing to our output: when that blocks (a paused pager), the ranks' lines and beats
    wait behind it, and their silence is ours (the heartbeat counts start afresh after such a pause).

    Raises:
        WaitTimeout: past `timeout`; JobEnding: from `check`, said on `world`'s stderr as it happens.
    """
    deadline = None if timeout is None else time.monotonic() + timeout

    def ended() -> bool:
        try:
            if not writing:
                check()
        except JobEnding as exc:
            if world is not None:
                world.say(f"hpcdist: {exc}; ending the job")
            raise
        return proc.poll() is not None

    poll_until(ended, deadline, lambda: f"the launcher ran longer than {timeout:g} s", backoff=Backoff(0.001, 0.05))
    return proc.wait()


def _end(proc: subprocess.Popen[bytes], signum: int) -> None:
    """End a process that ran out of time: `signum` (mpirun then ends its ranks), SIGKILL if it lingers."""
    proc.send_signal(signum)
    try:
        proc.wait(_END_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _tee(
    stream: IO[bytes], name: str, watch: Callable[[str, bytes], bytes], writing: set[str], out: IO[str] | None
) -> None:
    """Read a pipe chunk by chunk until it closes; write what `watch` makes of each to `out` (None: nowhere).

    After the last chunk, `watch(name, b"")` gives back what it still held (a last line without a newline).
    """
    fd = stream.fileno()
    chunk = b"-"
    while chunk:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        shown = watch(name, chunk)
        if out is not None and shown:
            writing.add(name)
            try:
                _write(out, shown)
            except (OSError, ValueError):  # our own output closed (e.g. `| head`): keep draining, keep watching
                out = None
            finally:
                writing.discard(name)


def _write(out: IO[str], data: bytes) -> None:
    """Write bytes to a text stream (through its buffer when it has one) and flush."""
    sink: IO[bytes] | None = getattr(out, "buffer", None)
    if sink is not None:
        sink.write(data)
    else:
        out.write(data.decode(errors="replace"))
    out.flush()


def run_mpirun(
    argv: Sequence[str],
    token: str = "",
    router: OutputRouter | None = None,
    timeout: float | None = None,
    vanished_named: bool | None = None,
    heartbeat: float | None = None,
    shrink: bool = False,
    np: int | None = None,
    family: str | None = None,
    *,
    world: World,
    scheduler_signals: bool = False,
    spares: int = 0,
    startup: float | None = None,
) -> LaunchOutcome:
    """Run the mpirun command line built by hpcdist in `world` (its environment; the output goes to its streams);
    its status is non-zero when a rank failed or a host was lost.

    Raises:
        WaitTimeout: the job ran longer than `timeout` seconds (None: no limit); it was ended.

    Open MPI's mpirun returns 0 after losing a host's daemon; its output is watched for that, and for the
    events of ranks whose contract carries `token` (acted on, never shown). With a `router`
    (ranks that tag their lines), the console shows what it selects, and each failed rank's last lines
    follow at the end. `family`: the MPI family whose launcher runs (None: every family's words are read), which
    says how its output reads; `vanished_named` overrides whether a rank whose tagger saw it vanish is named.
    `heartbeat` (seconds): a rank that beat and fell silent that long ends the job (launching/heartbeat.py); until
    rank 0 says every rank is past MPI_Init, `startup` seconds, where longer.
    `shrink` (--on-failure shrink, `np` ranks): a failed or lost rank is named in one line as it is heard, the job
    goes on, and its status is the survivors' (launching/shrink.py); the last `spares` of them wait to take lost ranks'
    places. `scheduler_signals`: the ranks run in the
    scheduler's job steps, and the scheduler signals them itself (Slurm, on cancel, preemption or the time limit):
    SIGTERM or SIGHUP to hpcdist mpirun is passed on to none of them, so that each is signalled once.
    """
    watch = MpirunWatch(token, vanished_named, heartbeat, shrink, np, family, spares, startup)
    console = Console(watch, router)
    codes = ExitCodeWatch(watch.family)  # Hydra's -print-all-exitcodes block, read beside the watch

    def feed(stream: str, chunk: bytes) -> bytes:
        shown = codes.feed(stream, chunk)  # Hydra's exit-code block taken out
        if chunk:
            return console.feed(stream, shown) if shown else b""
        return (console.feed(stream, shown) if shown else b"") + console.feed(stream, b"")

    received = _Received(router)
    launcher = families.lookup(family) if family is not None else None
    # the ranks' shims (there when a router reads them) turn the family's sigterm into SIGTERM
    sigterm = launcher.sigterm if router is not None and launcher is not None else signal.SIGTERM
    ends_job = launcher.ends_job if launcher is not None else signal.SIGINT
    ending = _Ending(received, None if scheduler_signals else sigterm, ends_job, world)

    def check() -> None:
        watch.check()
        _say(watch.news(), world)
        ending.check()

    clear_stale_sessions()  # else a launcher given a killed one's pid cannot start
    handlers: dict[int, Callable[[subprocess.Popen[bytes]], None]] = {
        signal.SIGQUIT: _ask_for_stacks,
        signal.SIGTERM: lambda proc: ending.stop(proc, signal.SIGTERM),
        signal.SIGHUP: lambda proc: ending.stop(proc, signal.SIGHUP),
    }
    if ends_job != signal.SIGINT:  # Ctrl-C ends the job through the signal that its launcher ends one with

        def interrupt(proc: subprocess.Popen[bytes]) -> None:
            received.append(signal.SIGINT)
            proc.send_signal(ends_job)

        handlers[signal.SIGINT] = interrupt
    stalled = signal.SIGINT if HELD in argv else signal.SIGTERM  # a launcher that holds SIGTERM ends on SIGINT
    code = _spawn(argv, world.environ, "the MPI launcher", feed, received, timeout, check, handlers, world, stalled)
    ends_mid_line = watch.mid_line("stderr")
    _say(watch.news(), world)  # a loss heard as the launcher ended
    outcome, problem = watch.outcome(code, tuple(received))
    if shrink:  # the survivors' status, not the launcher's (which is the lost rank's)
        code = outcome.status
    interrupted = any(sig in proctree.STOPS for sig in received)
    if ends_mid_line and not interrupted:  # PRRTE ends its banners with a NUL, not a newline: start ours afresh
        world.say("")
    if outcome.usage is not None:  # the same mistake on every rank: said once, instead of each rank's failure
        world.say(f"hpcdist: error: {outcome.usage}")
    elif not interrupted and not (router is not None and router.caller_reports):
        if code and outcome.headline() and not watch.ended_it:  # the rank that began it (said already when hpcdist
            world.say(f"hpcdist: {outcome.headline()}")  # mpirun ended the job for it)
        if code and router is not None and router.options.log_dir:  # where each rank's whole output is
            world.say(f"hpcdist: each rank's whole output: {_logs(router.options.log_dir, np)}")
        if router is not None and (code or not shrink):  # under shrink, a loss the survivors outlived was named
            ended = summary(console.failures(code), router.options.tail, router.options.log_dir)
            world.say(ended, end="")
        if outcome.ended:  # the others the job's end reached, in one line however many
            world.say(f"hpcdist: {outcome.ended_line()}")
    known = codes.endings(outcome.hosts) if code and not interrupted else {}  # after a stop: the stop's one line
    endings = describe_exit_codes(known)
    if endings:
        world.say(f"hpcdist: exit statuses as Hydra reports them: {endings}")
    elif code and codes.lines and not known and not interrupted:  # taken out of the output: said as Hydra printed it
        world.say(f"hpcdist: Hydra's exit codes (ranks not told apart): {' '.join(codes.lines)}")
    if problem and not interrupted:  # a stop's one line says it: hosts the launcher lost while it ended follow from it
        world.say(f"hpcdist: error: {problem}")
    return outcome


def _logs(log_dir: str, np: int | None) -> str:
    """'logs/rank-000.log … rank-003.log': the log files of a job of `np` ranks (rank-NNN.log when not known)."""
    if not np:
        return os.path.join(log_dir, "rank-NNN.log")
    first = os.path.join(log_dir, log_name(0, np))
    return first if np == 1 else f"{first} … {log_name(np - 1, np)}"


def _say(lines: Sequence[str], world: World) -> None:
    """hpcdist mpirun's own lines, on `world`'s stderr as they happen."""
    for line in lines:
        world.say(line)


def _ask_for_stacks(proc: subprocess.Popen[bytes]) -> None:
    """SIGQUIT (Ctrl-\\) to hpcdist mpirun: SIGUSR2 to the ranks on this host, whose stack dumps rank 0 prints.

    Not through the launcher: Hydra's mpiexec dies of SIGUSR2. One rank suffices (rank 0 then asks every other
    rank over MPI), so this host's ranks are signalled directly, those that handle SIGUSR2 only (a rank without
    hpcdist's forensics would die of it); with none here, hpcdist says what to do instead.
    """
    ranks = [pid for pid in _descendants(proc.pid, b"hpcdist.worker") if _catches(pid, signal.SIGUSR2)]
    for pid in ranks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR2)
    if not ranks:  # os.write: a signal handler may interrupt a print to the same stream
        os.write(2, _NO_STACKS)


_NO_STACKS = (  # made before any signal arrives: the handler only writes it
    "hpcdist: SIGQUIT: no rank on this host dumps its stacks on SIGUSR2 (not started yet, "
    f"{settingtable.FORENSICS.name}=0, not a Python program, or no rank here); send SIGUSR2 to a rank that does "
    "(kill -USR2 PID) for every rank's Python stacks\n"
).encode()


def _descendants(pid: int, marker: bytes) -> list[int]:
    """The processes under `pid` on this host whose command line holds `marker` (read from /proc)."""
    found = []
    for child in proctree.descendants(pid):
        with contextlib.suppress(OSError), open(f"/proc/{child}/cmdline", "rb") as handle:
            if marker in handle.read():
                found.append(child)
    return found


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (SigCgt in /proc/PID/status)."""
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status", "rb") as handle:
        for line in handle:
            if line.startswith(b"SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


class _Received(list[int]):
    """The signals hpcdist received during a launch; after Ctrl-C, mpirun's own words are no longer shown."""

    def __init__(self, router: OutputRouter | None) -> None:
        super().__init__()
        self._router = router

    def append(self, signum: int) -> None:
        """Note a signal (called from the signal handler, before it is passed on to mpirun)."""
        super().append(signum)
        if signum in proctree.STOPS and self._router is not None:
            self._router.launcher_quiet = True


class _Ending:
    """SIGTERM or SIGHUP to hpcdist mpirun: every rank is sent SIGTERM through the launcher (the family's `sigterm`;
    None: the scheduler signals the ranks itself) and has settingtable.KILL_WAIT seconds to end (to save a checkpoint);
    then, or at a second such signal, the launcher ends the job as on Ctrl-C (the family's `ends_job`)."""

    def __init__(self, received: _Received, sigterm: int | None, ends_job: int, world: World) -> None:
        self._received, self._sigterm, self._ends_job, self._world = received, sigterm, ends_job, world
        self._grace = settings.kill_wait(world.environ)
        self._proc: subprocess.Popen[bytes] | None = None
        self._deadline: float | None = None  # None: not asked to end; inf: the launcher was told to end the job

    def stop(self, proc: subprocess.Popen[bytes], signum: int) -> None:
        """The signal handler's part: the first signal goes to every rank, a second one ends the job."""
        if self._deadline is None:
            self._received.append(signum)
            self._proc, self._deadline = proc, time.monotonic() + self._grace
            if self._sigterm is not None:  # None: the scheduler signalled every rank already
                proc.send_signal(self._sigterm)
        else:
            self._end(proc)

    def check(self) -> None:
        """Between polls: past the grace, the launcher ends the job (said in one line)."""
        if self._proc is not None and self._deadline is not None and time.monotonic() > self._deadline:
            self._world.say(
                f"hpcdist: the ranks did not end within {self._grace:g} s of SIGTERM ({settingtable.KILL_WAIT.name}); "
                "killing them"
            )
            self._end(self._proc)

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        """Have the launcher end the job now, as Ctrl-C does (once)."""
        if self._deadline != math.inf:
            self._deadline = math.inf
            proc.send_signal(self._ends_job)


def submit_sbatch(path: str, otherwise: str = "") -> str:
    """Submit the batch script at `path` with `sbatch --parsable` and return the job id it prints.

    `otherwise` ends the message when there is no sbatch: what the caller can do instead (`, or drop --submit`).
    """
    return submit_script("slurm", path, otherwise)


def submit_script(scheduler: str, path: str, otherwise: str = "") -> str:
    """Submit the job script at `path` with `scheduler`'s submit command and return the job id it prints.

    `otherwise` ends the message when there is no such command: what the caller can do instead.

    Raises:
        UsageError: the command is missing, did not answer within 120 s, or refused the job.
    """
    words = schedulers.lookup(scheduler)
    argv = words.submit_argv(path)
    script = open(path, "rb") if words.script_on_stdin else None  # noqa: SIM115 (closed below)
    try:
        done = subprocess.run(argv, stdin=script, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise UsageError(f"{argv[0]} not found on PATH; submit from a {words.title} login node{otherwise}") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"{argv[0]} did not answer within 120 s; check `{words.ping}`, then submit again") from None
    finally:
        if script is not None:
            script.close()
    if done.returncode != 0:
        reason = done.stderr.strip() or f"exit status {done.returncode}"
        raise UsageError(f"{argv[0]} rejected {path}: {reason}")
    return words.submitted(done.stdout)


def shell_syntax_errors(text: str) -> str:
    """What `bash -n` says about the script `text` (errors and warnings), empty when it reads cleanly.

    Empty too where this machine has no bash to ask.

    Raises:
        UsageError: bash took longer than 30 s to read it.
    """
    try:
        done = subprocess.run(
            ["bash", "-n"], input=text, capture_output=True, text=True, errors="replace", timeout=_SYNTAX_SECONDS
        )
    except FileNotFoundError:
        return ""
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"bash -n took more than {_SYNTAX_SECONDS:g} s to read the generated script; shorten its --setup lines"
        ) from None
    return done.stderr.strip() or (f"bash -n exited with status {done.returncode}" if done.returncode else "")
