"""MkDocs hook: the CLI reference page's body, rendered at build time from hpcdist's own parser."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- cli-reference -->"
CHECKOUT = str(Path(__file__).resolve().parents[2])  # hpcdist from here, installed or not: the docs extra suffices


def _help(parser: argparse.ArgumentParser) -> str:
    """A parser's whole --help text, at a fixed width so the page does not depend on the terminal."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return parser.format_help().rstrip()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands' parsers by name, in the order `hpcdist --help` lists them."""
    for action in parser._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def render() -> str:
    """The reference: `hpcdist --help`, then one section per subcommand with its --help."""
    if CHECKOUT not in sys.path:  # (here, when the page is built: a path added as MkDocs loads the hook does not last)
        sys.path.insert(0, CHECKOUT)
    from hpcdist.cli import build_parser

    parser = build_parser()
    parts = ["## hpcdist", "", "```text", _help(parser), "```", ""]
    for name, sub in _subparsers(parser).items():
        parts += [f"## hpcdist {name}", "", "```text", _help(sub), "```", ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Replace the marker on the CLI reference page with the rendered reference."""
    lines = markdown.split("\n")
    if MARKER not in lines:  # the marker alone on its line; one quoted in a sentence (the testing page's) is text
        return markdown
    return "\n".join(render() if line == MARKER else line for line in lines)
