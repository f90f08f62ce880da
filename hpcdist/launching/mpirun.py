"""Build the launch command line of a job in its MPI's dialect (pure: no processes are started).

`build_mpirun_argv` checks the spec and asks the family it names (`hpcdist.families`) for its command line: Open
MPI's `mpirun`, MPICH's Hydra `mpiexec`, Intel MPI's or MVAPICH's Hydra. Also here: the variables a launch forwards
to its ranks, and whether a job spans hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import families, schedulers
from ..contract import PREFIX
from ..errors import UsageError
from ..families.base import MpirunSpec
from ..hosts import HostSlots
from ..values import MAX_COUNT
from .names import ENV_NAME

__all__ = ["SHIM", "build_mpirun_argv", "env_forwards", "spans_hosts"]

_FORWARD_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", PREFIX)
_FORWARD_NAMES = frozenset(
    {"OMP_NUM_THREADS", "PYTHONPATH", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "THP_MEM_ALLOC_ENABLE"}
)
SHIM = ("-m", "hpcdist.worker", "--")  # after a python: what each rank runs before the program (scripts too)


def build_mpirun_argv(spec: MpirunSpec) -> list[str]:
    """Return the launch argv for `spec` in its family's dialect.

    Raises:
        UsageError: a spec the launcher would reject or misread, or a family hpcdist has no launcher for.
    """
    _validate(spec)
    if spec.family not in families.names():
        raise UsageError(f"no launcher for MPI {spec.family!r}; use one of {', '.join(families.names())}")
    return families.lookup(spec.family).command(spec)


def spans_hosts(hosts: Sequence[HostSlots], environ: Mapping[str, str]) -> bool:
    """Whether the job may run on more than one host: several host names, or an allocation of several."""
    if hosts:
        return len({h.host for h in hosts}) > 1
    return schedulers.spans_hosts(environ)


def env_forwards(environ: Mapping[str, str], user: Sequence[str]) -> tuple[tuple[str, str | None], ...]:
    """Pick the `-x` variables: known job variables set in `environ` (sorted), then `user` items."""
    auto = {
        name: None
        for name in sorted(environ)
        if ENV_NAME.match(name) and (name.startswith(_FORWARD_PREFIXES) or name in _FORWARD_NAMES)
    }
    chosen: dict[str, str | None] = {}
    for item in user:
        name, eq, value = item.partition("=")
        if not ENV_NAME.match(name):
            raise UsageError(
                f"-x {item!r}: {name!r} is not a valid variable name; use letters, digits and "
                f"'_' not starting with a digit, as in -x NAME or -x NAME=VALUE"
            )
        auto.pop(name, None)
        chosen[name] = value if eq else None
    return tuple(auto.items()) + tuple(chosen.items())


def _validate(spec: MpirunSpec) -> None:
    """Raise UsageError for a spec mpirun would reject or misread."""
    if spec.np is not None and spec.np < 1:
        raise UsageError(f"-np must be at least 1, got {spec.np}")
    if spec.np is not None and spec.np > MAX_COUNT:
        raise UsageError(f"-np must be at most {MAX_COUNT} (MPI counts ranks in an int), got {spec.np}")
    if not spec.program:
        raise UsageError("no program to run; put it after '--', e.g. -np 2 -- python train.py")
    for name, _ in spec.env:
        if not ENV_NAME.match(name):
            raise UsageError(
                f"-x {name!r}: not a valid variable name; use letters, digits and '_' not starting with a digit"
            )
    if spec.launch_agent is not None and not spec.launch_agent.strip():
        raise UsageError("--launch-agent needs a command that reaches another host, e.g. --launch-agent ssh")
    if not spec.bind_to.strip():
        raise UsageError("--bind-to needs a value such as none, core or socket")
    if not spec.map_by.strip():
        raise UsageError("--map-by needs a value such as slot, node or ppr:1:socket")
