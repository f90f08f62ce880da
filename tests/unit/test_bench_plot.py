"""`hpcdist bench --plot` and `--from`: pictures drawn from fixed result rows, checked on the Figure, and the errors."""

from __future__ import annotations

import argparse
import json
import re
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pytest

from hpcdist.bench.ddp import DdpResult, ddp_document, ddp_plan_from_options
from hpcdist.bench.fmt import FLOOR, RAW_AGAIN, REFERENCE, Result, compare, json_row
from hpcdist.bench.plan import BenchOptions, bandwidths, byte_counts, plan_from_options
from hpcdist.bench.plot import check_plot_file, collective_figure, ddp_figure, draw, load_run
from hpcdist.bench.run import collective_document
from hpcdist.cli import build_parser, main
from hpcdist.cli.diagnose import bench as run_bench
from hpcdist.cli.diagnose import bench_options
from hpcdist.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "all_reduce -b 8 -e 64K -f 4 --backend mpi,gloo --reference"
IMPLS = ("torch/mpi4py", "torch/gloo", REFERENCE, FLOOR, RAW_AGAIN)  # as run_plan orders them
LATENCY_US = {"torch/mpi4py": 7.0, "torch/gloo": 250.0, REFERENCE: 1.5, FLOOR: 6.5, RAW_AGAIN: 1.6}
ENV = {
    "backend": "mpi4py",
    "backends": ["mpi4py", "gloo"],
    "world_size": 2,
    "dtype": "float32",
    "torch_threads": 1,
    "launcher": "openmpi",
    "hpcdist": "0.1.0",
    "torch": "2.13.0",
    "numpy": "2.3.0",
    "python": "3.11.9",
    "mpi4py": "4.1.0",
    "mpi_library": "Open MPI v5.0.8",
}
DEVICES = [{"rank": r, "host": "vm", "pid": 100 + r, "device": "cpu"} for r in range(2)]
STEPS = {"torch/mpi4py": (11.0, 12.5, 10.5, 11.2, 30.0), "torch/gloo": (16.0, 17.5, 15.1, 16.4, 16.2)}


def _namespace(argv: str) -> argparse.Namespace:
    """`hpcdist bench ARGV` parsed, as the CLI hands it to its bench command."""
    return build_parser().parse_args(["bench", *argv.split()])


def _args(argv: str) -> BenchOptions:
    return bench_options(_namespace(argv))


def _data(values: object) -> Sequence[float]:
    """A drawn line's x or y data (matplotlib types it as any array-like; here a sequence of numbers)."""
    return cast(Sequence[float], values)


def _collective_doc(command: str = COMMAND) -> dict:
    """The document run_plan builds, from fixed timings: latency plus size at 10 GB/s (gloo 1 GB/s)."""
    plan = plan_from_options(_args(command))
    rows = []
    for size in plan.sizes:
        counts = byte_counts(plan.collective, size, plan.elsize, 2)
        for impl in IMPLS:
            seconds = LATENCY_US[impl] * 1e-6 + size / (1e9 if impl == "torch/gloo" else 1e10)
            result = Result(seconds * 1e6, *bandwidths(plan.collective, size, seconds, 2), 0)
            rows.append(json_row(size, counts.param, plan, impl, result, result))
    return collective_document(plan, dict(ENV), DEVICES, rows, 0, {}, compare(rows, REFERENCE))


def _ddp_doc() -> dict:
    plan = ddp_plan_from_options(_args("ddp -n 5 -w 1 --backend mpi,gloo"))
    return ddp_document(plan, dict(ENV), DEVICES, [DdpResult(impl, steps, 0) for impl, steps in STEPS.items()])


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's signature and IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_the_collective_picture_has_one_log_log_line_per_implementation_from_the_in_place_rows() -> None:
    doc = _collective_doc()
    fig = collective_figure(doc)
    bw_axes, time_axes = fig.axes
    sizes = [8, 32, 128, 512, 2048, 8192, 32768]
    for axes, key in ((bw_axes, "bus_bw"), (time_axes, "time")):
        assert (axes.get_xscale(), axes.get_yscale()) == ("log", "log")
        assert [line.get_label() for line in axes.get_lines()] == list(IMPLS)
        legend = axes.get_legend()
        assert legend is not None
        assert [text.get_text() for text in legend.get_texts()] == list(IMPLS)
        for line, impl in zip(axes.get_lines(), IMPLS, strict=True):
            want = [row["in_place"][key] for row in doc["results"] if row["impl"] == impl]
            assert list(_data(line.get_xdata())) == sizes and list(_data(line.get_ydata())) == want
        reference, floor, again = axes.get_lines()[-3:]
        assert (reference.get_color(), reference.get_linestyle()) == ("black", "--")
        assert (floor.get_color(), floor.get_linestyle()) == ("grey", ":")
        assert (again.get_color(), again.get_linestyle(), again.get_marker()) == ("dimgrey", "--", "x")
    assert bw_axes.get_ylabel().startswith("bus bandwidth (GB/s")
    assert time_axes.get_ylabel().startswith("time per call (µs)")
    fig.canvas.draw()
    assert [t.get_text() for t in bw_axes.get_xticklabels()] == [
        "8 B",
        "32 B",
        "128 B",
        "512 B",
        "2 KiB",
        "8 KiB",
        "32 KiB",
    ]
    assert fig.get_suptitle() == "hpcdist bench all_reduce, 2 ranks: in-place rows"


