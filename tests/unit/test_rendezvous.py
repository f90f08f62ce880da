"""Rendezvous decisions that need no network: address choice and the srun port."""

from __future__ import annotations

import re
import socket

import pytest

from hpcdist.errors import UsageError
from hpcdist.runtime.addresses import HostInfo, offered_address, rendezvous_address, subnet_members
from hpcdist.runtime.env import AgentFacts, LaunchEnv
from hpcdist.runtime.netif import Interface
from hpcdist.runtime.rendezvous import (
    Rendezvous,
    _host_tag,
    _in_block,
    check_master_addr,
    new_run_id,
    slurm_rendezvous,
)


def _srun(job: str, step: str, nodelist: str = "node[03-04]") -> LaunchEnv:
    return LaunchEnv.from_environ(
        {
            "SLURM_PROCID": "1",
            "SLURM_NTASKS": "2",
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": "1",
            "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
            "SLURM_STEP_NODELIST": nodelist,
            "SLURM_JOB_ID": job,
            "SLURM_STEP_ID": step,
        }
    )


def test_loopback_only_when_every_rank_shares_one_host() -> None:
    n1, n2 = HostInfo("n1", (Interface("eth0", "10.0.0.5", 24),)), HostInfo("n2", (Interface("eth0", "10.0.0.6", 24),))
    assert rendezvous_address([n1, n1, n1]) == "127.0.0.1"
    assert rendezvous_address([n1, n1, n2]) == "10.0.0.5"


def test_the_reduced_counts_pick_the_interface_most_hosts_share() -> None:
    """Each host's leader sends 1 per rank-0 subnet it is on; the sums choose as the gathered hosts would."""
    n1 = HostInfo("n1", (Interface("eth0", "10.0.0.5", 24), Interface("ib0", "10.1.0.5", 16)))
    n2 = HostInfo("n2", (Interface("eth0", "10.0.0.6", 24), Interface("ib0", "10.1.3.6", 16)))
    n3 = HostInfo("n3", (Interface("ib0", "10.1.7.9", 16),))
    assert subnet_members(n1, n2.interfaces) == [1, 1] and subnet_members(n1, n3.interfaces) == [0, 1]
    assert offered_address(n1, [1, 2], 3) == rendezvous_address([n1, n2, n3]) == "10.1.0.5"
    assert offered_address(n1, [1, 1], 2) == rendezvous_address([n1, n2, n2]) == "10.0.0.5"  # a tie: the first
    assert offered_address(n1, [0, 0], 2, lambda: "192.0.2.1") == "192.0.2.1"  # routed: nothing shared
    assert offered_address(n1, [0, 0], 1) == "127.0.0.1"


def test_srun_rendezvous_is_the_first_node_and_a_port_from_the_job() -> None:
    rdzv = slurm_rendezvous(_srun("123456", "0"))
    assert (rdzv.addr, rdzv.port, rdzv.hosted) == ("node03", 15000 + 123456 % 10000, False)


def test_what_each_rendezvous_tells_torchruns_variables() -> None:
    """The srun store is rank 0's torch's; hpcdist's is served already; a user's endpoint claims nothing."""
    assert slurm_rendezvous(_srun("123456", "0")).facts() == AgentFacts(None, None, False)
    hosted = Rendezvous("127.0.0.1", 1234, True, node=(0, 1), run_id="hpcdist-1")
    assert hosted.facts() == AgentFacts((0, 1), "hpcdist-1", True)
    assert Rendezvous("n1", 29500, given=True).facts() == AgentFacts(None, None, None)


def test_run_ids_are_hpcdists_and_fresh() -> None:
    ids = {new_run_id() for _ in range(3)}
    assert len(ids) == 3 and all(re.fullmatch(r"hpcdist-[0-9a-f]{12}", i) for i in ids)


def test_two_steps_of_one_job_and_two_jobs_get_different_ports() -> None:
    ports = {slurm_rendezvous(_srun(job, step)).port for job, step in [("7", "0"), ("7", "1"), ("8", "0")]}
    assert len(ports) == 3 and all(15000 <= port < 25000 for port in ports)


def test_a_non_numeric_job_id_asks_for_master_port() -> None:
    with pytest.raises(UsageError, match="SLURM_JOB_ID='abc' is not a number; set MASTER_PORT"):
        slurm_rendezvous(_srun("abc", "0"))


def test_a_master_addr_that_does_not_resolve_is_named_with_this_host() -> None:
    check_master_addr("127.0.0.1")
    check_master_addr("localhost")
    with pytest.raises(
        UsageError,
        match=rf"MASTER_ADDR=no-such-host\.invalid does not resolve on host "
        rf"{re.escape(socket.gethostname())} \(.*\); correct the name",
    ):
        check_master_addr("no-such-host.invalid")


def _blocks(hosts: list[str], local_ranks: list[int]) -> list[bool]:
    """_in_block for every rank, given what the scan brings it: rank-1's host tag and local rank."""
    return [
        _in_block(r, local_ranks[r], hosts[r], (0, 0) if r == 0 else (_host_tag(hosts[r - 1]), local_ranks[r - 1]))
        for r in range(len(hosts))
    ]


def test_consecutive_ranks_per_host_are_told_from_round_robin() -> None:
    """The scan's count of local ranks 0 is each host's index only when every host's ranks are consecutive."""
    assert all(_blocks(["a", "a", "b", "b", "c"], [0, 1, 0, 1, 0]))
    assert not all(_blocks(["a", "b", "a", "b"], [0, 0, 1, 1]))  # --map-by node
    assert not all(_blocks(["a", "a", "b", "a"], [0, 1, 0, 2]))  # a host's ranks split in two runs
    assert not all(_blocks(["a", "a"], [1, 0]))  # local rank 0 is not the host's first rank
