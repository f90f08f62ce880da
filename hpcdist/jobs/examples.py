"""The checkout's example files (hostfiles/, slurm/, templates/) rendered from the bundled templates.

`python -m hpcdist.jobs.examples` checks them, `--write` regenerates them (`make examples`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..hosts import HostSlots
from .render import BUNDLED_DIR, make_environment, render_hostfile
from .sbatch import render_sbatch
from .sbatchspec import SbatchSpec

if TYPE_CHECKING:
    import jinja2

__all__ = ["EXAMPLES", "check_examples", "examples", "main", "render_examples", "write_examples"]

_PYTHON = ".venv/bin/python"  # the venv `make env` creates; jobs are submitted from the project directory
_SEED_HOSTS = (HostSlots("ip-26-0-162-46", 8), HostSlots("ip-26-0-162-239", 8))
_DEMO = ("python", "-m", "hpcdist", "run", "p2p", "broadcast", "allreduce", "reduce", "gather", "--backend", "gloo")
_TRAIN = ("python", "train.py", "--backend", "nccl")
_GPU_JOB: dict[str, object] = {
    "nodes": 2,
    "ntasks_per_node": 8,
    "gpus_per_node": "8",
    "cpus_per_task": 8,
    "mem": "0",
    "time": "4:00:00",
    "partition": "gpu",
    "exclusive": True,
    "output": "%x-%j.out",
    "setup": ("module load cuda",),
    "env": (("NCCL_DEBUG", "WARN"), ("NCCL_SOCKET_IFNAME", "^lo,docker0"), ("OMP_NUM_THREADS", "8")),
    "python": _PYTHON,
    "mpirun": ".venv/bin/mpirun",
    "torchrun": ".venv/bin/torchrun",
}


def _hostfile(hosts: tuple[HostSlots, ...], style: str, note: str) -> Callable[[jinja2.Environment], str]:
    """An example hostfile."""
    return lambda jinja: render_hostfile(hosts, style, note, jinja)


def _sbatch(**fields: object) -> Callable[[jinja2.Environment], str]:
    """An example sbatch script."""
    return lambda jinja: render_sbatch(SbatchSpec(**fields), jinja)  # type: ignore[arg-type]


EXAMPLES: dict[str, Callable[[jinja2.Environment], str]] = {
    "hostfiles/localhost": _hostfile(
        (HostSlots("localhost", 4),),
        "openmpi",
        "Four slots on this machine: `hpcdist mpirun --hostfile hostfiles/localhost -np 4 -- python train.py`",
    ),
    "hostfiles/two-node": _hostfile(
        _SEED_HOSTS,
        "openmpi",
        "Two nodes with 8 GPUs each (the seed notes' hosts), Open MPI form:\n"
        "hpcdist mpirun --hostfile hostfiles/two-node -np 16 -- python train.py --backend nccl",
    ),
    "hostfiles/two-node-mpich": _hostfile(
        _SEED_HOSTS, "mpich", "The same two nodes in MPICH/Hydra form (mpiexec -f hostfiles/two-node-mpich)"
    ),
    "slurm/cpu-mpi.sbatch": _sbatch(
        program=_DEMO,
        nodes=2,
        ntasks_per_node=4,
        cpus_per_task=1,
        mem="8G",
        time="30",
        job_name="cpu-mpi",
        output="%x-%j.out",
        launch="mpirun",
        python=_PYTHON,
        mpirun=".venv/bin/mpirun",
        env=(("OMP_NUM_THREADS", "1"),),
    ),
    "slurm/ddp-srun.sbatch": _sbatch(program=_TRAIN, job_name="ddp-srun", launch="srun", opal_prefix=True, **_GPU_JOB),
    "slurm/ddp-torchrun.sbatch": _sbatch(program=_TRAIN, job_name="ddp-torchrun", launch="torchrun", **_GPU_JOB),
    "slurm/requeue.sbatch": _sbatch(
        program=(*_TRAIN, "--resume", "checkpoints/latest.pt"),
        job_name="ddp-requeue",
        launch="srun",
        opal_prefix=True,
        requeue=True,
        requeue_signal="USR1@90",
        **{**_GPU_JOB, "time": "1-00:00:00"},
    ),
}
_GENERATED_DIRS = ("hostfiles", "slurm")
_COMMAND = "python -m hpcdist.jobs.examples"  # a maintainer's command for the project's checkout, not a user's


def render_examples() -> dict[str, str]:
    """Every example file's path (relative to the project) and text, from the bundled templates only."""
    jinja = make_environment(None, environ={})  # a site's $HPCDIST_TEMPLATE_DIR must not leak into the examples
    files = {path: render(jinja) for path, render in EXAMPLES.items()}
    for name in sorted(os.listdir(BUNDLED_DIR)):
        if name.endswith(".j2"):
            with open(os.path.join(BUNDLED_DIR, name), encoding="utf-8") as f:
                files[f"templates/{name}"] = f.read()
    return files


