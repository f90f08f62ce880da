"""The GPU tier (`make test-gpu`): it needs an NVIDIA GPU and a CUDA build of torch, and fails loudly without them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
BIN = Path(sys.executable).parent


def pytest_configure(config: pytest.Config) -> None:
    """End the session with status 1 and say why when this machine has no GPU torch can use: nothing is skipped."""
    import torch

    if not torch.cuda.is_available():
        built = torch.version.cuda or "no CUDA (a CPU-only build)"
        pytest.exit(
            f"make test-gpu: no GPU here: torch {torch.__version__} ({built}) sees no CUDA device; nothing was "
            "tested. Run it on a GPU node with a CUDA build of torch (pip install torch==<version> from PyPI).",
            returncode=1,
        )


@dataclass(frozen=True)
class Result:
    """A finished launch: status and output."""

    returncode: int
    stdout: str
    stderr: str


def launch(argv: list[str], timeout: float = 300, **env: str) -> Result:
    """Run argv from the repository root with extra environment; a hang fails the test after `timeout`."""
    full_env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **env}
    proc = subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def hpcdist() -> str:
    """The installed console script."""
    return str(BIN / "hpcdist")


@pytest.fixture
def started() -> float:
    """When the test started (for timings printed with the results)."""
    return time.monotonic()
