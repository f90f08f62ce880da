"""`hpcdist bench --plot`: pictures drawn from the JSON document that `--json` prints (matplotlib, Agg, no display).

A collective run draws bus bandwidth and time against message size, log-log, one line per implementation (each
backend and the raw-mpi4py reference), from the in-place rows, which are the same operation on every implementation
(torch's out-of-place rows also pay a copy). A `bench ddp` run draws each backend's step times as a box plot with
every step beside it. The caption holds the run's settings, so a picture explains itself. Because the picture is
made from the document alone, `--from FILE.json` redraws a saved run without measuring (nor importing torch).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..runtime.env import LaunchEnv
from .fmt import FLOOR, RAW_AGAIN, REFERENCE, human_bytes
from .plan import COLLECTIVE_OPTIONS, BenchOptions

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "FORMATS",
    "check_plot_file",
    "collective_figure",
    "ddp_figure",
    "draw",
    "figure",
    "load_run",
    "replot",
    "save",
]

FORMATS = ("png", "svg", "pdf")  # what Agg and matplotlib's own vector backends write without extra packages
_TOOLS = ("hpcdist bench", "hpcdist bench ddp", "hpcdist bench startup", "hpcdist bench recovery")
_COLOURS = {"torch/mpi4py": "tab:blue", "torch/mpi": "tab:blue", "torch/gloo": "tab:orange", "torch/nccl": "tab:green"}
_MEASURING = (*COLLECTIVE_OPTIONS, ("--timeout", "timeout"))


def check_plot_file(path: str, environ: Mapping[str, str] | None = None) -> None:
    """Refuse, before anything is measured, a --plot that could not be written: no matplotlib or an unknown format
    (on every rank, so all stop at once), or a directory that is not there (on the rank that will be rank 0 and
    draw: the directory may be on its host alone)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"--plot {path} needs matplotlib, which {sys.executable} cannot import ({exc}); install it with "
            "`pip install 'hpcdist[plot]'` (or `pip install matplotlib`), or drop --plot"
        ) from None
    target = Path(path)
    suffix = target.suffix.lstrip(".").lower()
    if suffix not in FORMATS:
        given = f"its suffix .{suffix} is not" if suffix else "a name without a suffix is not"
        raise UsageError(
            f"--plot {path}: {given} a picture format hpcdist draws; end the name with .png, .svg or .pdf, "
            "e.g. --plot bench.png"
        )
    if LaunchEnv.from_environ(os.environ if environ is None else environ).rank != 0:
        return
    try:
        if b"\0" in os.fsencode(path):
            raise UsageError(f"--plot {path!r}: a file name cannot hold a NUL character; give another name")
        if target.is_dir():
            raise UsageError(f"--plot {path} is a directory; give a file name, e.g. --plot {target / 'bench.png'}")
        folder = target.parent
        if not folder.is_dir():
            raise UsageError(
                f"--plot {path}: the directory {folder} does not exist; create it first or write elsewhere"
            )
        if not os.access(folder, os.W_OK):
            raise UsageError(f"--plot {path}: the directory {folder} is not writable; write the picture elsewhere")
    except (OSError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"--plot {path!r}: not a usable file name ({reason}); give a shorter, plainer name") from None


