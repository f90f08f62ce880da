"""Build the launch command line of a job in its MPI's dialect (pure: no processes are started).

One registered class per launcher dialect (ReFrame's `register_launcher`): `command(spec) -> list[str]`.
`build_mpirun_argv` picks the class `spec.family` names: Open MPI's `mpirun`, MPICH's Hydra `mpiexec`, or
Intel MPI's Hydra.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..errors import UsageError
from ..values import MAX_COUNT
from .hostfile import HostSlots
from .names import ENV_NAME

__all__ = [
    "KEEPALIVE",
    "LAUNCHERS",
    "SHIM",
    "ULFM",
    "AppContext",
    "HydraLauncher",
    "IntelLauncher",
    "Launcher",
    "MpirunSpec",
    "OpenMpiLauncher",
    "build_mpirun_argv",
    "env_forwards",
    "spans_hosts",
]

_FORWARD_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "HPCDIST_")
_FORWARD_NAMES = frozenset({"OMP_NUM_THREADS", "PYTHONPATH", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"})
SHIM = ("-m", "hpcdist.shim", "--")  # after a python: what each rank runs before the program (scripts too)
# Open MPI 5's `btl ofi` probes for an HPC fabric: ~1 s per start on hosts that have none.
_FABRIC_PROBE_BTL = "ofi"
# TCP keepalive on PRRTE's daemon links: a cut link is noticed after ~2 + 3 x 1 s instead of ~8 minutes.
# Hydra's srun starts one proxy per node; with a site's MpiDefault=pmix, srun would give them, and so the ranks,
# PMIX_* beside Hydra's PMI_*, and MPICH's MPI_Init aborts ("Found both env vars PMI_SIZE and PMIX_NAMESPACE",
# measured): srun reads its --mpi from this variable.
_SRUN_MPI = "SLURM_MPI_TYPE"
KEEPALIVE = (("oob_tcp_keepalive_time", "2"), ("oob_tcp_keepalive_intvl", "1"), ("oob_tcp_keepalive_probes", "3"))
# Open MPI's fault tolerance (ULFM, `--with-ft ulfm`) for --on-failure shrink, measured with Open MPI 5.0.11: over
# shared memory (its default btl on one host) the survivors hang in their next collective after a peer is killed;
# over TCP they get MPI_ERR_PROC_FAILED at once (docs/survivors.md, "Detecting a failure"). And the agreement
# (MPI_Comm_agree) by Early Returning Consensus: the wheel's default for coll_ftagree_agreement reads 0 (an Allreduce,
# not fault tolerant) or garbage (open-mpi/ompi#13915), and the survivors' commit then came out 0 for all-ones now and
# then, with no rank failed, or hung.
ULFM = (("btl", "tcp,self"), ("coll_ftagree_agreement", "1"))
_SHARED_MEMORY_BTLS = ("sm", "vader")


@dataclass(frozen=True)
class AppContext:
    """One host's part of a launch in app contexts (`-np N -H host:N -x NAME=VALUE PROGRAM :`)."""

    host: HostSlots
    np: int
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class MpirunSpec:
    """Everything needed to build one `mpirun` command line."""

    program: tuple[str, ...]
    np: int | None  # None: mpirun takes every slot of the Slurm allocation it runs in
    hostfile: str | None = None
    hosts: tuple[HostSlots, ...] = ()
    env: tuple[tuple[str, str | None], ...] = ()
    mca: tuple[tuple[str, str], ...] = ()
    bind_to: str = "none"
    map_by: str = "slot"
    oversubscribe: bool = False
    as_root: bool = False
    skip_fabric_probe: bool = True
    keepalive: bool = False  # --prtemca KEEPALIVE: set for jobs on several hosts, so a lost host is noticed
    extra: tuple[str, ...] = ()
    mpirun: str = "mpirun"
    contexts: tuple[AppContext, ...] = ()  # set: one app context per host, each with its own variables
    family: str = "openmpi"  # the launcher's dialect: a key of LAUNCHERS (launching.families.FAMILIES)
    launch_agent: str | None = None  # the remote shell that starts the launcher's daemons on other hosts (ssh's)
    slurm: bool = False  # ranks placed by the Slurm allocation it runs in: Hydra starts its proxies with srun
    exit_codes: bool = False  # Hydra: print every rank's exit status at the end (-print-all-exitcodes)
    fault_tolerance: bool = False  # Open MPI's ULFM (--with-ft ulfm, ULFM's MCA settings): survivors carry on


class Launcher:
    """One MPI family's launcher dialect; `command` turns a checked spec into its argv."""

    name: ClassVar[str]

    def command(self, spec: MpirunSpec) -> list[str]:
        """The argv that launches `spec`."""
        raise NotImplementedError