def test_the_collective_caption_holds_the_run_s_settings() -> None:
    caption = collective_figure(_collective_doc()).get_supxlabel().splitlines()
    assert caption[0] == (
        "hpcdist bench all_reduce -b 8 -e 64K -f 4 -n 20 -w 5 --rounds 5 -c 1 -d float32 -o sum "
        "--backend mpi,gloo --reference"
    )
    assert "median of 5 rounds" in caption[1] and "every checked result right" in caption[1]
    assert "torch/mpi4py is hpcdist's mpi backend" in caption[2]
    assert caption[3] == "2 ranks on 1 host (vm), device cpu, launcher openmpi, torch threads per rank: 1"
    assert caption[4] == "hpcdist 0.1.0, torch 2.13.0, mpi4py 4.1.0, Open MPI v5.0.8, numpy 2.3.0, Python 3.11.9"


def test_a_rooted_data_movement_run_names_its_root_and_no_reduction() -> None:
    caption = collective_figure(_collective_doc("broadcast -b 1K -e 4K -i 1K -r 1 --backend gloo")).get_supxlabel()
    assert caption.splitlines()[0] == (
        "hpcdist bench broadcast -b 1K -e 4K -i 1K -n 20 -w 5 --rounds 1 -c 1 -d float32 -r 1 --backend gloo"
    )


def test_zero_sizes_and_zero_bandwidths_are_left_out_of_the_log_axes() -> None:
    doc = _collective_doc()
    doc["results"].insert(0, {**doc["results"][0], "size": 0})
    doc["results"][1] = {**doc["results"][1], "in_place": {**doc["results"][1]["in_place"], "bus_bw": 0.0}}
    bw_axes, time_axes = collective_figure(doc).axes
    assert next(iter(_data(bw_axes.get_lines()[0].get_xdata()))) == 32  # 0 B dropped, and 8 B whose busbw is 0
    assert next(iter(_data(time_axes.get_lines()[0].get_xdata()))) == 8


def test_a_wrong_result_is_said_in_the_caption() -> None:
    doc = _collective_doc()
    doc["out_of_bounds"] = {"count": 3, "okay": False}
    assert "3 results WRONG" in collective_figure(doc).get_supxlabel()


def test_the_ddp_picture_shows_each_backend_s_steps_its_median_and_the_speed_up() -> None:
    fig = ddp_figure(_ddp_doc())
    (axes,) = fig.axes
    assert [t.get_text() for t in axes.get_xticklabels()] == list(STEPS)
    dots = [line for line in axes.get_lines() if line.get_label() in STEPS]
    assert [tuple(_data(line.get_ydata())) for line in dots] == list(STEPS.values())
    assert len(axes.patches) == len(STEPS)  # one box per backend
    notes = [text.get_text() for text in axes.texts]
    assert notes == ["median 11.20 ms\n1.45x gloo", "median 16.20 ms"]
    assert axes.get_ylim()[0] == 0 and axes.get_ylim()[1] > 30.0  # the slowest step is in view
    caption = fig.get_supxlabel().splitlines()
    assert caption[0] == "hpcdist bench ddp -n 5 -w 1 --backend mpi,gloo"
    assert caption[1].startswith("MLP 512-1024-1024-512 ReLU (2,099,712 parameters), batch 32 per rank")
    assert fig.get_suptitle() == "hpcdist bench ddp, 2 ranks: step time per backend"


@pytest.mark.parametrize("make", [_collective_doc, _ddp_doc])
def test_draw_writes_a_png_of_a_sane_size(make, tmp_path: Path, capsys) -> None:
    path = tmp_path / "bench.png"
    draw(make(), str(path))
    width, height = _png_size(path)
    assert 800 <= width <= 1600 and 400 <= height <= 900
    assert 20_000 < path.stat().st_size < 1_000_000
    assert capsys.readouterr().err == f"hpcdist bench: drew {path}\n"


