"""The launcher's contract with its ranks: every variable it hands a rank (a leaf; it imports only events, errors,
values and the version). With `events` (what a rank tells back) and `lines` (the tagged lines a rank prints), it is
all the two sides share:

- `RankContract`: what `hpcdist mpirun` (and a generated script) hands each rank, one typed field per `HPCDIST_*`
  variable; the launcher writes it with `environ()`, a rank reads it once with `from_environ()` and passes the
  object down. Its `version` is the launcher's hpcdist: a rank of another version refuses to start (`check_version`).
- The launch's token (`new_token`), which each of a rank's event lines carries, so no program output passes for one.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import typing
from collections.abc import Mapping
from typing import ClassVar

from . import records
from ._version import __version__
from .errors import UsageError
from .events import Event, encode
from .records import record
from .values import MAX_COUNT, ON_FAILURE, parse_seconds, parse_whole

__all__ = [
    "DRY_RUN_TOKEN",
    "NUMBERED",
    "PREFIX",
    "RELAYED_SIGTERM",
    "RESTART_VARS",
    "RankContract",
    "check_version",
    "new_token",
]

PREFIX = "HPCDIST_"  # every variable of hpcdist's starts so: the contract's and the settings'
NUMBERED = "numbered"  # HPCDIST_TAG's value when the launcher routes the lines: [host:rank:N], N from 1 per rank
# Every rank turns this signal into SIGTERM to itself (rank/child.py): a launcher that passes SIGTERM on but kills
# the ranks soon after (Open MPI's PRRTE: 0.5 s later, no setting) is sent this one, which it passes on, job kept
RELAYED_SIGTERM = signal.SIGURG
# What a dry run prints for the control token, which each launch makes anew: a rank started by the printed line
# (nobody listening to its events) runs as under a plain mpirun, its lines tagged [host:rank]
DRY_RUN_TOKEN = "<per-launch token>"
RESTART_VARS = ("HPCDIST_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT")  # an attempt's index: hpcdist's, torchrun's
_TOKEN = re.compile(r"[0-9a-f]{16}\Z")


@record(frozen=True)
class RankContract:
    """What hpcdist's launcher hands every rank; each field is one variable (`VARIABLES`), unset at its default."""

    version: str | None = None  # the launcher's hpcdist: a rank of another version refuses to start
    token: str | None = None  # this launch's control token: set, the rank sends events (none otherwise)
    run_id: str | None = None  # one id for every attempt of a launch (the ranks' TORCHELASTIC_RUN_ID)
    restart_count: int | None = None  # this attempt's index, 0 first (None: the launch does not restart)
    max_restarts: int = 0  # --max-restarts (the ranks' TORCHELASTIC_MAX_RESTARTS)
    beat_interval: float | None = None  # seconds between the tagger's heartbeats (None: no heartbeat)
    trace: str | None = None  # --trace: the absolute path rank 0 writes every rank's calls to
    on_failure: str = "end"  # end: a failing rank ends the job; shrink: it ends alone, the survivors carry on
    min_np: int = 1  # under shrink: the fewest ranks the survivors carry on with
    spares: int = 0  # under shrink: the last this many ranks wait idle, to take the place of lost ones
    tag: str = ""  # "1": each line tagged [host:rank]; NUMBERED: also numbered for the router; "" or "0": untagged
    log_dir: str | None = None  # each rank also writes its lines to DIR/rank-NNN.log
    ranks: str | None = None  # only these ranks' lines reach the console (e.g. 0,3 or 0-3,7)
    output_rate: float | None = None  # bytes a second a rank's tagger forwards (0: all; None: no limit given)
    bind: str = "none"  # auto: the rank binds itself to its share of the node (placement.binding)
    progress: bool | None = None  # ranks draw progress bars (True) or not (False); None: as their stdout is a terminal
    mpi: str | None = None  # the launcher's MPI family (--mpi's names): a rank reads that family's variables alone
    scheduler: str | None = None  # the scheduler whose job the launch runs in ("none": no job's): read it alone

    VARIABLES: ClassVar[Mapping[str, str]] = {
        "version": "HPCDIST_VERSION",
        "token": "HPCDIST_CONTROL",
        "run_id": "HPCDIST_RUN_ID",
        "restart_count": RESTART_VARS[0],
        "max_restarts": "HPCDIST_MAX_RESTARTS",
        "beat_interval": "HPCDIST_HEARTBEAT",
        "trace": "HPCDIST_TRACE",
        "on_failure": "HPCDIST_ON_FAILURE",
        "min_np": "HPCDIST_MIN_NP",
        "spares": "HPCDIST_SPARES",
        "tag": "HPCDIST_TAG",
        "log_dir": "HPCDIST_LOG_DIR",
        "ranks": "HPCDIST_RANKS",
        "output_rate": "HPCDIST_OUTPUT_RATE",
        "bind": "HPCDIST_BIND",
        "progress": "HPCDIST_PROGRESS",
        "mpi": "HPCDIST_MPI",
        "scheduler": "HPCDIST_SCHEDULER",
    }

    @classmethod
    def variable(cls, field: str) -> str:
        """The environment variable that carries `field`."""
        return cls.VARIABLES[field]

    def environ(self) -> dict[str, str]:
        """The variables to export to every rank: each field that is not at its default (the restart counter twice,
        as hpcdist's and as torchrun's)."""
        out: dict[str, str] = {}
        for spec in records.fields(self):
            value = getattr(self, spec.name)
            if value == spec.default:
                continue
            name = self.VARIABLES[spec.name]
            out[name] = _text(value)
        if self.restart_count is not None:
            out[RESTART_VARS[1]] = str(self.restart_count)
        return out

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RankContract:
        """The contract a rank was started with, read from its environment once.

        Raises:
            UsageError: a variable's value is not of its kind; the message names the variable.
        """
        values: dict[str, object] = {}
        hints = typing.get_type_hints(cls)
        for spec in records.fields(cls):
            name = cls.VARIABLES[spec.name]
            raw = environ.get(name)
            if raw is None or raw == "":
                continue
            values[spec.name] = _read(raw, hints[spec.name], name)
        if values.get("token") == DRY_RUN_TOKEN:  # a dry run's line, run by hand: no launcher reads the events
            values.pop("token")
            if values.get("tag") == NUMBERED:  # numbered for a router that is not there
                values["tag"] = "1"
        contract = cls(**values)  # type: ignore[arg-type]  # each value read by its field's type
        contract._check()
        return contract

    def _check(self) -> None:
        """Refuse values of the right type that are out of range."""
        if self.on_failure not in ON_FAILURE:
            raise UsageError(
                f"{self.variable('on_failure')}={self.on_failure!r}: choose one of {', '.join(ON_FAILURE)} "
                "(hpcdist mpirun --on-failure sets it)"
            )
        if self.tag not in ("", "0", "1", NUMBERED):
            raise UsageError(
                f"{self.variable('tag')}={self.tag!r}: set it to 1 (prefix each line with [host:rank]) or 0"
            )
        if self.min_np < 1:
            raise UsageError(
                f"{self.variable('min_np')}={self.min_np!r} is not a positive whole number; unset it or give a rank "
                "count (hpcdist mpirun --min-np sets it)"
            )
        if self.spares and not self.shrinks:
            raise UsageError(
                f"{self.variable('spares')}={self.spares} needs {self.variable('on_failure')}=shrink; unset it "
                "(hpcdist mpirun --on-failure shrink --spares N sets both)"
            )
        if self.bind not in ("auto", "none"):
            raise UsageError(f"{self.variable('bind')}={self.bind!r}: set it to auto or none (hpcdist mpirun --bind)")
        if self.token is not None and not _TOKEN.match(self.token):
            raise UsageError(
                f"{self.variable('token')} is set by hpcdist mpirun for each launch and must not be set by hand; "
                "unset it"
            )

    @property
    def shrinks(self) -> bool:
        """Whether a failing rank ends alone (--on-failure shrink) rather than ending the job."""
        return self.on_failure == "shrink"

    @property
    def routed(self) -> bool:
        """Whether a launcher listens to this rank's events and routes its tagged lines (hpcdist mpirun itself)."""
        return self.token is not None

    def tell(self, event: Event) -> None:
        """Send `event` to the launcher as one line on fd 2; nothing when no launcher listens (no token)."""
        if self.token is None:
            return
        with contextlib.suppress(OSError):  # stderr closed: the launcher will not hear this rank
            os.write(2, encode(event, self.token).encode(errors="replace"))