LAUNCHERS: dict[str, type[Launcher]] = {}


def register_launcher(name: str) -> Callable[[type[Launcher]], type[Launcher]]:
    """Class decorator: `LAUNCHERS[name]` builds the argv of specs whose family is `name`."""

    def register(cls: type[Launcher]) -> type[Launcher]:
        cls.name = name
        LAUNCHERS[name] = cls
        return cls

    return register


def build_mpirun_argv(spec: MpirunSpec) -> list[str]:
    """Return the launch argv for `spec` in its family's dialect.

    Raises:
        UsageError: a spec the launcher would reject or misread, or a family hpcdist has no launcher for.
    """
    _validate(spec)
    launcher = LAUNCHERS.get(spec.family)
    if launcher is None:
        raise UsageError(f"no launcher for MPI {spec.family!r}; use one of {', '.join(LAUNCHERS)}")
    return launcher().command(spec)


@register_launcher("openmpi")
class OpenMpiLauncher(Launcher):
    """Open MPI's `mpirun` (PRRTE): `contexts` win over `hostfile`, which wins over `hosts`."""

    def command(self, spec: MpirunSpec) -> list[str]:
        """The mpirun argv for `spec`."""
        argv = [spec.mpirun] if spec.np is None or spec.contexts else [spec.mpirun, "-np", str(spec.np)]
        if spec.contexts:  # each app context names its host below
            pass
        elif spec.hostfile is not None:
            argv += ["--hostfile", spec.hostfile]
        elif spec.hosts:
            argv += ["-H", ",".join(f"{h.host}:{h.slots}" for h in spec.hosts)]
        argv += ["--bind-to", spec.bind_to, "--map-by", spec.map_by]
        if spec.oversubscribe:
            argv.append("--oversubscribe")
        if spec.as_root:
            argv.append("--allow-run-as-root")
        if spec.fault_tolerance:
            argv += ["--with-ft", "ulfm"]
        for key, value in _mca_pairs(spec.mca, spec.skip_fabric_probe, spec.fault_tolerance):
            argv += ["--mca", key, value]
        if spec.keepalive:
            for key, value in KEEPALIVE:
                argv += ["--prtemca", key, value]
        if spec.launch_agent is not None:
            argv += ["--prtemca", "plm_ssh_agent", spec.launch_agent]
        for name, setting in spec.env:
            argv += ["-x", name if setting is None else f"{name}={setting}"]
        argv += spec.extra
        if not spec.contexts:
            return argv + list(spec.program)
        for index, context in enumerate(spec.contexts):
            argv += [
                *([":"] if index else []),
                "-np",
                str(context.np),
                "-H",
                f"{context.host.host}:{context.host.slots}",
            ]
            for name, value in context.env:
                argv += ["-x", f"{name}={value}"]
            argv += spec.program
        return argv


@register_launcher("mpich")
class HydraLauncher(Launcher):
    """MPICH's Hydra `mpiexec` (MVAPICH's too).

    Measured with MPICH 5.0.2: hosts are global only (`-hosts a:2,b:2` or `-f FILE` of `host:N` lines; a second
    list is "duplicate host file or host list setting"), so app contexts fill the hosts in order. Hydra passes
    the whole environment by default (`-genvall`; `-genvlist` would drop the rest), so a bare `-x NAME` needs
    nothing and a value is `-genv NAME VALUE`. It runs as root and oversubscribes without being asked.
    """

    def command(self, spec: MpirunSpec) -> list[str]:
        """The mpiexec argv for `spec`."""
        if spec.fault_tolerance:
            raise UsageError(
                f"--on-failure shrink needs Open MPI's fault tolerance (ULFM), which {self.name}'s launcher does not "
                "start; use --mpi openmpi with Open MPI's mpirun, or drop --on-failure shrink"
            )
        if spec.mca:
            raise UsageError(
                f"--mca is Open MPI's; {self.name}'s settings are environment variables (MPIR_CVAR_*, FI_*, "
                f"I_MPI_*): pass them with -x NAME=VALUE, or use --mpi openmpi"
            )
        argv = [spec.mpirun] if spec.np is None or spec.contexts else [spec.mpirun, "-n", str(spec.np)]
        if not spec.contexts:
            argv += self.placement(spec)
        argv += self.bootstrap(spec)
        argv += self.binding(spec)
        for name, setting in spec.env:
            argv += [] if setting is None else ["-genv", name, setting]
        argv += spec.extra
        if spec.slurm and spec.launch_agent is None:  # srun starts the proxies, which are no MPI tasks
            argv = ["env", f"{_SRUN_MPI}=none", *argv]
        if not spec.contexts:
            return argv + list(spec.program)
        return argv + self.app_contexts(spec)

    def placement(self, spec: MpirunSpec) -> list[str]:
        """Where the ranks go: the hostfile, else the hosts with their slots, else Hydra's own (this host, Slurm)."""
        if spec.hostfile is not None:
            return ["-f", spec.hostfile]
        return ["-hosts", ",".join(f"{h.host}:{h.slots}" for h in spec.hosts)] if spec.hosts else []

    def bootstrap(self, spec: MpirunSpec) -> list[str]:
        """How Hydra starts its proxies: the launch agent as ssh's stand-in, srun inside Slurm; its exit codes."""
        argv = ["-print-all-exitcodes"] if spec.exit_codes else []
        if spec.launch_agent is not None:
            if len(spec.launch_agent.split()) != 1:
                raise UsageError(
                    f"--launch-agent {spec.launch_agent!r}: {self.name}'s Hydra runs the agent as one program "
                    "(execvp of the whole text, measured), so it takes no arguments here; put the command in a "
                    "script and pass the script's path"
                )
            return [*argv, "-launcher", "ssh", "-launcher-exec", spec.launch_agent]
        return [*argv, "-launcher", "slurm"] if spec.slurm else argv

    def binding(self, spec: MpirunSpec) -> list[str]:
        """Hydra's `-bind-to`; `-map-by` only when not the default fill of each host's slots in turn."""
        return ["-bind-to", spec.bind_to, *(["-map-by", spec.map_by] if spec.map_by != "slot" else [])]

    def app_contexts(self, spec: MpirunSpec) -> list[str]:
        """The hosts, each context's slots in order, then one context per host with its own variables."""
        argv = ["-hosts", ",".join(f"{c.host.host}:{c.np}" for c in spec.contexts)]
        for index, context in enumerate(spec.contexts):
            argv += [*([":"] if index else []), "-n", str(context.np)]
            for name, value in context.env:
                argv += ["-env", name, value]
            argv += spec.program
        return argv


