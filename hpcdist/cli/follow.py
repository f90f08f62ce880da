"""`hpcdist status` and `hpcdist logs`: a submitted job's state and output, from scontrol and its files."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..errors import UsageError
from .types import Seconds, rank

if TYPE_CHECKING:  # the jobs wing is imported when a command runs, not when the CLI parses
    from ..jobs.slurmjob import JobInfo
    from ..jobs.torchrunlogs import RankFiles, TorchrunLayout

__all__ = ["COMMANDS", "add_parsers"]

_FOLLOW_SECONDS = 86400.0  # --follow's default limit: a day
_STATE_EVERY = 2.0  # --follow asks scontrol for the job's state at most this often
# a rank's line: the shim's tag `[host:3] text` (--tag, mpirun mode), torchrun's `[3]:text` (--tag, torchrun mode)
# or srun --label's `  3: text`
_RANK_LINE = re.compile(r"(?:\[[^\s:\[\]]+:(?P<tag>[0-9]+)\] |\[(?P<torchrun>[0-9]+)\]:|\s*(?P<label>[0-9]+): )")
_COLUMNS = ("job_id", "name", "state", "exit_code", "run_time", "nodes", "reason")


def add_parsers(sub: Any) -> None:
    """Add `status` and `logs` to the CLI's subparsers."""
    st = sub.add_parser(
        "status",
        help="a Slurm job's state, exit code, nodes and output files (from scontrol; no slurmdbd needed)",
        description="Slurm forgets a job MinJobAge (300 s by default) after it ends; without slurmdbd, "
        "status works until then. An array job shows one line per task.",
    )
    st.add_argument("job_id", metavar="JOBID", help="the id sbatch printed, or ARRAYID_TASK for one array task")
    st.add_argument("--json", action="store_true", help="print JSON (a list: one object per job or array task)")
    st.add_argument(
        "--wait",
        action="store_true",
        help="wait until the job (every task) has ended, with a progress line on a terminal; exit 1 unless all "
        "COMPLETED with exit code 0",
    )
    st.add_argument(
        "--timeout",
        type=Seconds(),
        default=_FOLLOW_SECONDS,
        metavar="SECONDS",
        help=f"with --wait: give up after this long (default: {_FOLLOW_SECONDS:g})",
    )
    lg = sub.add_parser(
        "logs",
        help="print a Slurm job's output (or one rank's), and with --follow keep printing until the job ends",
        description="The job's StdOut and StdErr files as scontrol names them; --rank reads the rank's own file "
        "when the job was generated with --log-dir (--launch torchrun: the latest run's stdout.log and stderr.log "
        "of the rank), else picks the rank's lines when it was generated with --tag.",
    )
    lg.add_argument("job_id", metavar="JOBID", help="the id sbatch printed, or ARRAYID_TASK for one array task")
    lg.add_argument("--rank", type=rank, metavar="N", help="only rank N's output")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the job ends")
    lg.add_argument(
        "--timeout",
        type=Seconds(),
        default=_FOLLOW_SECONDS,
        metavar="SECONDS",
        help=f"with --follow: give up after this long (default: {_FOLLOW_SECONDS:g})",
    )


