"""Each rank's start (`python -m hpcdist.worker`): torchrun's variables from the launch, then the user's program.

Python programs run in this process (like `python -m mpi4py`), because a process that has
initialised MPI cannot exec another program that initialises MPI again. Anything else runs as a
child process that connects to rank 0's rendezvous store as a client and must not use MPI itself.
"""

from __future__ import annotations

import gc

if __name__ == "__main__":  # the shim: no collections of its start-up's objects, which live as long as the rank
    gc.disable()  # (main turns it on for the program)

import atexit
import importlib.util
import io
import math
import os
import runpy
import signal
import sys
import time
import types
import zipimport
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import NoReturn

from . import families, records, settings
from .abort import abort_job, before_abort, declare, end_failed_rank, exit_status, speak_under, survived
from .contract import RankContract, check_version
from .errors import RendezvousTimeout, TooFewRanks, UsageError
from .events import Done, Failed, Started
from .forensics.cause import failed_call, peer_lost, said_finished
from .hosts import this_host
from .program import PythonTarget, is_python, parse_python_argv
from .rank.child import relay_sigterm, run_child
from .rank.tagger import leave_time_to_peers
from .rank.tagger import start as start_tagger
from .runtime.adopt import adopt, finish
from .runtime.bootstrap import program_finished, say_ready, stacks_on_failure
from .runtime.env import LaunchEnv
from .runtime.pmi import finalize as pmi_finalize
from .runtime.prepare import job_timeout, prepare, serve_store
from .runtime.process import RankProcess, current, existing
from .status import describe_status as _describe  # 'exit code 3', 'killed by SIGKILL'

__all__ = ["FINALIZE_SECONDS", "bind", "format_failure", "main", "python_target"]

FINALIZE_SECONDS = 10.0  # under --on-failure shrink: how long a survivor's MPI_Finalize may take before it leaves


def python_target(argv: Sequence[str], which: Callable[[str], str | None] | None = None) -> PythonTarget | None:
    """How to run `argv` in-process, or None when it is not a Python program (`which`: shutil.which unless given)."""
    if not argv:
        raise UsageError("no program given; usage: hpcdist mpirun [options] -- PROGRAM [ARGS...]")
    if is_python(argv[0]):
        return parse_python_argv(argv)
    if which is None:
        import shutil  # a rank whose program is python's never needs it

        which = shutil.which
    path = which(argv[0])
    if path and _has_python_shebang(path):
        return PythonTarget("path", path, tuple(argv[1:]))
    return None


def check_target(target: PythonTarget) -> None:
    """Raise UsageError, as python itself refuses them, for a script that is not there or a module not installed."""
    if target.kind == "path" and not os.path.isfile(target.what):
        where = os.path.abspath(target.what)
        raise UsageError(f"python can't open file {where!r}: no such file; check the script's path")
    if target.kind == "module":
        try:
            found = importlib.util.find_spec(target.what) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise UsageError(
                f"no module named {target.what!r} (python -m {target.what}); check its name, or install it for "
                f"{sys.executable}"
            )


