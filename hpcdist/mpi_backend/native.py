"""The compiled mpi backend (native.cpp): building and caching it per torch and MPI, loading it, its watchdog.

$HPCDIST_MPI_NATIVE picks the implementation: `auto` (the default: the compiled one when it builds, otherwise
the Python group, with one line saying why), `1` (the compiled one or an error), `0` (the Python group only).
The build, ~1 min once, is keyed by the source, torch, Python and the libmpi mpi4py loaded, and cached in
$HPCDIST_CACHE_DIR, else `<venv>/share/hpcdist/native` if writable, else ~/.cache/hpcdist/native;
`python -m hpcdist.mpi_backend.native` builds it ahead of time (`make env` does, for each MPI venv).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import threading
import time
from pathlib import Path
from types import ModuleType

from mpi4py import MPI

from .. import abort
from .errors import NativeUnavailable

__all__ = ["ENV", "active", "build", "load", "loaded", "start_watchdog"]

ENV = "HPCDIST_MPI_NATIVE"
_SOURCE = Path(__file__).with_name("native.cpp")
_WATCH_EVERY = 0.2  # seconds between the watchdog's looks at the calls in flight
_state: dict[str, object] = {}


def mode() -> str:
    """`auto`, `1` or `0`, from $HPCDIST_MPI_NATIVE.

    Raises:
        NativeUnavailable: the variable holds anything else.
    """
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", "1", "0"):
        raise NativeUnavailable(f"${ENV}={value!r} is not one of auto, 1, 0; unset it or pick one")
    return value


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
        f"files, or set {ENV}=0 to use the Python backend"
    )


def _key(lib: Path) -> str:
    """What the build depends on: the source, torch, Python and the MPI library."""
    import torch

    parts = [_SOURCE.read_bytes(), torch.__version__.encode(), sys.version.encode(), str(lib.resolve()).encode(),
             MPI.Get_library_version().encode()]  # fmt: skip
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def _cache_dirs() -> list[Path]:
    """Where builds are kept, in order of preference."""
    given = os.environ.get("HPCDIST_CACHE_DIR")
    if given:
        return [Path(given) / "native"]
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [Path(sysconfig.get_path("data")) / "share" / "hpcdist" / "native", home / "hpcdist" / "native"]


def _import(name: str, path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    if spec is None:
        raise NativeUnavailable(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def build(verbose: bool = False) -> ModuleType:
    """The compiled module for this torch and MPI: loaded from the cache, or built into it first.

    Raises:
        NativeUnavailable: no mpi.h, no writable cache directory, or the compiler failed (its output is kept).
    """
    import torch  # noqa: F401 - the extension links against torch's libraries, loaded first

    lib = _libmpi()
    include = _header(lib)
    key = _key(lib)
    name = f"hpcdist_native_{key}"
    dirs = [d / key for d in _cache_dirs()]
    for directory in dirs:
        if (directory / f"{name}.so").is_file():
            return _import(name, directory / f"{name}.so")
    for directory in dirs:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK):
            break
    else:
        raise NativeUnavailable(f"no writable cache directory among {', '.join(map(str, dirs))}; set HPCDIST_CACHE_DIR")
    import ninja  # the build tool, from its wheel: cpp_extension looks on PATH
    from torch.utils import cpp_extension

    path = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{path}"

    if verbose or MPI.COMM_WORLD.Get_rank() == 0:
        print(f"hpcdist: building the native mpi backend once (about a minute) in {directory}", file=sys.stderr)
    try:
        return cpp_extension.load(
            name=name,
            sources=[str(_SOURCE)],
            extra_include_paths=[str(include)],
            extra_cflags=["-O2"],
            extra_ldflags=[f"-L{lib.parent}", f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}"],
            build_directory=str(directory),
            verbose=verbose,
        )
    except (RuntimeError, OSError, ImportError) as exc:  # the compiler's or ninja's failure, as cpp_extension says
        raise NativeUnavailable(f"building it in {directory} failed: {str(exc).strip().splitlines()[-1]}") from exc
    finally:
        os.environ["PATH"] = path


def load() -> ModuleType | None:
    """The compiled module if $HPCDIST_MPI_NATIVE allows it and it builds; else None (auto says why, once).

    Raises:
        NativeUnavailable: $HPCDIST_MPI_NATIVE=1 and it cannot be had.
    """
    if "module" in _state:
        return _state["module"]  # type: ignore[return-value]
    module = None
    chosen = mode()
    if chosen != "0":
        try:
            module = build()
        except NativeUnavailable as exc:
            if chosen == "1":
                raise
            if MPI.COMM_WORLD.Get_rank() == 0:
                print(f"hpcdist: the native mpi backend is unavailable, using the Python one: {exc}", file=sys.stderr)
    _state["module"] = module
    return module


def loaded() -> ModuleType | None:
    """The compiled module if a group of this process runs on it, else None (never builds or loads it)."""
    return _state.get("module")  # type: ignore[return-value]


def active() -> bool:
    """Whether this process's mpi4py groups run on the compiled backend (known once the first group exists)."""
    return _state.get("module") is not None


def start_watchdog(module: ModuleType) -> None:
    """Start (once) the thread that ends the job when a compiled call outlives its group's timeout."""
    if "watchdog" in _state:
        return
    thread = threading.Thread(target=_watch, args=(module,), name="hpcdist-mpi-watchdog", daemon=True)
    _state["watchdog"] = thread
    thread.start()


def _watch(module: ModuleType) -> None:
    while True:
        time.sleep(_WATCH_EVERY)
        late = module.overdue()
        if late:
            for text in late:
                print(f"hpcdist.mpi_backend: {text}", file=sys.stderr, flush=True)
            abort.abort_job(1)
            os._exit(1)  # MPI is not initialised any more: nobody else can end this process


if __name__ == "__main__":
    try:
        built = build(verbose="-v" in sys.argv)
    except NativeUnavailable as exc:
        sys.exit(f"hpcdist: error: {exc}")
    print(f"hpcdist: native mpi backend ready: {built.__file__}")
