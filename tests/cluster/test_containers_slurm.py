"""`hpcdist sbatch --container-runtime podman`: a job on two nodes whose srun starts each rank inside a podman
container of the container tier's image (tests/containers/build_image.sh: this venv's Open MPI and mpi4py wheels and
this hpcdist), the image's Open MPI meeting srun through PMIx."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_slurm_cluster import assert_ok

from hpcdist.jobs.sbatch import render_sbatch
from hpcdist.jobs.sbatchspec import SbatchSpec

pytestmark = pytest.mark.timeout(900)

CONTAINERS = Path(__file__).resolve().parents[1] / "containers"


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The container tier's wheel image (built once per machine, else found) and the containers.conf podman needs
    here (tests/containers/podman_conf.py)."""
    if shutil.which("podman") is None and shutil.which("apt-get") is None:
        pytest.skip("podman is not installed and there is no apt-get to install it")
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    subprocess.run([sys.executable, str(CONTAINERS / "podman_conf.py"), str(conf)], check=True, timeout=60)
    done = subprocess.run(
        [str(CONTAINERS / "build_image.sh"), "wheel", sys.executable],
        env={**os.environ, "CONTAINERS_CONF": str(conf)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"build_image.sh wheel failed:\n{done.stderr}"
    return done.stdout.strip(), conf


def test_srun_starts_each_rank_of_an_sbatch_script_in_a_podman_container(
    submit, venv: Path, tmp_path: Path, podman: tuple[str, Path]
) -> None:
    image, conf = podman
    shutil.copy(CONTAINERS / "allreduce.py", tmp_path)  # the job's working directory, mounted into each container
    spec = SbatchSpec(
        program=("python", "allreduce.py"),
        nodes=2,
        time="5",
        python=str(venv / "bin" / "python"),
        env=(("CONTAINERS_CONF", str(conf)),),
        container_image=image,
        container_runtime="podman",
    )
    text = render_sbatch(spec)
    assert f" --mpi srun --container-image {image} --container-runtime podman -- \\\n" in text
    result = submit(text, 240)
    assert_ok(result)
    assert sorted(result.stdout.splitlines()) == [
        "rank 0 of 2 on node1 in a container, Open MPI v5.0.11: allreduce 3",
        "rank 1 of 2 on node2 in a container, Open MPI v5.0.11: allreduce 3",
    ], result.describe()