def _status(args: argparse.Namespace) -> int:
    """`hpcdist status JOBID [--json]`."""
    from ..jobs.slurmjob import show_job, wait_job

    if args.wait:
        infos = wait_job(args.job_id, args.timeout, sys.stderr if sys.stderr.isatty() else None)
    else:
        infos = show_job(args.job_id)
    rows = [info.summary() for info in infos]
    failed = args.wait and any((row["state"], row["exit_code"]) != ("COMPLETED", "0:0") for row in rows)
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 1 if failed else 0
    table = [[c.upper().replace("_", " ") for c in _COLUMNS]] + [[row[c] for c in _COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    for row in rows:
        print(f"{row['job_id']}: stdout {row['stdout'] or '-'}, stderr {row['stderr'] or '-'}")
    return 1 if failed else 0


def _logs(args: argparse.Namespace) -> int:
    """`hpcdist logs JOBID [--rank N] [--follow]`."""
    from ..jobs.slurmjob import batch_script, rank_log, show_job
    from ..jobs.torchrunlogs import check_torchrun_tags, read_layout

    infos = show_job(args.job_id)
    if len(infos) > 1:
        tasks = ", ".join(info.job_id for info in infos[:5]) + (", …" if len(infos) > 5 else "")
        raise UsageError(f"job {args.job_id} is an array of {len(infos)} records ({tasks}); name one task, e.g. "
                         f"hpcdist logs {infos[0].job_id}")  # fmt: skip
    info = infos[0]
    if info.unsplit:
        raise UsageError(f"the tasks of array job {info.job_id} have not started; they have no output yet")
    keep: Callable[[str], str | None] = lambda line: line  # noqa: E731 - every line
    streams: list[tuple[Path, IO[str]]] = []
    script = batch_script(info.job_id) if args.rank is not None else ""
    layout = read_layout(script)
    if layout is not None:
        return _torchrun_logs(args, info, layout)
    own = rank_log(script, info, args.rank) if args.rank is not None else None
    if own is not None:
        streams = [(own, sys.stdout)]
    else:
        for key, sink in (("StdOut", sys.stdout), ("StdErr", sys.stderr)):
            path = info.path(key)
            if path is not None and path not in [p for p, _ in streams]:
                streams.append((path, sink))
        if args.rank is not None:
            check_torchrun_tags(script, info.job_id)
            keep = _rank_lines(args.rank)
    if not streams:
        raise UsageError(f"job {info.job_id} has no output file scontrol knows of (StdOut and StdErr are unset)")
    if not args.follow:
        missing = [str(p) for p, _ in streams if not p.exists()]
        if missing and info.state != "PENDING":
            raise UsageError(f"job {info.job_id} ({info.state}): {missing[0]} does not exist here; read it on the "
                             "node that ran the job, or put the output on a shared file system")  # fmt: skip
        _copy(streams, {}, keep, final=True)
        return 0
    _follow(info.job_id, lambda: streams, keep, args.timeout)
    return 0


def _torchrun_logs(args: argparse.Namespace, info: JobInfo, layout: TorchrunLayout) -> int:
    """`hpcdist logs JOBID --rank N` of a torchrun-mode job with --log-dir: the rank's files of the latest run."""
    from ..jobs.torchrunlogs import find_rank_files

    root = Path(info.fields.get("WorkDir", ".")) / layout.log_dir
    job = info.fields.get("JobId", info.job_id)  # an array task's own id: its SLURM_JOB_ID, torchrun's run id
    layout.place(args.rank, info.job_id)  # an out-of-range rank is an error before anything is read
    shown: list[RankFiles] = []  # oldest first: --follow goes on from one run (or attempt) to the next

    def streams() -> list[tuple[Path, IO[str]]]:
        found = find_rank_files(root, job, layout, args.rank)
        if found is not None and found.attempt_dir not in [f.attempt_dir for f in shown]:
            if shown or found.chosen:  # say which run is shown: there was a choice, or a new one began
                print(f"hpcdist: {found.describe(info.job_id, args.rank)}", file=sys.stderr, flush=True)
            shown.append(found)
        # earlier runs stay in the list, so what they wrote before --follow saw the next one is printed too
        return [pair for f in shown for pair in ((f.stdout, sys.stdout), (f.stderr, sys.stderr))]

    keep: Callable[[str], str | None] = lambda line: line  # noqa: E731 - every line
    if args.follow:
        _follow(info.job_id, streams, keep, args.timeout)
        return 0
    files = streams()
    if not files and info.state != "PENDING":
        node, _ = layout.place(args.rank, info.job_id)
        raise UsageError(f"job {info.job_id} ({info.state}): torchrun has made no run directory {job}_* under "
                         f"{root / f'node-{node}'} here; torchrun makes it when node {node} starts its workers: "
                         "read it on the node that ran the job, or put --log-dir on a shared file system")  # fmt: skip
    _copy(files, {}, keep, final=True)
    return 0


def _rank_lines(wanted: int) -> Callable[[str], str | None]:
    """A filter that keeps rank `wanted`'s tagged or labelled lines, without the tag."""

    def keep(line: str) -> str | None:
        match = _RANK_LINE.match(line)
        if match is None or int(match["tag"] or match["torchrun"] or match["label"]) != wanted:
            return None
        return line[match.end() :]

    return keep


def _copy(
    streams: list[tuple[Path, IO[str]]], offsets: dict[Path, int], keep: Callable[[str], str | None], final: bool
) -> None:
    """Print what each file holds past its offset (whole lines only, unless `final`); advance the offsets."""
    for path, sink in streams:
        try:
            with path.open("rb") as f:
                f.seek(offsets.get(path, 0))
                data = f.read()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
        end = len(data) if final else data.rfind(b"\n") + 1
        offsets[path] = offsets.get(path, 0) + end
        for line in data[:end].decode(errors="replace").splitlines(keepends=True):
            shown = keep(line)
            if shown is not None:
                sink.write(shown)
        sink.flush()


def _follow(
    job: str, streams: Callable[[], list[tuple[Path, IO[str]]]], keep: Callable[[str], str | None], timeout: float
) -> None:
    """Print new output as it arrives until the job has ended (then the rest), or `timeout` passes.

    `streams` is asked again at each step: torchrun's files appear, and change at a restart, while the job runs.
    """
    from ..jobs.slurmjob import show_job
    from ..waits import Backoff, poll_until

    offsets: dict[Path, int] = {}
    asked, state = 0.0, "UNKNOWN"

    def step() -> bool:
        nonlocal asked, state
        ended = False
        if time.monotonic() - asked >= _STATE_EVERY:
            info = show_job(job)[0]
            asked, state = time.monotonic(), info.state
            ended = info.ended  # asked before reading: what the job wrote before it ended is read below
        _copy(streams(), offsets, keep, final=ended)
        return ended

    poll_until(
        step,
        time.monotonic() + timeout,
        lambda: (
            f"hpcdist logs --follow waited {timeout:g} s for job {job} to end; it is still {state}; "
            "pass a longer --timeout"
        ),
        backoff=Backoff(0.1, 1.0),
    )


COMMANDS = {"status": _status, "logs": _logs}
