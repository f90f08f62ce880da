"""Slurm job arrays: `--array SPEC` checked by Slurm's own rules (pure), and the variables a task's ranks need."""

from __future__ import annotations

import re

from ..errors import UsageError
from ..values import parse_whole

__all__ = ["ARRAY_VARS", "MAX_ARRAY_SIZE", "array_indices", "check_array", "check_task_file"]

MAX_ARRAY_SIZE = 1001  # Slurm's MaxArraySize default: task ids run from 0 to MaxArraySize - 1
# what Slurm sets in an array task's batch script and steps; mpirun passes them on to every rank with -x
ARRAY_VARS = ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT")
_ITEM = re.compile(r"(?P<first>[0-9]+)(?:-(?P<last>[0-9]+)(?::(?P<step>[0-9]+))?)?\Z")
_PATTERN = re.compile(r"%(%|[0-9]*[A-Za-z])")  # sbatch's filename patterns: %j, %4a, … and %% for a %
_FORMS = "use IDS[%LIMIT] with IDS like 0-15, 1,3,5 or 1-9:2, e.g. 0-31%4"


def array_indices(spec: str, what: str = "--array") -> tuple[list[int], int | None]:
    """(the task ids, in order, each once; the %-limit or None) of a Slurm --array value, else UsageError.

    Forms as sbatch reads them: comma-separated items N, N-M or N-M:STEP, then optionally %LIMIT, the most
    tasks that run at once; ids from 0 to MAX_ARRAY_SIZE - 1 (Slurm's default MaxArraySize is 1001).
    """
    ids, percent, limit_text = spec.partition("%")
    limit = None
    if percent:
        limit = parse_whole(limit_text) if limit_text == limit_text.strip() else None
        if limit is None or limit < 1:
            raise UsageError(
                f"{what} {spec!r}: the limit after % must be a whole number of at least 1 (tasks running at "
                f"once), got {limit_text!r}; {_FORMS}"
            )
    if not ids.strip():
        raise UsageError(f"{what} {spec!r} names no task ids; {_FORMS}")
    found: list[int] = []
    for item in ids.split(","):
        match = _ITEM.match(item)
        if match is None:
            raise UsageError(f"{what} {spec!r}: {item!r} is not N, N-M or N-M:STEP; {_FORMS}")
        # digits only (_ITEM), so parse_whole gives a number; one of more than 19 digits is above every bound
        first = parse_whole(match["first"]) or 0
        last = first if match["last"] is None else parse_whole(match["last"]) or 0
        step = 1 if match["step"] is None else parse_whole(match["step"]) or 0
        if last < first:
            raise UsageError(f"{what} {spec!r}: the range {item!r} runs backwards; write it as {last}-{first}")
        if step < 1:
            raise UsageError(f"{what} {spec!r}: the step in {item!r} must be at least 1")
        if last >= MAX_ARRAY_SIZE:
            raise UsageError(
                f"{what} {spec!r}: task id {last} is above {MAX_ARRAY_SIZE - 1}, the largest Slurm's default "
                f"MaxArraySize ({MAX_ARRAY_SIZE}) allows; use smaller ids (a site may raise MaxArraySize)"
            )
        found += range(first, last + 1, step)
    return sorted(set(found)), limit


def check_array(spec: str, what: str = "--array") -> str:
    """The --array value as written, once array_indices accepted it (`what` names it in an error)."""
    array_indices(spec, what)
    return spec


def check_task_file(option: str, value: str, array: str = "--array") -> None:
    """UsageError when an array's --output/--error names one file for every task (no %a task id, no %j job id)."""
    if not any(m[1][-1] in "aj" for m in _PATTERN.finditer(value)):
        raise UsageError(
            f"{option} {value!r} with {array}: every task would write this one file; put the task id in it, "
            "e.g. job-%A_%a.out (%A: the array's id, %a: the task's), or leave it out (slurm-%A_%a.out)"
        )
