"""`hpcdist mpirun`'s options as one typed, frozen value: what the CLI parses into and `hpcdist.launch` builds.

Every option the launch uses is a field, the restarts and the run mode included: run it (`RUN`), print the command
that would run (`DRY_RUN`), or hand it to a script that runs it later (`SCRIPT`: `hpcdist mpirun --script`, and the
mpirun step of a batch script). Each value is checked here, once, when the options are made, by the one check for
its kind (values.py), so `--dry-run`, a real run and the Python API refuse the same things. What depends on the
world around the launch (a hostfile's slots, the mpirun found) is checked by `plan.plan`.
"""

from __future__ import annotations

from .. import containers
from ..containers.base import parse_mounts
from ..errors import UsageError
from ..records import fields, record
from ..values import ON_FAILURE, check_count, check_seconds

__all__ = ["DRY_RUN", "MODES", "RUN", "SCRIPT", "MpirunOptions"]

RUN, DRY_RUN, SCRIPT = "run", "dry-run", "script"
MODES = (RUN, DRY_RUN, SCRIPT)
# each field's `hpcdist mpirun` flag, as `MpirunOptions.argv` writes it (a flag alone: a switch; mode and its
# script, and the program after `--`, are written by argv itself)
_FLAGS = {"np": "-np", "hostfile": "--hostfile", "hosts": "-H", "include": "--include", "exclude": "--exclude",
          "export": "-x", "mca": "--mca", "bind_to": "--bind-to", "map_by": "--map-by", "bind": "--bind",
          "oversubscribe": "--oversubscribe", "probe_fabrics": "--probe-fabrics", "bare": "--bare",
          "mpirun": "--mpirun", "mpi": "--mpi", "launch_agent": "--launch-agent", "tag": "--tag",
          "log_dir": "--log-dir", "ranks": "--ranks", "tail": "--tail", "heartbeat_timeout": "--heartbeat-timeout",
          "trace": "--trace", "outcome": "--outcome", "on_failure": "--on-failure", "min_np": "--min-np",
          "spares": "--spares",
          "max_restarts": "--max-restarts", "container_image": "--container-image",
          "container_runtime": "--container-runtime", "container_mounts": "--container-mounts",
          "container_gpus": "--container-gpus"}  # fmt: skip


