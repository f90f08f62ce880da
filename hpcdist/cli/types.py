"""argparse types shared by the subcommands: whole numbers and seconds, bounded as every wing bounds them."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..errors import UsageError
from ..values import MAX_COUNT, check_seconds, parse_seconds, parse_whole

__all__ = ["count", "rank", "seconds", "whole"]


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