@register_launcher("intel")
class IntelLauncher(HydraLauncher):
    """Intel MPI's Hydra `mpiexec.hydra`.

    Measured with impi-rt 2021.18.1: `-hosts a:2` is read as a host named "a:2" (the bootstrap fails), so equal
    slots are `-hosts a,b -ppn 2` and others one app context per host (`-n 2 -host a PROG : …`); `-f FILE`
    reads `host:N` lines. It pins every rank to one core by default (I_MPI_PIN): `--bind-to none` turns that
    off, and other values name the pinning domain.
    """

    def placement(self, spec: MpirunSpec) -> list[str]:
        """The hostfile, else the hosts and their common number of slots per host (per-host contexts otherwise)."""
        if spec.hostfile is not None or not spec.hosts:
            return super().placement(spec)
        return ["-hosts", ",".join(h.host for h in spec.hosts), "-ppn", str(spec.hosts[0].slots)]

    def binding(self, spec: MpirunSpec) -> list[str]:
        """I_MPI_PIN=0 for no binding, else I_MPI_PIN_DOMAIN; Intel MPI places ranks by -ppn, not -map-by."""
        if spec.map_by != "slot":
            raise UsageError(
                f"--map-by {spec.map_by} is not Intel MPI's; it places ranks by host and slots (-H a:2,b:2) and "
                "pins them by I_MPI_PIN_* variables: drop --map-by, or pass -x I_MPI_PIN_ORDER=..."
            )
        if any(name.startswith("I_MPI_PIN") for name, _ in spec.env):
            return []  # the user's own pinning variables decide
        if spec.bind_to == "none":
            return ["-genv", "I_MPI_PIN", "0"]
        return ["-genv", "I_MPI_PIN_DOMAIN", spec.bind_to]

    def command(self, spec: MpirunSpec) -> list[str]:
        """Hosts of unequal slots become one app context per host, each with its `-host`."""
        if not spec.contexts and spec.hostfile is None and len({h.slots for h in spec.hosts}) > 1:
            spec = dataclasses.replace(spec, contexts=_fill(spec.hosts, spec.np))
        return super().command(spec)

    def app_contexts(self, spec: MpirunSpec) -> list[str]:
        """One context per host: its ranks, its `-host` and its own variables."""
        argv: list[str] = []
        for index, context in enumerate(spec.contexts):
            argv += [*([":"] if index else []), "-n", str(context.np), "-host", context.host.host]
            for name, value in context.env:
                argv += ["-env", name, value]
            argv += spec.program
        return argv


