"""Building the compiled mpi backend once per cache: its key, the lock its first users share, its failure record.

In a cache directory R, for the build key K (source, torch, Python, the libmpi mpi4py loaded):
  R/K/                 the finished build (hpcdist_native_K.so beside ninja's files), renamed into place whole
  R/K.lock             flock(2)ed by the one process that builds; it holds that process's host:pid
  R/K.tmp-HOST-PID/    a build in progress (the next builder removes one left by a killed process)
  R/K.failed           why the build failed and with which compiler (JSON): later jobs neither retry nor say it
                       again until the compiler found changes (or K does); removing it retries
A process that finds R/K/ loads it without locking or writing anything, so a read-only cache with a prebuilt
module works. The others wait in flock(2) (asleep, not polling) for the one that builds. The compiler runs in a child
process with its own environment (ninja's directory on PATH, CXX): the building process's environment is left alone.
K is the digest alone for the normal build, `tsan_DIGEST` or `asan_DIGEST` for a test build (variants.py).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from mpi4py import MPI

from .. import settings, settingtable
from ..errors import UsageError
from ..settingtable import MPI_NATIVE, MPI_SANITIZER
from .errors import NativeUnavailable
from .failures import Compiler, first_error, me, missing_compiler, record, record_note, recorded
from .variants import Variant, chosen

__all__ = ["BuildFailed", "BuildFailedBefore", "build", "built", "key"]

_CSRC = Path(__file__).with_name("csrc")  # the C++ source: native.cpp, one translation unit, and its headers
_SOURCE = _CSRC / "native.cpp"
_PROGRESS_EVERY = 15.0  # seconds between the builder's "still building" lines
_TYPICAL = "about 30 s of one core's time, longer on a busy node"  # measured: docs/mpi-backend.md
# What the compiling child runs, argv[1] holding the keywords: torch's cpp_extension writes ninja's file and builds
# the library without loading it (a test build loads only where its sanitizer's runtime was preloaded); load()
# does the same, then imports. On failure it prints the error with the compiler's output, for first_error to read.
_CHILD = """
import json, subprocess, sys
from torch.utils import cpp_extension
try:
    cpp_extension._write_ninja_file_and_build_library(**json.loads(sys.argv[1]))
except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
    output = getattr(exc, "output", None)
    print(exc, output.decode(errors="replace") if isinstance(output, bytes) else output or "", sep="\\n", flush=True)
    sys.exit(1)
"""


class BuildFailed(NativeUnavailable):
    """This process tried to build the compiled backend and could not (it says so; the failure is recorded)."""


class BuildFailedBefore(NativeUnavailable):
    """A recorded failure for this key and compiler: the build is not retried, and `auto` does not say it again."""


def _wait_seconds() -> float:
    try:
        return settings.mpi_build_wait(os.environ)
    except UsageError as exc:
        raise NativeUnavailable(str(exc)) from None


@contextmanager
def _locked(path: Path, seconds: float) -> Iterator[bool]:
    """Hold flock(2) on `path` (creating it), waiting asleep at most `seconds` for the process that holds it.

    Yields whether the lock holds: False on a filesystem without flock (Lustre mounted without `-o flock`,
    NFS with `nolock`), where builds may then run side by side and the first to rename itself into place wins.

    Raises:
        NativeUnavailable: the wait timed out; the message names this rank, the holder and the directory.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _wait_for_lock(fd, path, seconds)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            yield False
            return
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{me()}\n".encode(), 0)
        yield True
    finally:
        os.close(fd)  # releases the lock


def _wait_for_lock(fd: int, path: Path, seconds: float) -> None:
    """Block in flock(2) on a thread of its own, so that the wait can time out."""
    taken = threading.Event()

    def take() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            return  # the descriptor was closed after a timeout
        taken.set()

    threading.Thread(target=take, name="hpcdist-native-build-wait", daemon=True).start()
    if taken.wait(seconds):
        return
    try:
        holder = path.read_text().strip() or "another process"
    except OSError:
        holder = "another process"
    raise NativeUnavailable(
        f"rank {MPI.COMM_WORLD.Get_rank()} ({me()}) waited {seconds:.0f} s for the native mpi backend's build by "
        f"{holder} in {path.parent}; wait longer (${settingtable.MPI_BUILD_WAIT.name}), build it ahead with "
        f"`python -m hpcdist.mpi_backend.native`, or set {MPI_NATIVE.name}=0"
    )