def _text(value: object) -> str:
    """A field's value as its variable holds it: a flag as 1 or 0, a whole number without a fraction (`2097152`,
    `5`), other numbers in as few digits as show them (`0.5`, `1.16667`)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def _read(raw: str, kind: object, name: str) -> object:
    """`raw`, the value of variable `name`, as a field of type `kind`.

    Raises:
        UsageError: it is not of that kind.
    """
    if kind in (str, str | None):
        return raw
    if kind in (bool, bool | None):
        if raw not in ("0", "1"):
            raise UsageError(f"{name}={raw!r}: set it to 1 or 0")
        return raw == "1"
    if kind in (int, int | None):
        number = parse_whole(raw)
        if number is None or number > MAX_COUNT:
            raise UsageError(f"{name}={raw!r} is not a whole number; hpcdist's launcher sets it, so unset it")
        return number
    seconds = parse_seconds(raw)
    if seconds is None or not math.isfinite(seconds):
        raise UsageError(f"{name}={raw!r} is not a number; hpcdist's launcher sets it, so unset it")
    return seconds


def check_version(contract: RankContract, where: str, own: str = __version__) -> None:
    """Refuse to run a rank whose hpcdist differs from its launcher's.

    `where` names this rank (`rank 3 on n2`). A launcher that says no version (a plain mpirun) is not checked.

    Raises:
        UsageError: the versions differ, naming both.
    """
    if contract.version is None or contract.version == own:
        return
    raise UsageError(
        f"the launcher runs hpcdist {contract.version} but {where} has hpcdist {own}; install hpcdist "
        f"{contract.version} in the Python environment every host runs (a container image or a venv on one host may "
        "hold another)"
    )


def new_token() -> str:
    """A fresh token for one launch, so that no program output can pass for an event line by chance."""
    import secrets  # the launcher's alone: a rank reads its token

    return secrets.token_hex(8)
