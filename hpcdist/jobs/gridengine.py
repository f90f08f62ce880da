"""Grid Engine: QsubSpec -> a job script of `#$` lines (pure), its options checked as qsub(1) reads them.

Son of Grid Engine 8.1.9's submit(1), sge_types(1) and sge_conf(5) are the references: a parallel job's slots come
from `-pe NAME SLOTS`, its time limit from `-l h_rt=TIME`, and a job script that exits with status 99 is
rescheduled. The script's launch is `hpcdist mpirun`, which reads the job's hosts from PE_HOSTFILE when it runs.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..records import field, record
from ..values import MAX_COUNT, parse_whole
from .batch import BatchJob, Words, check_choice, check_word, render_batch

if TYPE_CHECKING:
    import jinja2

__all__ = ["ARRAY_VARS", "QsubSpec", "parse_slots", "parse_time", "render_gridengine"]

# what an array task's ranks may need: its index and the array's range (submit(1), ENVIRONMENTAL VARIABLES)
ARRAY_VARS = ("SGE_TASK_ID", "SGE_TASK_FIRST", "SGE_TASK_LAST", "SGE_TASK_STEPSIZE")
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./~$-]+")  # GE's path aliases ($JOB_ID, $TASK_ID, $HOME) included
_PLAIN_TEXT = "letters, digits and _@%+=:,./~$- only"
_NAME = re.compile(r"[A-Za-z0-9_.+=%,-]+")  # sge_types(1) name: no blank, /, :, @, \, * or ?
_SLOTS = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_TIME = re.compile(r"([0-9]+)|([0-9]*):([0-9]*):([0-9]*)")
_TIMES = ("h_rt", "s_rt")  # the wall-clock limits (queue_conf(5)), checked as times
_ARRAY = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?")
_YES_NO = ("y", "n", "yes", "no")
_RESOURCE = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)=(.+)")


@record(frozen=True)
class QsubSpec:
    """One Grid Engine job: qsub's options, in its own spelling, around the job (`BatchJob`)."""

    job: BatchJob
    pe: tuple[str, str] | None = None  # -pe NAME SLOTS (SLOTS: N or N-M)
    resources: tuple[str, ...] = ()  # each -l NAME=VALUE[,NAME=VALUE...]
    name: str | None = None  # -N
    queue: str | None = None  # -q
    project: str | None = None  # -P
    account: str | None = None  # -A
    output: str | None = None  # -o
    error: str | None = None  # -e
    join: str | None = None  # -j y|n
    array: str | None = None  # -t N[-M[:S]]
    rerun: str | None = None  # -r y|n
    cwd: bool = False  # -cwd
    export_all: bool = False  # -V
    notify: bool = False  # -notify
    extra: tuple[tuple[str, ...], ...] = field(default=())  # qsub's other options: ('-M', 'me@site')


def parse_time(value: str, option: str = "-l h_rt") -> int:
    """Seconds in a Grid Engine time (sge_types(1) time_specifier: SECONDS or HH:MM:SS, where an empty field is 0)."""
    match = _TIME.fullmatch(value)
    if match is None:
        raise UsageError(
            f"{option}={value!r} is not a Grid Engine time; use HH:MM:SS (a field may be empty: 1::30) or seconds, "
            "e.g. h_rt=4:00:00 or h_rt=3600"
        )
    if match[1] is not None:
        return parse_whole(match[1]) or 0
    hours, minutes, seconds = (parse_whole(part or "0") or 0 for part in match.group(2, 3, 4))
    return (hours * 60 + minutes) * 60 + seconds


def parse_slots(value: str) -> tuple[int, int]:
    """The fewest and most slots of a -pe SLOTS value, `8` or `4-16`."""
    match = _SLOTS.fullmatch(value)
    low = parse_whole(match[1]) if match else None
    high = parse_whole(match[2] or match[1]) if match else None
    if low is None or high is None or not 1 <= low <= high <= MAX_COUNT:
        raise UsageError(
            f"-pe SLOTS {value!r}: give a number of slots from 1 to {MAX_COUNT}, or a range LOW-HIGH, e.g. "
            "-pe mpi 8 or -pe mpi 4-16"
        )
    return low, high


