"""PBS Pro / OpenPBS: PbsSpec -> a job script of #PBS lines (pure), its options checked as qsub(1B) reads them.

OpenPBS's qsub(1B) and pbs_resources(7B) are the references. A job's ranks are its chunks' `mpiprocs`:
`-l select=2:ncpus=64:mpiprocs=4` is two hosts of 4 ranks, and PBS_NODEFILE names each chunk's host once per
mpiproc, which `hpcdist mpirun` reads when it runs in the job.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..records import record
from ..values import MAX_COUNT, parse_whole
from .batch import BatchJob, Words, check_choice, check_word, render_batch

if TYPE_CHECKING:
    import jinja2

__all__ = ["ARRAY_VARS", "PbsSpec", "parse_select", "parse_walltime", "render_pbs"]

# what a subjob's ranks may need: its index and the array's id (OpenPBS src/resmom/start_exec.c)
ARRAY_VARS = ("PBS_ARRAY_INDEX", "PBS_ARRAY_ID")
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./~$\[\]-]+")
_PLAIN_TEXT = "letters, digits and _@%+=:,./~$[]- only"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=%,@-]{0,235}")  # qsub(1B) -N: printable, no blank, up to 236
_DURATION = re.compile(r"(?:(?:([0-9]+):)?([0-9]+):)?([0-9]+)(?:\.[0-9]+)?")  # [[HH:]MM:]SS[.ms]
_SETTING = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=[^:+=]+")  # a chunk's resource: ncpus=64
_ARRAY = re.compile(r"([0-9]+)-([0-9]+)(?::([0-9]+))?(?:%([0-9]+))?")
_PLACE = ("free", "pack", "scatter", "vscatter", "excl", "shared", "exclhost")
_SELECT_FORM = "e.g. -l select=2:ncpus=64:mpiprocs=4:ngpus=4 (N:chunk, chunks joined by +)"


@record(frozen=True)
class PbsSpec:
    """One PBS job: qsub's options, in its own spelling, around the job (`BatchJob`)."""

    job: BatchJob
    resources: tuple[str, ...] = ()  # each -l value: select=..., walltime=..., place=..., NAME=VALUE[,...]
    name: str | None = None  # -N
    queue: str | None = None  # -q
    account: str | None = None  # -A
    output: str | None = None  # -o
    error: str | None = None  # -e
    join: str | None = None  # -j oe|eo|n
    array: str | None = None  # -J X-Y[:Z][%max]
    rerun: str | None = None  # -r y|n
    export_all: bool = False  # -V
    extra: tuple[tuple[str, ...], ...] = ()  # qsub's other options: ('-M', 'me@site')


def parse_walltime(value: str) -> int:
    """Seconds in a PBS duration (pbs_resources(7B): SECONDS or [[HH:]MM:]SS[.ms])."""
    match = _DURATION.fullmatch(value)
    if match is None:
        raise UsageError(
            f"-l walltime={value!r} is not a PBS duration; use [[HH:]MM:]SS or seconds, e.g. walltime=4:00:00"
        )
    hours, minutes, seconds = (parse_whole(part or "0") or 0 for part in match.groups())
    return (hours * 60 + minutes) * 60 + seconds


def parse_select(value: str) -> int:
    """The ranks of a select statement: each chunk's count times its mpiprocs (1 unless given), summed."""
    ranks = 0
    for chunk in value.split("+"):
        words = chunk.split(":")
        count = parse_whole(words.pop(0)) if words[0].isdigit() else 1
        settings = dict(word.partition("=")[::2] for word in words)
        if not all(_SETTING.fullmatch(word) for word in words) or not chunk:
            raise UsageError(f"-l select={value!r}: {chunk!r} is not [N:]NAME=VALUE[:NAME=VALUE...]; {_SELECT_FORM}")
        procs = parse_whole(settings.get("mpiprocs", "1"))
        if count is None or procs is None or count < 1:
            raise UsageError(
                f"-l select={value!r}: chunk {chunk!r} needs a count from 1 and a whole mpiprocs; {_SELECT_FORM}"
            )
        ranks += count * procs
    if not 1 <= ranks <= MAX_COUNT:
        raise UsageError(f"-l select={value!r} gives {ranks} ranks (mpiprocs); give 1 to {MAX_COUNT}, {_SELECT_FORM}")
    return ranks


