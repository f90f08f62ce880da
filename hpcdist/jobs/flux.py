"""Flux: FluxSpec -> a batch script of `# flux:` directives (pure), its options checked as flux-batch(1) reads them.

flux-core's flux-batch(1) and RFC 36 (submission directives, read with shell quoting) are the references. The script
runs on the first node of the job's Flux instance; its launch is `hpcdist mpirun --mpi flux`, which starts the ranks
with `flux run`, the same number on every node. Flux requeues no job: a failed launch is run again by the script's
own loop (`--max-restarts`).
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from .. import records
from ..errors import UsageError
from ..records import record
from ..values import MAX_COUNT
from .batch import BatchJob, Words, render_batch

if TYPE_CHECKING:
    import jinja2

__all__ = ["FluxSpec", "parse_duration", "render_flux"]

_FSD = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([smhd]?)")  # RFC 23; a bare number is minutes for -t
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SLOTS_FORM = "e.g. -N 2 -n 8 (four ranks on each of two nodes)"


@record(frozen=True)
class FluxSpec:
    """One Flux batch job: flux batch's options, in its own spelling, around the job (`BatchJob`)."""

    job: BatchJob
    nodes: int | None = None  # -N
    nslots: int | None = None  # -n: a rank in each, unless the job's -np
    cores_per_slot: int | None = None  # -c
    gpus_per_slot: int | None = None  # -g
    time_limit: str | None = None  # -t MINUTES|FSD
    queue: str | None = None  # -q
    bank: str | None = None  # -B
    job_name: str | None = None  # --job-name
    output: str | None = None  # --output (flux batch's default: flux-{{id}}.out)
    error: str | None = None  # --error
    exclusive: bool = False  # -x
    extra: tuple[tuple[str, str | None], ...] = ()  # flux batch's other long options: ('setattr', 'x=1')


def parse_duration(value: str) -> float:
    """Seconds in a -t value: minutes, or a Flux standard duration (RFC 23) such as 90s, 2h or 1.5d."""
    match = _FSD.fullmatch(value)
    if match is None:
        raise UsageError(
            f"-t {value!r} is not a Flux time limit; use minutes or a number with s, m, h or d, e.g. -t 30 or -t 2h"
        )
    return float(match[1]) * _UNITS[match[2] or "m"]


def _word(option: str, value: str) -> str:
    """`value` as one shell word of a `# flux:` line (RFC 36 reads them with shell quoting); a line break is refused."""
    if "\n" in value or "\r" in value or "\0" in value:
        raise UsageError(f"{option} {value!r} contains a line break, which a `# flux:` line cannot hold; remove it")
    return shlex.quote(value)


def _directives(spec: FluxSpec) -> list[str]:
    """The `# flux:` lines in a fixed order."""
    words: list[list[str]] = []
    counts = (("-N", spec.nodes), ("-n", spec.nslots), ("-c", spec.cores_per_slot), ("-g", spec.gpus_per_slot))
    for option, count in counts:
        if count is not None:
            if not 1 <= count <= MAX_COUNT:
                raise UsageError(f"{option} {count}: give 1 to {MAX_COUNT}, {_SLOTS_FORM}")
            words.append([option, str(count)])
    if spec.exclusive:
        words.append(["-x"])
    if spec.time_limit is not None:
        parse_duration(spec.time_limit)
        words.append(["-t", _word("-t", spec.time_limit)])
    for option, value in (("-q", spec.queue), ("-B", spec.bank)):
        if value is not None:
            words.append([option, _word(option, value)])
    for option, value in (("--job-name", spec.job_name), ("--output", spec.output), ("--error", spec.error)):
        if value is not None:
            words.append([f"{option}={_word(option, value)}"])
    for name, value in spec.extra:
        words.append([f"--{name}" if value is None else f"--{name}={_word('--' + name, value)}"])
    return ["# flux: " + " ".join(line) for line in words]


def render_flux(spec: FluxSpec, jinja: jinja2.Environment | None = None) -> str:
    """The Flux batch script for `spec`, rendered from flux.sh.j2 (pure: nothing is submitted).

    Raises:
        UsageError: no -N (flux run puts as many ranks on every node), no rank count (-n or -np), ranks that do not
            divide evenly among the nodes, a value flux batch would refuse, or --requeue (Flux requeues no job).
    """
    if spec.job.requeue:
        raise UsageError("Flux requeues no job; drop --requeue, and have --max-restarts N run the launch again")
    if spec.nodes is None:
        raise UsageError(f"-N NODES is missing: flux run must start as many ranks on every node; {_SLOTS_FORM}")
    ranks = spec.job.np if spec.job.np is not None else spec.nslots
    if ranks is None:
        raise UsageError(f"-n SLOTS is missing: it gives the job's ranks, one in each slot; {_SLOTS_FORM}")
    if ranks % spec.nodes:
        raise UsageError(
            f"{ranks} ranks do not divide evenly among -N {spec.nodes} nodes, which torch's LOCAL_WORLD_SIZE needs; "
            f"give a multiple of {spec.nodes}, {_SLOTS_FORM}"
        )
    words = Words(
        scheduler="flux",
        command="hpcdist flux",
        directives=tuple(_directives(spec)),
        allocation={},
        slots=spec.nslots,
        family="flux",
        per_node=ranks // spec.nodes,
    )
    return render_batch("flux.sh.j2", records.replace(spec.job, np=ranks), words, {}, jinja)
