"""A Grid Engine job script of `hpcdist gridengine --container-image --container-runtime podman` runs for real, as
Grid Engine would run it: on this host, with the host file and variables it sets, its hpcdist mpirun line starting two
ranks on Open MPI, each inside a podman container of the tier's image."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

from hpcdist.jobs.batch import BatchJob
from hpcdist.jobs.gridengine import QsubSpec, render_gridengine

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def test_a_grid_engine_script_runs_its_two_ranks_in_podman_containers(
    wheel_image: str, podman_env: dict[str, str], tmp_path: Path
) -> None:
    shutil.copy(HERE / "allreduce.py", tmp_path)  # in the working directory, which the containers mount
    job = BatchJob(
        program=("python", "allreduce.py"),
        python=sys.executable,
        mpirun=str(BIN / "mpirun"),
        container_image=wheel_image,
        container_runtime="podman",
    )
    script = tmp_path / "job.sh"
    script.write_text(render_gridengine(QsubSpec(job, pe=("mpi", "2"))))
    (tmp_path / "pe_hostfile").write_text("localhost 2 all.q@localhost UNDEFINED\n")
    variables = {"PE_HOSTFILE": str(tmp_path / "pe_hostfile"), "JOB_ID": "7", "NHOSTS": "1", "NSLOTS": "2"}
    done = subprocess.run(
        ["bash", str(script)],
        cwd=tmp_path,
        env={**podman_env, **ROOT_OK, **variables},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert (done.returncode, done.stderr) == (0, "hpcdist mpirun: on the hosts of the Grid Engine job 7: localhost:2\n")
    host = socket.gethostname()
    assert sorted(done.stdout.splitlines()) == [
        f"rank 0 of 2 on {host} in a container, Open MPI v5.0.11: allreduce 3",
        f"rank 1 of 2 on {host} in a container, Open MPI v5.0.11: allreduce 3",
    ]