@record(frozen=True)
class MpirunOptions:
    """What `hpcdist mpirun [options] -- PROGRAM` asks for, each field named after its option, at its default."""

    program: tuple[str, ...] = ()  # what each rank runs (after `--`)
    np: int | None = None  # -np: None: the hosts' slots
    hostfile: str | None = None
    hosts: str | None = None  # -H a:2,b:2
    include: str | None = None  # DeepSpeed's host and slot selection (exclude each other)
    exclude: str | None = None
    export: tuple[str, ...] = ()  # -x NAME[=VALUE]
    mca: tuple[tuple[str, str], ...] = ()
    bind_to: str = "none"
    map_by: str = "slot"
    bind: str = "none"  # auto: the shim binds each local rank
    oversubscribe: bool = False
    probe_fabrics: bool = False
    bare: bool = False
    mpirun: str | None = None
    mpi: str | None = None  # openmpi, mpich or intel: the dialect of `mpirun`
    launch_agent: str | None = None
    tag: bool | None = None  # None: when our output is a terminal
    log_dir: str | None = None
    ranks: str | None = None  # the console's rank list, e.g. "0,3"
    tail: int | None = None  # None: DEFAULT_TAIL
    heartbeat_timeout: float | None = None  # None: $HPCDIST_HEARTBEAT_TIMEOUT or the default; 0: off
    trace: str | None = None  # FILE.json: rank 0 writes every rank's calls there as one Chrome trace
    outcome: str | None = None  # FILE.json: how the job ended, written when it ends, for tools
    on_failure: str = "end"  # a lost rank ends the job (end), or the survivors carry on (shrink: Open MPI's ULFM)
    min_np: int | None = None  # the fewest ranks the job may go on with: after a lost host's restart, or a shrink
    spares: int = 0  # under shrink: this many more ranks wait idle, each to take a lost rank's place
    max_restarts: int = 0  # start the whole job again after a failure, up to this many times
    container_image: str | None = None  # each rank runs inside this image (hpcdist.containers)
    container_runtime: str | None = None  # the runtime that runs it (None: the first installed)
    container_mounts: tuple[str, ...] = ()  # SRC:DST[:ro][,...] host directories mounted in
    container_gpus: bool = False  # NVIDIA GPUs inside, the runtime's own way
    mode: str = RUN  # RUN, DRY_RUN (print the command) or SCRIPT (a script runs it later)
    script: str | None = None  # SCRIPT: the file `hpcdist mpirun --script` writes ("-": print it)

    def argv(self) -> list[str]:
        """The `hpcdist mpirun` arguments that give these options (each field not at its default), `--` and the
        program last: what a batch script's step runs."""
        argv: list[str] = []
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name not in _FLAGS or value == field.default:
                continue
            flag = _FLAGS[field.name]
            if isinstance(value, bool):  # a switch; False off its default: --tag's other side, --no-tag
                argv.append(flag if value else f"--no-{flag.removeprefix('--')}")
            elif field.name in ("export", "container_mounts"):
                argv += [word for name in value for word in (flag, name)]
            elif field.name == "mca":
                argv += [word for key, setting in value for word in (flag, key, setting)]
            else:
                argv += [flag, value if isinstance(value, str) else f"{value:g}"]
        argv += {RUN: [], DRY_RUN: ["--dry-run"], SCRIPT: ["--script", self.script or "-"]}[self.mode]
        return [*argv, "--", *self.program]

    def __post_init__(self) -> None:
        """Refuse a value of the wrong kind, whoever made the options.

        Raises:
            UsageError: -np or --min-np below 1, --tail or --max-restarts below 0, an empty --trace, a
                --heartbeat-timeout that is no number of seconds, an empty --outcome or one without a run, an
                --on-failure that is not one of ON_FAILURE, a mode that is not one of MODES (or a script file without
                SCRIPT), or a list option that is not a list of the right items.
        """
        if self.np is not None:
            check_count(self.np, "-np", 1, "e.g. -np 4")
        if self.min_np is not None:
            check_count(self.min_np, "--min-np", 1, "e.g. --min-np 2")
        check_count(self.spares, "--spares", 0, "e.g. --spares 1")
        if self.spares and self.on_failure != "shrink":
            raise UsageError(
                f"--spares {self.spares} replaces lost ranks of a shrinking job; add --on-failure shrink, or drop "
                "--spares"
            )
        if self.on_failure not in ON_FAILURE:
            raise UsageError(
                f"--on-failure must be one of {', '.join(ON_FAILURE)}, got {self.on_failure!r}; e.g. --on-failure "
                "shrink (the survivors carry on when a rank dies)"
            )
        check_count(self.max_restarts, "--max-restarts", 0, "e.g. --max-restarts 2")
        if self.mode not in MODES:
            raise UsageError(f"MpirunOptions.mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.script is not None and (self.mode != SCRIPT or not isinstance(self.script, str) or not self.script):
            raise UsageError(f"--script takes the file to write (- prints it), in mode {SCRIPT!r}; got {self.script!r}")
        if self.tail is not None:
            check_count(self.tail, "--tail", 0, "e.g. --tail 20")
        if self.heartbeat_timeout is not None and self.heartbeat_timeout != 0:
            check_seconds(self.heartbeat_timeout, "--heartbeat-timeout", "e.g. --heartbeat-timeout 30 (0: off)")
        for name in ("program", "export", "container_mounts"):
            value = getattr(self, name)
            if not (isinstance(value, tuple) and all(isinstance(item, str) for item in value)):
                raise UsageError(f"MpirunOptions.{name} must be a tuple of strings, got {value!r}")
        if self.trace is not None and not (isinstance(self.trace, str) and self.trace):
            raise UsageError(f"--trace takes the file to write, e.g. --trace trace.json; got {self.trace!r}")
        if self.outcome is not None and not (isinstance(self.outcome, str) and self.outcome):
            raise UsageError(f"--outcome takes the file to write, e.g. --outcome outcome.json; got {self.outcome!r}")
        if self.outcome is not None and self.mode != RUN:
            raise UsageError("--outcome is written as the job ends, and --dry-run and --script run nothing; drop one")
        if not all(isinstance(pair, tuple) and len(pair) == 2 for pair in self.mca):
            raise UsageError(f"MpirunOptions.mca must be (KEY, VALUE) pairs, got {self.mca!r}")
        self._check_container()

    def _check_container(self) -> None:
        """Refuse container options without an image, an unknown runtime, or mounts that are not SRC:DST pairs."""
        if self.container_image is None:
            given = [f for f in ("container_runtime", "container_mounts", "container_gpus") if getattr(self, f)]
            if given:
                raise UsageError(
                    f"{_FLAGS[given[0]]} says how to run each rank in a container, and no image is given; add "
                    "--container-image IMAGE, or drop it"
                )
            return
        if not (isinstance(self.container_image, str) and self.container_image.strip()):
            raise UsageError(
                f"--container-image takes an image, e.g. --container-image train.sif; got {self.container_image!r}"
            )
        if self.container_runtime is not None:
            containers.lookup(self.container_runtime)
        parse_mounts(self.container_mounts)