def load_run(path: str) -> dict[str, Any]:
    """A document saved from `hpcdist bench … --json`, checked as far as drawing needs it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"--from {path}: cannot read it ({exc}); give the file that `hpcdist bench … --json >FILE` wrote"
        ) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--from {path}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg}); save only what `hpcdist bench … --json` "
            "prints (rank 0's standard output)"
        ) from None
    except ValueError as exc:  # a number json cannot convert (an integer of over 4,300 digits)
        raise UsageError(
            f"--from {path}: not a document `hpcdist bench … --json` writes ({exc}); give the file it wrote"
        ) from None
    tool = doc.get("tool") if isinstance(doc, dict) else None
    if tool not in _TOOLS or doc.get("version") != 1:
        raise UsageError(
            f'--from {path} is not a version 1 document of `hpcdist bench --json` (its "tool" is {tool!r}); '
            "give the file that `hpcdist bench … --json >FILE` wrote"
        )
    if not isinstance(doc.get("results"), list) or not doc["results"]:
        raise UsageError(f"--from {path} holds no results to draw; give the output of a run that finished")
    return doc


def replot(args: BenchOptions) -> int:
    """`hpcdist bench --from FILE.json --plot FILE.png`: redraw a saved run, measuring nothing."""
    if args.source is None:
        raise UsageError("bench redraws a saved run from --from FILE.json; give the file a --json run wrote")
    if args.plot is None:
        raise UsageError(f"--from {args.source} redraws a saved run and needs --plot FILE.png; add it")
    given = [flag for flag, name in _MEASURING if getattr(args, name, None) is not None]
    given += [flag for flag in ("--reference", "--json") if getattr(args, flag.lstrip("-"))]
    given += ["--backend"] if args.backend != "auto" else []
    if given:
        raise UsageError(
            f"--from {args.source} redraws a saved run, so nothing is measured; drop {', '.join(given)} "
            "(the picture shows the settings the file was measured with)"
        )
    doc = load_run(args.source)
    kind = doc.get("collective") if doc["tool"] == "hpcdist bench" else doc["tool"].rsplit(" ", 1)[1]
    if args.collective is not None and isinstance(kind, str) and args.collective != kind:
        raise UsageError(
            f"--from {args.source} is a saved {kind} run, not {args.collective}; "
            f"give `bench {kind}` or leave the name out"
        )
    try:
        fig = figure(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(
            f"--from {args.source}: the document lacks or garbles what the picture needs ({type(exc).__name__}: "
            f"{exc}); give the file unchanged, as `hpcdist bench … --json` wrote it"
        ) from None
    save(fig, args.plot)
    return 0


def draw(doc: dict[str, Any], path: str) -> None:
    """Draw `doc` (as `--json` prints it) into `path`."""
    save(figure(doc), path)


def save(fig: Figure, path: str) -> None:
    """Write the picture (its format from the suffix) and say so on stderr."""
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise UsageError(
            f"--plot {path}: cannot write it ({exc.strerror or exc}); write the picture elsewhere"
        ) from None
    print(f"hpcdist bench: drew {path}", file=sys.stderr, flush=True)


def figure(doc: dict[str, Any]) -> Figure:
    """The picture of a collective, a DDP or a start-up document."""
    if doc["tool"] == "hpcdist bench startup":
        from .startup_plot import startup_figure

        return startup_figure(doc)
    return ddp_figure(doc) if doc["tool"] == "hpcdist bench ddp" else collective_figure(doc)


def _new_figure(width: float, height: float) -> Figure:
    """A figure on the Agg canvas: pyplot and its display backends are never involved."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _style(impl: str, index: int) -> dict[str, Any]:
    """The reference black and dashed (again: lighter), the floor grey and dotted; each backend its own colour, the
    same in every picture."""
    if impl == REFERENCE:
        return {"color": "black", "linestyle": "--", "marker": "s"}
    if impl == RAW_AGAIN:
        return {"color": "dimgrey", "linestyle": "--", "marker": "x"}
    if impl == FLOOR:
        return {"color": "grey", "linestyle": ":", "marker": "^"}
    return {"color": _COLOURS.get(impl, f"C{index + 3}"), "linestyle": "-", "marker": "o"}


