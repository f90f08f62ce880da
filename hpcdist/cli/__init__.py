"""The `hpcdist` command: argparse -> spec -> dry-run print or run. Parsing and dispatch only.

It may import every other wing (lazily, so that text-only commands never import torch); nothing imports it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from .._version import __version__
from ..errors import UsageError

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports mistakes as UsageError, so they print as `hpcdist: error: …`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; see `{self.prog} --help`")


def build_parser() -> _Parser:
    """All subcommands and their options."""
    from . import diagnose, generate, launch

    parser = _Parser(prog="hpcdist", description="MPI-first HPC job toolkit for PyTorch.")
    parser.add_argument("--version", action="version", version=f"hpcdist {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    launch.add_parsers(sub)
    generate.add_parsers(sub)
    diagnose.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; user mistakes print `hpcdist: error: …` and return 2."""
    from . import diagnose, generate, launch

    try:
        args = build_parser().parse_args(argv)
        return {**launch.COMMANDS, **generate.COMMANDS, **diagnose.COMMANDS}[args.command](args)
    except UsageError as exc:
        print(f"hpcdist: error: {exc}", file=sys.stderr)
        return 2
