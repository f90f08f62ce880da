"""`hpcdist sbatch --launch mpirun` per MPI family: the launch line in each dialect, checked by bash and shellcheck."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from test_render import check_script

from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.jobs.local import local_tools
from hpcdist.jobs.render import make_environment
from hpcdist.jobs.sbatch import SbatchSpec, render_sbatch
from hpcdist.launching.world import World

JINJA = make_environment(None, {})
SPEC = SbatchSpec(program=("python", "train.py"), python="/v/bin/python", nodes=2, ntasks_per_node=2,
                  launch="mpirun", env=(("NCCL_DEBUG", "INFO"),))  # fmt: skip
SHIM = "    /v/bin/python -m hpcdist.worker -- python train.py"
NO_PMIX = "env SLURM_MPI_TYPE=none "  # srun starts Hydra's proxies as no MPI tasks (no PMIx beside Hydra's PMI)


@pytest.mark.parametrize(("changes", "line"), [
    ({"mpi": "mpich", "mpirun": "/v/bin/mpiexec"}, f"{NO_PMIX}/v/bin/mpiexec -n 4 -launcher slurm -bind-to none \\"),
    ({"mpi": "intel", "mpirun": "/v/bin/mpiexec.hydra"},
     f"{NO_PMIX}/v/bin/mpiexec.hydra -n 4 -launcher slurm -genv I_MPI_PIN 0 \\"),
])  # fmt: skip
def test_hydra_takes_the_allocation_through_srun(changes: dict[str, Any], line: str, tmp_path: Path) -> None:
    text = render_sbatch(dataclasses.replace(SPEC, **changes), JINJA)
    check_script(text, tmp_path)
    assert f"\n{line}\n{SHIM}\n" in text


def test_open_mpi_keeps_its_line_and_srun_its_pmix(tmp_path: Path) -> None:
    text = render_sbatch(dataclasses.replace(SPEC, mpirun="/v/bin/mpirun"), JINJA)
    check_script(text, tmp_path)
    assert "\n/v/bin/mpirun -np 4 --bind-to none --map-by slot " in text and "SLURM_MPI_TYPE" not in text


@pytest.mark.parametrize("family", ["mpich", "intel"])
def test_hydra_scripts_with_restarts_requeue_arrays_and_logs_pass_shellcheck(family: str, tmp_path: Path) -> None:
    spec = dataclasses.replace(SPEC, mpi=family, mpirun="mpiexec", max_restarts=2, requeue=True, array="0-3",
                               time="10:00")  # fmt: skip
    text = render_sbatch(spec, JINJA)
    check_script(text, tmp_path)
    assert f"{NO_PMIX}mpiexec -n 4 -launcher slurm " in text


def _install(tmp_path: Path, *files: str) -> Path:
    """A folder with these executables, as an MPI installation's bin/ (a python among them)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("python", *files):
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)
    return folder


@pytest.mark.parametrize(("files", "family", "launcher"), [
    (("mpirun", "mpiexec", "mpichversion", "hydra_pmi_proxy"), "mpich", "mpirun"),
    (("mpirun", "mpiexec.hydra", "impi_info", "hydra_bstrap_proxy"), "intel", "mpiexec.hydra"),
    (("mpirun", "ompi_info", "prterun"), "openmpi", "mpirun"),
    (("mpirun",), "openmpi", "mpirun"),
])  # fmt: skip
def test_the_family_is_told_by_the_mpirun_beside_the_python(
    tmp_path: Path, files: tuple[str, ...], family: str, launcher: str
) -> None:
    """The one choice for `hpcdist sbatch` and `hpcdist.submit`: local_tools, as `hpcdist mpirun` tells it."""
    folder = _install(tmp_path, *files)
    tools = local_tools(World(), "mpirun", python=str(folder / "python"))
    assert (tools["mpi"], tools["mpirun"]) == (family, str(folder / launcher))
    assert local_tools(World(), "mpirun", python=str(folder / "python"), mpi="mpich")["mpi"] == "mpich"


def test_sbatch_cli_detects_and_takes_mpi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _install(tmp_path, "mpirun", "mpiexec.hydra", "impi_info")
    assert main(["sbatch", "--launch", "mpirun", "--python", str(folder / "python"), "--", "x.py"]) == 0
    assert f"\n{NO_PMIX}{folder}/mpiexec.hydra -n 1 -launcher slurm -genv I_MPI_PIN 0 \\\n" in capsys.readouterr().out
    assert main(["sbatch", "--launch", "mpirun", "--mpi", "mpich", "--python", str(folder / "python"), "--", "x"]) == 0
    assert f"\n{NO_PMIX}{folder}/mpirun -n 1 -launcher slurm -bind-to none \\\n" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--mpi", "mpich"], "hpcdist: error: --mpi mpich names the dialect of an mpirun line; it needs --launch mpirun, "
                         "not srun\n"),
    (["--launch", "mpirun", "--mpi", "lam"], "hpcdist: error: --mpi 'lam' is not an MPI hpcdist knows; use one of "
                                             "openmpi, mpich, intel, mvapich\n"),
])  # fmt: skip
def test_sbatch_mpi_mistakes_are_usage_errors(argv: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["sbatch", *argv, "--", "x.py"]) == 2
    assert capsys.readouterr() == ("", message)


def test_submit_refuses_mpi_for_srun_before_making_its_directory(tmp_path: Path) -> None:
    import hpcdist

    with pytest.raises(UsageError, match=r"hpcdist\.submit's mpi= mpich names the dialect of an mpirun line"):
        hpcdist.submit(print, mpi="mpich", folder=tmp_path / "jobs")
    assert not (tmp_path / "jobs").exists()
