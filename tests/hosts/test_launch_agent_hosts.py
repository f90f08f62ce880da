"""`hpcdist mpirun --launch-agent tests/hosts/agent`: the agent given on the command line reaches n2, in Open MPI's
dialect (--prtemca plm_ssh_agent) and MPICH's (-launcher ssh -launcher-exec), with no agent in the environment."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from netns_hosts import AGENT, BIN, PROGRAMS, Hosts, Launch

RANKS_ON = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}


@pytest.mark.parametrize("family", ["openmpi", "mpich"])
def test_the_launch_agent_option_starts_the_ranks_on_n2(cluster: Hosts, family: str, request: pytest.FixtureRequest,
                                                        tmp_path: Path) -> None:  # fmt: skip
    python = BIN / "python" if family == "openmpi" else request.getfixturevalue("mpich_python")
    env = {name: value for name, value in os.environ.items() if not name.startswith(("HYDRA_", "PRTE_MCA_"))}
    env |= {
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "HPCDIST_AGENT_ENV": "clean",  # as ssh: what the ranks on n2 get comes through the launcher
        "HPCDIST_TIMEOUT": "120",
        "HPCDIST_MARKER_DIR": str(tmp_path),
    }
    program = ["python", str(PROGRAMS / "marked.py"), "-m", "hpcdist", "run", "allreduce", "--backend", "gloo"]
    argv = ["ip", "netns", "exec", "hpc-n1", "unshare", "--uts", "sh", "-c", 'hostname n1 && exec "$@"', "sh",
            str(python), "-m", "hpcdist", "mpirun", "--mpi", family, "--launch-agent", str(AGENT), "--hostfile",
            str(cluster.hostfile), "-np", "4", "--", *program]  # fmt: skip
    result = Launch(argv, env, tmp_path).wait(240)
    assert result.returncode == 0, result.stderr
    lines = set(result.stdout.splitlines())
    assert {f"rank {r}: all_reduce SUM over all ranks -> [10.0, 20.0, 30.0]" for r in range(4)} <= lines, result.stdout
    markers = {int(p.name[4:]): json.loads(p.read_text()) for p in tmp_path.glob("rank*")}
    assert {rank: m["host"] for rank, m in markers.items()} == RANKS_ON, markers
