"""The program each rank of a `hpcdist bench startup` job runs, by path: it stamps its phases and writes them down.

`python startup_probe.py MODE DIR TIMEOUT LAUNCH`: MODE `pass` does nothing else, `mpi` imports mpi4py's MPI
(MPI_Init), `torch` runs `init_process_group("gloo")` from the environment (env://, waiting at most TIMEOUT seconds)
and one barrier. Each phase is stamped in seconds since LAUNCH (the wall clock when the job was launched, which the
benchmark adds to the command line as it starts it), and the rank writes DIR/rank-R.json with
them, its CPU seconds (user + system, with those of its children still running: under hpcdist mpirun the helper
process beside the rank, so a rank's CPU is its whole process tree's) and its peak resident memory. It imports nothing
of hpcdist, so under plain mpirun it costs what a plain script costs.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

__all__ = ["main"]

_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def _first(names: tuple[str, ...]) -> str:
    """The value of the first of `names` set in the environment."""
    return next(os.environ[name] for name in names if name in os.environ)


def _children_cpu() -> float:
    """The CPU seconds of this process's children still running, from /proc (0 where there is none)."""
    total = 0.0
    try:
        tasks = os.listdir("/proc/self/task")
        pids = [pid for task in tasks for pid in _read(f"/proc/self/task/{task}/children").split()]
    except OSError:
        return 0.0
    for pid in pids:
        try:
            fields = _read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: proc(5)'s 14, 15
    return total


def _read(path: str) -> str:
    """A file's text."""
    with open(path, encoding="ascii") as handle:
        return handle.read()


def main(argv: list[str]) -> int:
    """Run MODE's phases and write this rank's record into DIR."""
    start = time.time()
    mode, folder, timeout, when = argv
    launch = float(when)
    phases = {"start": start - launch}
    rank, size = int(_first(_RANK_VARS)), int(_first(_SIZE_VARS))
    if mode == "mpi":
        from mpi4py import MPI

        MPI.COMM_WORLD.Get_rank()
        phases["mpi"] = time.time() - launch
    elif mode == "torch":
        os.environ.setdefault("RANK", str(rank))
        os.environ.setdefault("WORLD_SIZE", str(size))
        import datetime

        import torch.distributed as dist

        phases["torch"] = time.time() - launch
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(timeout)))
        phases["init"] = time.time() - launch
        dist.barrier()
        phases["barrier"] = time.time() - launch
        dist.destroy_process_group()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    helper = _children_cpu()
    phases["end"] = time.time() - launch
    record = {"rank": rank, "size": size, "phases": phases, "cpu": usage.ru_utime + usage.ru_stime + helper}
    record["host"] = os.uname().nodename
    record["helper_cpu"] = helper
    record["rss_mb"] = usage.ru_maxrss / 1024.0
    path = os.path.join(folder, f"rank-{rank}.json")
    with open(path + ".part", "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.replace(path + ".part", path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
