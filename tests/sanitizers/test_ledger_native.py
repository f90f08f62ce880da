"""The compiled ledger below Python: readers racing writers never keep a torn row, and a backend dropped on its own
worker thread goes quietly."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from mpi4py import MPI

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("slots", [4, 256])
def test_readers_racing_writers_keep_only_whole_rows(native_testing, slots) -> None:
    torn, rows = native_testing.ledger_race(writers=2, readers=2, calls=20000, slots=slots)
    assert rows > 0  # the readers saw rows while the writers wrote
    assert torn == 0


def test_a_backend_whose_last_reference_drops_on_its_worker_is_destroyed_there(native_testing) -> None:
    fallback = SimpleNamespace(_ring_comm=MPI.COMM_SELF)  # the Python group's part the backend reads at its start
    assert native_testing.drop_on_worker(MPI.COMM_SELF.handle, fallback)
