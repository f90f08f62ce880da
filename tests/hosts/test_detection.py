"""The multi-host decisions that need no network (pure, no root): rendezvous address and interface, lost hosts."""

from __future__ import annotations

import pytest

from hpcdist.launching.watch import MpirunWatch
from hpcdist.runtime.addresses import (
    HostInfo,
    ReachCount,
    choose_interface,
    interface_towards,
    rendezvous_address,
    unreachable_summary,
)
from hpcdist.runtime.netif import Interface
from hpcdist.runtime.prepare import socket_ifnames


def host(name: str, *ifaces: str) -> HostInfo:
    """host("n1", "eth0=10.0.0.1/24") -> HostInfo."""
    return HostInfo.decode(" ".join([name, *ifaces]))


N1 = host("n1", "docker0=172.17.0.1/16", "eth0=10.250.0.1/24", "ib0=192.168.7.1/24")
N2 = host("n2", "eth0=10.250.0.2/24", "ib0=192.168.7.2/24")
N3 = host("n3", "eth0=10.250.0.3/24")


def test_host_info_round_trips_and_drops_interfaces_that_do_not_fit() -> None:
    assert HostInfo.decode(N1.encode()) == N1
    assert N1.interfaces[1] == Interface("eth0", "10.250.0.1", 24)
    assert HostInfo.decode(N1.encode(limit=30)) == host("n1", "docker0=172.17.0.1/16")
    assert HostInfo.decode("lonely") == HostInfo("lonely", ())


@pytest.mark.parametrize(
    ("hosts", "preferred", "expected"),
    [
        ([N1, N1, N2, N2], None, "eth0"),  # eth0 and ib0 both reach n2: the first one
        ([N1, N1, N2, N2], "192.168.7.1", "ib0"),  # ...unless the hostname resolves to the other
        ([N1, N2, N3], "192.168.7.1", "eth0"),  # only eth0 reaches n3 as well: more hosts win
        ([N1, host("n2", "eth0=10.9.0.2/24")], None, None),  # no shared subnet (routed)
        ([host("n2", "eth0=10.250.0.2/24"), N1], None, "eth0"),  # rank 0 on n2
    ],
)
def test_rank_0_offers_its_interface_on_the_subnet_shared_with_the_other_hosts(
    hosts: list[HostInfo], preferred: str | None, expected: str | None
) -> None:
    chosen = choose_interface(hosts, preferred)
    assert (chosen.name if chosen else None) == expected


def test_rendezvous_address_is_loopback_on_one_host_and_never_when_ranks_span_hosts() -> None:
    assert rendezvous_address([N1, N1], lambda: "unused") == "127.0.0.1"
    assert rendezvous_address([N1, N1, N2, N2], lambda: "unused") in ("10.250.0.1", "192.168.7.1")
    assert rendezvous_address([N1, host("n2", "eth0=10.9.0.2/24")], lambda: "10.9.9.9") == "10.9.9.9"


@pytest.mark.parametrize(
    ("addr", "ifaces", "expected"),
    [
        ("10.250.0.1", N1.interfaces, "eth0"),  # its own address (rank 0's host)
        ("10.250.0.1", N2.interfaces, "eth0"),  # same subnet
        ("192.168.7.1", N2.interfaces, "ib0"),
        ("10.9.0.1", N2.interfaces, None),  # routed: let gloo choose
        ("127.0.0.1", N2.interfaces, None),
    ],
)
def test_each_rank_names_its_own_interface_towards_the_rendezvous(
    addr: str, ifaces: tuple[Interface, ...], expected: str | None
) -> None:
    assert interface_towards(addr, ifaces) == expected


def test_socket_ifnames_follow_the_interface_unless_the_user_set_them() -> None:
    assert socket_ifnames("eth0", {}) == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}
    assert socket_ifnames("eth0", {"NCCL_SOCKET_IFNAME": "ib0"}) == {"GLOO_SOCKET_IFNAME": "eth0"}
    assert socket_ifnames(None, {}) == {}


LOST = b"""--------------------------------------------------------------------------
PRTE has lost communication with a remote daemon.

  HNP daemon   : [prterun-n1-16000@0,0] on node n1
  Remote daemon: [prterun-n1-16000@0,1] on node n2

This is usually due to either a failure of the TCP network
--------------------------------------------------------------------------
\0"""
AGENT_DIED = b"""A daemon failed to report back after being spawned. This could
  Local host:    n1
  Remote host:   n2
  Daemon exit status: 0
"""


@pytest.mark.parametrize("size", [1, 7, 4096])
def test_a_lost_host_is_found_in_output_split_anywhere(size: int) -> None:
    watch = MpirunWatch(family="openmpi")
    for i in range(0, len(LOST), size):
        watch.feed("stderr", LOST[i : i + size])
    watch.feed("stderr", b"")
    status, message = watch.lost.verdict(0)
    assert status != 0 and message is not None
    assert message.startswith("mpirun lost contact with host n2 ")
    assert not watch.mid_line("stderr")


def test_a_dead_launch_agent_on_stdout_counts_as_a_lost_host() -> None:
    watch = MpirunWatch(family="openmpi")
    watch.feed("stdout", AGENT_DIED)
    assert watch.lost.verdict(0)[0] != 0
    assert watch.lost.hosts == ["n2"]


def test_mpirun_s_own_failure_status_is_kept_and_normal_output_is_no_loss() -> None:
    watch = MpirunWatch(family="openmpi")
    watch.feed("stdout", b"rank 1: Remote host: n9 is mentioned by a user program\n")
    assert watch.lost.verdict(0) == (0, None)
    assert watch.lost.verdict(3) == (3, None)
    lost = MpirunWatch(family="openmpi")
    lost.feed("stderr", LOST)
    assert lost.lost.verdict(14)[0] == 14


def test_the_unreachable_summary_lists_the_first_hosts_then_a_count_and_explains_loopback() -> None:
    problems = ["rank 2 on n2 (2 rank(s) there; via eth0 10.250.0.2) cannot reach the rendezvous 10.250.0.1:41234"]
    text = unreachable_summary("10.250.0.1", 41234, "n1", problems, ReachCount(1, 2, 2, 4))
    assert text.startswith(
        "the rendezvous 10.250.0.1:41234 on n1 is unreachable from 1 of 2 hosts (2 of 4 ranks):\n  rank 2 on n2"
    )
    many = unreachable_summary("10.250.0.1", 41234, "n1", problems, ReachCount(40, 41, 80, 82))
    assert "10.250.0.1:41234\n  and 39 more host(s)\n" in many
    assert "no firewall blocks TCP" in text
    assert "is a loopback address" in unreachable_summary("127.0.0.1", 1, "n1", problems, ReachCount(1, 2, 2, 4))
    assert "is a loopback address" in unreachable_summary("localhost", 1, "n1", problems, ReachCount(1, 2, 2, 4))
