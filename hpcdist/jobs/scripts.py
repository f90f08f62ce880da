"""The job script of `hpcdist.submit` under Grid Engine, PBS, LSF or Flux: its options in each scheduler's own Spec.

hpcdist.submit's own words (nodes, ntasks_per_node, time, partition) become each scheduler's: the ranks are nodes x
ntasks_per_node (or Grid Engine's -pe slots, a PBS select statement), time its time limit, partition its queue. The
rest are the scheduler's Spec fields and BatchJob's (env, setup, mpi, bind, max_restarts, …), by their Python names.
The script's program is the function's (`program`), its output goes to job.out and each rank's to logs/ in the job's
directory (`Job.logs`). Slurm's script is sbatch.py's, as `hpcdist sbatch` writes it.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import records
from ..errors import UsageError
from ..launching.output import OutputOptions
from ..launching.world import World
from ..values import MAX_COUNT
from .batch import BatchJob
from .flux import FluxSpec, render_flux
from .gridengine import QsubSpec, parse_slots, render_gridengine
from .local import local_tools
from .lsf import BsubSpec, render_lsf
from .pbs import PbsSpec, parse_select, render_pbs

__all__ = ["SPECS", "hints", "own", "render"]

SPECS: dict[str, type] = {"gridengine": QsubSpec, "pbs": PbsSpec, "lsf": BsubSpec, "flux": FluxSpec}
_RENDER: dict[str, Callable[[Any], str]] = {
    "gridengine": render_gridengine,
    "pbs": render_pbs,
    "lsf": render_lsf,
    "flux": render_flux,
}
_RANKS = "the ranks are nodes= x ntasks_per_node="
_OUTPUT = "the job's output goes to its directory: read it with job.logs(None)"
# fields hpcdist.submit sets itself, with what to do instead: BatchJob's, then each scheduler's
_OWN = {
    "job": "hpcdist.submit writes the job",
    "program": "the function is the program",
    "np": _RANKS,
    "rank_output": "each rank's output goes to its directory: read it with job.logs(rank)",
    "output": _OUTPUT,
    "error": _OUTPUT,
    "join": _OUTPUT,
    "array": "arrays of hpcdist.submit are Slurm's only; submit one job per task",
    "slots": _RANKS,
    "nnodes": _RANKS,
    "nslots": _RANKS,
    "nodes": _RANKS,
}


def hints(scheduler: str) -> dict[str, Any]:
    """The options hpcdist.submit takes for `scheduler`, its Spec's fields and BatchJob's, with their types."""
    both = typing.get_type_hints(SPECS[scheduler]) | typing.get_type_hints(BatchJob)
    return {name: hint for name, hint in both.items() if name not in _OWN}


def own(name: str) -> str | None:
    """What to do instead of setting `name`, a field hpcdist.submit sets itself; None for the others."""
    return _OWN.get(name)


def render(
    scheduler: str,
    settings: dict[str, Any],
    common: dict[str, Any],
    program: tuple[str, ...],
    directory: Path,
    world: World,
    option: Callable[[str], str],
) -> tuple[str, int]:
    """The job script for `scheduler` and its number of ranks, from hpcdist.submit's checked `settings` and its own
    `common` words (nodes, ntasks_per_node, time, partition); `program` gets the job's python in front.

    Raises:
        UsageError: a common word and the Spec field it sets are both given, or the script cannot be written.
    """
    job_names = {f.name for f in records.fields(BatchJob)}
    job = {key: value for key, value in settings.items() if key in job_names}
    spec = {key: value for key, value in settings.items() if key not in job_names}
    nodes, per_node = common["nodes"], common["ntasks_per_node"]
    for key, count in (("nodes", nodes), ("ntasks_per_node", per_node)):
        if count is not None and not 1 <= count <= MAX_COUNT:
            raise UsageError(f"hpcdist.submit's {key}= must be from 1 to {MAX_COUNT}, got {count}")
    shape = (nodes or 1, per_node or 1)
    words = _WORDS[scheduler]
    ranks = words(spec, shape, nodes is not None or per_node is not None)
    for key, field in (("time", _TIME[scheduler]), ("partition", "queue")):
        if common[key] is None:
            continue
        if field in spec:
            raise UsageError(f"hpcdist.submit's {key}= and {field}= both set the job's {key}; give one")
        if scheduler in ("gridengine", "pbs") and key == "time":
            spec["resources"] = (*spec.get("resources", ()), f"{field}={common[key]}")
        else:
            spec[field] = common[key]
    name = directory.name.rpartition("-")[0].lstrip("_.-") or "job"  # the function's; PBS's -N begins alphanumeric
    spec.setdefault("job_name" if scheduler == "flux" else "name", name)
    spec["output"] = str(directory / "job.out")
    if scheduler in ("gridengine", "pbs"):
        spec["join"] = "y" if scheduler == "gridengine" else "oe"  # stderr into job.out (LSF, Flux: by default)
    python = job.pop("python", None) or world.python
    if scheduler != "flux" and spec.get("launch", "mpirun") == "mpirun":
        given = {key: job.pop(key) for key in ("mpirun", "mpi") if key in job}
        tools = local_tools(world, "mpirun", python, given.get("mpirun"), None, False, given.get("mpi"), option)
        job |= {"mpirun": tools["mpirun"], "mpi": tools["mpi"]}
    batch = BatchJob(
        program=(python, *program),
        np=ranks,
        python=python,
        rank_output=OutputOptions(tag=False, log_dir=str(directory / "logs")),
        **job,
    )
    return _RENDER[scheduler](SPECS[scheduler](job=batch, **spec)), ranks


def _gridengine(spec: dict[str, Any], shape: tuple[int, int], given: bool) -> int:
    """The ranks of a Grid Engine job: nodes x ntasks_per_node when given, else its parallel environment's fewest
    slots; more than one needs pe=."""
    pe = spec.get("pe")
    if pe is not None and not given:
        return parse_slots(pe[1])[0]
    ranks = shape[0] * shape[1]
    if pe is None and ranks > 1:
        raise UsageError(
            f"hpcdist.submit's {ranks} ranks under Grid Engine need a parallel environment: pass pe=(NAME, SLOTS), "
            f"e.g. pe=('mpi', '{ranks}') (`qconf -spl` lists the site's)"
        )
    return ranks


def _pbs(spec: dict[str, Any], shape: tuple[int, int], given: bool) -> int:
    """The ranks of a PBS job: its select statement's, else nodes chunks of ntasks_per_node (select=N:ncpus=M:
    mpiprocs=M, added to its resources)."""
    select = [value for value in spec.get("resources", ()) if value.startswith("select=")]
    if select and given:
        raise UsageError(
            "hpcdist.submit's resources= select statement and its nodes= or ntasks_per_node= both give the ranks; "
            "give one"
        )
    if select:
        return parse_select(select[0].removeprefix("select="))
    nodes, per_node = shape
    spec["resources"] = (f"select={nodes}:ncpus={per_node}:mpiprocs={per_node}", *spec.get("resources", ()))
    return nodes * per_node


def _lsf(spec: dict[str, Any], shape: tuple[int, int], given: bool) -> int:
    """The ranks of an LSF job: nodes x ntasks_per_node, -n slots spread ptile to a host (jsrun: -nnodes)."""
    nodes, per_node = shape
    if spec.get("launch", "mpirun") == "jsrun":
        spec["nnodes"] = nodes
    else:
        spec["slots"] = str(nodes * per_node)
        if nodes > 1:
            spec["requirements"] = (*spec.get("requirements", ()), f"span[ptile={per_node}]")
    return nodes * per_node


def _flux(spec: dict[str, Any], shape: tuple[int, int], given: bool) -> int:
    """The ranks of a Flux job: nodes x ntasks_per_node, -N nodes and -n a slot for each."""
    spec["nodes"], spec["nslots"] = shape[0], shape[0] * shape[1]
    return shape[0] * shape[1]


_WORDS = {"gridengine": _gridengine, "pbs": _pbs, "lsf": _lsf, "flux": _flux}
_TIME = {"gridengine": "h_rt", "pbs": "walltime", "lsf": "runlimit", "flux": "time_limit"}
