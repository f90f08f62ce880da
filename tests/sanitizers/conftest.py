"""The sanitizer tier's own tests (`make test-sanitizers`), in two kinds, each collected in its own run.

- under `--with-mpi` (the tier's mpiexec runs, every rank on a sanitizer's test build of the compiled backend): the
  tests marked `mpi`, the backend's parts below Python (the ring, the ledger) through the test build's `testing`
  hooks (csrc/testing.h), fixture `native_testing`;
- without it (one plain pytest process): the tests that are not, which start processes of their own under a
  sanitizer (that ThreadSanitizer is live) and read the builds.

What one run does not collect is deselected (named by pytest's count), never skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep this directory's `mpi` tests under --with-mpi and its other tests without it."""
    here = config.rootpath / "tests" / "sanitizers"
    with_mpi = bool(config.getoption("--with-mpi", default=False))
    left = [
        item
        for item in items
        if item.path.is_relative_to(here) and (item.get_closest_marker("mpi") is None) == with_mpi
    ]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if item not in left]


@pytest.fixture(scope="session")
def native_testing() -> Any:
    """The test build's `testing` hooks, on a rank whose HPCDIST_MPI_SANITIZER names a sanitizer's build."""
    from hpcdist.mpi_backend import native

    module = native.load()
    if module is None or not hasattr(module, "testing"):
        pytest.fail(
            "the compiled backend loaded here is not a test build: run under `make test-sanitizers`, or set "
            "HPCDIST_MPI_SANITIZER=tsan (or asan) and HPCDIST_MPI_NATIVE=1 with the sanitizer's runtime preloaded "
            "(tests/sanitizers/rank_env.py)"
        )
    return module.testing


@pytest.fixture
def test_build(monkeypatch: pytest.MonkeyPatch) -> Callable[[str | None], Path]:
    """The compiled backend's file for a sanitizer's test build (None: the normal build), built where it is not."""

    def built(sanitizer: str | None) -> Path:
        from hpcdist.mpi_backend import building

        if sanitizer is None:
            monkeypatch.delenv("HPCDIST_MPI_SANITIZER", raising=False)
        else:
            monkeypatch.setenv("HPCDIST_MPI_SANITIZER", sanitizer)
        return building.built()

    return built