def collective_figure(doc: dict[str, Any]) -> Figure:
    """Bus bandwidth (left) and time (right) against message size, log-log, one line per implementation."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    rows = doc["results"]
    impls = list(dict.fromkeys(row["impl"] for row in rows))
    fig = _new_figure(11.0, 5.4)
    bw_axes, time_axes = fig.subplots(1, 2)
    for index, impl in enumerate(impls):
        mine = [row for row in rows if row["impl"] == impl and row["size"] > 0]
        for axes, key in ((bw_axes, "bus_bw"), (time_axes, "time")):
            points = [(row["size"], row["in_place"][key]) for row in mine if row["in_place"][key] > 0]
            if points:
                axes.plot(*zip(*points, strict=True), label=impl, markersize=4, **_style(impl, index))
    sizes = sorted({row["size"] for row in rows if row["size"] > 0})
    ticks = _size_ticks(sizes)
    names = {
        bw_axes: ("bus bandwidth (GB/s, 1e9 B/s), in place", "bus bandwidth"),
        time_axes: ("time per call (µs), in place, slowest rank", "latency"),
    }
    for axes, (label, title) in names.items():
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.xaxis.set_major_locator(FixedLocator(ticks))
        axes.xaxis.set_minor_locator(NullLocator())
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: human_bytes(round(value))))
        axes.tick_params(axis="x", labelrotation=45)
        axes.set_xlabel("message size (bytes per rank, as the table's size column)")
        axes.set_ylabel(label)
        axes.set_title(title)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=8)
    env = doc.get("environment", {})
    fig.suptitle(f"hpcdist bench {doc['collective']}, {env.get('world_size', '?')} ranks: in-place rows")
    fig.supxlabel(_collective_caption(doc), fontsize=8, x=0.01, ha="left", multialignment="left")
    return fig


def _size_ticks(sizes: list[int]) -> list[int]:
    """Powers of two across the measured sizes, at most 10 of them, evenly spaced on the log axis."""
    if not sizes:
        return []
    low, high = sizes[0].bit_length() - 1, (sizes[-1] - 1).bit_length()
    step = max(1, -(-(high - low) // 9))
    return [2**power for power in range(low, high + 1, step)]


def ddp_figure(doc: dict[str, Any]) -> Figure:
    """Each backend's DDP step times: a box plot with every step beside it, the median and the speed-up on top."""
    results = doc["results"]
    fig = _new_figure(max(9.0, 3.2 + 2.2 * len(results)), 5.4)
    axes: Axes = fig.subplots()
    steps = [result["step_ms"] for result in results]
    positions = list(range(1, len(results) + 1))
    boxes = axes.boxplot(
        steps, positions=positions, widths=0.5, whis=(0, 100), patch_artist=True, medianprops={"color": "black"}
    )
    for index, (result, box) in enumerate(zip(results, boxes["boxes"], strict=True)):
        style = _style(result["impl"], index)
        box.set(facecolor=style["color"], alpha=0.35)
        spread = len(result["step_ms"]) - 1 or 1
        xs = [positions[index] + 0.3 + 0.12 * i / spread for i in range(len(result["step_ms"]))]
        axes.plot(xs, result["step_ms"], linestyle="none", marker=".", color=style["color"], label=result["impl"])
        text = f"median {statistics.median(result['step_ms']):.2f} ms"
        if result.get("speedup_vs_gloo") is not None and result["impl"] != "torch/gloo":
            text += f"\n{result['speedup_vs_gloo']:.2f}x gloo"
        axes.annotate(
            text,
            (positions[index], max(result["step_ms"])),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=8,
        )
    axes.set_xticks(positions, [result["impl"] for result in results])
    axes.set_xlim(0.4, len(results) + 0.8)
    axes.set_ylim(bottom=0, top=1.18 * max(max(s) for s in steps))
    axes.set_ylabel("DDP step time (ms), slowest rank")
    axes.grid(True, axis="y", alpha=0.3)
    env = doc.get("environment", {})
    fig.suptitle(f"hpcdist bench ddp, {env.get('world_size', '?')} ranks: step time per backend")
    fig.supxlabel(_ddp_caption(doc), fontsize=8, x=0.01, ha="left", multialignment="left")
    return fig


def _size_flag(size: int) -> str:
    """nccl-tests' spelling of a size: 64K, 1M, 2G, or bytes."""
    for unit, suffix in ((1024**3, "G"), (1024**2, "M"), (1024, "K")):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def _where(doc: dict[str, Any]) -> str:
    """`2 ranks on 1 host (vm), device cpu, launcher openmpi, torch threads per rank: 2`."""
    env, devices = doc.get("environment", {}), doc.get("devices", [])
    hosts = sorted({d["host"] for d in devices})
    kinds = sorted({d["device"] for d in devices})
    shown = ", ".join(hosts[:3]) + (", …" if len(hosts) > 3 else "")
    return (
        f"{env.get('world_size', len(devices))} ranks on {len(hosts)} host{'s' * (len(hosts) != 1)} ({shown}), "
        f"device {', '.join(kinds)}, launcher {env.get('launcher')}, "
        f"torch threads per rank: {env.get('torch_threads')}"
    )


