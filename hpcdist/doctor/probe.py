"""Probes for `hpcdist doctor`: each command runs through proctree.capture with a timeout; Facts out.

The probe jobs' command lines come from the launch pipeline (`probe_options` -> `plan` -> `command`), as `hpcdist
mpirun` builds its own, in the World the doctor was started in; the rendezvous probe runs the jobs' own rendezvous
code (`offer_rendezvous`, `probe`), so the doctor checks the address a job would use.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import containers, families, records, settingtable
from ..containers.base import Container
from ..contract import RankContract
from ..errors import UsageError
from ..hosts import HostSlots, resolve
from ..launching.execute import command
from ..launching.families import detect_family, resolve_family
from ..launching.hostfile import parse_hostfile, read_hostfile_text
from ..launching.options import MpirunOptions
from ..launching.plan import plan
from ..launching.sessions import clear_stale_sessions
from ..launching.world import World
from ..placement.topology import load_topology
from ..proctree import capture
from ..runtime.env import AGENT_VARIABLES, LaunchEnv
from .facts import DEFAULT_TIMEOUT, Check, Facts, Probe, tail
from .image import IDENTIFY

__all__ = ["gather_facts", "job_place", "outside_the_job", "probe_command", "probe_options"]

# What a launch (hpcdist's shim, torchrun) gives each rank: the doctor's own probe jobs must not inherit them
_JOB_VARIABLES = (*AGENT_VARIABLES, RankContract.variable("token"), RankContract.variable("beat_interval"))

_MPI4PY_PROBE = (
    "import json, mpi4py; mpi4py.rc.initialize = False; mpi4py.rc.finalize = False; from mpi4py import MPI; "
    "print(json.dumps({'version': mpi4py.__version__, 'library': MPI.Get_library_version(), "
    "'module': MPI.__file__}))"
)
_TORCH_PROBE = (
    "import json, torch, torch.distributed as d; a = d.is_available(); c = torch.cuda.is_available(); "
    "print(json.dumps({'version': torch.__version__, 'distributed': a, 'gloo': a and d.is_gloo_available(), "
    "'nccl': a and d.is_nccl_available(), 'mpi': a and d.is_mpi_available(), 'cuda': c, "
    "'cuda_devices': torch.cuda.device_count() if c else 0}))"
)
_WORLD_PROBE = (
    "import os; from mpi4py import MPI; c = MPI.COMM_WORLD; "  # one write(2) per line: ranks share the pipe
    "os.write(1, f'hpcdist-world {c.Get_rank()} {c.Get_size()}\\n'.encode())"
)
_HOST_PROBE = 'echo hpcdist-host "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-?}}" "$(hostname)"'


def outside_the_job(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The environment for the probes of a doctor that runs as a rank of a job (`hpcdist mpirun -- hpcdist doctor`):
    `environ` without the job's rank variables, so that its own probe jobs are not taken for ranks of it; None when
    it runs alone."""
    env = _started_by(environ)
    if env is None or env.launcher == "single":
        return None
    return {name: value for name, value in environ.items() if name not in _JOB_VARIABLES}


def _started_by(environ: Mapping[str, str]) -> LaunchEnv | None:
    """The launch that started this doctor, or None when its variables contradict each other (then it runs as if
    alone, and its probes show what such variables do)."""
    try:
        return LaunchEnv.from_environ(environ)
    except UsageError:
        return None


def job_place(environ: Mapping[str, str], host: str = "this host") -> tuple[int, Check | None]:
    """This doctor's rank in the job it runs in (0 alone), and for rank 0 of a job of several a line saying that it
    reports for the job (`host`: the name of the host it checked)."""
    env = _started_by(environ)
    if env is None or env.world_size == 1:
        return 0, None
    return env.rank, Check(
        "launch",
        "info",
        f"run as rank 0 of {env.world_size} ({env.launcher} launch): rank 0 checked {host} with "
        "probe jobs of its own and reports for the job; the other ranks only ended (to check other hosts, run "
        "`hpcdist doctor --hostfile FILE`)",
    )