def _fill(hosts: Sequence[HostSlots], np: int | None) -> tuple[AppContext, ...]:
    """One context per host, the ranks filling each host's slots in turn (all slots when np is None).

    Raises:
        UsageError: more ranks than slots (Intel MPI's per-host contexts cannot oversubscribe).
    """
    left = sum(h.slots for h in hosts) if np is None else np
    if left > sum(h.slots for h in hosts):
        raise UsageError(
            f"-np {left} is more than the {sum(h.slots for h in hosts)} slots of hosts "
            f"{','.join(f'{h.host}:{h.slots}' for h in hosts)}; Intel MPI gets hosts of unequal slots as one app "
            "context per host, which cannot oversubscribe: lower -np or give every host the same slots"
        )
    contexts = []
    for host in hosts:
        take = min(left, host.slots)
        left -= take
        if take:
            contexts.append(AppContext(host, take))
    return tuple(contexts)


def spans_hosts(hosts: Sequence[HostSlots], environ: Mapping[str, str]) -> bool:
    """Whether the job may run on more than one host: several host names, or a multi-node Slurm allocation."""
    if hosts:
        return len({h.host for h in hosts}) > 1
    nodes = environ.get("SLURM_JOB_NUM_NODES", environ.get("SLURM_NNODES", "1"))
    return nodes.isdigit() and int(nodes) > 1


def env_forwards(environ: Mapping[str, str], user: Sequence[str]) -> tuple[tuple[str, str | None], ...]:
    """Pick the `-x` variables: known job variables set in `environ` (sorted), then `user` items."""
    auto = {
        name: None
        for name in sorted(environ)
        if ENV_NAME.match(name) and (name.startswith(_FORWARD_PREFIXES) or name in _FORWARD_NAMES)
    }
    chosen: dict[str, str | None] = {}
    for item in user:
        name, eq, value = item.partition("=")
        if not ENV_NAME.match(name):
            raise UsageError(
                f"-x {item!r}: {name!r} is not a valid variable name; use letters, digits and "
                f"'_' not starting with a digit, as in -x NAME or -x NAME=VALUE"
            )
        auto.pop(name, None)
        chosen[name] = value if eq else None
    return tuple(auto.items()) + tuple(chosen.items())


def _validate(spec: MpirunSpec) -> None:
    """Raise UsageError for a spec mpirun would reject or misread."""
    if spec.np is not None and spec.np < 1:
        raise UsageError(f"-np must be at least 1, got {spec.np}")
    if spec.np is not None and spec.np > MAX_COUNT:
        raise UsageError(f"-np must be at most {MAX_COUNT} (MPI counts ranks in an int), got {spec.np}")
    if not spec.program:
        raise UsageError("no program to run; put it after '--', e.g. -np 2 -- python train.py")
    for name, _ in spec.env:
        if not ENV_NAME.match(name):
            raise UsageError(
                f"-x {name!r}: not a valid variable name; use letters, digits and '_' not starting with a digit"
            )
    if spec.launch_agent is not None and not spec.launch_agent.strip():
        raise UsageError("--launch-agent needs a command that reaches another host, e.g. --launch-agent ssh")
    if spec.fault_tolerance:
        for key, value in spec.mca:
            names = [n.strip() for n in value.lstrip("^").split(",")]
            if key == "btl" and (value.startswith("^") or any(n in _SHARED_MEMORY_BTLS for n in names)):
                raise UsageError(
                    f"--mca btl {value}: under --on-failure shrink the survivors hang over shared memory (measured "
                    "with Open MPI 5.0.11), so the transports must be named and exclude sm; drop --mca btl (hpcdist "
                    "uses tcp,self) or give a list without sm, e.g. --mca btl tcp,self"
                )
    if not spec.bind_to.strip():
        raise UsageError("--bind-to needs a value such as none, core or socket")
    if not spec.map_by.strip():
        raise UsageError("--map-by needs a value such as slot, node or ppr:1:socket")


def _mca_pairs(mca: tuple[tuple[str, str], ...], skip_fabric_probe: bool, ulfm: bool = False) -> list[tuple[str, str]]:
    """User `--mca` pairs, with `ofi` excluded from `btl` unless the user chose the btl list; under `ulfm`, ULFM's
    settings that the user did not give (a btl list of theirs was checked by `_validate`)."""
    if ulfm:
        given = {key for key, _ in mca}
        return [*mca, *((key, value) for key, value in ULFM if key not in given)]
    if not skip_fabric_probe:
        return list(mca)
    if all(key != "btl" for key, _ in mca):
        return [*mca, ("btl", "^" + _FABRIC_PROBE_BTL)]
    return [(key, _exclude_probe(value) if key == "btl" else value) for key, value in mca]


def _exclude_probe(value: str) -> str:
    """Add `ofi` to an exclusion list (`^a,b`); leave an inclusion list (`self,tcp`) alone."""
    if not value.startswith("^"):
        return value
    names = [n.strip() for n in value[1:].split(",") if n.strip()]
    if _FABRIC_PROBE_BTL in names:
        return value
    return "^" + ",".join([*names, _FABRIC_PROBE_BTL])
