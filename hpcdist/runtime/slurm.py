"""What Slurm's srun tells a task about its step: the step id, this node's task count, the nodes (pure)."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import UsageError
from ..values import MAX_COUNT, parse_whole, slurm_counts

__all__ = ["local_size", "nodelist", "step_id"]

_MAX_NORMAL_STEP_ID = 0xFFFFFFF0  # above: Slurm's batch/extern/interactive/pending pseudo-steps


def step_id(environ: Mapping[str, str]) -> str | None:
    """The srun step id, or None outside a real step (no id, or batch/extern/interactive)."""
    step = environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID"))
    number = None if step is None else parse_whole(step)
    if step is None or number is None or step != step.strip() or number > _MAX_NORMAL_STEP_ID:
        return None
    return step


def local_size(var: str, text: str, node_id: int) -> int:
    """Entry `node_id` of Slurm's compressed tasks-per-node list `text` (`2(x3),1`), read from `var`.

    The list is walked, never expanded, so `2(x99999999999)` costs nothing.
    """
    first = 0
    for count, repeat in slurm_counts(text, var, MAX_COUNT):
        if node_id < first + repeat:
            if count > MAX_COUNT:
                raise UsageError(f"{var}={text!r} gives a node more than {MAX_COUNT} tasks; let srun set it")
            return count
        first += repeat
    raise UsageError(
        f"SLURM_NODEID={node_id} is out of range for {var}={text} "
        f"({first} nodes); let srun set both instead of setting them by hand"
    )


def nodelist(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The step's expanded hostnames, empty when Slurm gave no nodelist."""
    import hostlist

    var = next((n for n in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST") if n in environ), None)
    if var is None:
        return ()
    try:
        return tuple(hostlist.expand_hostlist(environ[var]))
    except hostlist.BadHostlist as exc:
        raise UsageError(
            f"{var}={environ[var]!r} is not a valid Slurm nodelist ({exc}); "
            "let srun set it instead of setting it by hand"
        ) from None
