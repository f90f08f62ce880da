"""MkDocs hook: the settings reference page's tables, rendered at build time from hpcdist's own table of settings."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- settings-reference -->"
CHECKOUT = str(Path(__file__).resolve().parents[2])  # hpcdist from here, installed or not: the docs extra suffices


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table."""
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The table of the user's settings (hpcdist.settingtable.SETTINGS), then the variables hpcdist mpirun sets."""
    if CHECKOUT not in sys.path:  # (here, when the page is built: a path added as MkDocs loads the hook does not last)
        sys.path.insert(0, CHECKOUT)
    from hpcdist.contract import RESTART_VARS, RankContract
    from hpcdist.settingtable import SETTINGS

    rows = ["| Variable | Takes | Default | What it does |", "| --- | --- | --- | --- |"]
    rows += [f"| `{s.name}` | {_cell(s.takes)} | {_cell(s.default)} | {_cell(s.does)} |" for s in SETTINGS]
    names = sorted({*RankContract.VARIABLES.values(), *RESTART_VARS})
    handed = ", ".join(f"`{name}`" for name in names)
    return "\n".join(
        [
            *rows,
            "",
            "## Set by hpcdist mpirun for each rank",
            "",
            "`hpcdist mpirun` (and a script that `hpcdist sbatch` generates) hands every rank the launch's contract "
            f"in these variables, each one the value of one of its options: {handed}. Set them through the options, "
            "not by hand: a rank refuses a value that is not of its kind, and a rank whose hpcdist differs from "
            "its launcher's (`HPCDIST_VERSION`) refuses to start.",
        ]
    )


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Replace the marker on the settings reference page with the rendered tables."""
    lines = markdown.split("\n")
    if MARKER not in lines:  # the marker alone on its line; one quoted in a sentence (the testing page's) is text
        return markdown
    return "\n".join(render() if line == MARKER else line for line in lines)
