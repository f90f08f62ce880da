"""`hpcdist bench --plot` on real ranks: `hpcdist mpirun -np 2`, rank 0 alone draws, the picture is the JSON's."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from launching import launch

SMALL = ["all_reduce", "-b", "8", "-e", "64K", "-f", "4", "--backend", "mpi,gloo", "--reference"]
SIZES = [8, 32, 128, 512, 2048, 8192, 32768]
IMPLS = ["torch/mpi4py", "torch/gloo", "raw-mpi4py", "torch-floor", "raw-again"]


def _bench(hpcdist: str, *argv: str, **env: str):
    return launch([hpcdist, "mpirun", "-np", "2", "--", hpcdist, "bench", *argv], timeout=240, **env)


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_two_ranks_print_the_table_and_rank_0_alone_draws_it(hpcdist: str, tmp_path: Path) -> None:
    picture = tmp_path / "out.png"
    result = _bench(hpcdist, *SMALL, "--plot", str(picture))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line and not line.startswith("#")]
    assert [(int(row[0]), row[-1]) for row in rows] == [(size, impl) for size in SIZES for impl in IMPLS]
    assert all(float(row[5]) > 0 and float(row[9]) > 0 for row in rows)  # out-of-place and in-place times
    assert result.stderr.count(f"hpcdist bench: drew {picture}\n") == 1  # one rank drew
    width, height = _png_size(picture)
    assert 800 <= width <= 1600 and 400 <= height <= 900 and picture.stat().st_size > 20_000


def test_the_picture_is_the_json_s_and_from_redraws_it_byte_for_byte(hpcdist: str, tmp_path: Path) -> None:
    measured, redrawn, saved = tmp_path / "measured.png", tmp_path / "redrawn.png", tmp_path / "run.json"
    result = _bench(hpcdist, *SMALL, "--json", "--plot", str(measured))
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)  # stdout is the JSON alone: the drawing's note goes to stderr
    assert [(row["size"], row["impl"]) for row in doc["results"]] == [(s, i) for s in SIZES for i in IMPLS]
    saved.write_text(result.stdout)
    again = launch([hpcdist, "bench", "--from", str(saved), "--plot", str(redrawn)], timeout=120)
    assert again.returncode == 0 and again.stdout == "", again.stderr
    assert redrawn.read_bytes() == measured.read_bytes()


def test_bench_ddp_draws_the_step_times(hpcdist: str, tmp_path: Path) -> None:
    picture = tmp_path / "ddp.svg"
    result = _bench(hpcdist, "ddp", "-n", "4", "-w", "1", "--backend", "mpi,gloo", "--plot", str(picture))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "# Parameters agree on every rank: OK" in result.stdout
    assert result.stderr.count(f"hpcdist bench: drew {picture}\n") == 1
    svg = picture.read_text()
    assert svg.startswith("<?xml") and "torch/mpi4py" in svg and "torch/gloo" in svg and "x gloo" in svg


def test_without_matplotlib_every_rank_stops_before_measuring(hpcdist: str, tmp_path: Path) -> None:
    """A matplotlib that cannot be imported (first on PYTHONPATH, which mpirun passes to the ranks): exit 2 on the
    ranks with the install hint, no table started, no picture."""
    blocker = tmp_path / "blocked" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib is blocked for this test')\n")
    path = os.pathsep.join(filter(None, [str(blocker.parent), os.environ.get("PYTHONPATH", "")]))
    result = _bench(hpcdist, *SMALL, "--plot", str(tmp_path / "out.png"), PYTHONPATH=path)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"hpcdist: error: --plot {tmp_path / 'out.png'} needs matplotlib" in output
    assert "pip install 'hpcdist[plot]'" in output and "Traceback" not in output
    assert "# hpcdist bench" not in output and not (tmp_path / "out.png").exists()
