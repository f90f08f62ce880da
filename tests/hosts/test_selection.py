"""`hpcdist mpirun --include/--exclude` across the two namespace hosts, on Open MPI and MPICH: the ranks run where
the selection says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from netns_hosts import PROGRAMS, Hosts


@pytest.mark.parametrize(("selection", "host"), [(["--exclude", "n2"], "n1"), (["--include", "n2"], "n2")])
def test_every_rank_runs_on_the_selected_host(
    mpi_cluster: Hosts, tmp_path: Path, selection: list[str], host: str
) -> None:
    program = [sys.executable, str(PROGRAMS / "marked.py"), "-m", "hpcdist", "run", "allreduce", "--backend", "gloo"]
    # the hostfile is `n1 slots=2, n2 slots=2`; one host's two slots are left
    result = mpi_cluster.launch(["-np", "2", *selection, "--", *program], tmp_path).wait(180)
    assert result.returncode == 0, result.stderr
    markers = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("rank*"))]
    assert [(m["rank"], m["host"], m["status"]) for m in markers] == [(0, host, 0), (1, host, 0)], result.stderr