def _resources(values: tuple[str, ...]) -> list[str]:
    """The -l values, each NAME=VALUE[,...], their time limits checked."""
    for value in values:
        for item in value.split(","):
            match = _RESOURCE.fullmatch(item)
            if match is None:
                raise UsageError(f"-l {value!r}: {item!r} is not NAME=VALUE; e.g. -l h_rt=4:00:00 or -l h_vmem=4G")
            if match[1] in _TIMES:
                parse_time(match[2], f"-l {match[1]}")
            check_word("-l", value, _PLAIN, _PLAIN_TEXT)
    return list(values)


def _array(value: str) -> str:
    """A -t value, N[-M[:S]], each from 1."""
    match = _ARRAY.fullmatch(value)
    numbers = [parse_whole(part) or 0 for part in match.groups() if part is not None] if match else [0]
    if 0 in numbers or (len(numbers) > 1 and numbers[1] < numbers[0]):
        raise UsageError(f"-t {value!r}: give task ids FIRST[-LAST[:STEP]], each from 1, e.g. -t 1-10 or -t 2-20:2")
    return value


def _directives(spec: QsubSpec) -> list[str]:
    """The `#$` lines in a fixed order; --requeue adds -notify."""
    lines: list[list[str]] = []
    if spec.pe is not None:
        check_word("-pe NAME", spec.pe[0], _NAME, "letters, digits and _.+=%,- only")
        parse_slots(spec.pe[1])
        lines.append(["-pe", *spec.pe])
    lines += [["-l", value] for value in _resources(spec.resources)]
    if spec.name is not None:
        lines.append(["-N", check_word("-N", spec.name, _NAME, "letters, digits and _.+=%,- only (sge_types(1))")])
    for option, value in (("-q", spec.queue), ("-P", spec.project), ("-A", spec.account)):
        if value is not None:
            lines.append([option, check_word(option, value, _PLAIN, _PLAIN_TEXT)])
    for option, value in (("-o", spec.output), ("-e", spec.error)):
        if value is not None:
            lines.append([option, check_word(option, value, _PLAIN, _PLAIN_TEXT)])
    if spec.join is not None:
        lines.append(["-j", check_choice("-j", spec.join, _YES_NO)])
    if spec.array is not None:
        lines.append(["-t", _array(spec.array)])
    if spec.rerun is not None:
        lines.append(["-r", check_choice("-r", spec.rerun, _YES_NO)])
    lines += [[flag] for flag, on in (("-cwd", spec.cwd), ("-V", spec.export_all)) if on]
    if spec.notify or spec.job.requeue:
        lines.append(["-notify"])
    for option, *values in spec.extra:
        lines.append([option, *(check_word(option, value, _PLAIN, _PLAIN_TEXT) for value in values)])
    return ["#$ " + " ".join(words) for words in lines]


def render_gridengine(spec: QsubSpec, jinja: jinja2.Environment | None = None) -> str:
    """The Grid Engine job script for `spec`, rendered from gridengine.sh.j2 (pure: nothing is submitted).

    Raises:
        UsageError: no -pe for more than one rank (Grid Engine gives several slots only to a parallel job), a value
            qsub would refuse or misread, or a launch hpcdist mpirun would refuse in the job.
    """
    if spec.pe is None and spec.job.np != 1:
        raise UsageError(
            "-pe NAME SLOTS is missing: Grid Engine gives a job several slots only in a parallel environment; "
            "e.g. -pe mpi 8 (`qconf -spl` lists the environments), or -np 1 for a job of one rank"
        )
    low = parse_slots(spec.pe[1])[0] if spec.pe is not None else 1  # a serial job: its one slot
    directives = _directives(spec)
    words = Words(
        scheduler="gridengine",
        command="hpcdist gridengine",
        directives=tuple(directives),
        allocation={"PE_HOSTFILE": "", "JOB_ID": "", "SGE_TASK_ID": "undefined"},
        array_vars=ARRAY_VARS if spec.array is not None else (),
        array_dir='/"${JOB_ID}.${SGE_TASK_ID}"' if spec.array is not None else "",
        slots=low,
    )
    return render_batch("gridengine.sh.j2", spec.job, words, {"np": spec.job.np, "pe": spec.pe is not None}, jinja)
