"""The rank that began a failure is named first, however the launcher heard the ranks end (repeated: it varies)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from launching import PROGRAMS, launch

PROGRAM = str(PROGRAMS / "first_failure.py")
FIRST = re.compile(r"^hpcdist: first failure: (.*)$", re.MULTILINE)
HEADER = re.compile(r"^hpcdist: rank ([0-9]+) on \S+ (?:failed \(.*\)|finished .*); (?:its last|it printed)", re.M)

# (ranks, the failing rank, backend): each repetition fails another rank, rank 0 and the last rank among them; on
# both backends, but at 8 ranks (on a few cores, the slowest) once on each
RUNS = [
    *(
        (np, fail, backend)
        for np, fail in [(2, 1), (2, 0), (2, 1), (4, 2), (4, 1), (4, 3)]
        for backend in ("gloo", "mpi")
    ),
    (8, 5, "mpi"),
    (8, 3, "gloo"),
]


def _run(hpcdist_bin: str, markers: Path, np: int, fail: int, backend: str, how: str, **env: str) -> tuple[str, str]:
    """Launch the program (its ranks' markers in `markers`); the launcher's first-failure line and the whole stderr."""
    result = launch(
        [hpcdist_bin, "mpirun", "-np", str(np), "--", "python", PROGRAM],
        timeout=150,
        MARKERS=str(markers),
        FAIL_RANK=str(fail),
        HOW=how,
        BACKEND=backend,
        HPCDIST_TIMEOUT="4",
        **env,
    )
    assert result.returncode != 0, result.stderr
    found = FIRST.findall(result.stderr)
    assert len(found) == 1, result.stderr  # said once, by the launcher
    return found[0], result.stderr


@pytest.mark.parametrize(("np", "fail", "backend"), RUNS)
def test_the_rank_that_raised_is_named_first_and_its_casualties_after(
    hpcdist: str, tmp_path: Path, backend: str, np: int, fail: int
) -> None:
    first, stderr = _run(hpcdist, tmp_path, np, fail, backend, "raise")
    cause, _, then = first.partition("; then ")
    assert re.fullmatch(rf"rank {fail} on \S+ failed with exit code 1", cause), stderr
    casualties = [int(r) for r in re.findall(r"[0-9]+", then.removesuffix("failed after it"))]
    assert fail not in casualties and set(casualties) <= set(range(np)), stderr
    assert HEADER.findall(stderr) == [], stderr  # its lines were shown as they came: no summary repeats them
    assert stderr.count(f"ValueError: NaN in the gradients on rank {fail}") == 1, stderr  # its traceback, once


@pytest.mark.parametrize(("backend", "api"), [("gloo", "plain"), ("mpi", "plain"), ("gloo", "init")])
def test_a_rank_that_finished_while_the_others_waited_is_named(
    hpcdist: str, tmp_path: Path, backend: str, api: str
) -> None:
    first, stderr = _run(hpcdist, tmp_path, 4, 2, backend, "exit", API=api)
    waited = "finished its program while ranks 0-1,3 waited in all_reduce #2; then rank 0 failed after it"
    assert re.fullmatch(rf"rank 2 on \S+ {waited}", first), stderr  # rank 0 reported the hang: a casualty
    assert HEADER.findall(stderr) == [], stderr  # it printed nothing: named once, in the line above


@pytest.mark.parametrize("how", ["raise", "return"])
def test_hpcdist_launch_names_the_rank_that_began_the_failure(tmp_path: Path, how: str) -> None:
    program = [sys.executable, str(PROGRAMS / "first_failure_launch.py")]
    result = launch(program, timeout=150, HOW=how, HPCDIST_TIMEOUT="4", MARKERS=str(tmp_path))
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("{")] or [result.stderr]
    failed = json.loads(line)
    assert failed["rank"] == 2, failed["text"]
    expected = "raised ValueError: NaN in the gradients on rank 2" if how == "raise" else "returned while ranks "
    assert failed["text"].startswith(f"rank 2 on {failed['host']} {expected}"), failed["text"]
