"""`hpcdist doctor` for real: this machine passes, and a foreign mpirun (the mixed-installation trap) fails."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from launching import ROOT

pytestmark = pytest.mark.e2e

# The doctor through the CLI's entry point, in a fresh interpreter.
_RUN = "import sys\nfrom hpcdist.cli import main\nsys.exit(main(['doctor', *sys.argv[1:]]))\n"


# A foreign MPI's launcher: MPICH's version text, and it starts N unconnected copies of the program.
def _doctor(
    *args: str, timeout: float = 240, python: Path | None = None, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """Run the doctor (by `python`, default this one) with this environment minus launcher/network variables, plus
    `extra_env`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OMPI_", "PMIX", "PRTE_", "HPCDIST_", "NCCL_", "GLOO_"))
    }
    return subprocess.run(
        [str(python or sys.executable), "-c", _RUN, *args],
        cwd=ROOT,
        env={**env, **extra_env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_this_machine_passes_with_the_localhost_hostfile() -> None:
    proc = _doctor("--hostfile", "hostfiles/localhost", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    passed = {c["detail"] for c in data["checks"] if c["status"] == "pass"}
    assert data["ok"] is True and data["counts"]["fail"] == 0
    assert "`mpirun -np 2 python` starts one MPI world of 2 ranks" in passed
    assert any("both use Open MPI" in d for d in passed)
    assert any(d.startswith("every host answered `mpirun hostname`: localhost") for d in passed)
    assert any(d.startswith("all ") and "other rank(s) connected to rank 0's rendezvous" in d for d in passed)


def test_a_foreign_mpirun_is_caught_as_a_mixed_installation(mpich_python: Path) -> None:
    """The classic mix, for real: MPICH's mpiexec (the mpich wheel's, tests/conftest.py) starting this venv's
    mpi4py, which loads Open MPI: every rank is rank 0 of a world of 1."""
    proc = _doctor("--mpirun", str(mpich_python.parent / "mpiexec"), "--timeout", "60")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(
        line.startswith("FAIL") and "is MPICH 5." in line and "but mpi4py" in line and "uses Open MPI" in line
        for line in lines
    ), proc.stdout
    assert any(line.startswith("FAIL") and "2 separate worlds of size 1" in line for line in lines), proc.stdout
    assert "fix: build mpi4py against the MPI of this mpirun" in proc.stdout


def test_a_bad_interface_and_an_unknown_host_fail_with_fixes(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=1\nno-such-host.invalid slots=1\n")
    proc = _doctor("--hostfile", str(hostfile), GLOO_SOCKET_IFNAME="no-such-if0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "host 'no-such-host.invalid'" in proc.stdout and "GLOO_SOCKET_IFNAME=no-such-if0" in proc.stdout
    assert proc.stdout.count("fix: ") >= 2


def _printed_command(stdout: str) -> list[str]:
    """The command in backquotes in the mixed installation's fix line (the first FAIL's)."""
    fix = next(line for line in stdout.splitlines() if "fix: mpi4py here loads" in line)
    return shlex.split(fix.split("`")[1])


@pytest.mark.parametrize("reverse", [False, True], ids=["mpich-mpiexec-openmpi-mpi4py", "openmpi-mpirun-mpich-mpi4py"])
def test_the_mix_is_fixed_by_the_command_the_doctor_prints(mpich_python: Path, reverse: bool) -> None:
    """Both mixes for real; the fix names the launcher of mpi4py's MPI beside the python, and its command passes."""
    python, mpirun = (
        (mpich_python, Path(sys.executable).parent / "mpirun")
        if reverse
        else (Path(sys.executable), mpich_python.parent / "mpiexec")
    )
    proc = _doctor("--mpirun", str(mpirun), "--timeout", "60", python=python)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    loads, own = (
        ("MPICH", mpich_python.parent / "mpirun") if reverse else ("Open MPI", Path(sys.executable).parent / "mpirun")
    )
    command = _printed_command(proc.stdout)
    assert f"fix: mpi4py here loads {loads}: start it with {loads}'s launcher" in proc.stdout, proc.stdout
    assert command == [str(python), "-m", "hpcdist", "doctor", "--mpirun", str(own)], proc.stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX", "PRTE_", "HPCDIST_"))}
    fixed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert f"both use {loads} " in fixed.stdout
