"""The commands `hpcdist trainjob` and `hpcdist mpijob` put in their pods, run here as the operators would run them.

No Kubernetes cluster runs here: each test gives the command the variables and files its operator gives the pod
(the Trainer's PET_* variables; mpi-operator's host file and K_MPI_JOB_ROLE), with this machine as the only node.
"""

from __future__ import annotations

import os
import socket

import pytest
from launching import BIN, PROGRAMS, launch

from hpcdist.jobs.kubernetes import MPIJobSpec, TrainJobSpec, mpijob, trainjob

pytestmark = pytest.mark.e2e
PROGRAM = ("python", str(PROGRAMS / "one_to_many.py"), "--backend", "gloo")
PATH = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"  # `torchrun` and `hpcdist`, as the image has them


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _markers(directory) -> dict[str, str]:
    return {path.name: path.read_text().strip() for path in sorted(directory.iterdir())}


def test_a_trainjob_pod_runs_an_unmodified_torchrun_style_script(tmp_path) -> None:
    trainer = trainjob(TrainJobSpec(name="a", image="img", program=PROGRAM, num_proc_per_node=2))["spec"]["trainer"]
    result = launch(
        [*trainer["command"], *trainer["args"]],
        PATH=PATH,
        MARKER_DIR=str(tmp_path),
        # what the Trainer's torch plug-in sets for node 0 of one (torch.go EnforceMLPolicy)
        PET_NNODES="1",
        PET_NPROC_PER_NODE=str(trainer["numProcPerNode"]),
        PET_NODE_RANK="0",
        PET_MASTER_ADDR="127.0.0.1",  # in a cluster: a-node-0-0.a, the headless service's name for node 0
        PET_MASTER_PORT=str(_free_port()),  # in a cluster: 29500, in the pod's own network
    )
    assert result.returncode == 0, result.stderr
    assert _markers(tmp_path) == {f"rank{r}": f"{r} {r} 2 1" for r in range(2)}  # rank, local rank, world, value


def test_an_mpijob_launcher_runs_the_ranks_on_its_host_file(tmp_path) -> None:
    spec = mpijob(MPIJobSpec(name="a", image="img", program=PROGRAM, slots_per_worker=2))["spec"]
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    hostfile = tmp_path / "hostfile"  # mpi-operator's /etc/mpi/hostfile, one worker: this machine
    hostfile.write_text(f"localhost slots={spec['slotsPerWorker']}\n")
    markers = tmp_path / "markers"
    markers.mkdir()
    result = launch(
        launcher["command"],
        PATH=PATH,
        MARKER_DIR=str(markers),
        K_MPI_JOB_ROLE="launcher",  # what mpi-operator sets in the launcher pod (mpi_job_controller.go)
        OMPI_MCA_orte_default_hostfile=str(hostfile),
    )
    assert result.returncode == 0, result.stderr
    assert _markers(markers) == {f"rank{r}": f"{r} {r} 2 1" for r in range(2)}