def _versions(doc: dict[str, Any]) -> str:
    """`hpcdist 0.1.0, torch 2.13.0, mpi4py 4.1.0, Open MPI v5.0.8, numpy 2.3, Python 3.11.9`."""
    env = doc.get("environment", {})
    parts = [
        f"{name} {env[key]}"
        for name, key in (("hpcdist", "hpcdist"), ("torch", "torch"), ("mpi4py", "mpi4py"))
        if env.get(key)
    ]
    parts += [env["mpi_library"]] if env.get("mpi_library") else []
    parts += [f"{name} {env[key]}" for name, key in (("numpy", "numpy"), ("Python", "python")) if env.get(key)]
    return ", ".join(parts)


def _collective_caption(doc: dict[str, Any]) -> str:
    """The command line the run was measured with, what each point is, where it ran, and the versions."""
    config, first = doc["config"], doc["results"][0]
    step = f"-f {config['step_factor']}" if "step_factor" in config else f"-i {_size_flag(config['step_bytes'])}"
    command = (
        f"hpcdist bench {doc['collective']} -b {_size_flag(config['minimum_bytes'])} "
        f"-e {_size_flag(config['maximum_bytes'])} {step} -n {config['iterations']} -w {config['warmup_iters']} "
        f"--rounds {config['rounds']} -c {config['validation']} -d {doc.get('environment', {}).get('dtype')}"
        + (f" -o {first['redop']}" if first["redop"] != "none" else "")
        + (f" -r {first['root']}" if first["root"] >= 0 else "")
        + f" --backend {','.join(config['backends'])}"
        + (" --reference" if config["reference"] else "")
    )
    bounds = doc.get("out_of_bounds", {})
    checked = (
        "results not checked (-c 0)"
        if not config["validation"]
        else ("every checked result right" if bounds.get("okay") else f"{bounds.get('count')} results WRONG")
    )
    return "\n".join(
        [
            command,
            f"each point: the median of {config['rounds']} rounds of the -n iterations, rounds interleaved across "
            f"implementations, time = the slowest rank; busbw as nccl-tests; {checked}",
            f"torch/<backend>: dist calls on that backend's group (torch/mpi4py is hpcdist's mpi backend); "
            f"{REFERENCE}: MPI itself on numpy buffers (--reference); {FLOOR}: torch's dispatch of the same call on a "
            f"group that does nothing, plus {REFERENCE}'s time (the limit through torch's API); {RAW_AGAIN}: "
            f"{REFERENCE} timed again, its distance from it the run's noise",
            _where(doc),
            _versions(doc),
        ]
    )


def _ddp_caption(doc: dict[str, Any]) -> str:
    """The command, the model, how a step is timed, where it ran, and the versions."""
    config, model = doc["config"], doc.get("model", {})
    layers = "-".join(map(str, model.get("layers", [])))
    agree = "parameters agree on every rank" if doc.get("okay") else "parameters DIFFER between ranks"
    return "\n".join(
        [
            f"hpcdist bench ddp -n {config['iterations']} -w {config['warmup_iters']} "
            f"--backend {','.join(config['backends'])}",
            f"MLP {layers} ReLU ({model.get('parameters'):,} parameters), "
            f"batch {model.get('batch_per_rank')} per rank, "
            f"{str(model.get('loss')).upper()} loss, {str(model.get('optimizer')).upper()}; {agree}",
            "a step is forward+backward+optimizer step, timed as the slowest rank, backends interleaved step by step",
            "box: quartiles and median; whiskers: fastest to slowest step; dots: every step in order, left to right",
            _where(doc),
            _versions(doc),
        ]
    )
