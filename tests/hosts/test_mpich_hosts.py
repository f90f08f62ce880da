"""A lost host under MPICH across the two namespace hosts: Hydra's ssh launcher with tests/hosts/agent.

mpiexec runs inside n1 with hostname n1 and starts its proxy on n2 through the agent (HYDRA_LAUNCHER_EXEC, as
PRRTE's plm_ssh_agent for Open MPI); the MPICH venv is tests/conftest.py's. The workloads and a failing rank
across the hosts run on MPICH as on Open MPI in test_multihost.py (its `mpi_cluster` tests).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from netns_hosts import Hosts

NP = 4


def test_a_lost_host_ends_the_mpich_job_at_once(cluster: Hosts, mpich_python: Path, tmp_path: Path) -> None:
    script = 'touch "$HPCDIST_MARKER_DIR/ready$RANK" && exec sleep 600'
    launch = cluster.on_mpich(mpich_python).launch(["--", "sh", "-c", script], tmp_path)
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready*"))) < NP:
        assert launch.running(), launch.wait(10).stderr
        assert time.monotonic() < deadline, launch.err.read_text()
        time.sleep(0.2)
    broken = time.monotonic()
    cluster.kill("n2")
    result = launch.wait(60)
    seconds = time.monotonic() - broken
    print(f"\nhpcdist mpirun ended {seconds:.1f} s after n2 was killed, status {result.returncode}\n"
          f"--- stderr ---\n{result.stderr}", file=sys.stderr)
    assert result.returncode != 0, result.stderr
    # Hydra names no host: `[mpiexec@n1] control_cb (…): assert (!closed) failed`
    assert "assert (!closed) failed" in result.stderr
    assert "hpcdist: error: mpirun lost contact with a remote host (it names none)" in result.stderr
    assert seconds < 15
    assert cluster.pids("n1") == [] or all(not Path(f"/proc/{pid}").exists() for pid in cluster.pids("n1"))