def _check_root(root: str) -> None:
    """Raise UsageError unless `root` is a directory (the project's)."""
    if not os.path.isdir(root):
        what = "does not exist" if not os.path.exists(root) else "is not a directory"
        raise UsageError(f"{root!r} {what}; give the project directory (the one holding hostfiles/ and slurm/)")


def check_examples(root: str) -> list[str]:
    """What differs between the files under `root` and what the templates render (empty when in sync)."""
    _check_root(root)
    expected = render_examples()
    problems = []
    for path, text in expected.items():
        try:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                if f.read() != text:
                    problems.append(f"{path} differs from what the templates render")
        except FileNotFoundError:
            problems.append(f"{path} is missing")
        except (OSError, UnicodeDecodeError) as exc:  # a directory in its place, unreadable, not text
            problems.append(f"{path} cannot be read ({getattr(exc, 'strerror', None) or exc})")
    for folder in (*_GENERATED_DIRS, "templates"):
        present = os.listdir(os.path.join(root, folder)) if os.path.isdir(os.path.join(root, folder)) else []
        for name in sorted(present):
            path = f"{folder}/{name}"
            if path not in expected and (folder != "templates" or name.endswith(".j2")):
                problems.append(
                    f"{path} is not an example hpcdist renders; add it to hpcdist/jobs/examples.py or remove it"
                )
    return problems


def write_examples(root: str) -> list[str]:
    """Rewrite every example file under `root` that differs; return the paths written."""
    _check_root(root)
    written = []
    for path, text in render_examples().items():
        target = os.path.join(root, path)
        try:
            with open(target, encoding="utf-8") as f:
                if f.read() == text:
                    continue
        except (OSError, UnicodeDecodeError):
            pass  # missing or unreadable: written below, which says what is wrong if it cannot be
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
            if path.endswith(".sbatch"):
                os.chmod(target, 0o755)
        except OSError as exc:
            raise UsageError(f"cannot write {target!r}: {exc.strerror or exc}; make it a writable file") from None
        written.append(path)
    return written


def examples(root: str, write: bool) -> int:
    """Report the example files' drift under `root` (status 1), or rewrite them (`write`)."""
    if write:
        for path in write_examples(root):
            print(f"wrote {path}")
        return 0
    problems = check_examples(root)
    for problem in problems:
        print(f"{_COMMAND}: {problem}", file=sys.stderr)
    if problems:
        print(f"{_COMMAND}: regenerate them with `{_COMMAND} --write`", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    """`python -m hpcdist.jobs.examples [--write] [ROOT]`: for the project's checkout (ROOT: default .)."""
    write = "--write" in argv
    rest = [word for word in argv if word != "--write"]
    if len(rest) > 1 or any(word.startswith("-") for word in rest):
        print(f"usage: {_COMMAND} [--write] [ROOT]", file=sys.stderr)
        return 2
    try:
        return examples(rest[0] if rest else ".", write)
    except UsageError as exc:
        print(f"{_COMMAND}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
