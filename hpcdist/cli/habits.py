"""Other launchers' options (torchrun, Open MPI's and MPICH's mpirun, srun, sbatch) and hpcdist's own former names given
to an hpcdist command: one it spells differently is refused with the hpcdist spelling that does the same (`habit`);
one of sbatch's that `hpcdist sbatch` does not model goes into the script as it is (`passed_on`)."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType

from ..errors import UsageError

__all__ = ["MPIRUN", "SBATCH", "habit", "passed_on", "passed_words"]

_RENDEZVOUS = "hpcdist mpirun finds the rendezvous itself (MPI tells each rank its place): drop torchrun's {name}"
_MODULE = "the program comes after --, as torchrun's -m MODULE: hpcdist mpirun -np N -- python -m MODULE"
_PER_NODE = "{name} N (ranks per host) is --map-by ppr:N:node here, with -np giving the ranks in all"
_WDIR = "the ranks start in hpcdist mpirun's own directory: cd to the directory first instead of {name}"

MPIRUN: Mapping[str, str] = MappingProxyType(
    {
        "--nproc-per-node": "torchrun's --nproc-per-node N is -np N here, on this host; on several hosts, -np with "
        "a --hostfile (or -H) that gives each host N slots",
        "--nnodes": "hpcdist mpirun runs on the hosts of --hostfile or -H (or of the Slurm allocation it runs in): "
        "give those and -np instead of torchrun's --nnodes",
        "--node-rank": _RENDEZVOUS,
        "--standalone": "a job on this host needs no rendezvous options: drop torchrun's --standalone",
        "--rdzv-backend": _RENDEZVOUS,
        "--rdzv-endpoint": _RENDEZVOUS,
        "--rdzv-id": _RENDEZVOUS,
        "--rdzv-conf": _RENDEZVOUS,
        "--master-addr": _RENDEZVOUS,
        "--master-port": _RENDEZVOUS,
        "-m": _MODULE,
        "--module": _MODULE,
        "--no-python": "the program after -- runs as it is given: hpcdist mpirun -np N -- PROGRAM ARGS",
        "-N": "Open MPI's " + _PER_NODE,
        "--npernode": "Open MPI's " + _PER_NODE,
        "-npernode": "Open MPI's " + _PER_NODE,
        "-ppn": "MPICH's " + _PER_NODE,
        "--ppn": "MPICH's " + _PER_NODE,
        "--wdir": _WDIR,
        "-wdir": _WDIR,
        "-wd": _WDIR,
        "--ntasks": "srun's --ntasks N is -np N here",
        "--ntasks-per-node": "srun's " + _PER_NODE,
        "--no-shim": "hpcdist's former --no-shim is --bare now (the program without hpcdist's wrapper around "
        "each rank)",
    }
)

SBATCH: Mapping[str, str] = MappingProxyType(
    {
        "--gres": "sbatch's --gres gpu:N is --gpus-per-node N here (--gres gpu:TYPE:N: --gpus-per-node TYPE:N)",
        "--gpus": "give the GPUs of each node: sbatch's --gpus G on N nodes is --gpus-per-node G/N here",
        "-G": "give the GPUs of each node: sbatch's -G G on N nodes is --gpus-per-node G/N here",
        "-n": "sbatch's -n (--ntasks) R is --nodes N --ntasks-per-node R/N here: every node runs as many ranks",
        "--ntasks": "sbatch's --ntasks R is --nodes N --ntasks-per-node R/N here: every node runs as many ranks",
        "--nproc-per-node": "torchrun's --nproc-per-node N is --ntasks-per-node N here (with --launch torchrun, "
        "torchrun's own --nproc-per-node in the script)",
        "--nnodes": "torchrun's --nnodes N is --nodes N (-N N) here",
        "-np": "mpirun's -np R is --nodes N --ntasks-per-node R/N here",
    }
)

_NEGATIVE = re.compile(r"-\d+(?:\.\d+)?")  # a negative number: a value (a priority), never an option


def habit(habits: Mapping[str, str], option: str) -> str | None:
    """What to write instead of `option` (either spelling of a long option: --nproc_per_node too), else None."""
    name = "--" + option[2:].replace("_", "-") if option.startswith("--") else option
    found = habits.get(name)
    return found.format(name=option) if found is not None else None


def passed_on(
    args: Sequence[str],
    options: Mapping[str, str],
    own: Collection[str],
    habits: Mapping[str, str],
    tool: str = "sbatch",
) -> tuple[list[str], list[tuple[str, str | None]]]:
    """`args` without the long `options` (name -> 'value', 'optional' or 'flag') found before `--`, and those as
    (name, value) pairs; options in `own` (the parser's) or `habits` (refused with their spelling) stay in `args`.

    A 'value' option takes `--name=value` or `--name value`; an 'optional' one a value only as `--name=value`.

    Raises:
        UsageError: an option that takes a value is last, or followed by `--`.
    """
    kept: list[str] = []
    found: list[tuple[str, str | None]] = []
    words = iter(args)
    for word in words:
        if word == "--":
            kept += [word, *words]
            break
        given, equals, value = word.partition("=")
        name = "--" + given[2:].replace("_", "-") if given.startswith("--") else given
        takes = options.get(name[2:]) if name.startswith("--") else None
        if takes is None or given in own or name in own or name in habits:
            kept.append(word)
        elif equals:
            found.append((name[2:], value))
        elif takes == "value":
            following = next(words, "--")
            if following == "--":
                raise UsageError(f"{given} needs a value, as {tool}'s {name} does; e.g. {name}=VALUE")
            found.append((name[2:], following))
        else:
            found.append((name[2:], None))
    return kept, found


def passed_words(
    args: Sequence[str], options: Mapping[str, tuple[int, int]], own: Collection[str], tool: str
) -> tuple[list[str], list[tuple[str, ...]]]:
    """`args` without the single-dash `options` (name -> (fewest, most) values, `-pe` -> (2, 2)) found before `--`,
    and those as (name, value...) tuples; an option in `own` (the parser's) stays in `args`. An option takes its
    fewest values, then more up to its most while the next word is no option (`-binding pe linear:2`).

    Raises:
        UsageError: an option has fewer values than it takes before the next option, `--` or the end.
    """
    kept: list[str] = []
    found: list[tuple[str, ...]] = []
    words = list(args)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            kept += words[i:]
            break
        takes = options.get(word) if word not in own else None
        if takes is None:
            kept.append(word)
            i += 1
            continue
        fewest, most = takes
        values = []
        for value in words[i + 1 : i + 1 + most]:
            if value.startswith("-") and not _NEGATIVE.fullmatch(value):  # qsub -p -10: a value, not an option
                break
            values.append(value)
        if len(values) < fewest:
            raise UsageError(
                f"{word} needs {fewest} value{'s' if fewest > 1 else ''}, as {tool}'s {word} does; give "
                f"{word} {' '.join(['VALUE'] * fewest)} before --"
            )
        found.append((word, *values))
        i += 1 + len(values)
    return kept, found
