"""argparse types shared by the subcommands: whole numbers and seconds, bounded as every wing bounds them."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..errors import UsageError
from ..values import MAX_COUNT, check_seconds, parse_seconds, parse_whole

__all__ = ["add_output_options", "count", "digits", "rank", "seconds", "whole"]


def whole(low: int, high: int = MAX_COUNT) -> Callable[[str], int]:
    """An argparse type: a whole number in ASCII digits from `low` to `high`."""

    def parse(text: str) -> int:
        number = parse_whole(text)
        if number is None or number < low:
            raise argparse.ArgumentTypeError(f"must be a whole number of at least {low}, got {text!r}")
        if number > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {text!r}")
        return number

    return parse


def digits(text: str) -> int:
    """An argparse type: a whole number in ASCII digits, its range checked where the options it fills are made."""
    number = parse_whole(text)
    if number is None:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}")
    return number


count = whole(1)  # nodes, tasks, slots, ports (callers check narrower ranges)
rank = whole(0)  # a node rank or rank index


def seconds(text: str) -> float:
    """An argparse type: a timeout in seconds, finite, above 0 and at most values.MAX_SECONDS."""
    value = parse_seconds(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}")
    try:
        return check_seconds(value, "the timeout", "e.g. --timeout 300")
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_output_options(parser: argparse.ArgumentParser, script: bool = False) -> None:
    """The per-rank output options of `hpcdist mpirun`, or (`script`) of the scripts `hpcdist sbatch` writes."""
    g = parser.add_argument_group("per-rank output")
    if script:
        g.add_argument("--tag", action="store_true", help="prefix each line with its rank (srun: --label)")
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
            type=whole(0),
            metavar="N",
            help="lines of a failed rank's output the failure summary shows (default: 20)",
        )
