"""Flight Recorder dumps of every rank's calls, in the format torch's `torchfrtrace` analyses, and where they go.

On a hang report rank 0 writes one file per rank, DIR/fr_rank_<rank>, from what every rank answered. For gloo
and the mpi backend it builds each from the rank's ledger: torch 2.13's own recorder on gloo lists its process
groups under one empty name while its entries name "0", "1", … (torchfrtrace stops on that with a KeyError) and
records no point-to-point call, whereas the ledger names every group by its global ranks. On nccl a rank sends
the dump of torch's own recorder, written as it is. All but `save` and `local_part` is pure.

A ledger-built dump gives each call its group, shape, dtype and state (`started` while it waits, else
`completed`); a recv and its send go in a group of their own two ranks (see `_groups`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .. import settings, settingtable
from ..commcall import Call
from ..contract import RankContract

__all__ = [
    "PART",
    "PREFIX",
    "VERSION",
    "command",
    "dump_dir",
    "dumps",
    "local_part",
    "nccl_environ",
    "save",
    "write",
]

PREFIX = "fr_rank_"  # a dump is PREFIX<rank>, as torchfrtrace's -p/--prefix expects
PART = "fr"  # the name of this rank's part of a watchdog answer
VERSION = "2.10"  # the dump format torch 2.13 writes and torchfrtrace reads
# The ledger's operation names (torch.distributed's, and c10d's for calls recorded below Python) as torchfrtrace
# names them; an operation it does not know would end its analysis, so such a call is left out.
_TYPES = {
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "allreduce_coalesced": "allreduce_coalesced",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "all_gather_into_tensor": "_all_gather_base",
    "_allgather_base": "_all_gather_base",
    "gather": "gather",
    "scatter": "scatter",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "_reduce_scatter_base",
    "_reduce_scatter_base": "_reduce_scatter_base",
    "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
    "all_to_all_single": "all_to_all",
    "alltoall_base": "all_to_all",
    "barrier": "barrier",
    "send": "send",
    "isend": "send",
    "recv": "recv",
    "irecv": "recv",
}
_DTYPES = {  # torch's dtype names as c10 names them in a dump
    "float32": "Float",
    "float64": "Double",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "int64": "Long",
    "int32": "Int",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
    "bool": "Bool",
    "complex64": "ComplexFloat",
    "complex128": "ComplexDouble",
}
_P2P = ("send", "recv")
_STATUS = ("last_enqueued_collective", "last_started_collective", "last_completed_collective")
_WORLD = "world"
_DUMP_NAME = re.compile(rf"{PREFIX}[0-9]+")


def dump_dir(contract: RankContract, environ: Mapping[str, str], cwd: str) -> str:
    """The absolute directory for this run's dumps: the FR_DIR setting, else the launch's log directory's `fr`, else
    a temporary one, named after the launch (its run id, else SLURM_JOB_ID), which every rank knows."""
    import tempfile  # loaded when a hang's dump is written, as json, pickle and shlex below

    log_dir = contract.log_dir
    given = settings.fr_dir(environ) or (os.path.join(log_dir, "fr") if log_dir else "")
    if given:
        return os.path.normpath(os.path.join(cwd, os.path.expanduser(given)))
    run = contract.run_id or environ.get("SLURM_JOB_ID")
    return os.path.join(environ.get("TMPDIR") or tempfile.gettempdir(), f"hpcdist-fr-{run}" if run else "hpcdist-fr")


def nccl_environ(environ: Mapping[str, str], directory: str) -> dict[str, str]:
    """The variables that have torch's NCCL recorder dump on a timeout into `directory`, unless set (the recorder
    itself is turned on for every backend by `sources.enable_flight_recorder`)."""
    wanted: dict[str, str] = {}
    if "TORCH_NCCL_DUMP_ON_TIMEOUT" not in environ:
        wanted["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
    if "TORCH_FR_DUMP_TEMP_FILE" not in environ and "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in environ:
        wanted["TORCH_FR_DUMP_TEMP_FILE"] = os.path.join(directory, PREFIX)
    return wanted


def command(directory: str, incomplete: bool = False) -> str:
    """The shell command that analyses the dumps in `directory`."""
    import shlex

    words = ["torchfrtrace", directory, "-p", PREFIX] + (["--allow-incomplete-ranks"] if incomplete else [])
    return shlex.join(words)


def _records(calls: Iterable[Call]) -> list[Call]:
    """A rank's ledger, oldest first."""
    return sorted(calls, key=lambda call: call.seq)


class _Group(NamedTuple):
    """A process group as the dumps name it, alike in every rank's: its name, its description, its global ranks."""

    name: str
    desc: str
    ranks: list[int]