def _probe(argv: Sequence[str], timeout: float, world: World) -> Probe:
    """Run one probe command in `world`'s environment (the one outside the job, when the doctor runs in one)."""
    code, out, err = capture(argv, timeout, world.environ)
    return Probe(tuple(argv), code, out, err)


def _json_probe(code: str, timeout: float, world: World) -> tuple[dict[str, Any] | None, str]:
    """Run `python -c code` printing one JSON line: (data, error text)."""
    probe = _probe([world.python, "-c", code], timeout, world)
    if probe.code == 0:
        try:
            return json.loads(probe.out.strip().splitlines()[-1]), ""
        except (ValueError, IndexError):
            pass
    return None, "timed out" if probe.code is None else (tail(probe.err, 1) or f"exit {probe.code}")


def _interfaces() -> dict[str, str]:
    """Network interfaces of this host and their operstate, from /sys/class/net."""
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        names = [name for _, name in socket.if_nameindex()]
    states = {}
    for name in names:
        try:
            with open(f"/sys/class/net/{name}/operstate") as fh:
                states[name] = fh.read().strip()
        except OSError:
            states[name] = "unknown"
    return states


def probe_options(
    mpirun: str, family: str, np: int, program: Sequence[str], hostfile: str | None = None
) -> MpirunOptions:
    """A probe job as `hpcdist mpirun --bare --oversubscribe` would run it (probes are tiny): in the dialect of
    `family` (the MPI that `mpirun --version` named, else Open MPI's), over the hostfile's hosts filled by node when
    given."""
    return MpirunOptions(
        program=tuple(program),
        np=np,
        hostfile=hostfile,
        map_by="node" if hostfile else "slot",
        oversubscribe=True,
        bare=True,
        mpirun=mpirun,
        mpi=family,
    )


def probe_command(options: MpirunOptions, world: World) -> list[str]:
    """A probe job's command line: the launch pipeline's, for `options` in `world`."""
    return command(plan(options, world))


def _launch_probe(options: MpirunOptions, timeout: float, world: World) -> Probe:
    """Run a probe job; one the launch pipeline refuses (an mpirun that cannot run) fails as a usage error would."""
    try:
        argv = probe_command(options, world)
    except UsageError as exc:
        return Probe((options.mpirun or "mpirun", *options.program), 2, "", f"hpcdist: error: {exc}")
    return _probe(argv, timeout, world)


def _binding_facts(local_world_size: int | None, topology: str | None, world: World) -> dict[str, Any]:
    """This node's topology (sysfs, or the hwloc XML `topology`) and the local world size to plan --bind auto for.

    The size: `local_world_size`, else the launch this runs in (mpirun, srun), else the allocation's
    SLURM_NTASKS_PER_NODE, else one rank per GPU, else 1.
    """
    environ = {**world.environ, settingtable.TOPOLOGY.name: topology} if topology else dict(world.environ)
    facts: dict[str, Any] = {
        "bind_environ": {
            k: v
            for k, v in environ.items()
            if k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS") or k.startswith("NCCL_")
        }
    }
    try:
        found = load_topology(environ, None if topology else set(world.cpus))  # a file: the whole machine
    except UsageError as exc:
        return {**facts, "topology_error": str(exc)}
    try:
        launch = LaunchEnv.from_environ(world.environ)
    except UsageError:
        launch = None
    tasks = world.environ.get("SLURM_NTASKS_PER_NODE", "")
    size, source = (
        (local_world_size, "--local-world-size")
        if local_world_size
        else (launch.local_world_size, f"the {launch.launcher} launch")
        if launch and launch.launcher != "single"
        else (int(tasks), "SLURM_NTASKS_PER_NODE")
        if tasks.isdigit() and int(tasks) > 0
        else (len(found.gpus), "one per GPU; --local-world-size N for another")
        if found.gpus
        else (1, "--local-world-size N for another")
    )
    return {**facts, "topology": found, "local_world_size": size, "local_world_size_from": source}


