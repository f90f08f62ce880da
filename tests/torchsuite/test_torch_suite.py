"""torch's own distributed test suite on hpcdist's mpi backend (BACKEND=mpi) or on gloo, under `mpiexec -n 3`.

`make test-torch-suite` runs this module three times, as PyTorch's CI once ran distributed_test.py for its MPI backend:
    BACKEND=mpi  mpiexec -n 3 python -m pytest --with-mpi tests/torchsuite
    BACKEND=gloo mpiexec -n 3 python -m pytest --with-mpi tests/torchsuite
and BACKEND=mpi again with MPICH's mpiexec and the MPICH venv's python (the backend is the part that differs by MPI).
One pytest test runs every test of torch's DistributedTest._DistTestBase (harness.py says how). torch's own
skips (GPU-only tests, tests written for other backends or world sizes) are not pytest skips: the tier counts
them and lists them by reason in its report, so under CI=true (where a pytest skip fails the run) the tier
neither fails on them nor passes by being skipped. It fails on:
- a failure that EXPECTED_FAILURES does not list, and on a listed failure that passes (the list stays true);
- a CORE test that did not pass (torch's suite must still exercise every area here);
- no tests at all, or a world size other than 3.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest
from harness import Harness, Result

from hpcdist.families import identify as mpi_identity

pytestmark = pytest.mark.mpi

WORLD_SIZE = 3  # as PyTorch's CI ran the suite for its MPI backend; several tests assume 3 or more ranks

# Failures accepted by test id, with their cause.
EXPECTED_FAILURES: dict[str, dict[str, str]] = {
    "mpi": {
        "test_get_backend": "asserts dist.get_backend() == 'mpi'; hpcdist's backend is registered with torch as "
        "'mpi4py', since torch reserves 'mpi' for its native backend, which PyPI wheels lack",
    },
    "gloo": {},
}

# One or more tests per area that must pass on both backends.
CORE = {
    "collectives": [
        "test_all_reduce_sum",
        "test_broadcast",
        "test_all_gather",
        "test_reduce_sum",
        "test_scatter",
        "test_gather",
        "test_barrier",
        "test_all_gather_coalesced_simple",
        "test_all_reduce_coalesced_sum",
    ],
    "point-to-point": [
        "test_send_recv",
        "test_send_recv_any_source",
        "test_isend",
        "test_irecv",
        "test_batch_isend_irecv_gloo",
    ],
    "groups": [
        "test_all_reduce_full_group_sum",
        "test_get_rank_size_group",
        "test_destroy_group",
        "test_barrier_full_group",
    ],
    "DDP": ["test_DistributedDataParallelCPU", "test_accumulate_gradients_no_sync"],
    "object collectives": ["test_all_gather_object_default_pg", "test_scatter_object_list"],
}
# Where a collective past its group's timeout raises (gloo, hpcdist's Python mpi backend); the compiled one ends the
# job instead, and tests/e2e/test_native.py shows that.
CORE_TIMEOUTS = {"timeouts": ["test_barrier_timeout_full_group"]}


def core(backend: str) -> dict[str, list[str]]:
    """The CORE tests of this run."""
    raises = backend == "gloo" or os.environ.get("HPCDIST_MPI_NATIVE", "auto") == "0"
    return {**CORE, **CORE_TIMEOUTS} if raises else CORE


@pytest.mark.timeout(0)  # pytest-timeout would stop one rank; each torch test has the plugin's deadline instead
def test_torch_distributed_suite(request: pytest.FixtureRequest, deadline: Any, tier_report: Any) -> None:
    from mpi4py import MPI

    backend = os.environ.get("BACKEND", "mpi")
    assert MPI.COMM_WORLD.size == WORLD_SIZE, f"run the tier with mpiexec -n {WORLD_SIZE}, not {MPI.COMM_WORLD.size}"
    comm = MPI.COMM_WORLD.Dup()  # the harness's own barriers and agreement, apart from everything else
    harness = Harness(backend, comm, deadline=deadline)
    try:
        names = harness.names()
        assert names, "torch's distributed_test.py has no tests here"
        results = harness.run(names, label=f"{request.node.nodeid} :: ")
    finally:
        harness.close()
        comm.Free()
    mpi = " ".join(mpi_identity(MPI.Get_library_version()) or ("an unknown MPI",))
    tier_report(report(backend, harness.torch_backend, mpi, results, request.config.get_verbosity()))
    problems = check(results, EXPECTED_FAILURES[backend], core(backend))
    assert not problems, "\n".join(problems)


def check(results: list[Result], expected: dict[str, str], areas: dict[str, list[str]]) -> list[str]:
    """What is wrong with a run: unexpected failures, expected failures that passed, CORE tests that did not pass."""
    outcome = {r.name: r for r in results}
    problems = [f"{r.name} failed: {r.reason}" for r in results if r.outcome == "failed" and r.name not in expected]
    for name, cause in expected.items():
        if name not in outcome or outcome[name].outcome != "failed":
            got = outcome[name].outcome if name in outcome else "not run"
            problems.append(f"{name} was expected to fail ({cause}) but {got}: update EXPECTED_FAILURES")
    for area, names in areas.items():
        for name in names:
            got = outcome[name].outcome if name in outcome else "not run"
            if got != "passed":
                problems.append(f"core test {name} ({area}) {got}: {outcome[name].reason if name in outcome else ''}")
    return problems


def report(backend: str, torch_backend: str, mpi: str, results: list[Result], verbosity: int = 0) -> str:
    """The tier's summary (`mpi` names the MPI that ran it): counts, every failure with its cause, torch's skips."""
    import torch

    counts = Counter(r.outcome for r in results)
    expected = EXPECTED_FAILURES[backend]
    lines = [
        f"torch {torch.__version__} DistributedTest._DistTestBase, BACKEND={backend} (torch backend "
        f"{torch_backend!r}), {WORLD_SIZE} ranks of {mpi}: {len(results)} tests in "
        f"{sum(r.seconds for r in results):.1f} s",
        f"  {counts['passed']} passed, {counts['failed']} failed "
        f"({sum(r.name in expected for r in results if r.outcome == 'failed')} expected), "
        f"{counts['skipped']} skipped by torch's suite",
    ]
    for r in results:
        if r.outcome == "failed":
            why = f"expected: {expected[r.name]}" if r.name in expected else "UNEXPECTED"
            lines.append(f"  FAILED {r.name} ({why})\n      {r.reason}")
    lines.append("  skipped by torch's suite, by reason:")
    for reason, n in Counter(r.reason for r in results if r.outcome == "skipped").most_common():
        lines.append(f"    {n:4d}  {reason}")
    if verbosity > 0:
        lines += [f"  {r.outcome:8s} {r.seconds:6.2f} s  {r.name}" for r in results]
    return "\n".join(lines)
