"""`hpcdist mpirun`'s options as one typed, frozen value: what the CLI parses into and `hpcdist.launch` builds.

Each value is checked here, once, when the options are made, by the one check for its kind (values.py), so
`--dry-run`, a real run and the Python API refuse the same things. What depends on the world around the launch
(a hostfile's slots, the mpirun found) is checked by `spec.spec_from_options`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..values import ON_FAILURE, check_count, check_seconds

__all__ = ["MpirunOptions"]


@dataclass(frozen=True)
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
    no_shim: bool = False
    mpirun: str | None = None
    mpi: str | None = None  # openmpi, mpich or intel: the dialect of `mpirun`
    launch_agent: str | None = None
    tag: bool | None = None  # None: when our output is a terminal
    log_dir: str | None = None
    ranks: str | None = None  # the console's rank list, e.g. "0,3"
    tail: int | None = None  # None: DEFAULT_TAIL
    heartbeat_timeout: float | None = None  # None: $HPCDIST_HEARTBEAT_TIMEOUT or the default; 0: off
    trace: str | None = None  # FILE.json: rank 0 writes every rank's calls there as one Chrome trace
    on_failure: str = "end"  # a lost rank ends the job (end), or the survivors carry on (shrink: Open MPI's ULFM)
    min_np: int | None = None  # the fewest ranks the job may go on with: after a lost host's restart, or a shrink

    def __post_init__(self) -> None:
        """Refuse a value of the wrong kind, whoever made the options.

        Raises:
            UsageError: -np or --min-np below 1, --tail below 0, an empty --trace, a
                --heartbeat-timeout that is no number of seconds, an --on-failure that is not one of ON_FAILURE, or
                a list option that is not a list of the right items.
        """
        if self.np is not None:
            check_count(self.np, "-np", 1, "e.g. -np 4")
        if self.min_np is not None:
            check_count(self.min_np, "--min-np", 1, "e.g. --min-np 2")
        if self.on_failure not in ON_FAILURE:
            raise UsageError(
                f"--on-failure must be one of {', '.join(ON_FAILURE)}, got {self.on_failure!r}; e.g. --on-failure "
                "shrink (the survivors carry on when a rank dies)"
            )
        if self.tail is not None:
            check_count(self.tail, "--tail", 0, "e.g. --tail 20")
        if self.heartbeat_timeout is not None and self.heartbeat_timeout != 0:
            check_seconds(self.heartbeat_timeout, "--heartbeat-timeout", "e.g. --heartbeat-timeout 30 (0: off)")
        for name in ("program", "export"):
            value = getattr(self, name)
            if not (isinstance(value, tuple) and all(isinstance(item, str) for item in value)):
                raise UsageError(f"MpirunOptions.{name} must be a tuple of strings, got {value!r}")
        if self.trace is not None and not (isinstance(self.trace, str) and self.trace):
            raise UsageError(f"--trace takes the file to write, e.g. --trace trace.json; got {self.trace!r}")
        if not all(isinstance(pair, tuple) and len(pair) == 2 for pair in self.mca):
            raise UsageError(f"MpirunOptions.mca must be (KEY, VALUE) pairs, got {self.mca!r}")