_Key = str | tuple[str, int, int]  # a ledger group, or a (group, sender, receiver) channel of sends and receives


def _channel(rank: int, record: Call) -> tuple[str, int, int] | None:
    """The (group, sender, receiver) channel of rank `rank`'s send or recv; None for a receive from any source."""
    peer = record.peer.partition("=")[2]
    if not peer.isdigit():
        return None
    return (record.group, rank, int(peer)) if _TYPES[record.op] == "send" else (record.group, int(peer), rank)


def _groups(ledgers: Mapping[int, list[Call]], world_size: int) -> dict[_Key, _Group]:
    """Every group in the ledgers, world first ("0"), then subgroups, then one group per channel of sends.

    torchfrtrace expects every member of a call's group to make the call, so each send and its receive go in a
    group of their own two ranks, the k-th send on a channel matching its k-th receive (MPI's and gloo's order).
    """
    import json

    groups: dict[_Key, _Group] = {_WORLD: _Group("0", "default_pg", list(range(world_size)))}
    for name in sorted({record.group for records in ledgers.values() for record in records} - {_WORLD}):
        groups[name] = _Group(str(len(groups)), "undefined", json.loads(name))
    channels = {
        _channel(rank, record)
        for rank, records in ledgers.items()
        for record in records
        if _TYPES.get(record.op) in _P2P
    }
    for group, sender, receiver in sorted(channel for channel in channels if channel is not None):
        where = "" if group == _WORLD else f" in group {group}"
        groups[group, sender, receiver] = _Group(
            str(len(groups)), f"p2p {sender}->{receiver}{where}", sorted({sender, receiver})
        )
    return groups


def _first_kept(ledgers: Mapping[int, list[Call]]) -> dict[str, int]:
    """Per group, the first collective that every rank that recorded one in it still has (ring buffers drop calls)."""
    first: dict[str, int] = {}
    for records in ledgers.values():
        starts: dict[str, int] = {}
        for record in records:
            if _TYPES.get(record.op) not in _P2P:
                starts.setdefault(record.group, record.gseq)
        for group, start in starts.items():
            first[group] = max(first.get(group, 0), start)
    return first