@pytest.mark.parametrize(("name", "magic"), [("b.svg", b"<?xml"), ("b.pdf", b"%PDF")])
def test_the_suffix_picks_the_format(name: str, magic: bytes, tmp_path: Path) -> None:
    draw(_collective_doc(), str(tmp_path / name))
    assert (tmp_path / name).read_bytes().startswith(magic)


def test_without_matplotlib_plot_is_a_usage_error_that_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(
        UsageError,
        match=r"--plot b\.png needs matplotlib, which .* cannot import .*; install it "
        r"with `pip install 'hpcdist\[plot\]'` \(or `pip install matplotlib`\), "
        r"or drop --plot",
    ):
        check_plot_file("b.png")


def test_without_matplotlib_the_cli_stops_before_measuring(tmp_path: Path) -> None:
    """In a fresh process that cannot import matplotlib: exit 2, the message, and torch never imported (nothing
    was initialised, let alone measured)."""
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from hpcdist.cli import main\n"
        f"status = main(['bench', 'all_reduce', '--plot', {str(tmp_path / 'b.png')!r}])\n"
        "print('torch imported' if 'torch' in sys.modules else 'torch not imported'); sys.exit(status)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"hpcdist: error: --plot {tmp_path / 'b.png'} needs matplotlib")
    assert "pip install 'hpcdist[plot]'" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == "torch not imported\n"
    assert not (tmp_path / "b.png").exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "b.txt",
            r"--plot {p}: its suffix \.txt is not a picture format hpcdist draws; end the name with \.png, \.svg "
            r"or \.pdf",
        ),
        ("bench", r"--plot {p}: a name without a suffix is not a picture format"),
        ("missing/b.png", r"--plot {p}: the directory {d} does not exist; create it first or write elsewhere"),
    ],
)
def test_a_plot_file_that_cannot_be_written_is_refused_first(name: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / name
    with pytest.raises(UsageError, match=message.format(p=re.escape(str(path)), d=re.escape(str(path.parent)))):
        check_plot_file(str(path))


def test_only_the_rank_that_draws_checks_the_directory(tmp_path: Path) -> None:
    """Rank 0 draws, so only rank 0 looks for the directory (it may exist on rank 0's host alone); every rank
    checks the format (and matplotlib), so all stop at once."""
    missing = str(tmp_path / "missing" / "b.png")
    ompi = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    rank1 = {**ompi, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    check_plot_file(missing, rank1)
    with pytest.raises(UsageError, match="does not exist"):
        check_plot_file(missing, {**ompi, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    with pytest.raises(UsageError, match="not a picture format"):
        check_plot_file(str(tmp_path / "b.jpg"), rank1)


def test_a_directory_is_not_a_plot_file(tmp_path: Path) -> None:
    (tmp_path / "d.png").mkdir()
    with pytest.raises(UsageError, match=r"is a directory; give a file name"):
        check_plot_file(str(tmp_path / "d.png"))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("b\0.png", r"a file name cannot hold a NUL character"),
        ("9" * 300 + ".png", r"not a usable file name \(File name too long\); give a shorter, plainer name"),
    ],
)
def test_a_name_the_file_system_refuses_is_a_usage_error(name: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=message):
        check_plot_file(str(tmp_path / name))


def _saved(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


@pytest.mark.parametrize(
    ("make", "name"), [(_collective_doc, ""), (_collective_doc, "all_reduce"), (_ddp_doc, ""), (_ddp_doc, "ddp")]
)
def test_from_redraws_a_saved_run_without_measuring(make, name: str, tmp_path: Path) -> None:
    saved, picture = _saved(tmp_path, make()), tmp_path / "again.png"
    argv = ["bench", *([name] if name else []), "--from", str(saved), "--plot", str(picture)]
    assert main(argv) == 0
    assert _png_size(picture)[0] >= 800
    again = load_run(str(saved))
    assert again == json.loads(json.dumps(make()))


def test_from_is_a_text_only_command_that_never_imports_torch(tmp_path: Path) -> None:
    saved = _saved(tmp_path, _collective_doc())
    code = (
        "import sys\nfrom hpcdist.cli import main\n"
        f"status = main(['bench', '--from', {str(saved)!r}, '--plot', {str(tmp_path / 'b.png')!r}])\n"
        "print(status, 'torch' in sys.modules, 'mpi4py.MPI' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout == "0 False False\n", proc.stderr
    assert (tmp_path / "b.png").stat().st_size > 20_000


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("", r"--from {f} redraws a saved run and needs --plot FILE\.png; add it"),
        (
            "--plot {o} -b 8 --backend mpi --json",
            r"--from {f} redraws a saved run, so nothing is measured; drop -b, "
            r"--json, --backend \(the picture shows the settings",
        ),
        (
            "broadcast --plot {o}",
            r"--from {f} is a saved all_reduce run, not broadcast; give `bench all_reduce` or leave ",
        ),
        ("ddp --plot {o}", r"--from {f} is a saved all_reduce run, not ddp"),
    ],
)
def test_from_refuses_what_it_cannot_honour(extra: str, message: str, tmp_path: Path) -> None:
    saved, out = _saved(tmp_path, _collective_doc()), tmp_path / "b.png"
    args = _namespace(f"--from {saved} " + extra.format(o=out))
    with pytest.raises(UsageError, match=message.format(f=re.escape(str(saved)))):
        run_bench(args)
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, r"--from {f}: cannot read it \(.*No such file"),
        (
            '{"tool": "hpcdist bench",\n  oops',
            r"--from {f}:2:3: not JSON \(.*\); save only what `hpcdist bench … "
            r"--json` prints",
        ),
        (
            '{"tool": "nccl-tests", "version": 1}',
            r"--from {f} is not a version 1 document of `hpcdist bench --json` "
            r"\(its \"tool\" is 'nccl-tests'\)",
        ),
        ("[1, 2]", r"its \"tool\" is None"),
        ("1" * 4400, r"--from {f}: not a document `hpcdist bench … --json` writes \(Exceeds the limit \(4300 digits\)"),
        ('{"tool": "hpcdist bench", "version": 1, "results": []}', r"--from {f} holds no results to draw"),
        (
            '{"tool": "hpcdist bench", "version": 1, "collective": "all_reduce", "results": [{"impl": "x"}]}',
            r"--from {f}: the document lacks or garbles what the picture needs \(KeyError: 'size'\); give the file "
            r"unchanged",
        ),
    ],
)
def test_a_saved_run_that_cannot_be_drawn_is_a_usage_error(text: str | None, message: str, tmp_path: Path) -> None:
    saved = tmp_path / "run.json"
    if text is not None:
        saved.write_text(text)
    with pytest.raises(UsageError, match=message.format(f=re.escape(str(saved)))):
        run_bench(_namespace(f"--from {saved} --plot {tmp_path / 'b.png'}"))


