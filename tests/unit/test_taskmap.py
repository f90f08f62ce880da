"""hpcdist.map in one process (no MPI launch): inline, in order, failures named like a distributed run."""

from __future__ import annotations

import pickle

import pytest

from hpcdist.errors import UsageError
from hpcdist.workloads.taskmap import TaskError, compute
from hpcdist.workloads.taskmap import map as task_map


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone process: no launcher variables from the machine running the tests."""
    import os

    for name in list(os.environ):
        if name.startswith(("OMPI_", "PMIX", "PMI_", "SLURM_", "MV2_", "HPCDIST_")) or name in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
        ):
            monkeypatch.delenv(name)


def test_the_seeds_example_runs_inline_in_order() -> None:
    assert task_map(compute, range(10)) == [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]


def test_any_iterable_works_and_an_empty_one_gives_an_empty_list() -> None:
    assert task_map(str.upper, (word for word in ["a", "b"])) == ["A", "B"]
    assert task_map(compute, []) == []


def test_a_failure_names_the_item_the_rank_and_keeps_the_traceback() -> None:
    def fragile(x: int) -> int:
        if x == 2:
            raise KeyError("missing")
        return x

    with pytest.raises(TaskError) as caught:
        task_map(fragile, [0, 1, 2, 3])
    error = caught.value
    assert (error.index, error.item, error.rank, error.error) == (2, "2", 0, "KeyError: 'missing'")
    assert 'raise KeyError("missing")' in error.remote_traceback
    assert str(error).startswith("hpcdist.map: fn failed for item 2 (2) on rank 0: KeyError: 'missing'\n")
    assert isinstance(error.__cause__, KeyError)


def test_a_task_error_survives_pickling_and_long_items_are_cut() -> None:
    error = TaskError(5, "x" * 10, 3, "ValueError: v", "Traceback ...\nValueError: v\n")
    again = pickle.loads(pickle.dumps(error))
    assert (again.index, again.item, again.rank, again.error, str(again)) == (
        5,
        "x" * 10,
        3,
        "ValueError: v",
        str(error),
    )
    with pytest.raises(TaskError) as caught:
        task_map(lambda s: 1 / 0, ["y" * 500])
    assert len(caught.value.item) == 120 and caught.value.item.endswith("...")


def test_a_bad_timeout_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="positive number of seconds"):
        task_map(compute, [1], timeout=0)
    monkeypatch.setenv("HPCDIST_TIMEOUT", "soon")
    with pytest.raises(UsageError, match="HPCDIST_TIMEOUT='soon' is not a number"):
        task_map(compute, [1])
