"""The table of the user's settings: every environment variable a user may set, what it takes, its default (a leaf).

Each is a `Setting` (its name, what it takes, its default, what it does); `SETTINGS` lists them all, in the order
the documentation's table of settings shows them (generated from this module). This module and `contract` alone
spell a variable's name; each setting's typed reader, of the same name in lower case, is `settings`'.
"""

from __future__ import annotations

from collections.abc import Mapping

from .records import record
from .values import STORES

__all__ = [
    "CACHE_DIR",
    "DEBUG",
    "DEFAULT_BUILD_WAIT",
    "DEFAULT_KILL_WAIT",
    "DEFAULT_STARTUP_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "FORENSICS",
    "FR_DIR",
    "HEARTBEAT_TIMEOUT",
    "JOB_RATE",
    "KILL_WAIT",
    "LAUNCH_DIR",
    "MIN_RATE",
    "MPIRUN",
    "MPI_BUILD_WAIT",
    "MPI_CUDA_AWARE",
    "MPI_NATIVE",
    "MPI_RING_BYTES",
    "MPI_SANITIZER",
    "OUTPUT_RATE",
    "SANITIZERS",
    "SETTINGS",
    "STARTUP_TIMEOUT",
    "STORE",
    "SUBMIT_DIR",
    "TEMPLATE_DIR",
    "TIMEOUT",
    "TOPOLOGY",
    "Setting",
]

DEFAULT_TIMEOUT = 300.0  # seconds any wait of a rank may take, unless the job says otherwise
DEFAULT_STARTUP_TIMEOUT = 60.0  # seconds the ranks wait for each other at start-up, at least the TIMEOUT
DEFAULT_KILL_WAIT = 30.0  # seconds the ranks have to end after SIGTERM to hpcdist mpirun (Slurm's KillWait)
DEFAULT_BUILD_WAIT = 600.0  # seconds a process waits for another's build of the compiled mpi backend
JOB_RATE = 8 << 20  # bytes per second the whole job's output may bring to the launcher, shared by the ranks
MIN_RATE = 1 << 10  # but never less than this per rank
SANITIZERS = ("tsan", "asan")  # the compiled mpi backend's test builds, by the sanitizer each is built with


@record(frozen=True)
class Setting:
    """One variable a user may set: its name, what it takes, its default, and what it changes."""

    name: str
    takes: str
    default: str
    does: str

    def raw(self, environ: Mapping[str, str]) -> str | None:
        """Its value in `environ`, None when unset."""
        return environ.get(self.name)