def _has_python_shebang(path: str) -> bool:
    """Whether an executable file is a Python script (e.g. a console script such as `hpcdist` or `pytest`)."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def format_failure(rank: int, exc: BaseException) -> str:
    """A rank-prefixed traceback, so the failing rank is obvious in interleaved output."""
    import traceback  # loaded by a failing rank only, as in the two functions below

    lines = "".join(traceback.format_exception(exc)).rstrip("\n").splitlines()
    return "\n".join(f"[rank {rank}] {line}" for line in lines)


def _run_in_process(process: RankProcess, target: PythonTarget, rank: int) -> tuple[int, Failed | None]:
    """Run the program as `__main__` here; its ending as an exit code, and how it failed when it raised.

    The `Failed` event says whether its error said a peer had gone (`after_peer`), the communication call the error
    came out of (`call`), and when (`at`; forensics/cause.py); None when it did not raise (its `how` is the shim's).
    """
    if target.kind == "path":
        sys.argv = [target.what, *target.args]
        sys.path[0] = os.path.dirname(os.path.abspath(target.what))
    else:
        sys.argv = ["-c" if target.kind == "code" else target.what, *target.args]
    try:
        if target.kind == "module":
            runpy.run_module(target.what, run_name="__main__", alter_sys=True)
        elif target.kind == "code":
            _run_as_main(compile(target.what, "<string>", "exec", dont_inherit=True), {})
        else:
            _run_path(target.what)
    except SystemExit as exc:
        return _exit_code(exc.code), None
    except UsageError as exc:  # e.g. init_process_group("nccl") without GPUs: a mistake, not a crash
        _usage_error(process, rank, str(exc))
        return 2, None
    except ModuleNotFoundError as exc:  # the same on every rank (not installed, or misspelt): said once for the job
        _usage_error(process, rank, _missing_module(exc))
        return 2, None
    except TooFewRanks as exc:  # every survivor alike: said once for the job; --max-restarts may start it again
        if not process.tell_usage(exc.line(), status=1) and exc.survivor == 0:
            print(f"hpcdist: error: {exc.line()}", file=sys.stderr, flush=True)
        return 1, None
    except SyntaxError as exc:  # in a file of the program: the same on every rank, said once for the job
        if not (exc.filename and os.path.isfile(exc.filename)):  # code the program compiled itself
            return _raised(process, rank, exc)
        _usage_error(process, rank, _syntax(exc))
        return 2, None
    except BaseException as exc:  # noqa: BLE001 - the user's program failed: report it with this rank's name
        return _raised(process, rank, exc)
    return 0, None


def _run_path(path: str) -> None:
    """Run the script at `path` as `__main__`, as runpy.run_path does; a source file without importing pkgutil, which
    runpy does (2 ms of every rank's start)."""
    with io.open_code(path) as handle:
        source = handle.read()
    try:
        zipimport.zipimporter(path)  # a zip application (python app.pyz): runpy runs its __main__.py
        packed = True
    except zipimport.ZipImportError:
        packed = source[:4] == importlib.util.MAGIC_NUMBER  # a compiled script (python script.pyc)
    if packed:
        runpy.run_path(path, run_name="__main__")
        return
    _run_as_main(compile(source, path, "exec", dont_inherit=True), {"__file__": path, "__cached__": None})


def _run_as_main(code: types.CodeType, names: dict[str, object]) -> None:
    """Run `code` (compiled without this module's `from __future__` flags, as python compiles a program) in a fresh
    module that is `__main__` while it runs, as runpy's: the program's classes pickle by `__main__`."""
    main = types.ModuleType("__main__")
    main.__dict__.update(names, __loader__=None, __package__=None, __spec__=None)
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"] = saved


def _raised(process: RankProcess, rank: int, exc: BaseException) -> tuple[int, Failed]:
    """The program raised `exc`: the others' stacks, then its traceback with this rank's name; status 1, and how."""
    how = Failed(rank, after_peer=peer_lost(str(exc)), call=failed_call(exc), at=time.time())
    if not process.contract.shrinks:  # the others' stacks, while they still wait where this rank left them
        stacks_on_failure(rank, exc)
    if not _told_in_one_line(process.contract, how):
        print(format_failure(rank, exc.with_traceback(_user_frames(exc.__traceback__))), file=sys.stderr)  # last
    return 1, how


def _syntax(exc: SyntaxError) -> str:
    """'train.py:2: SyntaxError: '(' was never closed: 'x = ('; fix the code there'."""
    line = (exc.text or "").strip()
    shown = f": {line!r}" if line else ""
    return f"{exc.filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg}{shown}; fix the code there"


def _told_in_one_line(contract: RankContract, how: Failed) -> bool:
    """Whether a rank that failed because a peer had gone is told in one line, without its traceback (under hpcdist
    mpirun, its headline's `then ranks … failed after it`; under srun or a plain mpirun, this rank's own line),
    unless the debug setting asks for everything."""
    return how.after_peer and not settings.debug(os.environ)


def _missing_module(exc: ModuleNotFoundError) -> str:
    """'train.py:3: no module named 'x'; …': where the program imported a module this Python does not have."""
    import traceback

    frames = traceback.extract_tb(_user_frames(exc.__traceback__))
    user = [frame for frame in frames if not frame.filename.startswith("<frozen ")]
    where = f"{user[-1].filename}:{user[-1].lineno}: " if user else ""
    return f"{where}{exc}; install it for {sys.executable}, or check its name"


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback without the shim's and runpy's frames, so it starts in the user's program."""
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>"):
        tb = tb.tb_next
    return tb


def _exit_code(code: object) -> int:
    """The status `sys.exit(code)` leaves to the OS: None 0, an int its low byte (-1 is 255), else printed and 1."""
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
    return exit_status(code)


def _run_child(process: RankProcess, words: Sequence[str], env: dict[str, str], rank: int) -> int:
    """Run a non-Python program as a child; one that cannot start is this rank's usage error (status 2)."""
    try:
        return run_child(words, env)
    except UsageError as exc:
        _usage_error(process, rank, str(exc), where=True)  # the program may be missing on one host only
        abort_job(2)
        return 2


def _usage_error(process: RankProcess | None, rank: int | str, message: str, where: bool = False) -> None:
    """A usage error on this rank: told to hpcdist mpirun, which says it once for the job, else printed here.

    `where`: the message depends on the rank's place, so the one told names the rank and its host too.
    """
    place = f"{f'rank {rank}' if rank != '' else 'a rank'} on {this_host()}: "  # '': its rank unknown yet
    if process is None or not process.tell_usage(f"{place if where else ''}{message}"):
        print(f"hpcdist: error: {place}{message}", file=sys.stderr, flush=True)


def bind(contract: RankContract, local_rank: int, local_world_size: int) -> None:
    """Under --bind auto (the contract's `bind`): pin this process to its share of the node's cores, and set
    OMP_NUM_THREADS and NCCL's NIC.

    Runs before MPI or torch start any thread, so that every thread (and child) inherits the CPU set. Each local
    rank plans the whole node from the same facts (sysfs or the TOPOLOGY setting's file, and the CPUs the launcher
    left it) and takes its own share, so the shares are disjoint without any exchange between the ranks.
    """
    if contract.bind == "none":
        return
    from .placement.binding import binding_env, plan_binding
    from .placement.topology import load_topology

    topology = load_topology(os.environ, os.sched_getaffinity(0))
    share = plan_binding(topology, local_world_size, os.environ)[local_rank]
    os.sched_setaffinity(0, share.cpus)
    os.environ.update(binding_env(share, os.environ))


def main(argv: Sequence[str] | None = None) -> int:
    """Read the launcher's contract, prepare the torch variables, run the program, and abort the whole job if it fails
    (under --on-failure shrink: end this rank only)."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["--"]:
        words = words[1:]
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # ranks' lines arrive whole
    host = this_host()
    rank = ""  # not known until the launcher's variables are read
    process: RankProcess | None = None
    try:
        process = current(os.environ)  # the launcher's contract, read once for this process
        speak_under(process.contract)
        env = LaunchEnv.from_environ(os.environ, process.contract.mpi, process.contract.scheduler)
        rank, process.rank = str(env.rank), env.rank
        check_version(
            process.contract, "this rank"
        )  # first: a rank of another hpcdist stops here (said with its place)
        target = python_target(words)
        if target is not None:
            check_target(target)
        tagger = start_tagger(process.contract, env.rank, env.world_size, host.split(".")[0])  # before the program
        relay_sigterm()  # after the tagger's fork: SIGTERM to hpcdist mpirun reaches the program as SIGTERM
        if tagger is not None:
            before_abort(tagger.drain)  # under Hydra, MPI_Abort also ends the tagger: its last lines go out first
            family = families.of_ranks(env.launcher)  # Hydra's MPI_Abort silences a peer killed a moment ago:
            if family is not None and family.abort_silences_peers:  # let it be named first
                before_abort(leave_time_to_peers)
        bind(process.contract, env.local_rank, env.local_world_size)
        seconds = job_timeout(os.environ)
        env, rdzv = prepare(process, seconds, env)  # the rendezvous is not kept: the store over MPI may replace it
        if env.rank == 0 and env.is_mpi and not rdzv.given:  # its collectives are done: every rank is past MPI_Init
            process.contract.tell(Started(0))  # hpcdist mpirun's heartbeat stops judging silence by start-up's limit
        # the program's own init_process_group gets hpcdist.init's protection
        adopted = adopt(process, env, seconds) if target is not None else None
    except (UsageError, RendezvousTimeout) as exc:
        _usage_error(process if isinstance(exc, UsageError) else None, rank, str(exc), where=True)
        if process is not None and rank.isdigit():
            process.contract.tell(Failed(int(rank), how="exit code 2"))
        abort_job(2)
        return 2
    contract = process.contract
    _collect_from_now()
    if target is not None and adopted is not None:
        code, failed = _run_in_process(process, target, env.rank)
        if code == 0:
            program_finished()  # before it says so: a peer failing from now on finds no stack of its to show
            said_finished(contract, env.rank)  # hpcdist mpirun names it if the others then fail waiting for it
            finish(adopted)  # wait for the other ranks, so that their hang report can name this rank as finished
    else:
        serve_store(process)  # on rank 0: the child's ranks connect to the store as clients
        child_env = dict(os.environ)  # TORCHELASTIC_USE_AGENT_STORE=True: rank 0's shim serves the store
        if contract.trace and env.rank == 0:
            print(
                f"hpcdist: no trace will be written: --trace records Python programs, and {words[0]} is not one",
                file=sys.stderr,
                flush=True,
            )
        say_ready(contract, env.rank, env.world_size)  # the child cannot say it; its rendezvous is ready for it
        code, failed = _run_child(process, words, child_env, env.rank), None
    if failed is None and survived():  # a survivor's own end: its status is told after its atexit hooks (abort._end)
        declare(code)
        return code
    if code != 0:
        # a usage error told to hpcdist mpirun is the job's one message; said only under a plain mpirun: hpcdist
        # mpirun, which this rank tells (routed), names the failure itself
        if process.told is None and not contract.routed:
            ending = (
                "leaving the job, the others carry on (--on-failure shrink)" if contract.shrinks else "ending the job"
            )
            print(
                f"hpcdist: rank {env.rank} on {host} failed ({_describe(code)}){_consequence(failed)}; {ending}",
                file=sys.stderr,
                flush=True,
            )
        # after a peer or in a call: a casualty, which hpcdist mpirun names after the rank that began the failure
        how = failed or Failed(env.rank, at=time.time())
        contract.tell(records.replace(how, how=_describe(code), host=host))
        end_failed_rank(contract, code if 0 < code < 256 else 1)
    else:
        contract.tell(Done(env.rank))  # its tagger need not report it vanished
    return code


def _collect_from_now() -> None:
    """Turn the garbage collector on for the program if the shim turned it off, with the shim's start-up objects
    frozen out of its reach: they live as long as the rank, and the two dozen collections that went through them as
    they were made cost a rank about 3 ms of CPU (docs/measurements/rank-cost.md)."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _consequence(failed: Failed | None) -> str:
    """' in all_reduce #2, after a peer had gone' from how the program failed; '' for a failure of the rank's own."""
    if failed is None:
        return ""
    call = f" in {failed.call.replace('#', ' #')}" if failed.call else ""
    return f"{call}{', after a peer had gone' if failed.after_peer else ''}"


def _leave(code: int) -> NoReturn:
    """Exit without C++ static destruction: at-exit handlers, flush, MPI_Finalize, MPICH's PMI goodbye, _exit.

    Measured on the two-node Slurm cluster: after a finished gloo job, torch's threads were sometimes
    still being torn down during interpreter exit ("terminate called without an active exception"),
    turning a successful rank into SIGABRT. Of the C exit handlers skipped, only MPICH's PMI `finalize`
    matters (runtime/pmi.py): it is sent here.
    """
    atexit._run_exitfuncs()
    mpi = sys.modules.get("mpi4py.MPI")
    process = existing()
    if mpi is not None and mpi.Is_initialized():
        if not mpi.Is_finalized():
            if process is not None and process.contract.shrinks:
                _bound_finalize()
            mpi.Finalize()
        pmi_finalize(mpi.Get_library_version())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _bound_finalize() -> None:
    """Under --on-failure shrink: have the kernel end this rank (SIGALRM) if MPI_Finalize has not returned within
    FINALIZE_SECONDS; its program ended well and said so, which is what hpcdist mpirun counts.

    After a rank was lost, a survivor's MPI_Finalize waited forever in ompi_mpi_finalize in 2 jobs of 10 here (Open
    MPI 5.0.11, ULFM, with the watchdog's communicator), and a Python timer thread beside it never ran again.
    """
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(math.ceil(FINALIZE_SECONDS))


if __name__ == "__main__":
    _leave(main())
