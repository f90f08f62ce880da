"""Two ranks started as Cray PALS's mpiexec, LSF's jsrun and Flux's flux run start them, and as the Kubeflow Trainer's
torch runtime starts two nodes' programs, with exactly the variables their documentation lists (docs/schedulers.md)
and one rank on each of two nodes: an unmodified torchrun-style
program under hpcdist's wrapper, and one that calls hpcdist.init(), meet over gloo and see torchrun's variables."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable

import pytest
from launching import PROGRAMS, ROOT

PROGRAM = str(PROGRAMS / "torchrun_style.py")
Launcher = Callable[[int], dict[str, str]]  # a rank's variables as the launcher sets them
_LAUNCHER_PREFIXES = ("OMPI_", "PMI", "PALS_", "JSM_", "FLUX_", "SLURM_", "MPI_", "MV2_", "PET_", "RANK", "WORLD_SIZE")


def pals(rank: int) -> dict[str, str]:
    """`mpiexec -n 2 --ppn 1` on two nodes, Cray's PMI."""
    return {
        "PALS_RANKID": str(rank), "PALS_LOCAL_RANKID": "0", "PALS_NODEID": str(rank), "PALS_DEPTH": "1",
        "PALS_APID": "0c9a3a4e-5b1d-4c1e-9d7f-1a2b3c4d5e6f", "PMI_RANK": str(rank), "PMI_SIZE": "2",
        "PMI_LOCAL_RANK": "0", "PMI_LOCAL_SIZE": "1",
    }  # fmt: skip


def jsrun(rank: int) -> dict[str, str]:
    """`jsrun -n2 -a1 -r1 --smpiargs off` (no Spectrum MPI variables beside jsrun's)."""
    return {
        "LSB_JOBID": "779469", "JSM_NAMESPACE_RANK": str(rank), "JSM_NAMESPACE_SIZE": "2",
        "JSM_NAMESPACE_LOCAL_RANK": "0", "JSM_NAMESPACE_LOCAL_SIZE": "1",
    }  # fmt: skip


def flux(rank: int) -> dict[str, str]:
    """`flux run -N2 -n2 -o pmi=off`."""
    return {
        "FLUX_TASK_RANK": str(rank), "FLUX_TASK_LOCAL_ID": "0", "FLUX_JOB_SIZE": "2", "FLUX_JOB_NNODES": "2",
        "FLUX_JOB_ID": "ƒM7Zq9AKHno", "FLUX_URI": "local:///tmp/flux-none/local-0",
    }  # fmt: skip


def kubeflow_trainer(rank: int) -> dict[str, str]:
    """A TrainJob of two nodes with numProcPerNode 1, its program run without torchrun (the rendezvous: _run's)."""
    return {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": str(rank)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(variables: Launcher, wrapped: bool) -> list[dict[str, object]]:
    """Both ranks, each with its launcher's variables and a rendezvous address; each one's JSON line."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_PREFIXES)}
    port = str(_free_port())
    wrapper = [sys.executable, "-m", "hpcdist.worker", "--", "python"] if wrapped else [sys.executable]
    program = [*wrapper, PROGRAM, *([] if wrapped else ["--hpcdist-init"])]
    rendezvous = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    if variables is kubeflow_trainer:  # the Trainer names its rendezvous in torchrun's PET_ variables
        rendezvous = {"PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": port}
    ranks = [
        subprocess.Popen(
            program,
            cwd=ROOT,
            env={**base, **variables(rank), **rendezvous},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    lines = []
    try:
        for rank in ranks:
            out, err = rank.communicate(timeout=120)
            assert rank.returncode == 0, err
            lines.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for rank in ranks:
            rank.kill()
    return lines


@pytest.mark.parametrize(
    ("variables", "wrapped"),
    [(pals, True), (jsrun, True), (flux, True), (flux, False), (kubeflow_trainer, True), (kubeflow_trainer, False)],
)
def test_the_ranks_see_torchruns_variables_and_meet(variables: Launcher, wrapped: bool) -> None:
    lines = _run(variables, wrapped)
    group = [None, None] if variables is jsrun else ["0", "1"]  # jsrun names no node
    place = {"WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "sum": 3.0}
    assert lines == [{"RANK": str(r), **place, "GROUP_RANK": group[r]} for r in (0, 1)]