DEBUG = Setting(
    "HPCDIST_DEBUG",
    "1 or 0",
    "0",
    "keeps MPI's own failure banners on the console, prints the traceback of an error inside hpcdist, and has a "
    "hang report say how many messages and bytes its rank received",
)
TIMEOUT = Setting(
    "HPCDIST_TIMEOUT",
    "seconds",
    "300",
    "how long any wait of a rank may take (rendezvous, a communication call) before the hang report ends the job; "
    "`--timeout` and `hpcdist.init(timeout=)` take precedence",
)
STARTUP_TIMEOUT = Setting(
    "HPCDIST_STARTUP_TIMEOUT",
    "seconds",
    f"{DEFAULT_STARTUP_TIMEOUT:g}",
    "how long the ranks wait for each other at start-up (the rendezvous, init_process_group), at least "
    "HPCDIST_TIMEOUT: ranks arrive after their own start-up, slower with many ranks importing torch from one "
    "shared file system",
)
STORE = Setting(
    "HPCDIST_STORE",
    ", ".join(STORES),
    "auto",
    "where torch's key-value store lives: tcp (rank 0's port) or mpi (over MPI, no port opens); "
    "`hpcdist.init(store=)` takes precedence",
)
FORENSICS = Setting(
    "HPCDIST_FORENSICS",
    "1 or 0",
    "1",
    "0 turns hang forensics off: no record of each rank's calls, no hang report, no stacks on SIGUSR2, no trace",
)
MPIRUN = Setting(
    "HPCDIST_MPIRUN",
    "a path",
    "the venv's mpirun, then PATH's",
    "the mpirun that `hpcdist mpirun` and `hpcdist doctor` run; `--mpirun` takes precedence",
)
HEARTBEAT_TIMEOUT = Setting(
    "HPCDIST_HEARTBEAT_TIMEOUT",
    "seconds (0: off)",
    "30",
    "how long `hpcdist mpirun` waits to hear from a running rank before it names the rank's host lost and ends "
    "the job; `--heartbeat-timeout` takes precedence",
)
KILL_WAIT = Setting(
    "HPCDIST_KILL_WAIT",
    "seconds",
    "30 (Slurm's KillWait)",
    "after SIGTERM or SIGHUP to `hpcdist mpirun`, how long its ranks, each sent SIGTERM, have to end (to save a "
    "checkpoint) before they are killed",
)
OUTPUT_RATE = Setting(
    "HPCDIST_OUTPUT_RATE",
    "bytes per second (0: no limit)",
    "8 MiB/s shared by the ranks, at least 1 KiB/s each",
    "how much of each rank's output `hpcdist mpirun` forwards a second; past it a rank's lines are held back "
    "(counted, and kept whole in `--log-dir`'s files)",
)
TEMPLATE_DIR = Setting(
    "HPCDIST_TEMPLATE_DIR",
    "a directory",
    "unset",
    "a site's templates (*.j2), searched after `--template-dir` and before the bundled set",
)
SUBMIT_DIR = Setting(
    "HPCDIST_SUBMIT_DIR",
    "a directory",
    "./hpcdist-jobs",
    "where `hpcdist.submit` writes its job directories (the job's nodes must see it)",
)
LAUNCH_DIR = Setting(
    "HPCDIST_LAUNCH_DIR",
    "a directory",
    "a private temporary one",
    "where `hpcdist.launch` writes the call and its results (every host of the launch must see it)",
)
CACHE_DIR = Setting(
    "HPCDIST_CACHE_DIR",
    "a directory",
    "<venv>/share/hpcdist, else ~/.cache/hpcdist",
    "where the compiled mpi backend is built and kept (in its `native` folder)",
)
MPI_BUILD_WAIT = Setting(
    "HPCDIST_MPI_BUILD_WAIT",
    "seconds",
    f"{DEFAULT_BUILD_WAIT:g}",
    "how long a process waits for another's build of the compiled mpi backend",
)
MPI_NATIVE = Setting(
    "HPCDIST_MPI_NATIVE",
    "auto, 1 or 0",
    "auto",
    "the mpi backend's implementation: the compiled one where it builds (auto), the compiled one or an error (1), "
    "the Python one (0)",
)
MPI_SANITIZER = Setting(
    "HPCDIST_MPI_SANITIZER",
    ", ".join(SANITIZERS),
    "unset (the normal build)",
    "for hpcdist's own tests only: load the compiled mpi backend's test build under ThreadSanitizer (tsan) or "
    "AddressSanitizer with UBSan (asan); the process must have that sanitizer's runtime preloaded (LD_PRELOAD)",
)
MPI_RING_BYTES = Setting(
    "HPCDIST_MPI_RING_BYTES",
    "bytes (0: never)",
    "262144 (Python backend), 8388608 (compiled)",
    "the size from which the mpi backend's all_reduce takes the ring",
)
MPI_CUDA_AWARE = Setting(
    "HPCDIST_MPI_CUDA_AWARE",
    "1 or 0",
    "0",
    "1 says the MPI library reads GPU memory itself: the mpi backend hands it CUDA tensors without staging them",
)
TOPOLOGY = Setting(
    "HPCDIST_TOPOLOGY",
    "a file",
    "this machine's sysfs",
    "an hwloc XML file (`lstopo --of xml FILE`) that `--bind auto` plans from instead of this machine",
)
FR_DIR = Setting(
    "HPCDIST_FR_DIR",
    "a directory",
    "the log directory's `fr`, else a temporary one",
    "where each rank writes its calls as Flight Recorder dumps on a hang, for torch's `torchfrtrace`",
)
SETTINGS = (
    TIMEOUT,
    STARTUP_TIMEOUT,
    STORE,
    FORENSICS,
    FR_DIR,
    DEBUG,
    MPIRUN,
    HEARTBEAT_TIMEOUT,
    KILL_WAIT,
    OUTPUT_RATE,
    TOPOLOGY,
    TEMPLATE_DIR,
    SUBMIT_DIR,
    LAUNCH_DIR,
    MPI_NATIVE,
    MPI_CUDA_AWARE,
    MPI_RING_BYTES,
    CACHE_DIR,
    MPI_BUILD_WAIT,
    MPI_SANITIZER,
)