def test_bench_without_an_operation_or_from_says_what_to_give(capsys) -> None:
    assert main(["bench"]) == 2
    assert capsys.readouterr().err == (
        "hpcdist: error: bench needs the operation to time, e.g. `hpcdist bench all_reduce` or `hpcdist bench ddp`, "
        "or --from FILE.json --plot FILE.png to redraw a saved run\n"
    )


# Hostile input (the property tier's helpers): any --plot name and any --from file end in a picture or a usage error.
from datetime import timedelta  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_properties import NUMBERS, SETTINGS, TEXT, cli, mostly  # noqa: E402

LEAVES = st.one_of(TEXT, NUMBERS, st.none(), st.booleans(), st.just([]), st.just({}), st.floats())


@st.composite
def _garbled(draw) -> str:
    """A saved run with one value replaced or removed: at the top, in config/environment, or in a row."""
    doc = draw(st.sampled_from([_collective_doc, _ddp_doc]))()
    where = draw(st.sampled_from(["", "config", "environment", "results.0", "results.0.in_place", "model"]))
    node = doc
    for part in filter(None, where.split(".")):
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    key = draw(st.sampled_from(sorted(node) or ["x"]))
    if draw(st.booleans()):
        node.pop(key, None)
    else:
        node[key] = draw(LEAVES)
    return json.dumps(doc)


@settings(SETTINGS, max_examples=20, deadline=timedelta(seconds=30))  # a picture takes seconds on a busy machine
@given(
    name=mostly(st.sampled_from(["b.png", "b.svg", "sub/b.png", "b", "b.PNG"]), TEXT.map(lambda t: t + ".png")),
    text=st.one_of(_garbled(), TEXT, st.just(json.dumps(_collective_doc()))),
    named=st.booleans(),
)
def test_any_plot_name_and_any_saved_file_give_a_picture_or_a_usage_error(
    tmp_path_factory, name: str, text: str, named: bool
) -> None:
    folder = tmp_path_factory.mktemp("plot")
    saved = folder / "run.json"
    saved.write_bytes(text.encode("utf-8", "surrogatepass"))
    cli(["bench", *(["all_reduce"] if named else []), "--from", str(saved), "--plot", f"{folder}/{name}"])
