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
SKIP = ["Not all ranks joining collective, sequence number: 2\n", "collective: gloo:all_reduce\nmissing ranks: {1}\n"]
P2P = [  # rank 2 waits in recv(src=0) while the others are in their second all_reduce
    "Not all ranks joining collective, sequence number: 2\n",
    "collective: gloo:all_reduce\nmissing ranks: {2}\n",
    "group info: 1:p2p 0->2\ncollective: gloo:recv 1<-0\nmissing ranks: {0}\n",
]


@pytest.mark.parametrize(
    ("backend", "hang", "verdict"),
    [pytest.param("gloo", "skip", SKIP, id="gloo-skip"), pytest.param("mpi", "p2p", P2P, id="mpi-backend-p2p")],
)  # (an id "mpi" would be pytest-mpi's marker)
def test_torchfrtrace_names_the_rank_that_the_others_wait_for(
    hpcdist: str, tmp_path: Path, backend: str, hang: str, verdict: list[str]
) -> None:
    where = ["--log-dir", str(tmp_path / "logs")] if backend == "gloo" else []  # mpi: HPCDIST_FR_DIR, with a space
    chosen = {"HPCDIST_FR_DIR": str(tmp_path / "fr dumps")} if backend == "mpi" else {}
    result = launch(
        [hpcdist, "mpirun", "-np", "4", *where, "--", "python", str(PROGRAMS / "hang.py")],
        timeout=150,
        HANG=hang,
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
    for line in verdict:
        assert line in text, text