def _place(value: str) -> None:
    """A place=... value: free|pack|scatter|vscatter, excl|shared|exclhost, group=RESOURCE, joined by ':'."""
    for word in value.split(":"):
        if word not in _PLACE and not re.fullmatch(r"group=[A-Za-z_][A-Za-z0-9_]*", word):
            raise UsageError(
                f"-l place={value!r}: {word!r} is not one of {', '.join(_PLACE)} or group=RESOURCE; "
                "e.g. -l place=scatter:excl"
            )


def _resources(values: tuple[str, ...]) -> int | None:
    """Check the -l values; the ranks their select statement gives (None without one)."""
    ranks: int | None = None
    for value in values:
        check_word("-l", value, _PLAIN, _PLAIN_TEXT)
        items = [value] if value.startswith("select=") else value.split(",")
        for item in items:
            name, equals, setting = item.partition("=")
            if not equals or not setting or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise UsageError(f"-l {value!r}: {item!r} is not NAME=VALUE; e.g. -l walltime=4:00:00")
            if name == "select":
                if ranks is not None:
                    raise UsageError("-l select=... is given twice; give one select statement, chunks joined by +")
                ranks = parse_select(setting)
            elif name == "walltime":
                parse_walltime(setting)
            elif name == "place":
                _place(setting)
    return ranks


def _array(value: str) -> str:
    """A -J value, X-Y[:Z][%max], with X below Y (a PBS array has at least two subjobs)."""
    match = _ARRAY.fullmatch(value)
    numbers = [parse_whole(part) or 0 for part in match.groups() if part is not None] if match else []
    if not numbers or numbers[0] >= numbers[1] or 0 in numbers[2:]:
        raise UsageError(f"-J {value!r}: give X-Y[:STEP][%MAX] with X below Y, e.g. -J 0-15 or -J 1-99:2%10")
    return value


def _directives(spec: PbsSpec) -> list[str]:
    """The #PBS lines in a fixed order; --requeue adds -r y."""
    lines: list[list[str]] = [["-l", value] for value in spec.resources]
    if spec.name is not None:
        lines.append(["-N", check_word("-N", spec.name, _NAME, "a letter or digit, then no blank (qsub(1B))")])
    for option, value in (("-q", spec.queue), ("-A", spec.account), ("-o", spec.output), ("-e", spec.error)):
        if value is not None:
            lines.append([option, check_word(option, value, _PLAIN, _PLAIN_TEXT)])
    if spec.join is not None:
        lines.append(["-j", check_choice("-j", spec.join, ("oe", "eo", "n"))])
    if spec.array is not None:
        lines.append(["-J", _array(spec.array)])
    rerun = "y" if spec.job.requeue and spec.rerun is None else spec.rerun
    if rerun is not None:
        lines.append(["-r", check_choice("-r", rerun, ("y", "n"))])
    if spec.job.requeue and rerun == "n":
        raise UsageError("--requeue needs a rerunnable job, but -r n says it is not; drop -r n or --requeue")
    if spec.export_all:
        lines.append(["-V"])
    for option, *values in spec.extra:
        lines.append([option, *(check_word(option, value, _PLAIN, _PLAIN_TEXT) for value in values)])
    return ["#PBS " + " ".join(words) for words in lines]


def render_pbs(spec: PbsSpec, jinja: jinja2.Environment | None = None) -> str:
    """The PBS job script for `spec`, rendered from pbs.sh.j2 (pure: nothing is submitted).

    Raises:
        UsageError: no -l select=... (the job's hosts and ranks), a value qsub would refuse or misread, or a launch
            hpcdist mpirun would refuse in the job.
    """
    ranks = _resources(spec.resources)
    if ranks is None:
        raise UsageError(
            "-l select=... is missing: it gives the job's hosts and ranks; e.g. -l select=2:ncpus=64:mpiprocs=4 "
            "(two hosts of 4 ranks each)"
        )
    words = Words(
        scheduler="pbs",
        command="hpcdist pbs",
        directives=tuple(_directives(spec)),
        allocation={"PBS_NODEFILE": "", "PBS_JOBID": ""},
        array_vars=ARRAY_VARS if spec.array is not None else (),
        array_dir='/"${PBS_JOBID}"' if spec.array is not None else "",
        slots=ranks,
    )
    return render_batch("pbs.sh.j2", spec.job, words, {"np": spec.job.np}, jinja)
