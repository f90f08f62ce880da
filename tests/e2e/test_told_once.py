"""A failed job told once, as a user reads the console: a missing script, a module missing on every rank, a raising
rank and a hang, at 2 and 4 ranks, on gloo and on the mpi backend. The lines and blocks are counted."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest
from launching import PROGRAMS, crowded, launch

pytestmark = pytest.mark.e2e

HOST = socket.gethostname().split(".")[0]
SIZES = [2, 4]
BACKENDS = ["gloo", "mpi"]


@pytest.mark.parametrize("np", SIZES)
def test_a_missing_script_is_one_line_with_status_2(hpcdist: str, tmp_path: Path, np: int) -> None:
    missing = tmp_path / "trian.py"
    result = launch([hpcdist, "mpirun", "-np", str(np), "--", "python", str(missing)], timeout=120)
    assert result.returncode == 2, result.stderr
    assert re.fullmatch(
        re.escape(crowded(np))
        + rf"hpcdist: error: rank \d on {HOST}: python can't open file '{re.escape(str(missing))}': no such file; "
        r"check the script's path\n",
        result.stderr,
    ), result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("np", SIZES)
def test_a_module_missing_on_every_rank_is_one_line_with_where_it_was_imported(
    hpcdist: str, tmp_path: Path, np: int
) -> None:
    (tmp_path / "train.py").write_text("import torch\n\nimport torchvison  # misspelt\n")
    result = launch([hpcdist, "mpirun", "-np", str(np), "--", "python", str(tmp_path / "train.py")], timeout=120)
    assert result.returncode == 2, result.stderr
    where = re.escape(f"{tmp_path / 'train.py'}:3")
    assert re.fullmatch(
        re.escape(crowded(np))
        + rf"hpcdist: error: {where}: No module named 'torchvison'; install it for /\S+/python[\d.]*, or check its "
        r"name\n",
        result.stderr,
    ), result.stderr


@pytest.mark.parametrize("options", [[], ["--on-failure", "shrink"]], ids=["abort", "shrink"])
def test_a_syntax_error_in_the_program_is_one_line_with_where_it_is(
    hpcdist: str, tmp_path: Path, options: list[str]
) -> None:
    """Every rank meets it: one line and status 2, not a traceback per rank (nor, under shrink, a loss per rank)."""
    (tmp_path / "model.py").write_text("import torch\n\nlayer = torch.nn.Linear(2, 2\n")
    (tmp_path / "train.py").write_text("import model\n")
    result = launch([hpcdist, "mpirun", "-np", "4", *options, "--", "python", str(tmp_path / "train.py")], timeout=120)
    assert result.returncode == 2, result.stderr
    where = re.escape(f"{tmp_path / 'model.py'}:3")
    assert re.fullmatch(
        re.escape(crowded(4))
        + rf"hpcdist: error: {where}: SyntaxError: '\(' was never closed: 'layer = torch.nn.Linear\(2, 2'; fix the "
        r"code there\n",
        result.stderr,
    ), result.stderr


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("np", SIZES)
def test_a_raising_rank_s_traceback_is_told_once(hpcdist: str, tmp_path: Path, np: int, backend: str) -> None:
    fail = np - 1
    outcome = tmp_path / "outcome.json"
    result = launch(
        [
            hpcdist,
            "mpirun",
            "-np",
            str(np),
            "--outcome",
            str(outcome),
            "--",
            "python",
            str(PROGRAMS / "first_failure.py"),
        ],
        timeout=150,
        MARKERS=str(tmp_path),
        FAIL_RANK=str(fail),
        HOW="raise",
        BACKEND=backend,
    )
    assert result.returncode == 1, result.stderr
    err = result.stderr
    assert err.count("Traceback (most recent call last)") == 1, err
    assert err.count(f"ValueError: NaN in the gradients on rank {fail}") == 1, err
    assert len(re.findall(rf"^hpcdist: first failure: rank {fail} on {HOST} failed with exit code 1", err, re.M)) == 1
    assert "its last" not in err and "Python stacks" not in err.split("first failure")[1], err  # nothing after, again
    assert err.count("the other ranks' Python stacks") <= 1, err  # where the others wait: said once, if at all
    assert not re.search(r"\((?:[^()]*/)?hpcdist/[^()]*\.py:\d+\)", err), err  # no frame of hpcdist's own
    written = json.loads(outcome.read_text())  # the same story, for tools
    assert (written["status"], written["first_failure"]) == (1, [fail]), written
    assert written["failed"][str(fail)] == {"host": HOST, "how": "exit code 1"}, written


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("np", SIZES)
def test_a_hang_report_is_told_once(hpcdist: str, np: int, backend: str) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", str(np), "--", "python", str(PROGRAMS / "hang.py")],
        timeout=150,
        HANG="skip",
        BACKEND=backend,
        HPCDIST_TIMEOUT="5",
    )
    assert result.returncode == 1, result.stderr
    err = result.stderr
    assert err.count("first divergence:") == 1, err
    assert err.count("every rank's Python stacks") == 1, err
    assert err.count("hpcdist: first failure:") <= 1 and "its last" not in err, err
