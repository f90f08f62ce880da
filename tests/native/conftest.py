"""The compiled backend below Python: its ring and its ledger driven through the test builds' hooks (csrc/testing.h),
under mpiexec at several world sizes, in `make test-sanitizers` (the hooks exist only in those builds)."""

from __future__ import annotations

from types import ModuleType

import pytest


@pytest.fixture(scope="session")
def hooks() -> ModuleType:
    """The compiled module's test hooks; a normal build has none, which fails the test rather than skipping it."""
    from hpcdist.mpi_backend import native

    module = native.load()
    assert module is not None, "the compiled backend did not load (HPCDIST_MPI_NATIVE=1 says why)"
    assert hasattr(module, "testing"), "a normal build of the compiled backend: run these under a test build"
    return module.testing
