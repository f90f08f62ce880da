"""argparse types shared by the subcommands, every count, duration and size checked here at parse time, and the
option groups several share (per-rank output, containers).

Each type is a `Checked`: `_Parser` hands it the option's name, so a refusal names the option and shows a value
that works. The parse itself is values.py's (ASCII digits only), shared with the Python API and the environment.
"""

from __future__ import annotations

import argparse
from typing import Any

from .. import settingtable
from ..errors import UsageError
from ..values import MAX_COUNT, check_count, check_seconds, parse_seconds, parse_whole

__all__ = [
    "Checked",
    "Later",
    "Seconds",
    "Size",
    "Whole",
    "WholeOrWord",
    "add_container_options",
    "add_output_options",
    "container_settings",
    "count",
    "port",
    "rank",
]


class Checked:
    """An argparse type that refuses what is not of its kind: check(text, option) raises UsageError."""

    def check(self, text: str, option: str) -> object:
        """The value `text` spells for `option`, else UsageError saying what is wrong and what works."""
        raise NotImplementedError

    def __call__(self, text: str) -> object:
        return self.check(text, "the value")


class Whole(Checked):
    """A whole number in ASCII digits (no sign, blank, `_` or other scripts' digits) from `low` to `high`."""

    def __init__(self, low: int, high: int = MAX_COUNT) -> None:
        self.low, self.high = low, high

    def check(self, text: str, option: str) -> int:
        number = parse_whole(text) if text == text.strip() else None
        how = f"e.g. {option} {max(self.low, 1)}"
        if number is None:
            raise UsageError(
                f"{option} {text!r} is not a whole number; write it in ASCII digits 0-9 alone (no sign, blank or "
                f"'_'), {how}"
            )
        if number > self.high:  # shown as typed: a number of more than 19 digits is parsed as a stand-in
            shown = text if len(text) <= 19 else f"a number of {len(text)} digits"
            raise UsageError(f"{option} must be at most {self.high}, got {shown}; {how}")
        return check_count(number, option, self.low, how, self.high)


class WholeOrWord(Checked):
    """A whole number as Whole, or one of `words` (torchrun's `--nproc-per-node auto`); kept as text."""

    def __init__(self, low: int, words: tuple[str, ...] = ()) -> None:
        self.whole, self.words = Whole(low), words

    def check(self, text: str, option: str) -> str:
        if text in self.words:
            return text
        try:
            self.whole.check(text, option)
        except UsageError as exc:
            raise UsageError(f"{exc}, or one of {', '.join(self.words)}" if self.words else str(exc)) from None
        return text


class Seconds(Checked):
    """A number of seconds in ASCII digits (`300`, `2.5`), above 0 and at most 30 days; 0 too when `off`."""

    def __init__(self, off: bool = False) -> None:
        self.off = off

    def check(self, text: str, option: str) -> float:
        value = parse_seconds(text)
        off = " (0: off)" if self.off else ""
        if value is None:
            raise UsageError(
                f"{option} {text!r} is not a number of seconds; write ASCII digits with an optional fraction, "
                f"e.g. {option} 30{off}"
            )
        if self.off and value == 0:
            return 0.0
        return check_seconds(value, option, f"e.g. {option} 30{off}")


class Later(Checked):
    """A value the wing that uses it checks (`time` -> hpcdist.jobs.sbatchspec.parse_time), imported only when given."""

    def __init__(self, module: str, name: str, by_field: bool = True) -> None:
        self.module, self.name, self.by_field = module, name, by_field  # by_field: it names options by a callable

    def check(self, text: str, option: str) -> str:
        import importlib

        check = getattr(importlib.import_module(self.module, __package__), self.name)
        check(text, (lambda _field: option) if self.by_field else option)
        return text


