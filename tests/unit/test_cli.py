"""The CLI in-process: exact dry-run commands, and every bad input as `hpcdist: error: …`, exit 2."""

from __future__ import annotations

import argparse
import importlib
import shlex
import subprocess
import sys

import pytest

from hpcdist import __version__
from hpcdist.cli import build_parser, main

SHIM = [sys.executable, "-m", "hpcdist.worker", "--"]
PER_RUN = ["-x", "HPCDIST_CONTROL=<per-launch token>", "-x", "HPCDIST_RUN_ID=<per-launch run id>"]


def _ours(rate: int) -> list[str]:
    """What a launch hpcdist mpirun watches hands every rank (each of them forwarding `rate` bytes a second)."""
    return ["-x", f"HPCDIST_VERSION={__version__}", "-x", "HPCDIST_HEARTBEAT=5", "-x", "HPCDIST_TAG=numbered",
            "-x", f"HPCDIST_OUTPUT_RATE={rate}", "-x", "HPCDIST_MPI=openmpi",
            "-x", "HPCDIST_SCHEDULER=none"]  # fmt: skip


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No launcher, job or forwarded variables from the machine running the tests."""
    import os

    for name in list(os.environ):
        if name.startswith(
            ("OMPI_", "PMIX", "PMI_", "SLURM_", "MV2_", "NCCL_", "GLOO_", "HPCDIST_", "MPI_")
        ) or name in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "PYTHONPATH",
            "OMP_NUM_THREADS",
            "CUDA_VISIBLE_DEVICES",
        ):
            monkeypatch.delenv(name)


def _dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert main(["mpirun", "--dry-run", "--mpirun", "mpirun", *argv]) == 0
    return shlex.split(capsys.readouterr().out)


def _root() -> list[str]:
    import os

    return ["--allow-run-as-root"] if os.geteuid() == 0 else []


def test_dry_run_with_the_localhost_hostfile(capsys: pytest.CaptureFixture[str]) -> None:
    argv = _dry_run(capsys, "-np", "4", "--hostfile", "hostfiles/localhost", "--", "python", "train.py")
    assert argv == [
        "mpirun",
        "-np",
        "4",
        "--hostfile",
        "hostfiles/localhost",
        "--bind-to",
        "none",
        "--map-by",
        "slot",
        *_root(),
        "--mca",
        "btl",
        "^ofi",
        *_ours(2097152),
        *PER_RUN,
        *SHIM,
        "python",
        "train.py",
    ]


def test_dry_run_reproduces_the_seed_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = _dry_run(
        capsys,
        "-np",
        "4",
        "-H",
        "104.171.200.62:2,104.171.200.182:2",
        "-x",
        "MASTER_ADDR=104.171.200.62",
        "-x",
        "MASTER_PORT=1234",
        "-x",
        "PATH",
        "-bind-to",
        "none",
        "-map-by",
        "slot",
        "-mca",
        "pml",
        "ob1",
        "-mca",
        "btl",
        "^openib",
        "--",
        "python3",
        "main.py",
    )
    assert argv == [
        "mpirun",
        "-np",
        "4",
        "-H",
        "104.171.200.62:2,104.171.200.182:2",
        "--bind-to",
        "none",
        "--map-by",
        "slot",
        *_root(),
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "^openib,ofi",
        "--prtemca",
        "oob_tcp_keepalive_time",
        "2",
        "--prtemca",
        "oob_tcp_keepalive_intvl",
        "1",
        "--prtemca",
        "oob_tcp_keepalive_probes",
        "3",
        *_ours(2097152),
        "-x",
        "MASTER_ADDR=104.171.200.62",
        "-x",
        "MASTER_PORT=1234",
        "-x",
        "PATH",
        *PER_RUN,
        *SHIM,
        "python3",
        "main.py",
    ]


def test_dry_run_defaults_np_to_the_slots_and_forwards_job_variables(
    capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("ip-26-0-162-46 slots=8\nip-26-0-162-239 slots=8\n")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    argv = _dry_run(capsys, "--hostfile", str(hostfile), "--bare", "--", "python", "your_script.py")
    assert argv[:3] == ["mpirun", "-np", "16"]
    assert argv[-12:] == ["-x", "NCCL_DEBUG", "-x", "OMP_NUM_THREADS", "-x", f"HPCDIST_VERSION={__version__}",
                          *PER_RUN, "python", "your_script.py"]  # fmt: skip


def test_an_mpich_hostfile_is_passed_as_hosts(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    hostfile = tmp_path / "mpich"
    hostfile.write_text("# MPICH form\nnode1:2\nnode2:2\n")
    argv = _dry_run(capsys, "--hostfile", str(hostfile), "--bare", "--", "true")
    assert argv[:5] == ["mpirun", "-np", "4", "-H", "node1:2,node2:2"]


def test_without_hosts_np_ranks_run_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert _dry_run(capsys, "-np", "3", "--bare", "--", "true")[:5] == ["mpirun", "-np", "3", "-H", "localhost:3"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mpirun", "--hostfile", "no/such/file", "--", "true"], "cannot read hostfile 'no/such/file'"),
        (["mpirun", "-np", "0", "--", "true"], "-np must be at least 1, got 0"),
        (["mpirun", "-np", "-2", "--", "true"], "-np '-2' is not a whole number"),
        (["mpirun", "-np", "5", "--hostfile", "hostfiles/localhost", "--", "true"], "-np 5 is more than the 4 slots"),
        (["mpirun", "-np", "2", "--"], "no program given"),
        (["mpirun", "--", "true"], "give the number of ranks with -np N"),
        (["mpirun", "-np", "two", "--", "true"], "-np 'two' is not a whole number; write it in ASCII digits"),
        (
            ["mpirun", "-np", "2", "-H", "a:2", "--hostfile", "hostfiles/localhost", "--", "true"],
            "either --hostfile or -H",
        ),
        (["mpirun", "-np", "2", "-x", "1BAD=x", "--", "true"], "-x '1BAD=x'"),
        (
            ["run", "p2p", "--backend", "mpl"],
            "argument --backend: unknown value 'mpl'; did you mean mpi? choose one of auto, gloo, nccl, mpi",
        ),
        (["run", "nosuch"], "argument NAME: unknown value 'nosuch'; choose one of allreduce, broadcast,"),
        (["frobnicate"], "unknown command 'frobnicate' for `hpcdist`; see `hpcdist --help`"),
    ],
)
def test_bad_input_is_a_clear_error(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("hpcdist: error: ") and message in err, err
    assert "Traceback" not in err


def test_a_malformed_hostfile_line_names_file_and_line(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    hostfile = tmp_path / "two"
    hostfile.write_text("node0 slots=2\n\n# comment\nnode1 slots\n")
    assert main(["mpirun", "--hostfile", str(hostfile), "--", "true"]) == 2
    err = capsys.readouterr().err
    assert f"hpcdist: error: {hostfile}:4: expected 'HOST slots=N [max_slots=M]' or 'HOST:N', got 'node1 slots'" in err


def test_env_reports_a_half_set_launcher(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    assert main(["env"]) == 2
    assert "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not" in capsys.readouterr().err


def test_env_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    for name, value in {
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }.items():
        monkeypatch.setenv(name, value)
    assert main(["env", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["launcher"], got["rank"], got["world_size"], got["local_rank"], got["local_world_size"]) == (
        "openmpi",
        3,
        4,
        1,
        2,
    )


def test_every_command_is_found_in_its_own_module() -> None:
    from hpcdist import cli

    for name, module in cli._MODULES.items():
        assert name in importlib.import_module(f"hpcdist.cli.{module}").COMMANDS, (name, module)
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(sub.choices) == sorted(cli._MODULES)


@pytest.mark.parametrize("argv", [["mpirun", "-np", "3", "--", "python", "t.py"], ["sbatch", "--nodes", "2"]])
def test_a_command_parses_alike_with_its_module_alone(argv: list[str]) -> None:
    assert build_parser(argv[0]).parse_args(argv) == build_parser().parse_args(argv)


def test_a_command_loads_its_own_module_alone() -> None:
    code = (
        "import sys; from hpcdist.cli import main; code = main(['env']); "
        "print(code, sorted(m for m in sys.modules if m.startswith('hpcdist.cli.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.splitlines()[-1] == "0 ['hpcdist.cli.habits', 'hpcdist.cli.launch', 'hpcdist.cli.types']"
