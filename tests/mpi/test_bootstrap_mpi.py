"""Launch detection, rendezvous and init under a real `mpiexec -n N` (any N): run with --with-mpi."""

from __future__ import annotations

import os
import socket

import pytest

from hpcdist.runtime.env import LaunchEnv
from hpcdist.runtime.rendezvous import RendezvousTimeout, _wait, mpi_rendezvous, store_over

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def test_the_world_is_as_large_as_the_launch_asked(comm) -> None:
    """mpi4py bound to another MPI than mpirun's gives N singletons of size 1: catch that here."""
    env = LaunchEnv.from_environ(os.environ)
    assert comm.size == env.world_size
    if "HPCDIST_TEST_NP" in os.environ:
        assert comm.size == int(os.environ["HPCDIST_TEST_NP"])


def test_launch_env_matches_what_mpi_says(comm, expected_launcher: str) -> None:
    from mpi4py import MPI

    env = LaunchEnv.from_environ(os.environ)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    assert (env.launcher, env.rank, env.world_size) == (expected_launcher, comm.rank, comm.size)
    assert (env.local_rank, env.local_world_size) == (node.rank, node.size)
    ranks = comm.allgather(env.rank)
    assert ranks == list(range(comm.size))
    node.Free()


def test_rendezvous_is_agreed_and_the_store_serves_every_rank(comm) -> None:
    from datetime import timedelta

    from torch.distributed import TCPStore

    env = LaunchEnv.from_environ({k: v for k, v in os.environ.items() if not k.startswith("MASTER_")})
    rdzv = mpi_rendezvous(comm, env, timeout=60)
    assert len(set(comm.allgather((rdzv.addr, rdzv.port)))) == 1
    assert rdzv.addr == "127.0.0.1" and rdzv.node == (0, 1)  # all ranks share this host
    assert (rdzv.listener is not None) == (comm.rank == 0) and rdzv.hosted
    store = store_over(rdzv.listener, rdzv.addr, comm.size, 60) if comm.rank == 0 else None  # what serve_store does
    client = TCPStore(rdzv.addr, rdzv.port, is_master=False, timeout=timedelta(seconds=30))
    client.set(f"rank{comm.rank}", str(comm.rank * 10))
    comm.Barrier()
    assert [client.get(f"rank{r}").decode() for r in range(comm.size)] == [str(r * 10) for r in range(comm.size)]
    comm.Barrier()  # rank 0's store lives until every rank has read
    del store


@pytest.mark.world_size(min=2)
def test_a_wait_that_times_out_names_the_rank_and_what_it_waited_for(comm) -> None:
    buf = bytearray(8)
    if comm.rank == 0:  # late: it sends its word once every other rank gave up waiting for it
        for rank in range(1, comm.size):
            comm.recv(source=rank, tag=7)
        comm.Ibcast(buf, root=0).Wait()
        return
    request = comm.Ibcast(buf, root=0)
    with pytest.raises(
        RendezvousTimeout, match=f"rank {comm.rank} of {comm.size} on .* waited 0.2 s for rank 0's word"
    ):
        _wait(comm, request, 0.2, "rank 0's word")
    comm.send(None, dest=0, tag=7)
    request.Wait()


def _check_world_and_subgroup_sums(comm) -> None:
    """SUM of rank+1 over the world, then over the subgroup of ranks 0 and 1, on the default backend."""
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([float(comm.rank + 1)])
    dist.all_reduce(tensor)
    assert tensor.item() == comm.size * (comm.size + 1) / 2
    members = list(range(min(2, comm.size)))
    group = dist.new_group(members)
    if comm.rank in members:
        tensor = torch.tensor([float(comm.rank + 1)])
        dist.all_reduce(tensor, group=group)
        assert tensor.item() == sum(r + 1 for r in members)


def test_init_mpi_on_a_wheel_without_mpi_uses_the_mpi4py_group_and_a_gloo_group_fits_beside_it(comm) -> None:
    import torch
    import torch.distributed as dist

    import hpcdist

    if dist.is_mpi_available():
        pytest.skip("this torch has a native MPI backend")
    with hpcdist.init("mpi", timeout=30) as session:
        assert session.backend == "mpi4py"
        assert len(set(comm.allgather((session.master_addr, session.master_port)))) == 1  # one shared store
        assert dist.get_backend() == "mpi4py" and (dist.get_rank(), dist.get_world_size()) == (comm.rank, comm.size)
        assert os.environ["RANK"] == str(comm.rank)
        _check_world_and_subgroup_sums(comm)
        named = dist.new_group(list(range(comm.size)), backend="mpi")  # as a script for a torch with MPI names it
        tensor = torch.tensor([float(comm.rank + 1)])
        dist.all_reduce(tensor, group=named)
        assert dist.get_backend(named) == "mpi4py" and tensor.item() == comm.size * (comm.size + 1) / 2
        beside = dist.new_group(list(range(comm.size)), backend="gloo")  # needs the default group's shared store
        tensor = torch.tensor([float(comm.rank + 1)])
        dist.all_reduce(tensor, group=beside)
        assert tensor.item() == comm.size * (comm.size + 1) / 2
    assert not dist.is_initialized()


def test_init_gloo_then_all_reduce_and_a_subgroup(comm) -> None:
    import torch.distributed as dist

    import hpcdist

    with hpcdist.init("gloo", timeout=60) as session:
        assert (session.rank, session.world_size, session.backend, session.device) == (
            comm.rank,
            comm.size,
            "gloo",
            "cpu",
        )
        assert os.environ["RANK"] == str(comm.rank) and os.environ["MASTER_PORT"] == str(session.master_port)
        _check_world_and_subgroup_sums(comm)
    assert not dist.is_initialized()


def test_init_gives_torchruns_variables_and_shutdown_takes_back_the_agent_store(comm) -> None:
    import hpcdist

    with hpcdist.init("gloo", timeout=60):
        names = ("GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RUN_ID")
        mine = {name: os.environ[name] for name in names}
        everyone = comm.allgather(mine)
        hosts = list(dict.fromkeys(comm.allgather(socket.gethostname())))
        assert mine["GROUP_RANK"] == str(hosts.index(socket.gethostname()))
        assert mine["GROUP_WORLD_SIZE"] == str(len(hosts)) and mine["ROLE_NAME"] == "default"
        assert (mine["ROLE_RANK"], mine["ROLE_WORLD_SIZE"]) == (str(comm.rank), str(comm.size))
        assert len({e["TORCHELASTIC_RUN_ID"] for e in everyone}) == 1
        assert os.environ["TORCHELASTIC_RESTART_COUNT"] == os.environ.get("HPCDIST_RESTART_COUNT", "0")
        assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True"  # rank 0's hpcdist serves the store
    assert "TORCHELASTIC_USE_AGENT_STORE" not in os.environ  # released with the store
