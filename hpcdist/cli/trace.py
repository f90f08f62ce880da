"""`hpcdist trace FILE`: read a merged timeline written by `hpcdist mpirun --trace` (never imports torch)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..errors import UsageError

__all__ = ["COMMANDS", "add_parsers"]


def add_parsers(sub: Any) -> None:
    """Add `trace` to the CLI's subparsers."""
    p = sub.add_parser(
        "trace",
        help="summarise or draw a trace written by hpcdist mpirun --trace (stragglers, time in collectives)",
        description="Perfetto (ui.perfetto.dev) opens the same file; this command needs no network.",
    )
    p.add_argument("file", metavar="FILE.json", help="the trace file")
    p.add_argument(
        "--summary",
        action="store_true",
        help="print per rank the time in collectives and between them, how often it arrived last, and the "
        "straggler if one rank stands out (the default when --plot is not given)",
    )
    p.add_argument("--plot", metavar="FILE.png", help="draw the timeline, one row per rank (.png, .svg or .pdf)")


def _trace(args: argparse.Namespace) -> int:
    """`hpcdist trace FILE [--summary] [--plot OUT]`."""
    from ..forensics.chrome import load_trace
    from ..forensics.stragglers import format_summary, summarize

    if args.plot is not None:
        from ..forensics.timeplot import check_picture

        check_picture(args.plot)
    try:
        trace = load_trace(args.file)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.summary or args.plot is None:
        print("\n".join(format_summary(summarize(trace))))
    if args.plot is not None:
        from ..forensics.timeplot import draw_trace

        calls = sum(len(r.calls) for r in trace.ranks)
        title = (
            f"{args.file}: {len(trace.ranks)} ranks, {calls} calls, clocks aligned within {trace.residual * 1e6:.0f} us"
        )
        draw_trace(trace, args.plot, title)
        print(f"hpcdist trace: drew {args.plot}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"trace": _trace}
