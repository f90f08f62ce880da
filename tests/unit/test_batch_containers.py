"""Containers in the job scripts: every generator takes hpcdist mpirun's container options and writes them onto its
launch line (under srun, pyxis's own srun options unless another runtime is named), quoted, and refuses a runtime its
launch cannot start."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile import hostile, launch_words
from test_render import check_script

from hpcdist import records
from hpcdist.cli import build_parser, main
from hpcdist.cli.launch import mpirun_options
from hpcdist.errors import UsageError
from hpcdist.jobs.batch import BatchJob
from hpcdist.jobs.flux import FluxSpec, render_flux
from hpcdist.jobs.gridengine import QsubSpec, render_gridengine
from hpcdist.jobs.lsf import BsubSpec, render_lsf
from hpcdist.jobs.pbs import PbsSpec, render_pbs
from hpcdist.jobs.render import make_environment
from hpcdist.jobs.sbatch import render_sbatch
from hpcdist.jobs.sbatchspec import SbatchSpec
from hpcdist.launching.mpirun import build_mpirun_argv
from hpcdist.launching.options import MpirunOptions
from hpcdist.launching.plan import container_for, plan
from hpcdist.launching.world import World

JINJA = make_environment(None, {})
PY = "/venv/bin/python"
JOB = BatchJob(
    program=("python", "train.py"),
    python=PY,
    mpirun="/venv/bin/mpirun",
    container_image="img",
    container_mounts=("/data:/data:ro",),
    container_gpus=True,
)
SBATCH = SbatchSpec(
    program=JOB.program,
    nodes=2,
    python=PY,
    container_image="img",
    container_mounts=("/data:/data:ro",),
    container_gpus=True,
)
OPTIONS = ["--container-image", "img", "--container-mounts", "/data:/data:ro", "--container-gpus"]


def render(kind: str, runtime: str | None = None, image: str = "img") -> str:
    """The script of scheduler `kind` ('sbatch' srun, 'sbatch-mpirun', 'pbs', 'lsf', 'lsf-jsrun', 'flux',
    'gridengine') for the job in `image` under `runtime`."""
    job = records.replace(JOB, container_image=image, container_runtime=runtime)
    sbatch = records.replace(SBATCH, container_image=image, container_runtime=runtime)
    scripts = {
        "sbatch": lambda: render_sbatch(sbatch, JINJA),
        "sbatch-mpirun": lambda: render_sbatch(records.replace(sbatch, launch="mpirun"), JINJA),
        "pbs": lambda: render_pbs(PbsSpec(job, resources=("select=2:mpiprocs=2",)), JINJA),
        "lsf": lambda: render_lsf(BsubSpec(job, slots="4"), JINJA),
        "lsf-jsrun": lambda: render_lsf(BsubSpec(records.replace(job, np=4), nnodes=2, launch="jsrun"), JINJA),
        "flux": lambda: render_flux(FluxSpec(job, nodes=2, nslots=4), JINJA),
        "gridengine": lambda: render_gridengine(QsubSpec(job, pe=("mpi", "4")), JINJA),
    }
    return scripts[kind]()


def launch(text: str, tmp_path: Path) -> list[str]:
    """The script's hpcdist mpirun line as bash reads it, up to `--`."""
    words = launch_words(text, PY, tmp_path)
    return words[: words.index("--")]


KINDS = ("sbatch", "sbatch-mpirun", "pbs", "lsf", "lsf-jsrun", "flux", "gridengine")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("runtime", ["podman", None])
def test_every_script_carries_the_container_options_onto_its_hpcdist_mpirun_line(
    kind: str, runtime: str | None, tmp_path: Path
) -> None:
    text = render(kind, runtime)
    check_script(text, tmp_path)
    words = launch(text, tmp_path)
    assert words[:4] == [PY, "-m", "hpcdist", "mpirun"]
    at = words.index("--container-image")
    named = runtime or ("pyxis" if kind == "sbatch" else None)  # under srun, srun's own by default
    assert words[at:] == [
        "--container-image", "img", *(["--container-runtime", named] if named else []),
        "--container-mounts", "/data:/data:ro", "--container-gpus",
    ]  # fmt: skip
    comment = {"pyxis": "srun starts it there itself", None: "the first container runtime installed"}.get(
        named, f"in the run line of {named}."
    )
    assert comment in text


