"""IBM Spectrum LSF: BsubSpec -> a job script of #BSUB lines (pure), its options checked as bsub(1) reads them.

IBM's bsub(1) pages for LSF 10.1 and OLCF's Summit user guide are the references. A job's slots are `-n`'s (or
whole nodes, `-nnodes`, on LSF's CSM clusters); `hpcdist mpirun` reads the job's hosts from LSB_DJOB_HOSTFILE or
LSB_MCPU_HOSTS when it runs, or (`--launch jsrun`) has LSF's jsrun start the ranks. A job that exits with one of
its `-Q` values is requeued.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..records import record
from ..values import MAX_COUNT, parse_whole
from .batch import BatchJob, Words, check_word, render_batch

if TYPE_CHECKING:
    import jinja2

__all__ = ["ARRAY_VARS", "REQUEUE_STATUS", "BsubSpec", "parse_runlimit", "parse_slots", "render_lsf"]

ARRAY_VARS = ("LSB_JOBINDEX",)  # an array element's index (IBM, "Environment variables set for job execution")
REQUEUE_STATUS = 99  # the exit status --requeue lists in -Q, so that LSF requeues the job
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./~-]+")  # written as it is
# written in double quotes, as bsub reads them in #BSUB lines (-R "span[ptile=4]"): no quote, $, ` or # inside
_QUOTABLE = re.compile(r"[^\"'\\$`#\x00-\x1f\x7f]+")
_QUOTABLE_TEXT = "a value without quotes, backslashes, $, `, # or line breaks (bsub reads it in double quotes)"
_SLOTS = re.compile(r"([0-9]+)(?:,([0-9]+))?")
_RUNLIMIT = re.compile(r"(?:([0-9]+):)?([0-9]+)(?:/[A-Za-z0-9_.-]+)?")
_ARRAY = re.compile(r"[^\[\]]*\[([0-9][0-9,:-]*)\](?:%[0-9]+)?")
_SIGNALS = ("USR1", "USR2", "URG", "TERM", "INT", "HUP", "QUIT", "ALRM", "CONT")


@record(frozen=True)
class BsubSpec:
    """One LSF job: bsub's options, in its own spelling, around the job (`BatchJob`)."""

    job: BatchJob
    slots: str | None = None  # -n MIN[,MAX]
    nnodes: int | None = None  # -nnodes N (CSM clusters)
    requirements: tuple[str, ...] = ()  # each -R "..."
    gpu: str | None = None  # -gpu "num=4"
    runlimit: str | None = None  # -W [HH:]MM
    queue: str | None = None  # -q
    project: str | None = None  # -P
    name: str | None = None  # -J NAME or NAME[1-10]%4
    output: str | None = None  # -o
    error: str | None = None  # -e
    rerun: bool = False  # -r
    warning: str | None = None  # -wa SIGNAL (default with --requeue: USR1)
    warning_time: str | None = None  # -wt [HH:]MM (default with --requeue: 2)
    launch: str = "mpirun"  # or "jsrun": LSF's own launcher starts the ranks (CSM clusters: -nnodes, and -np)
    extra: tuple[tuple[str, ...], ...] = ()  # bsub's other options: ('-alloc_flags', 'gpumps smt1')


def parse_runlimit(value: str, option: str = "-W") -> int:
    """Minutes in an LSF run limit, [HH:]MM (bsub(1) -W; a minute count may exceed 59), with an optional /HOST."""
    match = _RUNLIMIT.fullmatch(value)
    if match is None:
        raise UsageError(
            f"{option} {value!r} is not an LSF time; use [HH:]MM (hours and minutes, not HH:MM:SS), e.g. {option} 90 "
            f"or {option} 4:00"
        )
    return (parse_whole(match[1] or "0") or 0) * 60 + (parse_whole(match[2]) or 0)


def parse_slots(value: str) -> int:
    """The fewest slots of a -n value, MIN[,MAX]."""
    match = _SLOTS.fullmatch(value)
    low = parse_whole(match[1]) if match else None
    high = parse_whole(match[2] or match[1]) if match else None
    if low is None or high is None or not 1 <= low <= high <= MAX_COUNT:
        raise UsageError(f"-n {value!r}: give the slots, MIN[,MAX] from 1 to {MAX_COUNT}, e.g. -n 8 or -n 4,16")
    return low


def _value(option: str, value: str) -> str:
    """A #BSUB value: as it is when plain, else in double quotes."""
    if _PLAIN.fullmatch(value):
        return value
    return '"' + check_word(option, value, _QUOTABLE, _QUOTABLE_TEXT) + '"'