class Size(Checked):
    """A size in bytes as nccl-tests writes it (`8`, `64K`, `128M`, `1G`); kept as text, no blanks around it."""

    def check(self, text: str, option: str) -> str:
        from ..bench.plan import parse_size

        if text != text.strip():
            raise UsageError(f"{option} {text!r} has blanks around it; write the size alone, e.g. {option} 64M")
        parse_size(text, option)
        return text


count = Whole(1)  # nodes, tasks, slots, ranks per node
rank = Whole(0)  # a node rank or rank index
port = Whole(1, 65535)


def add_output_options(parser: argparse.ArgumentParser, script: bool = False) -> None:
    """The per-rank output options of `hpcdist mpirun`, or (`script`) of the scripts `hpcdist sbatch` writes."""
    g = parser.add_argument_group("per-rank output")
    if script:
        g.add_argument("--tag", action="store_true", help="prefix each line with [host:rank] (torchrun: [rank]:)")
    else:
        g.add_argument(
            "--tag",
            action=argparse.BooleanOptionalAction,
            help="prefix each line with [host:rank] (default: when the output is a terminal)",
        )
    g.add_argument("--log-dir", metavar="DIR", help="also write each rank's stdout and stderr to DIR/rank-NNN.log")
    g.add_argument("--ranks", metavar="LIST", help="show only these ranks' lines on the console, e.g. 0,3 or 0-3,7")
    if not script:
        g.add_argument(
            "--tail",
            type=Whole(0),
            metavar="N",
            help="lines of a failed rank's output the failure summary shows (default: 20); the summary names the "
            "failed rank in place of the MPI launcher's own banners (Open MPI's MPI_ABORT was invoked…, MPICH's "
            f"Abort(N) on node…), which {settingtable.DEBUG.name}=1 keeps on the console",
        )


def add_container_options(parser: argparse.ArgumentParser, script: bool = False) -> None:
    """--container-image and its kin (pyxis's spellings): each rank's program runs inside an image (hybrid model),
    in `hpcdist mpirun`'s launch or (`script`) in the launch of the scripts `hpcdist sbatch` and its kin write,
    where --container stays sbatch's own (Slurm's OCI bundle, passed on as an #SBATCH line)."""
    from .. import containers

    group = parser.add_argument_group(
        "containers", "run each rank inside an image, started by the host's launcher (docs/containers.md)"
    )
    group.add_argument(
        "--container-image",
        *(() if script else ("--container",)),
        metavar="IMAGE",
        help="the image each rank runs in; its MPI must be the host launcher's family and version (`hpcdist doctor "
        "--container-image IMAGE` checks) and its python3 must have this hpcdist unless --bare",
    )
    default = (
        "hpcdist sbatch --launch srun: pyxis, srun's own --container-image; otherwise the first of apptainer, "
        "singularity, podman, docker, enroot on the node's PATH when the job runs"
        if script
        else "the first of apptainer, singularity, podman, docker, enroot on PATH; pyxis: srun's own "
        "--container-image, with --mpi srun"
    )
    group.add_argument(
        "--container-runtime",
        metavar="|".join(containers.names()),
        help=f"the runtime that runs it (default: {default})",
    )
    group.add_argument(
        "--container-mounts",
        action="append",
        default=[],
        metavar="SRC:DST[:ro][,...]",
        help="host directories mounted inside, e.g. /data:/data:ro (repeatable); the working directory and the "
        "launcher's session directory ($TMPDIR or /tmp) always are",
    )
    group.add_argument(
        "--container-gpus",
        action="store_true",
        help="NVIDIA GPUs inside (apptainer --nv, podman --device nvidia.com/gpu=all, docker --gpus all)",
    )


def container_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The container options `add_container_options` parsed, as the fields of MpirunOptions, BatchJob and SbatchSpec
    that take them."""
    return {
        "container_image": args.container_image,
        "container_runtime": args.container_runtime,
        "container_mounts": tuple(args.container_mounts),
        "container_gpus": args.container_gpus,
    }
