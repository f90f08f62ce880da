"""`hpcdist bench startup --plot`: the measured start-up curves and the model's extrapolation (matplotlib, Agg)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .startup import ROWS, points_from_json, summarise
from .startup_model import CLUSTERS, SCALES, fit_models

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["startup_figure"]

_STYLE = {
    "hpcdist": ("tab:blue", "o"),
    "mpirun": ("black", "s"),
    "hpcdist-gloo": ("tab:orange", "o"),
    "mpirun-gloo": ("tab:green", "s"),
    "torchrun-gloo": ("tab:red", "^"),
}
# (ranks, seconds, what): the published start-ups the extrapolation is held against
_REFERENCES = ((229_376, 22.0, "MVAPICH, MPI_Init"), (96_000, 100.0, "torch libuv TCPStore"))


def startup_figure(doc: dict[str, Any]) -> Figure:
    """Left: wall time against ranks on this host, log-log, each row's medians with their spread and its model;
    right: the model on a cluster up to 100,000 ranks, beside the references."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    config, env = doc["config"], doc["environment"]
    summary = summarise(points_from_json(doc["results"]))
    models = {m.row: m for m in fit_models(config["rows"], summary, env["cores"])}
    fig = Figure(figsize=(12.0, 5.6), layout="constrained")
    FigureCanvasAgg(fig)
    here, cluster = fig.subplots(1, 2)
    for row in config["rows"]:
        colour, marker = _STYLE.get(row, ("grey", "x"))
        ns = sorted(n for name, n in summary if name == row)
        if not ns:
            continue
        walls = [summary[(row, n)]["wall"] for n in ns]
        spread = [
            [w - summary[(row, n)]["low"] for n, w in zip(ns, walls, strict=True)],
            [summary[(row, n)]["high"] - w for n, w in zip(ns, walls, strict=True)],
        ]
        here.errorbar(ns, walls, yerr=spread, color=colour, marker=marker, label=row, capsize=3, linestyle="-")
        model = models.get(row)
        if model is None:
            continue
        busy = [summary[(row, n)]["others_busy"] for n in ns]
        here.plot(ns, [model.here(n, b) for n, b in zip(ns, busy, strict=True)], color=colour, linestyle=":", lw=1)
        reach = [2**k for k in range(0, 19)]
        shape = CLUSTERS[ROWS[row].mode]
        totals = [model.terms(n, shape) for n in reach]
        cluster.plot(reach, [sum(t.values()) for t in totals], color=colour, label=row, linestyle="-")
        cluster.plot(reach, [sum(t.values()) - t["peers"] for t in totals], color=colour, linestyle="--", lw=1)
    for n, seconds, what in _REFERENCES:
        cluster.plot([n], [seconds], marker="*", markersize=12, color="purple", linestyle="none")
        cluster.annotate(what, (n, seconds), textcoords="offset points", xytext=(-8, 8), ha="right", fontsize=8)
    for scale in SCALES:
        cluster.axvline(scale, color="grey", linewidth=0.8, linestyle="--")
        cluster.annotate(
            f"{scale:,}",
            (scale, 1),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            fontsize=8,
            textcoords="offset points",
        )
    hosts = config.get("hosts") or []
    where = f"on {len(hosts)} hosts sharing them" if hosts else "on this host"
    for axes, title in (
        (here, f"measured {where} ({env['cores']} cores, oversubscribed); dotted: the model, under the same load"),
        (cluster, "on a cluster (gloo rows 8 ranks a node, others 128); dashed: without peers"),
    ):
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xlabel("ranks")
        axes.set_ylabel("seconds from launch to exit")
        axes.set_title(title, fontsize=9)
        axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axes.yaxis.set_minor_formatter(NullFormatter())
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=8)
    fig.suptitle("hpcdist bench startup: time to start N ranks (and for the gloo rows, init + one barrier)")
    fig.supxlabel(
        f"{env['date']}, {env['host_os']}, {env['cores']} cores, load average {env['load_before']:.1f} before, "
        f"{env['load_after']:.1f} after; median of up to {config['repeats']} repeats, bars min-max\n{env['versions']}",
        fontsize=8,
    )
    return fig
