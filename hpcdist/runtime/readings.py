"""What one launcher's variables say about this process, read and checked: the readings `env.LaunchEnv` compares.

Each present source (`ranksource.Source`) becomes a Reading: its rank, world size, local pair and node, each with
the variable an error names; a half-set source, a value out of range and two sources that disagree are UsageErrors
that name the variables and how to fix them. Pure: the environment is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import schedulers
from ..errors import UsageError
from ..ranksource import Source
from ..records import record
from ..values import MAX_COUNT, parse_whole

__all__ = [
    "FIELDS",
    "HalfSet",
    "Reading",
    "check_agree",
    "check_below",
    "first_set",
    "missing",
    "read_present",
    "read_source",
    "require",
    "whole",
]


FIELDS = ("rank", "world_size", "local_rank", "local_world_size", "node_rank")


@record(frozen=True)
class Reading:
    """What one present source says: field -> (variable shown in errors, value)."""

    source: Source
    values: dict[str, tuple[str, int]]
    nodelist: tuple[str, ...] = ()
    step_id: str | None = None


def check_agree(first: Reading, other: Reading) -> None:
    """Raise if `other` carries a value that differs from `first`'s."""
    for field in FIELDS:
        if field in first.values and field in other.values:
            (a_var, a), (b_var, b) = first.values[field], other.values[field]
            if a != b:
                raise UsageError(
                    f"launcher variables disagree: {a_var}={a} but {b_var}={b}; unset the stale "
                    f"{first.source.launcher} variables ({', '.join(first.source.variables)}) "
                    f"or the {other.source.launcher} ones, or launch with one launcher"
                )


def read_source(source: Source, environ: Mapping[str, str]) -> Reading | None:
    """What `source` says about this process, or None when none of its variables is set."""
    present = [v for v in source.variables if v in environ]
    scheduler = schedulers.of_ranks(source)
    step_id = None
    if scheduler is not None:
        step_id = scheduler.task_step(environ)
        if step_id is None:  # no task launch (an sbatch script, a salloc shell): its variables describe the
            return None  # allocation, yet this is ONE process, so the scheduler is not a rank source here
    if not present:
        return None
    values = {"rank": (source.rank, require(environ, source.rank, present[0], source))}
    if source.world_size:
        size_var = first_set(environ, source.world_size) or source.world_size[0]
        values["world_size"] = (size_var, require(environ, size_var, present[0], source))
        if values["world_size"][1] < 1:
            raise UsageError(
                f"{size_var}={environ[size_var]!r} must be at least 1; check how {source.started_by} was invoked"
            )
        check_below(values["rank"], values["world_size"])
    if source.node_rank and source.node_rank in environ:
        values["node_rank"] = (source.node_rank, whole(environ, source.node_rank))
        if source.node_count and source.node_count in environ:
            check_below(values["node_rank"], (source.node_count, whole(environ, source.node_count)))
    local_set = first_set(environ, source.local_world_size)
    if scheduler is not None and not source.local_world_size:  # its tasks see no local size: the scheduler's rule
        values |= scheduler.node_place(environ, values["rank"][1], values["world_size"][1])
        check_below(values["local_rank"], values["local_world_size"])
    elif (source.local_rank and source.local_rank in environ) or local_set:
        local_size_var = local_set or source.local_world_size[0]
        local_var = source.local_rank or ""
        if scheduler is not None and source.node_rank:  # the local sizes of every node, by node id
            if local_size_var not in environ:
                raise missing(local_var, local_size_var, source)
            node_id = require(environ, source.node_rank, local_size_var, source)
            local_size = scheduler.local_size(local_size_var, environ[local_size_var], node_id)
            values["local_world_size"] = (f"{local_size_var}[{node_id}]", local_size)
        else:
            values["local_world_size"] = (local_size_var, require(environ, local_size_var, local_var, source))
        values["local_rank"] = (local_var, require(environ, local_var, local_size_var, source))
        check_below(values["local_rank"], values["local_world_size"])
        check_below(values["local_world_size"], values["world_size"], inclusive=True)
    if scheduler is None:
        return Reading(source, values)
    return Reading(source, values, scheduler.step_hosts(environ), step_id)


def read_present(source: Source, environ: Mapping[str, str]) -> Reading:
    """What the variables of `source` that are set say, each alone (a half-set source, only to cross-check)."""
    fields = (
        ("rank", source.rank),
        ("world_size", first_set(environ, source.world_size)),
        ("local_rank", source.local_rank),
        ("local_world_size", first_set(environ, source.local_world_size)),
        ("node_rank", source.node_rank),
    )
    return Reading(source, {f: (v, whole(environ, v)) for f, v in fields if v and v in environ})


def first_set(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first of `names` that is set in `environ`."""
    return next((n for n in names if n in environ), None)


def require(environ: Mapping[str, str], var: str, because: str, source: Source) -> int:
    """The integer in `var`, which must be set because `because` is."""
    if var not in environ:
        raise missing(because, var, source)
    return whole(environ, var)


class HalfSet(UsageError):
    """A launcher's variables are only partly set."""


def missing(because: str, var: str, source: Source) -> HalfSet:
    """The error for a half-present variable set: `because` is set but `var` is not."""
    return HalfSet(
        f"{because} is set but {var} is not; these variables come from {source.started_by}: "
        f"launch with it, or unset {because} if it is left over from another job"
    )


def whole(environ: Mapping[str, str], var: str) -> int:
    """The non-negative integer in `var`, at most MAX_COUNT (no launcher starts more ranks)."""
    text = environ[var]
    number = parse_whole(text)
    if number is None:
        raise UsageError(f"{var}={text!r} is not a non-negative integer; fix or unset {var}")
    if number > MAX_COUNT:
        raise UsageError(f"{var}={text!r} is more than the {MAX_COUNT} ranks any launcher starts; fix or unset {var}")
    return number


def check_below(small: tuple[str, int], big: tuple[str, int], inclusive: bool = False) -> None:
    """Raise unless small < big (or <= when `inclusive`)."""
    (s_var, s), (b_var, b) = small, big
    if s > b or (s == b and not inclusive):
        raise UsageError(
            f"{s_var}={s} is out of range for {b_var}={b}; "
            f"{s_var} must be {'at most' if inclusive else 'below'} {b_var}"
        )
