"""Flight Recorder dumps end to end: a hang report writes one per rank, and torchfrtrace names the culprit."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from launching import BIN, PROGRAMS, launch

COMMAND = re.compile(r"hpcdist: Flight Recorder dumps of each rank's calls are in (.+); analyse them with: (.+)$", re.M)


@pytest.mark.parametrize("backend", ["gloo", "mpi"], ids=["gloo", "mpi-backend"])  # an id "mpi" is pytest-mpi's marker
def test_torchfrtrace_names_the_rank_missing_from_the_collective_the_others_wait_in(
    hpcdist: str, tmp_path: Path, backend: str
) -> None:
    where = ["--log-dir", str(tmp_path / "logs")] if backend == "gloo" else []  # mpi: HPCDIST_FR_DIR, with a space
    chosen = {"HPCDIST_FR_DIR": str(tmp_path / "fr dumps")} if backend == "mpi" else {}
    result = launch(
        [hpcdist, "mpirun", "-np", "4", *where, "--", "python", str(PROGRAMS / "hang.py")],
        timeout=150,
        HANG="skip",
        HPCDIST_TIMEOUT="3",
        BACKEND=backend,
        **chosen,
    )
    assert result.returncode != 0
    found = COMMAND.search(result.stderr)
    assert found, result.stderr
    directory = tmp_path / ("logs/fr" if backend == "gloo" else "fr dumps")
    assert found.group(1) == str(directory)
    assert sorted(path.name for path in directory.iterdir()) == [f"fr_rank_{rank}" for rank in range(4)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    analysis = subprocess.run(shlex.split(found.group(2)), env=env, capture_output=True, text=True, timeout=120)
    assert analysis.returncode == 0, analysis.stderr
    text = analysis.stdout + analysis.stderr
    assert "Not all ranks joining collective, sequence number: 2\n" in text, text
    assert "collective: gloo:all_reduce\nmissing ranks: {1}\n" in text, text
