"""hpcdist.jobs.arrays and `hpcdist sbatch --array`: Slurm's array syntax, the rendered script, the task id."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_render import bash_words, check_script
from test_slurm import launch_text

from hpcdist import records
from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.jobs.arrays import ARRAY_VARS, array_indices
from hpcdist.jobs.render import make_environment
from hpcdist.jobs.sbatch import render_sbatch
from hpcdist.jobs.sbatchspec import SbatchSpec
from hpcdist.launching.output import OutputOptions

JINJA = make_environment(None, {})
BASE = SbatchSpec(program=("python", "train.py"), python="/venv/bin/python", array="0-2")


@pytest.mark.parametrize(
    ("spec", "ids", "limit"),
    [
        ("0-15", list(range(16)), None),
        ("1,3,5", [1, 3, 5], None),
        ("0-31%4", list(range(32)), 4),
        ("1-9:2", [1, 3, 5, 7, 9], None),
        ("7", [7], None),
        ("0-3,2-5,9", [0, 1, 2, 3, 4, 5, 9], None),  # overlapping items: each id once
        ("0-1000", list(range(1001)), None),  # the most Slurm's default MaxArraySize allows
        ("5-5%1", [5], 1),
    ],
)
def test_slurm_array_forms(spec: str, ids: list[int], limit: int | None) -> None:
    assert array_indices(spec) == (ids, limit)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("", "names no task ids"),
        ("%4", "names no task ids"),
        ("3-1", "runs backwards; write it as 1-3"),
        ("0-1001", "task id 1001 is above 1000"),
        ("99999999999999999999999", "is above 1000"),
        ("0-31%0", "the limit after % must be a whole number of at least 1"),
        ("0-3%", "the limit after %"),
        ("0-3%x", "the limit after %"),
        ("0-3% 2", "the limit after %"),
        ("1-9:0", "the step in '1-9:0' must be at least 1"),
        ("1,,3", "'' is not N, N-M or N-M:STEP"),
        ("1,3,", "'' is not N, N-M or N-M:STEP"),
        ("-1", "'-1' is not N"),
        ("a-b", "'a-b' is not N"),
        ("1-3:", "'1-3:' is not N"),
        ("1:2", "'1:2' is not N"),
        ("0 - 3", "'0 - 3' is not N"),
        ("٣", "'٣' is not N"),
        ("0-3%2%1", "the limit after %"),
    ],
)
def test_bad_arrays_are_usage_errors_naming_the_part(spec: str, says: str) -> None:
    with pytest.raises(UsageError, match="--array") as info:
        array_indices(spec)
    assert says in str(info.value)


@pytest.mark.parametrize("launch", ["srun", "mpirun", "torchrun"])
def test_array_renders_its_sbatch_line_and_passes_checks(launch: str, tmp_path: Path) -> None:
    spec = records.replace(BASE, launch=launch, array="0-31%4", requeue=True, time="1:00:00")
    text = render_sbatch(spec, JINJA)
    assert "#SBATCH --array=0-31%4\n" in text
    check_script(text, tmp_path)


def test_mpirun_mode_passes_the_task_id_to_every_rank() -> None:
    text = render_sbatch(records.replace(BASE, launch="mpirun"), JINJA)
    assert " ".join(f"-x {name}" for name in ARRAY_VARS) in text
    plain = render_sbatch(records.replace(BASE, launch="mpirun", array=None), JINJA)
    assert "SLURM_ARRAY" not in plain and "--array" not in plain


def test_no_output_option_leaves_slurms_per_task_default() -> None:
    # Slurm names an array task's output slurm-%A_%a.out unless --output says otherwise
    text = render_sbatch(BASE, JINJA)
    assert "--output" not in text and "--error" not in text


def test_log_dir_with_an_array_gives_each_task_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    srun = render_sbatch(records.replace(BASE, rank_output=OutputOptions(log_dir="my logs")), JINJA)
    assert " --tag --log-dir 'my logs'/\"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\" -- \\\n" in srun
    assert "mkdir" not in srun  # each rank's tagger makes the directory it writes to
    check_script(srun, tmp_path, "srun.sh")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "41")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    assert bash_words(launch_text(srun, "/venv/bin/python")) == [
        *["/venv/bin/python", "-m", "hpcdist", "mpirun", "-np", "1", "--mpi", "srun"],
        *["--tag", "--log-dir", "my logs/41_2", "--", "python", "train.py"],
    ]  # as bash runs it: the task's own directory
    spec = records.replace(BASE, launch="mpirun", rank_output=OutputOptions(log_dir="logs"))
    mpirun = render_sbatch(spec, JINJA)
    check_script(mpirun, tmp_path, "mpirun.sh")
    words = bash_words(launch_text(mpirun, "/venv/bin/python"))  # its step is hpcdist mpirun too
    assert words[:4] == ["/venv/bin/python", "-m", "hpcdist", "mpirun"]
    assert words[-5:] == ["--log-dir", "logs/41_2", "--", "python", "train.py"] and "HPCDIST_LOG_DIR" not in mpirun
    torchrun = render_sbatch(records.replace(spec, launch="torchrun"), JINJA)  # torchrun's own run directories
    assert "--log-dir=logs" in torchrun and "SLURM_ARRAY_TASK_ID" not in torchrun


def test_cli_array_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sbatch", "--array", "1,3,5", "--", "python", "x.py"]) == 0
    assert "#SBATCH --array=1,3,5\n" in capsys.readouterr().out
    assert main(["sbatch", "-a", "3-1", "--", "python", "x.py"]) == 2
    assert "hpcdist: error: --array '3-1': the range '3-1' runs backwards" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["job-%A_%a.out", "job-%j.out", "out/%4a.log", "%x-%A-%a"])
def test_array_output_files_that_name_each_task(name: str) -> None:
    assert "--output" in render_sbatch(records.replace(BASE, output=name, error=name), JINJA)


@pytest.mark.parametrize("name", ["job.out", "job-%A.out", "job-%%a.out", "%x.out"])
def test_array_output_files_shared_by_every_task_are_refused(name: str) -> None:
    with pytest.raises(UsageError, match=r"with --array: every task would write this one file; put the task id"):
        render_sbatch(records.replace(BASE, error=name), JINJA)
