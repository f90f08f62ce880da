"""Build the multi-node torchrun command line of the seed notes, and its per-node launch script (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .. import records
from ..errors import UsageError
from ..launching.names import check_env_name
from ..program import check_program, is_python, parse_python_argv
from ..records import record
from ..values import ADDRESS, MAX_COUNT, parse_whole
from .render import render_template, shjoin, shquote

if TYPE_CHECKING:
    import jinja2

__all__ = [
    "TorchrunSpec",
    "build_torchrun_argv",
    "check_master",
    "program_words",
    "render_torchrun_script",
    "torchrun_line",
    "torchrun_options",
]

_NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")


@record(frozen=True)
class TorchrunSpec:
    """One torchrun launch; node_rank, master_addr and master_port are left out when None."""

    program: tuple[str, ...]
    nproc_per_node: str = "1"  # a count, or auto/cpu/gpu/xpu
    nnodes: int = 1
    node_rank: int | None = 0
    master_addr: str | None = None
    master_port: int | None = None
    torchrun: str = "torchrun"


def program_words(program: Sequence[str]) -> list[str]:
    """What follows torchrun's options: `python x.py` -> `x.py`, `python -m m` -> `-m m`, a binary -> `--no_python`."""
    if not program:
        raise UsageError("no program given; put it after '--', e.g. -- train.py --backend nccl")
    check_program(program, "torchrun")
    words = list(program)
    if is_python(words[0]):
        if len(words) < 2:
            raise UsageError(f"`{' '.join(words)}` names no script or module for torchrun to run")
        if words[1].startswith("-") and words[1] != "-m":
            raise UsageError(
                f"`{' '.join(words)}`: torchrun runs workers as `python SCRIPT` or `python -m MODULE`; "
                f"python option {words[1]} cannot be passed, set it in the environment instead"
            )
        target = parse_python_argv(words)
        return ["-m", target.what, *target.args] if target.kind == "module" else [target.what, *target.args]
    if words[0] == "-m" or words[0].endswith(".py"):
        return words
    return ["--no_python", *words]


def check_master(addr: str | None, port: int | None) -> None:
    """Raise UsageError for a rendezvous address or port torchrun cannot use."""
    if addr is not None and not ADDRESS.match(addr):
        raise UsageError(f"--master_addr {addr!r} is not a host name or IP address")
    if port is not None and not 1 <= port <= 65535:
        raise UsageError(f"--master_port must be between 1 and 65535, got {port}")


def _check(spec: TorchrunSpec) -> None:
    """Raise UsageError for a spec torchrun would reject or that cannot span the nodes."""
    if spec.nnodes < 1:
        raise UsageError(f"--nnodes must be at least 1, got {spec.nnodes}")
    if spec.nnodes > MAX_COUNT:
        raise UsageError(f"--nnodes must be at most {MAX_COUNT}, got {spec.nnodes}")
    count = parse_whole(spec.nproc_per_node) if spec.nproc_per_node.strip() == spec.nproc_per_node else None
    if spec.nproc_per_node not in _NPROC_WORDS and not (count is not None and 0 < count <= MAX_COUNT):
        raise UsageError(
            f"--nproc_per_node {spec.nproc_per_node!r}: give a count of at least 1 or one of {', '.join(_NPROC_WORDS)}"
        )
    if spec.node_rank is not None and not 0 <= spec.node_rank < spec.nnodes:
        raise UsageError(
            f"--node_rank {spec.node_rank} is out of range for --nnodes {spec.nnodes}; use 0 to {spec.nnodes - 1}"
        )
    check_master(spec.master_addr, spec.master_port)


def torchrun_options(spec: TorchrunSpec) -> list[str]:
    """torchrun's options for `spec` (`--nproc_per_node=N --nnodes=M [--node_rank=R] [--master_addr=A] ...`)."""
    _check(spec)
    options = [f"--nproc_per_node={spec.nproc_per_node}", f"--nnodes={spec.nnodes}"]
    if spec.node_rank is not None:
        options.append(f"--node_rank={spec.node_rank}")
    if spec.master_addr is not None:
        options.append(f"--master_addr={spec.master_addr}")
    if spec.master_port is not None:
        options.append(f"--master_port={spec.master_port}")
    return options


def _launch_options(spec: TorchrunSpec) -> list[str]:
    """torchrun's options, with --standalone (torchrun picks a free port when it starts) where no port is given.

    torchrun's fixed default port, 29500, collides when two jobs share a node. One node alone needs no agreed
    port; several nodes must all know node 0's port before they start, so they need --master_port.
    """
    if spec.nnodes > 1 and spec.master_addr is None:
        raise UsageError(
            f"--nnodes {spec.nnodes} needs --master_addr, the address of the node with --node_rank=0 "
            "that every node can reach"
        )
    _check(spec)
    if spec.master_port is not None:
        return torchrun_options(spec)
    if spec.master_addr is not None:
        where = f"--nnodes {spec.nnodes} --master_addr {spec.master_addr}"
        raise UsageError(
            f"{where} needs --master_port: every node must know node 0's port before it starts, and torchrun's "
            f"default, 29500, collides when two jobs share {spec.master_addr}; give one that is free there, e.g. "
            "--master_port 29517, or use `hpcdist sbatch --launch torchrun`, whose script picks one when the job starts"
        )
    return [*torchrun_options(records.replace(spec, node_rank=None)), "--standalone"]


def build_torchrun_argv(spec: TorchrunSpec) -> list[str]:
    """The torchrun argv; several nodes need --master_addr (torchrun's default, 127.0.0.1, reaches no other node)
    and --master_port; one node without them gets --standalone (a free port, chosen when torchrun starts)."""
    return [spec.torchrun, *_launch_options(spec), *program_words(spec.program)]


def torchrun_line(spec: TorchrunSpec, env: Mapping[str, str]) -> str:
    """The torchrun command line with `env` as leading `NAME=value` assignments (sorted), as bash runs it."""
    assignments = [f"{check_env_name(k)}={shquote(v)}" for k, v in sorted(env.items())]
    return " ".join([*assignments, shjoin(build_torchrun_argv(spec))]) + "\n"


def render_torchrun_script(spec: TorchrunSpec, env: Mapping[str, str], jinja: jinja2.Environment | None = None) -> str:
    """A per-node launch script: exports `env` (sorted), takes the node rank as $1 and execs torchrun."""
    per_node = records.replace(spec, node_rank=None)
    context = {
        "nnodes": spec.nnodes,
        "env": [(check_env_name(k), v) for k, v in sorted(env.items())],
        "torchrun": [spec.torchrun, *_launch_options(per_node)],
        "program": program_words(spec.program),
    }
    return render_template("torchrun.sh.j2", context, jinja)