@contextmanager
def _progress(directory: Path) -> Iterator[None]:
    """Say that this process builds, every 15 s that it still does, and how long it took."""
    began = time.monotonic()
    done = threading.Event()
    print(
        f"hpcdist: building the native mpi backend once ({_TYPICAL}) by {me()} in {directory}; "
        f"other ranks and later jobs load it",
        file=sys.stderr,
        flush=True,
    )

    def tell() -> None:
        while not done.wait(_PROGRESS_EVERY):
            print(f"hpcdist: still building the native mpi backend ({time.monotonic() - began:.0f} s so far)",
                  file=sys.stderr, flush=True)  # fmt: skip

    thread = threading.Thread(target=tell, name="hpcdist-native-build-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    print(f"hpcdist: built the native mpi backend in {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)


def _libmpi() -> Path:
    """The libmpi this process loaded (mpi4py loaded it at `from mpi4py import MPI`), as its file."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.rsplit(None, 1)[-1]
            if "/libmpi.so" in path:
                return Path(path)
    raise NativeUnavailable("cannot tell which libmpi this process loaded (/proc/self/maps names none)")


def _header(lib: Path) -> Path:
    """The mpi.h of the installation `lib` belongs to."""
    for include in (lib.parent.parent / "include", lib.parent.parent / "include" / "mpi"):
        if (include / "mpi.h").is_file():
            return include
    raise NativeUnavailable(
        f"no mpi.h beside {lib} (a runtime-only MPI such as the impi-rt wheel); install the MPI's development "
        f"files, or set {MPI_NATIVE.name}=0 to use the Python backend"
    )


def _key(lib: Path, variant: Variant) -> str:
    """What the build depends on: the source, torch, Python, the MPI library and the variant's flags."""
    import torch

    sources = [path.read_bytes() for path in sorted(_CSRC.iterdir()) if path.suffix in (".cpp", ".h")]
    parts = [*sources, torch.__version__.encode(), sys.version.encode(), str(lib.resolve()).encode(),
             MPI.Get_library_version().encode(), " ".join(variant.cflags + variant.ldflags).encode()]  # fmt: skip
    return variant.key(hashlib.sha256(b"\0".join(parts)).hexdigest()[:16])


def _variant() -> Variant:
    try:
        return chosen(os.environ)
    except UsageError as exc:
        raise NativeUnavailable(str(exc)) from None


def _check_runtime(variant: Variant) -> None:
    """A test build loads only after its sanitizer's runtime: refuse it, saying how, where that is not so.

    Raises:
        NativeUnavailable: the runtime is not loaded in this process.
    """
    if variant.runtime is None:
        return
    with open("/proc/self/maps") as maps:
        if f"/{variant.runtime}" in maps.read():
            return
    raise NativeUnavailable(
        f"${MPI_SANITIZER.name}={variant.name}: its test build loads only where {variant.runtime} is preloaded; "
        f"run with LD_PRELOAD=$(g++ -print-file-name={variant.runtime}), or unset {MPI_SANITIZER.name} for the "
        "normal build"
    )


def _cache_dirs() -> list[Path]:
    """Where builds are kept, in order of preference."""
    given = settings.cache_dir(os.environ)
    if given:
        return [Path(given) / "native"]
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [Path(sysconfig.get_path("data")) / "share" / "hpcdist" / "native", home / "hpcdist" / "native"]


def _writable(roots: list[Path]) -> Path:
    for root in roots:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(root, os.W_OK):
            return root
    raise NativeUnavailable(
        f"no writable cache directory among {', '.join(map(str, roots))}; set {settingtable.CACHE_DIR.name}"
    )


def _import(name: str, path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    if spec is None:
        raise NativeUnavailable(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        loader.exec_module(module)
    except ImportError as exc:
        raise NativeUnavailable(f"cannot load {path}: {exc}; remove {path.parent} to build it again") from None
    return module


def key() -> str:
    """This process's build key: its torch, Python and MPI, the source and the variant (the cache's directory name)."""
    return _key(_libmpi(), _variant())


def build(verbose: bool = False, retry: bool = False) -> ModuleType:
    """The compiled module for this torch, MPI and variant: loaded from the cache, or built into it first (by one).

    `retry` builds even where a failure is recorded (what building it by hand asks for).

    Raises:
        BuildFailed: this process found no compiler, or the compiler failed (recorded for later jobs).
        BuildFailedBefore: a failure is recorded for this key and compiler.
        NativeUnavailable: no mpi.h, no writable cache directory, the wait for another's build timed out, or a test
            build without its sanitizer's runtime loaded.
    """
    import torch  # noqa: F401 - the extension links against torch's libraries, loaded first

    _check_runtime(_variant())
    path = built(verbose, retry)
    return _import(path.stem, path)


def built(verbose: bool = False, retry: bool = False) -> Path:
    """The compiled module's file for this torch, MPI and variant, built into the cache where it is not; not loaded.

    Raises:
        BuildFailed: this process found no compiler, or the compiler failed (recorded for later jobs).
        BuildFailedBefore: a failure is recorded for this key and compiler.
        NativeUnavailable: no mpi.h, no writable cache directory, or the wait for another's build timed out.
    """
    variant = _variant()
    lib = _libmpi()
    include = _header(lib)
    key = _key(lib, variant)
    name = f"hpcdist_native_{key}"
    roots = _cache_dirs()
    for root in roots:
        if (root / key / f"{name}.so").is_file():
            return root / key / f"{name}.so"
    compiler = Compiler.find(os.environ)
    root = _writable(roots)
    final, failed = root / key, root / f"{key}.failed"
    reason = None if retry else recorded(failed, compiler)  # before the lock: a recorded failure costs no wait
    if reason is not None:
        raise BuildFailedBefore(f"{reason}; {record_note(failed)}")
    with _locked(root / f"{key}.lock", _wait_seconds()) as alone:
        if (final / f"{name}.so").is_file():  # built while this process waited
            return final / f"{name}.so"
        reason = None if retry else recorded(failed, compiler)
        if reason is not None:  # failed while this process waited: the builder said so
            raise BuildFailedBefore(f"{reason}; {record_note(failed)}")
        if alone:  # what a killed builder left: none other runs while this process holds the lock
            for leftover in [final, *root.glob(f"{key}.tmp-*")]:
                shutil.rmtree(leftover, ignore_errors=True)
        if compiler.path is None:
            reason = missing_compiler(compiler)
            record(failed, compiler, reason, "")
            raise BuildFailed(f"{reason}; {record_note(failed)}")
        building = root / f"{key}.tmp-{me().replace(':', '-')}"
        _compile(name, variant, compiler, include, lib, building, failed, verbose)
        try:
            os.rename(building, final)
        except OSError:  # without a lock across nodes, another process's build came first: the same build
            shutil.rmtree(building, ignore_errors=True)
        failed.unlink(missing_ok=True)
        return final / f"{name}.so"


def _compile(
    name: str,
    variant: Variant,
    compiler: Compiler,
    include: Path,
    lib: Path,
    directory: Path,
    failed: Path,
    verbose: bool,
) -> None:
    """Build the module in `directory` with torch's cpp_extension (ninja from its wheel), in a child process.

    Raises:
        BuildFailed: the compiler failed; its first error line is the reason, its whole output is recorded.
    """
    import ninja  # the build tool, from its wheel: cpp_extension looks on PATH

    arguments = {
        "name": name,
        "sources": [str(_SOURCE)],
        "extra_cflags": list(variant.cflags),
        "extra_cuda_cflags": [],
        "extra_sycl_cflags": [],
        "extra_ldflags": [f"-L{lib.parent}", f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}", *variant.ldflags],
        "extra_include_paths": [str(include)],
        "build_directory": str(directory),
        "verbose": verbose,
        "with_cuda": False,
        "with_sycl": False,
    }
    environ = {
        **os.environ,
        "PATH": f"{ninja.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}",
        "CXX": compiler.name if compiler.given else compiler.path or compiler.name,  # the one recorded
    }
    directory.mkdir()
    lines: list[str] = []
    with _progress(directory.parent / directory.name.split(".tmp-")[0]):
        try:
            with subprocess.Popen(
                [sys.executable, "-c", _CHILD, json.dumps(arguments)], cwd=directory, env=environ, text=True,
                errors="replace", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            ) as child:  # fmt: skip
                for line in child.stdout or ():
                    lines.append(line)
                    if verbose:
                        print(line, end="", flush=True)
            ended = child.returncode
        except OSError as exc:  # no Python to run
            lines, ended = [str(exc)], -1
    if ended == 0:
        return
    shutil.rmtree(directory, ignore_errors=True)
    text = "".join(lines) or f"the compiling process ended with status {ended} and said nothing"
    reason = f"building it with {compiler.path} failed: {first_error(text)}"
    record(failed, compiler, reason, text)
    raise BuildFailed(f"{reason}; {record_note(failed)}")
