"""Run throwaway test files under a real `mpiexec -n N python -m pytest` and read each rank's outcomes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

# Written into each throwaway directory: every rank records "nodeid when outcome" in outcomes-<rank>.txt.
_RECORDER = """
import os

def pytest_runtest_logreport(report):
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", "single")
    kind = ("xfailed" if report.skipped else "xpassed") if hasattr(report, "wasxfail") else report.outcome
    with open(f"outcomes-{rank}.txt", "a") as f:
        f.write(f"{report.nodeid} {report.when} {kind}\\n")
"""


@dataclass(frozen=True)
class Run:
    """A finished throwaway pytest run."""

    returncode: int
    output: str
    seconds: float
    directory: Path

    def outcomes(self, rank: int | str) -> dict[tuple[str, str], str]:
        """(test name, phase) -> outcome as rank `rank` reported it."""
        path = self.directory / f"outcomes-{rank}.txt"
        rows = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
        return {(nodeid.split("::")[-1], when): kind for nodeid, when, kind in rows}


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without any launcher's variables (the tests may run under mpiexec themselves)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OMPI_", "PMIX", "PRTE_", "PMI_", "HPCDIST_")) and k not in ("CI", "PYTEST_ADDOPTS")
    }
    return {**env, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **extra}


@pytest.fixture
def run_pytest(tmp_path: Path):
    """run_pytest(source, np=2 | None, *args, timeout=…): the test file under mpiexec (np=None: no MPI)."""

    def run(source: str, np: int | None = 2, *args: str, timeout: float = 150) -> Run:
        (tmp_path / "conftest.py").write_text(_RECORDER)
        (tmp_path / "test_throwaway.py").write_text(textwrap.dedent(source))
        pytest_argv = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--color=no",
            "-p",
            "no:randomly",
            *args,
            "test_throwaway.py",
        ]
        argv = (
            pytest_argv
            if np is None
            else [
                str(BIN / "mpiexec"),
                "-n",
                str(np),
                "--oversubscribe",
                "--bind-to",
                "none",
                "--mca",
                "btl",
                "^ofi",
                *pytest_argv,
            ]
        )
        start = time.monotonic()
        proc = subprocess.run(argv, cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=timeout)
        return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start, tmp_path)

    return run