def _signal(value: str) -> str:
    """A -wa signal name, without its SIG."""
    name = value.upper().removeprefix("SIG")
    if name not in _SIGNALS:
        raise UsageError(f"-wa {value!r}: give one of {', '.join(_SIGNALS)}, e.g. -wa USR1")
    return name


def _directives(spec: BsubSpec) -> list[tuple[str, ...]]:
    """The #BSUB options in a fixed order; --requeue adds -wa, -wt and -Q."""
    lines: list[tuple[str, ...]] = []
    if spec.nnodes is not None:
        lines.append(("-nnodes", str(spec.nnodes)))
    if spec.slots is not None:
        parse_slots(spec.slots)
        lines.append(("-n", spec.slots))
    lines += [("-R", value) for value in spec.requirements]
    if spec.gpu is not None:
        lines.append(("-gpu", spec.gpu))
    if spec.runlimit is not None:
        parse_runlimit(spec.runlimit)
        lines.append(("-W", spec.runlimit))
    if spec.name is not None and "[" in spec.name and not _ARRAY.fullmatch(spec.name):
        raise UsageError(f"-J {spec.name!r}: an array is NAME[INDICES][%LIMIT], e.g. -J 'train[1-10]%2'")
    for option, value in (("-q", spec.queue), ("-P", spec.project), ("-J", spec.name)):
        if value is not None:
            lines.append((option, value))
    for option, value in (("-o", spec.output), ("-e", spec.error)):
        if value is not None:
            lines.append((option, value))
    if spec.rerun:
        lines.append(("-r",))
    warning = spec.warning or ("USR1" if spec.job.requeue else None)
    lead = spec.warning_time or ("2" if spec.job.requeue else None)
    if warning is not None:
        lines.append(("-wa", _signal(warning)))
    if lead is not None:
        parse_runlimit(lead, "-wt")
        lines.append(("-wt", lead))
    if spec.job.requeue:
        if any(option == "-Q" for option, *_ in spec.extra):
            raise UsageError(f"-Q is one --requeue writes (-Q {REQUEUE_STATUS}); give --requeue or -Q, not both")
        lines.append(("-Q", str(REQUEUE_STATUS)))
    return lines + list(spec.extra)


def render_lsf(spec: BsubSpec, jinja: jinja2.Environment | None = None) -> str:
    """The LSF job script for `spec`, rendered from lsf.sh.j2 (pure: nothing is submitted).

    Raises:
        UsageError: neither -n nor -nnodes (the job's slots), a value bsub would refuse or misread, or a launch
            hpcdist mpirun would refuse in the job.
    """
    if spec.slots is None and spec.nnodes is None:
        raise UsageError("-n SLOTS is missing: it gives the job's ranks; e.g. -n 8 (or -nnodes N on a CSM cluster)")
    if spec.nnodes is not None and not 1 <= spec.nnodes <= MAX_COUNT:
        raise UsageError(f"-nnodes {spec.nnodes}: give 1 to {MAX_COUNT} nodes, e.g. -nnodes 2")
    if spec.launch not in ("mpirun", "jsrun"):
        raise UsageError(f"--launch {spec.launch!r}: use mpirun or jsrun")
    jsrun = spec.launch == "jsrun"
    if jsrun and (spec.nnodes is None or spec.job.np is None or spec.job.np % spec.nnodes):
        raise UsageError(
            "--launch jsrun starts as many ranks on every node of a CSM job: give -nnodes N and -np R, R a multiple of "
            "N, e.g. -nnodes 2 -np 12 (six on each)"
        )
    options = _directives(spec)
    lines = ["#BSUB " + " ".join([option, *(_value(option, value) for value in values)]) for option, *values in options]
    array = spec.name is not None and "[" in spec.name
    words = Words(
        scheduler="lsf",
        command="hpcdist lsf",
        directives=tuple(lines),
        allocation={"LSB_DJOB_HOSTFILE": "", "LSB_JOBID": ""},
        array_vars=ARRAY_VARS if array else (),
        array_dir='/"${LSB_JOBID}_${LSB_JOBINDEX}"' if array else "",
        slots=parse_slots(spec.slots) if spec.slots is not None else None,
        family="jsrun" if jsrun else None,
        per_node=spec.job.np // spec.nnodes if jsrun and spec.job.np and spec.nnodes else None,
    )
    warning = {option: values[0] for option, *values in options if values}.get("-wa", "")
    context = {"np": spec.job.np, "warning": warning, "jsrun": jsrun}
    return render_batch("lsf.sh.j2", spec.job, words, context, jinja)