def test_under_srun_the_step_starts_each_task_in_the_image_with_pyxis_s_own_srun_options(tmp_path: Path) -> None:
    words = launch(render("sbatch"), tmp_path)
    options = mpirun_options(build_parser().parse_args([*words[3:], "--", "python", "train.py"]))
    world = World(environ={"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]"}, python=PY, cwd="/home/u/run")
    argv = build_mpirun_argv(plan(options, world).spec)
    assert argv[argv.index("srun") :] == [
        "srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--ntasks=2", "--export=ALL", "--container-image=img",
        "--container-mounts=/home/u/run:/home/u/run,/data:/data:ro", "--container-workdir=/home/u/run",
        "python3", "-m", "hpcdist.worker", "--", "python", "train.py",
    ]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_image_and_mount_stay_one_word_each(kind: str, tmp_path: Path) -> None:
    image = hostile(tmp_path)
    text = render(kind, "apptainer", image)
    check_script(text, tmp_path)
    words = launch(text, tmp_path)
    assert words[words.index("--container-image") + 1] == image


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (
            "sbatch-mpirun",
            "--container-runtime pyxis gives srun's own container options, and --launch mpirun starts the ranks with "
            "Open MPI's mpirun; use --launch srun, or a runtime that wraps each rank (apptainer, singularity, podman, "
            "docker, enroot)",
        ),
        *(
            (
                kind,
                f"--container-runtime pyxis gives srun's own container options, and this {title} script starts the "
                f"ranks under {launcher}; name a runtime that wraps each rank (apptainer, singularity, podman, docker, "
                "enroot), or write a Slurm script: hpcdist sbatch --launch srun",
            )
            for kind, title, launcher in (
                ("pbs", "PBS", "Open MPI"),
                ("lsf", "LSF", "Open MPI"),
                ("lsf-jsrun", "LSF", "LSF's jsrun"),
                ("flux", "Flux", "Flux's flux run"),
                ("gridengine", "Grid Engine", "Open MPI"),
            )
        ),
    ],
)
def test_pyxis_outside_srun_is_refused_with_the_way_to_run_the_image(kind: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        render(kind, "pyxis")
    assert str(caught.value) == message


def test_torchrun_mode_refuses_an_image_and_names_the_launches_that_take_one() -> None:
    with pytest.raises(UsageError) as caught:
        render_sbatch(records.replace(SBATCH, launch="torchrun"), JINJA)
    assert str(caught.value) == (
        "--container-image runs each rank in an image under hpcdist mpirun, and --launch torchrun starts torchrun on "
        "each node without it; use --launch srun or mpirun, or drop --container-image"
    )


@pytest.mark.parametrize(
    "command",
    [
        ["sbatch", "-N", "2"],
        ["pbs", "-l", "select=2:mpiprocs=2"],
        ["lsf", "-n", "4"],
        ["flux", "-N", "2", "-n", "4"],
        ["gridengine", "-pe", "mpi", "4"],
    ],
)
def test_each_command_takes_the_options_of_hpcdist_mpirun(
    command: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main([*command, *OPTIONS, "--container-runtime", "podman", "--", "python", "train.py"]) == 0
    words = launch_words(capsys.readouterr().out, "/", tmp_path)
    assert words[words.index("--container-image") :][:7] == [
        "--container-image", "img", "--container-runtime", "podman", "--container-mounts", "/data:/data:ro",
        "--container-gpus",
    ]  # fmt: skip


def test_sbatch_s_own_container_option_is_still_passed_on_as_an_sbatch_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sbatch", "--container", "/oci/bundle", "--", "python", "train.py"]) == 0
    text = capsys.readouterr().out
    assert "#SBATCH --container=/oci/bundle\n" in text and "--container-image" not in text


def test_a_runtime_without_an_image_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pbs", "-l", "select=1:mpiprocs=2", "--container-runtime", "podman", "--", "python", "t.py"]) == 2
    assert capsys.readouterr().err == (
        "hpcdist: error: --container-runtime says how to run each rank in a container, and no image is given; add "
        "--container-image IMAGE, or drop it\n"
    )


def test_a_script_leaves_the_runtime_to_the_node_and_a_launch_here_takes_the_first_installed() -> None:
    options = MpirunOptions(program=("python", "t.py"), np=2, mpirun="mpirun", container_image="img")
    node = World(environ={"PATH": "/usr/bin:/bin"}, python=PY, here=False)  # podman may be there: it is not asked
    assert container_for(options, node, "openmpi") is None
    with pytest.raises(UsageError, match="--container-image needs a container runtime, and none of apptainer, "):
        container_for(options, World(environ={"PATH": "/nonexistent"}, python=PY), "openmpi")
