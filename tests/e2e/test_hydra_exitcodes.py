"""Hydra's `-print-all-exitcodes` read by `hpcdist mpirun`: real MPICH and Intel MPI ranks, one ending abruptly.

A rank that ends without MPI_Finalize (os._exit, a signal) makes Hydra kill the others and print each rank's status;
hpcdist names them. (After MPI_Abort, the shim's ending of a raise, MPICH prints none: the shim names that rank.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from launching import launch

# Rank 2 ends as asked after a second. The others end by os._exit(0) after 5 s, if Hydra has not killed them
# by then. (Left to sleep on, they hang in about half the runs under MPICH: Hydra ends nothing after rank 2's
# os._exit(3) while the shims wait for it; seen on main too, left to the Hydra fault work.)
PROGRAM = "import os, time; r = os.environ['RANK']; time.sleep(1 if r == '2' else 5); ({}) if r == '2' else os._exit(0)"


@pytest.mark.parametrize(("how", "says"), [
    ("os._exit(3)", "rank 2 exit code 3"),
    ("os.kill(os.getpid(), 9)", "killed by SIGKILL"),
])  # fmt: skip
@pytest.mark.parametrize("venv", ["mpich_python", "impi_python"])
def test_hydras_exit_statuses_are_named_per_rank(venv: str, how: str, says: str,
                                                request: pytest.FixtureRequest) -> None:  # fmt: skip
    python: Path = request.getfixturevalue(venv)
    result = launch([str(python), "-m", "hpcdist", "mpirun", "-np", "4", "--", "python", "-c", PROGRAM.format(how)],
                    timeout=120)  # fmt: skip
    assert result.returncode != 0, result.stderr
    assert "Exit codes:" not in result.stdout + result.stderr, result.stdout  # Hydra's block: read, not shown
    line = next((x for x in result.stderr.splitlines() if x.startswith("hpcdist: exit statuses as Hydra")), "")
    assert says in line, result.stderr
    assert "rank 2 on " in result.stderr, result.stderr  # the tagger's naming stands beside it
