"""Backend choice, environment merging and the timeout setting: pure decisions, plain values."""

from __future__ import annotations

import pytest

from hpcdist.errors import UsageError
from hpcdist.forensics.ledger import FINISHED, RUNNING
from hpcdist.forensics.recording import LEDGER
from hpcdist.runtime.backends import choose_backend, choose_store
from hpcdist.runtime.bootstrap import program_finished
from hpcdist.runtime.prepare import job_timeout, merge_environ
from hpcdist.settingtable import DEFAULT_TIMEOUT


@pytest.mark.parametrize(
    ("requested", "gpus", "local", "native", "expected"),
    [
        ("auto", 0, 4, False, "gloo"),
        ("auto", 8, 8, False, "nccl"),
        ("auto", 2, 4, False, "gloo"),  # too few GPUs for nccl: auto falls back, explicit nccl errors
        ("gloo", 8, 8, False, "gloo"),
        ("nccl", 8, 8, False, "nccl"),
        ("nccl", 8, 2, False, "nccl"),
        ("mpi", 0, 4, True, "mpi"),  # torch built with MPI: its native backend
        ("mpi", 0, 4, False, "mpi4py"),  # a PyPI wheel: hpcdist's process group on mpi4py
    ],
)
def test_choose_backend(requested: str, gpus: int, local: int, native: bool, expected: str) -> None:
    assert (
        choose_backend(requested, cuda_devices=gpus, local_world_size=local, native_mpi=native, host="n1") == expected
    )


@pytest.mark.parametrize(
    ("gpus", "native", "expected"), [(0, False, "mpi4py"), (0, True, "mpi"), (4, False, "nccl"), (2, False, "mpi4py")]
)
def test_auto_under_an_mpi_launch_prefers_the_mpi_backend_on_cpu(gpus: int, native: bool, expected: str) -> None:
    chosen = choose_backend(
        "auto", cuda_devices=gpus, local_world_size=4, native_mpi=native, host="n1", mpi_launch=True
    )
    assert chosen == expected


@pytest.mark.parametrize(
    ("requested", "gpus", "local", "native", "message"),
    [
        ("nccl", 0, 1, False, "backend nccl needs CUDA GPUs, but torch sees none on host n1"),
        ("nccl", 2, 4, False, "4 ranks run on host n1 but torch sees only 2 GPU(s)"),
        ("nccl", 2, 4, False, "Duplicate GPU detected"),
        ("mpl", 0, 1, False, "unknown backend 'mpl'; choose one of auto, gloo, nccl, mpi"),
    ],
)
def test_choose_backend_errors(requested: str, gpus: int, local: int, native: bool, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        choose_backend(requested, cuda_devices=gpus, local_world_size=local, native_mpi=native, host="n1")


def test_merge_environ_writes_only_new_values() -> None:
    current = {"RANK": "1", "PATH": "/bin"}
    assert merge_environ(current, {"RANK": "1", "WORLD_SIZE": "4"}) == {"WORLD_SIZE": "4"}


def test_merge_environ_refuses_to_overwrite_a_differing_user_value() -> None:
    with pytest.raises(UsageError, match="MASTER_PORT=1234 is already set, but the launch says MASTER_PORT=5678"):
        merge_environ({"MASTER_PORT": "1234"}, {"MASTER_PORT": "5678"})


@pytest.mark.parametrize(
    ("environ", "argument", "expected"),
    [({}, None, DEFAULT_TIMEOUT), ({"HPCDIST_TIMEOUT": "12.5"}, None, 12.5), ({"HPCDIST_TIMEOUT": "12"}, 3, 3.0)],
)
def test_job_timeout(environ: dict[str, str], argument: float | None, expected: float) -> None:
    assert job_timeout(environ, argument) == expected


@pytest.mark.parametrize(
    ("environ", "argument", "message"),
    [
        ({"HPCDIST_TIMEOUT": "ten"}, None, "HPCDIST_TIMEOUT='ten' is not a number of seconds"),
        ({"HPCDIST_TIMEOUT": "0"}, None, "positive number of seconds, got 0.0"),
        ({}, -1, "positive number of seconds, got -1"),
    ],
)
def test_job_timeout_errors(environ: dict[str, str], argument: float | None, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        job_timeout(environ, argument)


@pytest.mark.parametrize(
    ("requested", "backend", "mpi_launch", "expected"),
    [
        ("auto", "mpi4py", True, "mpi"),  # the mpi backend under MPI: no port
        ("auto", "mpi", True, "mpi"),
        ("auto", "gloo", True, "tcp"),  # gloo and nccl take it when asked
        ("auto", "nccl", True, "tcp"),
        ("auto", "gloo", False, "tcp"),
        ("mpi", "nccl", True, "mpi"),
        ("mpi", "gloo", True, "mpi"),
        ("tcp", "mpi4py", True, "tcp"),
    ],
)
def test_choose_store(requested: str, backend: str, mpi_launch: bool, expected: str) -> None:
    assert choose_store(requested, backend, mpi_launch=mpi_launch) == expected


@pytest.mark.parametrize(
    ("requested", "mpi_launch", "message"),
    [
        ("mpi", False, "store 'mpi' needs the ranks started by mpirun/mpiexec"),
        ("MPI", True, "unknown store 'MPI'; choose one of auto, tcp, mpi"),
    ],
)
def test_choose_store_errors(requested: str, mpi_launch: bool, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        choose_store(requested, "gloo", mpi_launch=mpi_launch)


def test_a_program_that_ended_well_is_finished_in_its_ledger_before_hpcdist_winds_down() -> None:
    """A failing peer's report then names the rank as finished instead of showing the stack of its shutdown."""
    phase, since = LEDGER.phase, LEDGER.since
    LEDGER.enter(RUNNING)
    try:
        program_finished()
        assert LEDGER.state().name == FINISHED
    finally:
        LEDGER.phase, LEDGER.since = phase, since
