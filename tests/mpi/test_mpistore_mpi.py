"""The store over MPI (runtime/mpistore.py) under a real `mpiexec -n N` (any N): its API, torch's uses, no port."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
from nccl_roots import nccl_roots

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture
def store(comm):
    from hpcdist.runtime.mpistore import MPIStore

    made = MPIStore(comm, timeout=30)
    yield made
    made.close()


def _listening_ports() -> set[int]:
    """The ports of the TCP sockets this process holds open in LISTEN state (from /proc)."""
    mine = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in mine:  # 0A: TCP_LISTEN; field 9: the socket's inode
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_every_rank_reads_what_the_others_set_and_counts_agree(comm, store) -> None:
    store.set(f"rank{comm.rank}", f"value {comm.rank}")
    after = (comm.rank + 1) % comm.size
    assert store.get(f"rank{after}") == f"value {after}".encode()  # waits until that rank has set it
    total = store.add("count", comm.rank + 1)
    assert 1 <= total <= comm.size * (comm.size + 1) // 2
    store.wait([f"rank{r}" for r in range(comm.size)])
    assert store.check([f"rank{r}" for r in range(comm.size)]) and not store.check(["never set"])
    # exactly one rank's compare_set wins; every rank then reads the winner's value
    first = store.compare_set("winner", "", str(comm.rank))
    assert comm.allreduce(int(first == str(comm.rank).encode())) == 1
    comm.Barrier()
    assert store.add("count", 0) == comm.size * (comm.size + 1) // 2
    assert store.num_keys() == comm.size + 2  # rank0.., count, winner
    comm.Barrier()
    if comm.rank == 0:
        assert store.delete_key("winner") and not store.delete_key("winner")
    comm.Barrier()
    assert not store.check(["winner"])


def test_torchs_prefix_store_reaches_it_with_bytes_and_the_extended_calls(comm, store) -> None:
    import torch.distributed as dist

    prefixed = dist.PrefixStore("job", store)  # torch's C++ PrefixStore calls this Python store with bytes
    prefixed.append("log", f"{comm.rank};")  # type: ignore[attr-defined]  # in torch, not in its stubs
    prefixed.multi_set(  # type: ignore[attr-defined]
        [f"a{comm.rank}", f"b{comm.rank}"], [b"\x00\xff", "text"]
    )
    values = prefixed.multi_get([f"a{r}" for r in range(comm.size)])
    assert values == [b"\x00\xff"] * comm.size
    comm.Barrier()
    assert sorted(store.get("job/log").decode().split(";")[:-1]) == sorted(str(r) for r in range(comm.size))
    assert prefixed.compare_set(f"b{comm.rank}", "text", "new") == b"new"


def test_a_wait_that_times_out_names_the_keys_and_the_rank(comm, store) -> None:
    with pytest.raises(RuntimeError, match=rf"rank {comm.rank} waited 0.5 s for key\(s\) 'absent'"):
        store.wait(["absent"], timedelta(seconds=0.5))
    comm.Barrier()


def test_init_mpi_holds_no_listening_port_and_torchs_uses_of_the_store_work(comm) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import hpcdist

    if dist.is_mpi_available():
        pytest.skip("this torch has a native MPI backend, which takes no store")
    mpis_own = _listening_ports()  # MPI's transports may listen (Open MPI's tcp component): not hpcdist's to close
    with hpcdist.init("mpi", timeout=60):
        dist.barrier()
        # no rank listens on a port of its own beyond MPI's (gloo's group below opens its own sockets)
        assert comm.allgather(sorted(_listening_ports() - mpis_own)) == [[]] * comm.size
        assert type(dist.distributed_c10d._get_default_store()).__name__ == "PrefixStore"
        gathered: list[object] = [None] * comm.size
        dist.all_gather_object(gathered, {"rank": comm.rank})
        assert gathered == [{"rank": r} for r in range(comm.size)]
        beside = dist.new_group(backend="gloo")  # gloo's pairs meet through the store over MPI
        tensor = torch.tensor([float(comm.rank + 1)])
        dist.all_reduce(tensor, group=beside)
        assert tensor.item() == comm.size * (comm.size + 1) / 2
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Linear(4, 1))  # broadcasts its parameters on the mpi group
        model(torch.full((2, 4), float(comm.rank))).sum().backward()
        grads = comm.allgather(model.module.weight.grad.tolist())
        assert all(grad == grads[0] for grad in grads)  # averaged: the same on every rank
        dist.barrier(group=beside)


def test_init_gloo_holds_rank_0s_listening_port(comm) -> None:
    """The check above can fail: with the TCP store (gloo), rank 0 listens before any group opens its own sockets."""
    import hpcdist.runtime.bootstrap as bootstrap
    from hpcdist.runtime.prepare import prepare
    from hpcdist.runtime.process import current

    mpis_own = _listening_ports()
    prepare(current(), 60)
    try:
        assert comm.allgather(sorted(_listening_ports() - mpis_own)) == [[int(os.environ["MASTER_PORT"])]] + [[]] * (
            comm.size - 1
        )
    finally:
        bootstrap.shutdown()
        comm.Barrier()


def test_init_gloo_on_the_store_over_mpi(comm) -> None:
    import torch
    import torch.distributed as dist

    import hpcdist
    from hpcdist.runtime.mpistore import MPIStore

    with hpcdist.init("gloo", timeout=60, store="mpi"):
        default = dist.distributed_c10d._get_default_store()
        assert isinstance(default, dist.PrefixStore) and isinstance(default.underlying_store, MPIStore)
        tensor = torch.tensor([float(comm.rank + 1)])
        dist.all_reduce(tensor)  # gloo's pairs found each other's addresses through the store over MPI
        assert tensor.item() == comm.size * (comm.size + 1) / 2
        sub = dist.new_group(list(range(0, comm.size, 2)))
        if comm.rank % 2 == 0:
            dist.all_reduce(tensor, group=sub)
            assert tensor.item() == len(range(0, comm.size, 2)) * comm.size * (comm.size + 1) / 2


@pytest.mark.parametrize("mine", [None, "2"])
def test_nccls_root_ids_reach_every_rank_over_mpi_as_torch_fetches_them(comm, monkeypatch, mine: str | None) -> None:
    """torch 2.13's scalable nccl start-up on the store over MPI, without the GPU: with the TORCH_NCCL_RANKS_PER_ROOT
    hpcdist.init leaves (128, or the user's), each root `set`s its 128-byte id under `UniqueNCCLID:<i>` and every rank
    `multi_get`s them all through torch's PrefixStore (ProcessGroupNCCL::allgatherUniqueNCCLIDs); random bytes stand
    for ncclGetUniqueId's."""
    import torch.distributed as dist

    import hpcdist

    if mine is None:
        monkeypatch.delenv("TORCH_NCCL_RANKS_PER_ROOT", raising=False)
    else:
        monkeypatch.setenv("TORCH_NCCL_RANKS_PER_ROOT", mine)
    with hpcdist.init("gloo", timeout=60, store="mpi"):
        per_root = int(os.environ["TORCH_NCCL_RANKS_PER_ROOT"])
        assert comm.allgather(per_root) == [int(mine or 128)] * comm.size
        roots = nccl_roots(comm.size, per_root)
        keys = [f"UniqueNCCLID:{i}" for i in range(len(roots))]
        ours = os.urandom(128) if comm.rank in roots else None
        made = [id_ for id_ in comm.allgather(ours) if id_ is not None]  # the ids, in root order
        group_store = dist.PrefixStore(f"nccl-ids-{mine}", dist.distributed_c10d._get_default_store())
        if ours is not None:
            group_store.set(keys[roots.index(comm.rank)], ours)  # type: ignore[arg-type]  # torch takes bytes too
        assert group_store.multi_get(keys) == made  # waits for the roots that are late
        assert len(made) == (2 if (mine, comm.size) == ("2", 4) else 1)


def test_a_server_thread_that_does_not_stop_says_where_it_is(comm, capfd) -> None:
    """A server thread held inside a request (here rank 0's own, whose answer waits) is told when it will not stop:
    the ranks that asked it meanwhile had no answer, and rank 0's stderr says where the thread was."""
    import threading

    from hpcdist.runtime.storeserver import Server

    server = Server(comm.Dup())
    held = threading.Event()
    server.local.put(("set", ("key", b"value"), 0.0, lambda ok, value: held.wait(30)))
    try:
        server.stop(0.2)
        assert server.thread.is_alive()
    finally:
        held.set()
    server.thread.join(5)
    assert not server.thread.is_alive() and server.table == {"key": b"value"}
    err = capfd.readouterr().err
    assert re.search(
        r"rank 0's MPI store thread did not stop in 0\.2 s: it has been in answering set for rank 0 for "
        r"[0-9.]+ s, so the ranks that asked it meanwhile had no answer",
        err,
    ), err
    server.stop(0.2)
    assert "did not stop" not in capfd.readouterr().err
