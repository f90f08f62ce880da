"""`hpcdist sbatch --launch mpirun` per MPI family: the step (hpcdist mpirun), checked by bash and shellcheck, and
the launch line in each dialect that it runs in the job (its own options given to `hpcdist mpirun --dry-run`)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
from test_render import check_script
from test_slurm import allocation, exported, from_launcher, step_dry_run

from hpcdist import records
from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.jobs.local import local_tools
from hpcdist.jobs.render import make_environment
from hpcdist.jobs.sbatch import render_sbatch
from hpcdist.jobs.sbatchspec import SbatchSpec
from hpcdist.launching.mpirun import SHIM
from hpcdist.launching.output import OutputOptions
from hpcdist.launching.world import World

JINJA = make_environment(None, {})
SPEC = SbatchSpec(program=("python", "train.py"), python="/v/bin/python", nodes=2, ntasks_per_node=2,
                  launch="mpirun", env=(("NCCL_DEBUG", "INFO"),))  # fmt: skip
PROGRAM = "    python train.py"  # the step's program, on the line after it
STEP = "/v/bin/python -m hpcdist mpirun -np 4 -x NCCL_DEBUG"  # the step up to its launcher: hpcdist mpirun
# srun starts Hydra's proxies as no MPI tasks (no PMIx beside Hydra's PMI), and Hydra holds Slurm's SIGTERM (which
# it would pass on to ranks Slurm signals itself), started by hpcdist mpirun's Python
NO_PMIX = ["env", "SLURM_MPI_TYPE=none", sys.executable, "-m", "hpcdist.launching.heldterm"]
MPIRUN = str(Path(sys.executable).parent / "mpirun")  # the Open MPI wheel's, beside this Python


@pytest.mark.parametrize(("mpi", "launcher", "dialect"), [
    ("mpich", "mpiexec", ["-bind-to", "none"]),
    ("intel", "mpiexec.hydra", ["-genv", "I_MPI_PIN", "0"]),
])  # fmt: skip
def test_a_hydra_step_takes_the_allocation_through_srun(
    mpi: str, launcher: str, dialect: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    mpirun = str(_install(tmp_path, launcher) / launcher)
    text = render_sbatch(records.replace(SPEC, mpi=mpi, mpirun=mpirun), JINJA)
    check_script(text, tmp_path)
    assert f"\n{STEP} --mpirun {mpirun} --mpi {mpi} -- \\\n{PROGRAM}\n" in text
    assert "SLURM_MPI_TYPE" not in text  # Hydra's line is hpcdist mpirun's to write when the step runs
    # what the job's hpcdist mpirun runs: Hydra, which starts its proxies through srun, and passes every variable on
    line = step_dry_run(text, "/v/bin/python", {**allocation(2, 2), **exported(text, "/v/bin/python")}, monkeypatch,
                        capsys)  # fmt: skip
    assert line[: 11 + len(dialect)] == [*NO_PMIX, mpirun, "-n", "4", "-print-all-exitcodes", "-launcher", "slurm",
                                        *dialect]  # fmt: skip
    assert line[-6:] == [sys.executable, *SHIM, "python", "train.py"]
    assert "NCCL_DEBUG" not in line and "-genvlist" not in line  # Hydra's -genvall, its default: no name needed


def test_an_open_mpi_step_keeps_its_line_and_srun_its_pmix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = render_sbatch(records.replace(SPEC, mpirun=MPIRUN), JINJA)
    check_script(text, tmp_path)
    assert f"\n{STEP} --mpirun {MPIRUN} --mpi openmpi -- \\\n{PROGRAM}\n" in text
    line = step_dry_run(text, "/v/bin/python", {**allocation(2, 2), **exported(text, "/v/bin/python")}, monkeypatch,
                        capsys)  # fmt: skip
    # mpirun reads the allocation itself
    assert from_launcher(line, MPIRUN)[:7] == [MPIRUN, "-np", "4", "--bind-to", "none", "--map-by", "slot"]
    assert " -x NCCL_DEBUG " in shlex.join(line) and line[-6:] == [sys.executable, *SHIM, "python", "train.py"]
    assert "SLURM_MPI_TYPE" not in text + shlex.join(line)  # srun keeps its PMIx for Open MPI's daemons


@pytest.mark.parametrize("family", ["mpich", "intel"])
def test_hydra_scripts_with_restarts_requeue_arrays_and_logs_pass_shellcheck(
    family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = records.replace(SPEC, mpi=family, mpirun="mpiexec", max_restarts=2, requeue=True, array="0-3",
                               time="10:00", rank_output=OutputOptions(tag=False, log_dir="logs"))  # fmt: skip
    text = render_sbatch(spec, JINJA)
    check_script(text, tmp_path)
    step = (f"    {STEP} -x SLURM_ARRAY_JOB_ID -x SLURM_ARRAY_TASK_ID -x SLURM_ARRAY_TASK_COUNT "
            f"-x HPCDIST_RESTART_COUNT -x TORCHELASTIC_RESTART_COUNT --mpirun mpiexec --mpi {family} "
            '--log-dir logs/"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}" -- \\\n'
            f"    {PROGRAM} &\n    hpcdist_step=$!\n")  # fmt: skip
    assert step in text and "SLURM_MPI_TYPE" not in text and "HPCDIST_LOG_DIR" not in text
    # the second attempt of array task 7_2, as its step runs: Hydra (mpiexec from PATH) starts its proxies through
    # srun, with the task's own log directory, and passes every variable on, the task's ids and the counters among them
    task = {"SLURM_ARRAY_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"}
    counted = {"HPCDIST_RESTART_COUNT": "1", "TORCHELASTIC_RESTART_COUNT": "1"}
    path = {"PATH": f"{_install(tmp_path, 'mpiexec')}{os.pathsep}{os.environ['PATH']}"}
    exports = exported(text, "hpcdist_signalled=0")  # before the trap and the loop
    assert exports == {"HPCDIST_MAX_RESTARTS": "2", "NCCL_DEBUG": "INFO"}
    monkeypatch.chdir(tmp_path)
    environ = {**allocation(2, 2), **exports, **task, **counted, **path}
    line = step_dry_run(text, "/v/bin/python", environ, monkeypatch, capsys)
    assert line[:11] == [*NO_PMIX, "mpiexec", "-n", "4", "-print-all-exitcodes", "-launcher", "slurm"]
    assert f" -genv HPCDIST_LOG_DIR {shlex.quote(str(tmp_path / 'logs' / '7_2'))} " in shlex.join(line)
    assert "-genvlist" not in line and "-genvnone" not in line
    assert line[-6:] == [sys.executable, *SHIM, "python", "train.py"]


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


def test_sbatch_cli_detects_and_takes_mpi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The MPI told by the files beside the Python, or given, is the step's --mpi: its hpcdist mpirun, in the job,
    speaks that dialect without looking again."""
    folder = _install(tmp_path, "mpirun", "mpiexec.hydra", "impi_info")
    python = str(folder / "python")
    for given, launcher, mpi, dialect in [
        ([], "mpiexec.hydra", "intel", ["-genv", "I_MPI_PIN", "0"]),
        (["--mpi", "mpich"], "mpirun", "mpich", ["-bind-to", "none"]),
    ]:
        assert main(["sbatch", "--launch", "mpirun", *given, "--python", python, "--", "x.py"]) == 0
        text = capsys.readouterr().out
        assert f"\n{python} -m hpcdist mpirun -np 1 --mpirun {folder}/{launcher} --mpi {mpi} -- \\\n    x.py\n" in text
        line = step_dry_run(text, python, allocation(1, 1), monkeypatch, capsys)
        assert line[: 11 + len(dialect)] == [*NO_PMIX, f"{folder}/{launcher}", "-n", "1", "-print-all-exitcodes",
                                            "-launcher", "slurm", *dialect]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), [
    (["--mpi", "mpich"], "hpcdist: error: --mpi mpich names the dialect of an mpirun line; it needs --launch mpirun, "
                         "not srun\n"),
    (["--launch", "mpirun", "--mpi", "lam"], "hpcdist: error: --mpi 'lam' is not an MPI hpcdist knows; use one of "
                                             "openmpi, pals, mpich, intel, mvapich, srun, jsrun, flux\n"),
    (["--launch", "mpirun", "--mpi", "srun"], "hpcdist: error: --mpi srun is --launch srun's launcher; use --launch "
                                              "srun\n"),
    (["--launch", "mpirun", "--mpi", "jsrun"], "hpcdist: error: --mpi jsrun: LSF's jsrun starts ranks only inside LSF "
                                               "jobs, and this script is for Slurm; write the script with `hpcdist "
                                               "lsf`, or give another --mpi\n"),
])  # fmt: skip
def test_sbatch_mpi_mistakes_are_usage_errors(argv: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["sbatch", *argv, "--", "x.py"]) == 2
    assert capsys.readouterr() == ("", message)


def test_submit_refuses_mpi_for_srun_before_making_its_directory(tmp_path: Path) -> None:
    import hpcdist

    with pytest.raises(UsageError, match=r"hpcdist\.submit's mpi= mpich names the dialect of an mpirun line"):
        hpcdist.submit(print, mpi="mpich", folder=tmp_path / "jobs", scheduler="slurm")
    assert not (tmp_path / "jobs").exists()
