"""Numbers and addresses read from user text, checked the same way by every wing (a leaf: imports errors only).

Whole numbers are ASCII digits only (int() would also take '١٢', '1_000' and '+5') and never more digits than
fit a count, so a huge input is refused cheaply instead of hitting Python's int-to-str limit.
"""

from __future__ import annotations

import math
import re

from .errors import UsageError

__all__ = [
    "ADDRESS",
    "ARRAY_TASK",
    "BACKENDS",
    "MAX_COUNT",
    "MAX_SECONDS",
    "ON_FAILURE",
    "RANK",
    "STORES",
    "check_count",
    "check_seconds",
    "parse_ranks",
    "parse_seconds",
    "parse_whole",
    "slurm_counts",
]

BACKENDS = ("auto", "gloo", "nccl", "mpi")  # what --backend and hpcdist.init(backend=) take
ON_FAILURE = ("end", "shrink")  # what --on-failure takes: a lost rank ends the job, or the survivors carry on (ULFM)
STORES = ("auto", "tcp", "mpi")  # what hpcdist.init(store=) and $HPCDIST_STORE take: where torch's store lives
MAX_COUNT = 2**31 - 1  # ranks, slots, nodes, tasks: MPI and Slurm count them in a C int
MAX_SECONDS = 30 * 86400  # a timeout: a wait longer than 30 days is a hang, and far larger ones overflow timedelta
_HUGE = 10**20  # stands for any whole number of more than 19 digits: above every bound hpcdist checks
_DIGITS = re.compile(r"[0-9]+\Z")
_SECONDS = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\Z")
# a host name, IPv4 or IPv6 address (brackets, zone after %) as torch and the launchers take it: no blanks
ADDRESS = re.compile(r"[A-Za-z0-9_.:%\[\]-]{1,255}\Z")
_TASKS = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?\Z")  # one item of Slurm's `2(x3),1`


def parse_whole(text: str) -> int | None:
    """The whole number `text` spells in ASCII digits (blanks around it allowed), else None.

    More than 19 digits gives a number above every bound hpcdist checks (callers bound what they take).
    """
    digits = text.strip()
    if not _DIGITS.match(digits):
        return None
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 19 else _HUGE


def parse_seconds(text: str) -> float | None:
    """A number of seconds in ASCII digits with an optional fraction (`300`, `2.5`) as float, else None.

    No sign, blank, exponent, `_`, inf or nan (all of which float() takes); range checks are check_seconds'.
    """
    return float(text) if len(text) <= 40 and _SECONDS.match(text) else None


def check_seconds(value: object, what: str, how: str) -> float:
    """`value` as float if it is a finite number of seconds above 0 and at most MAX_SECONDS, else UsageError.

    `what` names the setting (`the timeout`, or a variable and its value); `how` is an example (`e.g. --timeout 300`).
    """
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    if not (math.isfinite(number) and 0 < number <= MAX_SECONDS):
        raise UsageError(
            f"{what} must be a positive number of seconds, got {value!r}; give a finite number up to "
            f"{MAX_SECONDS} (30 days), {how}"
        )
    return number


def check_count(value: object, what: str, low: int, how: str, high: int = MAX_COUNT) -> int:
    """`value` if it is a whole number (an int, not a bool) from `low` to `high`, else UsageError.

    `what` names the setting (`-np`, `hpcdist.launch's np`); `how` is an example (`e.g. -np 4`).
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise UsageError(f"{what} must be a whole number, got {value!r}; {how}")
    if value < low:
        raise UsageError(f"{what} must be at least {low}, got {value}; {how}")
    if value > high:
        raise UsageError(f"{what} must be at most {high}, got {value}; {how}")
    return value


def slurm_counts(text: str, what: str, limit: int) -> list[tuple[int, int]]:
    """Slurm's compressed per-node counts (`2(x3),1` -> [(2, 3), (1, 1)]): (count, repeat) pairs.

    Never expanded here, so `2(x99999999999)` costs nothing; more than `limit` nodes in all is a UsageError,
    as is a malformed list. `what` names the variable in the message.
    """
    runs: list[tuple[int, int]] = []
    nodes = 0
    for part in text.split(","):
        match = _TASKS.match(part.strip())
        count = parse_whole(match[1]) if match else None
        repeat = parse_whole(match[2] or "1") if match else None
        if count is None or repeat is None or repeat < 1:
            raise UsageError(
                f"{what}={text!r} is not a Slurm tasks-per-node list like '2(x3),1'; "
                "let Slurm set it instead of setting it by hand"
            )
        nodes += repeat
        if nodes > limit:
            raise UsageError(
                f"{what}={text!r} lists more than {limit} nodes; let Slurm set it instead of setting it by hand"
            )
        runs.append((count, repeat))
    return runs


class _Placeholder:
    """An argument the ranks replace (RANK, ARRAY_TASK): one instance each, pickled by name so every rank loads it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"hpcdist.{self.name}"

    def __reduce__(self) -> str:
        return self.name


RANK = _Placeholder("RANK")  # an argument each rank of hpcdist.launch/submit receives as its own rank (mp.spawn's)
ARRAY_TASK = _Placeholder("ARRAY_TASK")  # an argument of hpcdist.submit(..., array=…) each task gets as its task id


def parse_ranks(text: str, np: int | None = None, what: str = "--ranks") -> frozenset[int]:
    """The ranks of a list such as `0,3` or `0-3,7`; each must be below `np` when it is known.

    Raises:
        UsageError: not such a list, a range that runs backwards, or a rank the job does not have.
    """
    ranks: set[int] = set()
    for item in text.split(","):
        match = re.fullmatch(r"\s*([0-9]{1,10})\s*(?:-\s*([0-9]{1,10})\s*)?", item)
        if match is None:
            raise UsageError(f"{what} {text!r}: {item.strip()!r} is not a rank or a range; use e.g. 0,3 or 0-3,7")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise UsageError(f"{what} {text!r}: the range {item.strip()!r} runs backwards; write it as {last}-{first}")
        bound = np if np is not None else MAX_COUNT
        if last >= bound:
            raise UsageError(
                f"{what} {text!r}: rank {last} does not exist in a job of {bound} ranks (ranks count from 0); "
                f"give ranks from 0 to {bound - 1}"
            )
        ranks.update(range(first, last + 1))
    return frozenset(ranks)
