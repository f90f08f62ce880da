"""`hpcdist trace FILE --plot`: a merged timeline drawn as a picture (matplotlib, Agg), one row per rank."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import UsageError
from .chrome import Trace

__all__ = ["FORMATS", "check_picture", "draw_trace"]

FORMATS = ("png", "svg", "pdf")
_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive")


def check_picture(path: str) -> None:
    """Refuse a picture that could not be written: no matplotlib, an unknown format, or a missing directory.

    Raises:
        UsageError: what is wrong and how to fix it.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"--plot {path} needs matplotlib, which {sys.executable} cannot import ({exc}); install it with "
            "`pip install 'hpcdist[plot]'`, or open the trace in ui.perfetto.dev instead"
        ) from None
    target = Path(path)
    if target.suffix.lstrip(".").lower() not in FORMATS:
        raise UsageError(f"--plot {path}: end the name with .png, .svg or .pdf, e.g. --plot trace.png")
    if not target.resolve().parent.is_dir():
        raise UsageError(f"--plot {path}: the directory {target.parent} does not exist; create it or pick another")


def draw_trace(trace: Trace, path: str, title: str) -> None:
    """Draw each rank's calls (coloured by operation) and marked regions (grey, labelled) against time in ms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = sorted({c.op for r in trace.ranks for c in r.calls})
    colour = {op: _COLOURS[i % len(_COLOURS)] for i, op in enumerate(ops)}
    starts = [c.started for r in trace.ranks for c in r.calls] + [a for r in trace.ranks for _, a, _ in r.regions]
    t0 = min(starts or [0])
    figure, axes = plt.subplots(figsize=(12, 1.0 + 0.8 * len(trace.ranks)), layout="constrained")
    for row, rank in enumerate(trace.ranks):
        y = len(trace.ranks) - 1 - row  # rank 0 on top, as Perfetto lists the tracks
        for op in ops:
            spans = [
                ((c.started - t0) * 1e3, (c.ended - c.started) * 1e3)
                for c in rank.calls
                if c.op == op and c.ended is not None
            ]
            axes.broken_barh(spans, (y - 0.05, 0.4), facecolors=colour[op], edgecolor=colour[op], linewidth=0.3)
            marks = [(c.started - t0) * 1e3 for c in rank.calls if c.op == op and c.ended is None]
            axes.plot(marks, [y + 0.15] * len(marks), "|", color=colour[op], markersize=12)
        regions = [((a - t0) * 1e3, (b - a) * 1e3) for _, a, b in rank.regions]
        axes.broken_barh(regions, (y - 0.4, 0.3), facecolors="0.85", edgecolor="0.4", linewidth=0.5)
        for name, a, b in rank.regions:
            axes.text(((a + b) / 2 - t0) * 1e3, y - 0.25, name, ha="center", va="center", fontsize=7, clip_on=True)
    axes.set_yticks(range(len(trace.ranks)), [f"rank {r.rank} ({r.host})" for r in reversed(trace.ranks)])
    axes.set_xlabel("ms since the first recorded call or region (rank 0's clock)")
    handles = [matplotlib.patches.Patch(color=colour[op], label=op) for op in ops]
    if any(r.regions for r in trace.ranks):
        handles.append(matplotlib.patches.Patch(facecolor="0.85", edgecolor="0.4", label="hpcdist.region"))
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    axes.set_title(title, fontsize=10)
    axes.grid(axis="x", linewidth=0.3)
    figure.savefig(path, dpi=110)
    plt.close(figure)
