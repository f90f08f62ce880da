"""One options object for the CLI and the API: the CLI parses into what `hpcdist.launch` builds, checked when made."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdist import __version__
from hpcdist.cli import build_parser, main
from hpcdist.cli.launch import mpirun_options, workload_options
from hpcdist.contract import RankContract
from hpcdist.errors import UsageError
from hpcdist.launching.options import MpirunOptions
from hpcdist.workloads import MAX_SEED, WorkloadOptions

ARGV = ["-np", "2", "--no-tag", "--mpirun", "/bin/true", "--mpi", "openmpi", "-x", "A=1", "--mca", "pml", "ob1"]
BUILT = MpirunOptions(
    program=("python", "t.py"),
    np=2,
    tag=False,
    mpirun="/bin/true",
    mpi="openmpi",
    export=("A=1",),
    mca=(("pml", "ob1"),),
)


def test_the_cli_parses_into_the_options_a_python_caller_builds() -> None:
    assert mpirun_options(build_parser().parse_args(["mpirun", *ARGV, "--", "python", "t.py"])) == BUILT
    assert workload_options(build_parser().parse_args(["run", "ddp", "--epochs", "2", "--seed", "7"])) == (
        WorkloadOptions(epochs=2, seed=7)
    )


def test_on_failure_follows_the_launch_unless_given() -> None:
    shrink = RankContract(on_failure="shrink")  # what `hpcdist mpirun --on-failure shrink` hands each rank
    assert workload_options(build_parser().parse_args(["run", "ddp"]), shrink).on_failure == "shrink"
    assert (
        workload_options(build_parser().parse_args(["run", "ddp", "--on-failure", "end"]), shrink).on_failure == "end"
    )
    assert workload_options(build_parser().parse_args(["run", "ddp"]), RankContract()).on_failure == "end"
    assert workload_options(build_parser().parse_args(["run", "ddp"])).on_failure == "end"


def test_the_dry_run_prints_the_command_the_options_build(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMPI_MCA_btl", raising=False)  # the user's own btl list would keep Open MPI's fabric probe
    for name in [name for name in os.environ if name.startswith("HPCDIST_")]:
        monkeypatch.delenv(name)  # the caller's own are passed on (-x NAME): `make test` exports HPCDIST_MPICH_VENV
    command = ["/bin/true", "-np", "2", "-H", "localhost:2", "--bind-to", "none", "--map-by", "slot"]
    command += ["--allow-run-as-root"] if os.geteuid() == 0 else []  # Open MPI refuses root without it
    command += ["--mca", "pml", "ob1", "--mca", "btl", "^ofi"]  # the probe of fabrics left out
    command += ["-x", f"HPCDIST_VERSION={__version__}", "-x", "HPCDIST_HEARTBEAT=5", "-x", "HPCDIST_TAG=numbered"]
    command += ["-x", "HPCDIST_OUTPUT_RATE=4194304", "-x", "HPCDIST_MPI=openmpi", "-x", "HPCDIST_SCHEDULER=none"]
    command += ["-x", "A=1"]
    command += ["-x", "HPCDIST_CONTROL=<per-launch token>", "-x", "HPCDIST_RUN_ID=<per-launch run id>"]
    command += [sys.executable, "-m", "hpcdist.worker", "--", "python", "t.py"]
    assert main(["mpirun", *ARGV, "--dry-run", "--", "python", "t.py"]) == 0
    assert capsys.readouterr().out == shlex.join(command) + "\n"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"np": 0}, "-np must be at least 1, got 0"),
        ({"np": True}, "-np must be a whole number, got True"),
        ({"np": 2**31}, "-np must be at most 2147483647, got 2147483648"),
        ({"tail": -1}, "--tail must be at least 0, got -1"),
        ({"heartbeat_timeout": float("inf")}, "--heartbeat-timeout must be a positive number of seconds, got inf"),
        ({"program": ["python", "t.py"]}, "MpirunOptions.program must be a tuple of strings, got ['python', 't.py']"),
        ({"export": ("A=1", 2)}, "MpirunOptions.export must be a tuple of strings"),
        ({"mca": (("pml",),)}, "MpirunOptions.mca must be (KEY, VALUE) pairs"),
    ],
)
def test_mpirun_options_refuse_a_wrong_value_when_made(fields: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as error:
        MpirunOptions(**{"program": ("true",), **fields})  # type: ignore[arg-type]
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"epochs": 0}, "--epochs must be at least 1, got 0"),
        ({"batch_size": -3}, "--batch-size must be at least 1, got -3"),
        ({"samples": 1.5}, "--samples must be a whole number, got 1.5"),
        ({"seed": MAX_SEED + 1}, f"--seed must be at most {MAX_SEED}"),
        ({"stop_after_epoch": 0}, "--stop-after-epoch must be at least 1, got 0"),
        ({"resume": True}, "--resume needs --checkpoint-dir DIR"),
        ({"on_failure": "retry"}, "--on-failure 'retry': choose one of end, shrink"),
        ({"on_failure": "shrink", "report": True}, "--on-failure shrink does not take --report"),
    ],
)
def test_workload_options_refuse_a_wrong_value_when_made(fields: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as error:
        WorkloadOptions(**fields)  # type: ignore[arg-type]
    assert message in str(error.value)


def test_shrink_takes_checkpoints() -> None:
    options = WorkloadOptions(on_failure="shrink", checkpoint_dir="d", resume=True, stop_after_epoch=2)
    assert (options.checkpoint_dir, options.resume, options.stop_after_epoch) == ("d", True, 2)


def test_a_checkpoint_dir_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x\n")
    with pytest.raises(UsageError, match="is a file, not a directory"):
        WorkloadOptions(checkpoint_dir=str(tmp_path / "afile" / "sub"))
    assert WorkloadOptions(checkpoint_dir=str(tmp_path / "new" / "dir")).checkpoint_dir == str(tmp_path / "new" / "dir")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "ddp", "--resume"], "hpcdist: error: --resume needs --checkpoint-dir DIR"),
        (["run", "ddp", "--epochs", "0"], "hpcdist: error: --epochs must be at least 1, got 0"),
        (["run", "ddp", "--on-failure", "shrink", "--report"], "hpcdist: error: --on-failure shrink does not take"),
        (["mpirun", "-np", "2", "--heartbeat-timeout", "nan", "--dry-run", "--", "true"], "'nan' is not"),
    ],
)
def test_the_cli_refuses_before_anything_starts_or_torch_loads(argv: list[str], message: str) -> None:
    code = f"import sys; from hpcdist.cli import main; rc = main({argv!r}); print(rc, 'torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, "CI": ""}
    )
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr
    assert message in done.stderr
