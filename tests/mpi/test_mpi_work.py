"""The mpi4py group's point-to-point, Work objects, futures, timeouts and lost errors, at any world size."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def world():
    from mpi4py import MPI

    import hpcdist

    assert not dist.is_initialized()
    with hpcdist.init("mpi", timeout=60):
        yield MPI.COMM_WORLD


def test_send_recv_with_tags_and_any_source(world) -> None:
    r, n = world.rank, world.size
    dst, src = (r + 1) % n, (r - 1) % n
    reqs = [dist.isend(torch.tensor([r, 1]), dst, tag=1), dist.isend(torch.tensor([r, 2]), dst, tag=2)]
    late, early = torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)
    dist.recv(late, src, tag=2)  # tags pick the message, not the order
    dist.recv(early, src, tag=1)
    assert (early.tolist(), late.tolist()) == ([src, 1], [src, 2])
    for w in reqs:
        assert w is not None  # None only for a rank outside the group
        w.wait()
    if n > 1:
        if r == 0:
            got = sorted(dist.recv(t := torch.zeros(1)) for _ in range(n - 1))
            assert got == list(range(1, n)) and t.item() >= 1
        else:
            dist.send(torch.tensor([float(r)]), 0)
    world.Barrier()


def test_irecv_any_source_reports_the_real_source(world) -> None:
    pg = dist.group.WORLD
    assert pg is not None  # the fixture initialised the default group
    r = world.rank
    work = pg.recv_anysource([t := torch.zeros(1)], 5)
    send = pg.send([torch.tensor([float(r)])], (r + 1) % world.size, 5)
    work.wait()
    send.wait()
    assert work._source_rank() == (r - 1) % world.size == int(t.item())


def test_batch_isend_irecv_ring(world) -> None:
    r, n = world.rank, world.size
    out, inc = torch.full((3,), float(r)), torch.zeros(3)
    ops = [dist.P2POp(dist.irecv, inc, (r - 1) % n), dist.P2POp(dist.isend, out, (r + 1) % n)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert (inc == (r - 1) % n).all()


def test_the_group_answers_torchs_per_device_backend_queries(world) -> None:
    from hpcdist.mpi_backend import native_active

    pg = dist.group.WORLD
    assert pg is not None
    for device in ("cpu", "cuda"):  # torch asks, e.g. in batch_isend_irecv and new_group, even without a GPU
        backend = pg._get_backend(torch.device(device))
        # the Python group is its own backend; the compiled one registered its C++ backend for both devices
        assert (backend is pg) is not native_active(), (device, backend)
        assert not backend.supports_splitting
    with pytest.raises(RuntimeError, match="No backend type associated with device type meta"):
        pg._get_backend(torch.device("meta"))


def test_work_api_and_futures(world) -> None:
    t = torch.ones(5)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    assert fut.wait()[0] is t and (t == world.size).all()  # completed by the progress thread
    assert work.wait() and work.is_completed() and work.is_success() and work.exception() is None
    chained = dist.all_reduce(torch.ones(2), async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    assert chained.wait().tolist() == [2.0 * world.size] * 2
    w = dist.barrier(async_op=True)
    assert w.wait() is True


def _self_group(timeout: float):
    """A one-rank mpi4py group per rank, so a test can provoke failures on every world size."""
    mine = None
    for rank in range(dist.get_world_size()):
        g = dist.new_group([rank], backend="mpi4py", timeout=timedelta(seconds=timeout))
        if rank == dist.get_rank():
            mine = g
    return mine


def test_a_receive_nobody_sends_times_out_naming_rank_operation_and_group(world) -> None:
    import hpcdist.mpi_backend as mb

    g = _self_group(1.0)
    t = torch.zeros(1)
    work = g.recv([t], 0, 9)
    with pytest.raises(
        mb.CollectiveTimeout,
        match=(
            rf"rank {world.rank}: recv from group rank 0 \(tag 9\) on group \[{world.rank}\] "
            "did not complete within 1 s"
        ),
    ):
        work.wait()
    g.send([torch.ones(1)], 0, 9).wait()  # the late message completes the orphaned request
    g.barrier().wait()
    assert t.item() == 1.0


@pytest.mark.python_backend  # the compiled backend's blocking call ends the job instead: tests/e2e/test_native.py
@pytest.mark.world_size(min=2)
def test_a_collective_only_rank_0_calls_times_out_then_completes_when_the_others_join(world) -> None:
    import hpcdist.mpi_backend as mb

    # the others' all_reduce must also complete within the timeout once they join: 1 s was too short under load
    g = dist.new_group(backend="mpi4py", timeout=timedelta(seconds=5))
    t = torch.ones(1)
    if world.rank == 0:
        members = ",".join(map(str, range(world.size)))
        with pytest.raises(
            mb.CollectiveTimeout, match=rf"rank 0: all_reduce on group \[{members}\] did not complete within 5 s"
        ):
            dist.all_reduce(t, group=g)
    world.Barrier()
    if world.rank != 0:
        dist.all_reduce(t, group=g)
    world.Barrier()
    dist.barrier(group=g)  # the group still works afterwards
    assert t.item() == world.size


def test_an_error_keeps_its_type_through_the_works_exception(world) -> None:
    import hpcdist.mpi_backend as mb

    g = _self_group(0.2)
    work = g.recv([torch.zeros(1)], 0, 12)
    with pytest.raises(mb.CollectiveTimeout):
        work.wait()
    error = work.exception()
    assert type(error) is mb.CollectiveTimeout and "recv from group rank 0 (tag 12)" in str(error)
    g.send([torch.ones(1)], 0, 12).wait()  # completes the orphaned request


def test_a_timeout_says_so_as_torch_s_own_backends_do(world) -> None:
    import hpcdist.mpi_backend as mb

    g = _self_group(0.2)
    with pytest.raises(
        mb.CollectiveTimeout, match=r" (Timed out|closed|timeout) "
    ) as caught:  # torch's test suite's pattern
        g.recv([torch.zeros(1)], 0, 11).wait()
    assert "every rank of the group made this call" in str(caught.value)
    g.send([torch.ones(1)], 0, 11).wait()  # completes the orphaned request


def test_an_async_error_nobody_waits_for_is_raised_at_the_next_call(world) -> None:
    import hpcdist.mpi_backend as mb

    g = _self_group(10.0)
    g.send([torch.ones(8)], 0, 3)
    g.recv([torch.zeros(2)], 0, 3)  # too small: MPI reports truncation; nobody waits
    with pytest.raises(mb.CollectiveError, match="an earlier asynchronous operation failed"):
        for _ in range(1000):
            g.barrier().wait()


def test_an_unobserved_error_at_destruction_aborts_the_job(world, monkeypatch) -> None:
    import hpcdist.abort as abort_mod

    aborted: list[int] = []
    monkeypatch.setattr(abort_mod, "abort_job", aborted.append)
    g = _self_group(10.0)
    g.send([torch.ones(8)], 0, 4)
    g.recv([torch.zeros(2)], 0, 4)
    dist.destroy_process_group(g)
    assert aborted == [1]


def test_the_bootstrap_picks_the_mpi4py_backend() -> None:
    from hpcdist.runtime.backends import choose_backend

    assert choose_backend("mpi", cuda_devices=0, local_world_size=4, native_mpi=dist.is_mpi_available(), host="h") in (
        "mpi",
        "mpi4py",
    )
