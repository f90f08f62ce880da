"""Plain torch.distributed under the shim: hpcdist.init's timeouts, hang watchdog and abort for unmodified programs.

`adopt` runs on every rank before the program, while the ranks are in step: it reserves the
watchdog's communicator and installs an import hook. When the program first imports
torch.distributed, the hook wraps `init_process_group` so that it goes through `bootstrap.start_group`,
as `hpcdist.init` does (a backstop timeout unless the program gave one, the ledger's init phase, the
watchdog), with "mpi" meaning hpcdist's mpi4py backend on wheels without native MPI (on hpcdist's store over MPI
unless the program names a store or an init_method of its own), and "nccl" checked against the GPUs torch sees
first (a UsageError, which hpcdist mpirun says once for the job). It also records the program's calls in the
ledger and starts the watchdog, so a rank that never calls init_process_group is named too. On rank 0 the import
also serves torch's store over the rendezvous's socket (`prepare.serve_store`), for the program's own clients of
MASTER_ADDR:MASTER_PORT, so a program that never imports torch never loads it. Nothing here imports torch.
`finish` runs after a program that ended well, so that the others' hang report can say this rank finished.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

from ..records import record
from ..settingtable import FORENSICS
from .bootstrap import check_nccl, forensics_enabled, mpi4py_backend, start_group
from .env import LaunchEnv
from .prepare import mpi_store_arguments, serve_store, startup_timeout
from .process import RankProcess

__all__ = ["Adopted", "adopt", "finish"]

_TARGET = "torch.distributed"


@record(frozen=True)
class Adopted:
    """What `adopt` turned on for the program: hang forensics, and the trace file rank 0 writes at its end."""

    forensics: bool
    trace: str | None  # the path of the trace (--trace), when every call is kept for it


def adopt(process: RankProcess, env: LaunchEnv, seconds: float) -> Adopted:
    """Give the program's own use of torch.distributed hpcdist's protection (every rank, before the program)."""
    contract = process.contract
    forensics = forensics_enabled(env, os.environ)
    if forensics:
        from ..forensics import collect, watchdog

        forensics = watchdog.reserve(contract, seconds, startup_timeout(seconds))
        if forensics:
            collect.install()  # its stacks in the hang report, and on SIGUSR2
            # answering from the start, torch or not: a failing rank's report has every other rank's stacks
            watchdog.start(contract, seconds, startup_timeout(seconds))
    path = contract.trace
    if path and forensics:
        from ..forensics import timeline

        timeline.begin(seconds)
    elif path and env.rank == 0:
        print(
            f"hpcdist: no trace will be written to {path}: tracing records through hang forensics, which "
            f"{FORENSICS.name}=0 or an MPI without MPI_THREAD_MULTIPLE turns off",
            file=sys.stderr,
            flush=True,
        )
    arm = functools.partial(_arm, process=process, seconds=seconds, forensics=forensics, env=env)
    if _TARGET in sys.modules:  # loaded before the program, e.g. by a module the shim's Python loads at start
        arm(sys.modules[_TARGET])
    else:
        sys.meta_path.insert(0, _Finder(arm))
    return Adopted(forensics, path if forensics else None)


def finish(adopted: Adopted) -> None:
    """The program ended well: wait, still answering the watchdog, until every rank's program has ended."""
    if adopted.forensics:
        from ..forensics import watchdog

        watchdog.finish()
    if adopted.trace:
        from ..forensics import timeline

        timeline.end(adopted.trace)


def _arm(dist: ModuleType, process: RankProcess, seconds: float, forensics: bool, env: LaunchEnv) -> None:
    """On rank 0 serve the store; wrap init_process_group (once); with forensics, record calls, start the watchdog."""
    serve_store(process)
    original = getattr(dist, "init_process_group", None)
    if original is None or hasattr(original, "_hpcdist_original"):
        return  # torch without distributed support, or already armed
    import inspect  # with torch only: a program that never imports torch.distributed does without it (4 ms)

    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> None:
        arguments = signature.bind(*args, **kwargs).arguments
        backend = arguments.pop("backend", None)
        if isinstance(backend, str) and backend.lower() == "mpi" and not dist.is_mpi_available():
            backend = mpi4py_backend(process.contract)  # as hpcdist.init does on wheels without native MPI
            if "store" not in arguments and arguments.get("init_method") in (None, "env://"):
                arguments.pop("init_method", None)  # the store over MPI, as hpcdist.init's: no port opens
                for name, value in mpi_store_arguments(env).items():
                    arguments.setdefault(name, value)
        if isinstance(backend, str) and backend.lower() == "nccl":
            check_nccl(env.local_world_size)  # one hpcdist line for the job instead of torch's error on every rank
        start_group(process, backend, seconds, forensics, **arguments)

    init_process_group._hpcdist_original = original  # type: ignore[attr-defined]  # start_group calls it
    dist.init_process_group = init_process_group  # type: ignore[attr-defined]
    if forensics:
        from ..forensics import recording, watchdog

        recording.instrument(dist)
        watchdog.start(process.contract, seconds, startup_timeout(seconds))


class _Finder:
    """Finds torch.distributed through the other finders, with a loader that arms the module once loaded (a meta
    path finder by its method, without importlib.abc's import cost)."""

    def __init__(self, arm: Callable[[ModuleType], None]) -> None:
        self._arm = arm

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """torch.distributed's spec with `_Loader` around its loader; None for every other module."""
        if fullname != _TARGET:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, self._done)
                return spec
        return None

    def _done(self, module: ModuleType) -> None:
        """Arm the loaded module and leave the import system."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self._arm(module)


class _Loader:
    """The real loader, then a callback on the executed module; anything else is the real loader's."""

    def __init__(self, inner: Any, then: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._then = then

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        """The real loader's module."""
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        """Run the module, then the callback."""
        self._inner.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