def _sizes(kind: str, shape: list[int], size: int) -> tuple[list[list[int]], list[list[int]]]:
    """Input and output sizes as a dump gives them, from the one tensor the ledger records for a call."""
    head, tail = (shape[0], shape[1:]) if shape else (1, [])
    if kind == "barrier":
        return [[]], [[]]
    if kind in ("all_gather", "gather"):
        return [shape], [[size, *shape]]
    if kind == "_all_gather_base":
        return [shape], [[head * size, *tail]]
    if kind in ("reduce_scatter", "scatter"):  # the ledger records their output
        return [[size, *shape]], [shape]
    if kind == "_reduce_scatter_base":
        return [shape], [[head // size, *tail]]
    return [shape], [shape]


def _dump(
    records: list[Call],
    rank: int,
    library: str,
    clock_ns: int,
    timeout: float,
    groups: Mapping[_Key, _Group],
    first: Mapping[str, int],
) -> dict[str, Any]:
    """Rank `rank`'s dump (the dict torch pickles) from its records, taken when its wall clock read `clock_ns`.

    A group's collectives before `first[group]` are left out, as not every rank still has them.
    """
    entries: list[dict[str, Any]] = []
    status: dict[str, dict[str, int]] = {}
    sent: dict[_Key, int] = {}
    used: set[_Key] = {_WORLD}
    for record in records:
        kind = _TYPES.get(record.op)
        key: _Key
        if kind in _P2P:
            channel = _channel(rank, record)
            if channel is None:
                continue  # torchfrtrace needs both ends
            key, group = channel, groups[channel]
            number = seq = sent[channel] = sent.get(channel, 0) + 1  # the k-th call on the channel, on both ends
            me, other = group.ranks.index(rank), group.ranks.index(channel[2] if kind == "send" else channel[1])
            label = f"send {me}->{other}" if kind == "send" else f"recv {me}<-{other}"  # by rank within the group
        elif kind is None or record.gseq < first.get(record.group, 0):
            continue  # an operation torchfrtrace does not know, or one other ranks no longer have
        else:
            key, group, label, number, seq = record.group, groups[record.group], kind, record.gseq, 0
            progress = status.setdefault(group.name, dict.fromkeys(_STATUS, 0))
            progress[_STATUS[0]] = progress[_STATUS[1]] = number
            progress[_STATUS[2]] = number if record.done else progress[_STATUS[2]]
        used.add(key)
        created = clock_ns - int(record.age * 1e9)
        inputs, outputs = _sizes(kind, list(record.shape), len(group.ranks))
        dtypes = [_DTYPES.get(record.dtype, record.dtype)] if record.dtype else []
        entries.append(
            {
                "record_id": len(entries),
                "pg_id": int(group.name),
                "process_group": (group.name, group.desc),
                "collective_seq_id": number,
                "p2p_seq_id": seq,
                "op_id": record.seq,
                "profiling_name": f"{library}:{label}",
                "time_created_ns": created,
                "input_sizes": inputs,
                "input_dtypes": dtypes,
                "output_sizes": outputs,
                "output_dtypes": dtypes,
                "state": "completed" if record.done else "started",
                "time_discovered_started_ns": created,
                "time_discovered_completed_ns": None,
                "retired": record.done,
                "timeout_ms": int(timeout * 1000),
                "is_p2p": kind in _P2P,
                "thread_id": "",
                "thread_name": "",
                "frames": [],
            }
        )
    config = {
        group.name: {"name": group.name, "desc": group.desc, "ranks": str(group.ranks)}
        for group in sorted((groups[key] for key in used), key=lambda group: int(group.name))
    }
    return {"version": VERSION, "comm_lib_version": "", "pg_config": config, "pg_status": status, "entries": entries}


def dumps(answers: Mapping[int, Mapping[str, Any]], world_size: int, timeout: float, now_ns: int) -> dict[int, bytes]:
    """Every answering rank's dump, pickled: torch's own when every rank sent one (nccl), else built from the ledgers.

    The two kinds are never mixed: they name process groups differently. `now_ns` stands for the wall clock of a
    rank whose answer has none.
    """
    import pickle

    parts = {rank: answer.get(PART) or {} for rank, answer in answers.items()}
    if parts and all(part.get("torch_dump") for part in parts.values()):
        return {rank: part["torch_dump"] for rank, part in parts.items()}
    ledgers = {rank: _records(answer["ledger"]) for rank, answer in answers.items()}
    groups = _groups(ledgers, world_size)
    first = _first_kept(ledgers)
    files: dict[int, bytes] = {}
    for rank, part in sorted(parts.items()):
        library = "nccl" if "nccl" in part.get("backend", "") else "gloo"  # torchfrtrace knows no "mpi"
        dump = _dump(ledgers[rank], rank, library, part.get("clock_ns", now_ns), timeout, groups, first)
        files[rank] = pickle.dumps(dump)
    return files


def write(directory: str, files: Mapping[int, bytes]) -> None:
    """Write each rank's dump as DIRECTORY/fr_rank_<rank>, removing dumps of other ranks an earlier run left there.

    Raises:
        OSError: the directory cannot be made or written.
    """
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if _DUMP_NAME.fullmatch(name) and int(name[len(PREFIX) :]) not in files:
            os.remove(os.path.join(directory, name))
    for rank, data in files.items():
        with open(os.path.join(directory, f"{PREFIX}{rank}"), "wb") as out:
            out.write(data)


def save(answers: Mapping[int, Mapping[str, Any]], world_size: int, timeout: float, contract: RankContract) -> str:
    """Write every answering rank's dump where `dump_dir` says; the line that tells the user where and what to run."""
    if not any(answer["ledger"] or (answer.get(PART) or {}).get("torch_dump") for answer in answers.values()):
        return "hpcdist: no rank has made a communication call, so there are no Flight Recorder dumps to write"
    directory = dump_dir(contract, os.environ, os.getcwd())
    try:
        files = dumps(answers, world_size, timeout, time.time_ns())
    except (LookupError, TypeError, ValueError) as error:  # a record it cannot read must not keep the job from ending
        return f"hpcdist: could not build the Flight Recorder dumps: {error!r}"
    try:
        write(directory, files)
    except OSError as error:
        return (
            f"hpcdist: could not write the Flight Recorder dumps in {directory}: {error.strerror or error}; "
            f"set {settingtable.FR_DIR.name} to a writable directory"
        )
    return (
        f"hpcdist: Flight Recorder dumps of each rank's calls are in {directory}; "
        f"analyse them with: {command(directory, len(answers) < world_size)}"
    )


def local_part() -> dict[str, Any]:
    """This rank's part of a watchdog answer: its backend, its wall clock, and on nccl torch's own recorder's dump."""
    part: dict[str, Any] = {"clock_ns": time.time_ns(), "backend": ""}
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_initialized():
        return part
    part["backend"] = str(dist.get_backend())
    if "nccl" in part["backend"]:
        from torch._C import _distributed_c10d

        dump = getattr(_distributed_c10d, "_dump_nccl_trace", None)  # torch's NCCL recorder, on builds with NCCL
        with contextlib.suppress(RuntimeError):  # then the dump is built from the ledger
            part["torch_dump"] = dump(True, True, False) if dump is not None else None
    return part