def gather_facts(
    world: World,
    hostfile: str | None = None,
    mpirun: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    local_world_size: int | None = None,
    topology: str | None = None,
    container: Container | None = None,
) -> Facts:
    """Probe this machine (and the hostfile's hosts, and the image of `container`) as `world` describes it; every
    command runs with `timeout`."""
    mpirun = mpirun or world.mpirun()
    outside = records.replace(world, environ=outside_the_job(world.environ) or world.environ)
    with ThreadPoolExecutor(max_workers=2) as pool:
        # `import torch` alone takes ~4 s
        torch_job = pool.submit(_json_probe, _TORCH_PROBE, max(timeout, 60.0), outside)
        mpi4py, mpi4py_error = _json_probe(_MPI4PY_PROBE, timeout, outside)
        version = _probe([mpirun, "--version"], timeout, outside) if mpirun else None
        torch_facts, torch_error = torch_job.result()
    named = families.from_version(version.out + version.err) if version else None
    family = named.name if named is not None else families.DEFAULT
    hosts: tuple[HostSlots, ...] = ()
    hostfile_error = ""
    if hostfile:
        try:
            hosts = parse_hostfile(read_hostfile_text(hostfile), hostfile)
        except UsageError as exc:
            hostfile_error = str(exc)
    resolved = {h.host: resolve(h.host) for h in hosts}
    can_launch = mpirun is not None and mpi4py is not None
    given = hostfile if hosts else None
    world_probe = hosts_probe = rendezvous = None
    if mpirun:  # else a probe's launcher given a killed one's pid cannot start
        clear_stale_sessions()
    if mpirun and can_launch:
        options = probe_options(mpirun, family, 2, [world.python, "-c", _WORLD_PROBE])
        world_probe = _launch_probe(options, timeout, outside)
    if mpirun and hosts and all(resolved.values()):
        options = probe_options(mpirun, family, len(hosts), ["sh", "-c", _HOST_PROBE], given)
        hosts_probe = _launch_probe(options, timeout, outside)
    np = max(min(sum(h.slots for h in hosts), 16) if hosts else 2, 2)
    if mpirun and can_launch and (not hosts or (hosts_probe is not None and hosts_probe.code == 0)):
        program = f"from hpcdist.runtime.rendezvous import doctor_probe; doctor_probe({timeout / 3:.1f})"
        options = probe_options(mpirun, family, np, [world.python, "-c", program], given)
        rendezvous = _launch_probe(options, timeout, outside)
    return Facts(
        mpirun=mpirun,
        mpirun_version=version,
        mpi4py=mpi4py,
        mpi4py_error=mpi4py_error,
        world=world_probe,
        torch=torch_facts,
        torch_error=torch_error,
        hpcdist_mpi_backend=importlib.util.find_spec("hpcdist.mpi_backend") is not None,
        environ={k: v for k, v in world.environ.items() if k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")},
        interfaces=_interfaces(),
        hostname_address=resolve(world.hostname),
        hostfile=hostfile,
        hosts=hosts,
        hostfile_error=hostfile_error,
        resolved=resolved,
        hosts_probe=hosts_probe,
        rendezvous=rendezvous,
        rendezvous_np=np,
        **_binding_facts(local_world_size, topology, world),
        python=world.python,
        beside=_launchers_beside(world),
        container=container.image if container is not None else None,
        container_probe=_container_probe(container, timeout, outside) if container is not None else None,
    )


def _container_probe(container: Container, timeout: float, world: World) -> Probe:
    """image.IDENTIFY run once inside the image, by its runtime (a first run may unpack the image: 4x the time)."""
    runtime = containers.lookup(container.runtime)
    return _probe(runtime.probe(container, ["sh", "-c", IDENTIFY], world.python), timeout * 4, world)


def _launchers_beside(world: World) -> dict[str, str]:
    """The MPI launchers beside `world`'s Python (a venv's MPI wheels), by the MPI their installation names."""
    found: dict[str, str] = {}
    for name in ("mpirun", "mpiexec"):
        path = world.beside_python(name)
        family = detect_family(path, world.which) if os.access(path, os.X_OK) else None
        if family is not None:
            found.setdefault(families.lookup(family).title, resolve_family(path, family, which=world.which)[1])
    return found
