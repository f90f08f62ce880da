"""Tests for hpcdist.hosts: the one `host:slots` form."""

from __future__ import annotations

from hpcdist.hosts import HOST_NAME, HostSlots, host_slots, hosts_text


def test_hosts_are_written_host_colon_slots_comma_separated() -> None:
    assert host_slots("n1", 4) == "n1:4"
    assert hosts_text((HostSlots("n1", 4), HostSlots("n2", 2, max_slots=8))) == "n1:4,n2:2"
    assert hosts_text(()) == ""


def test_a_host_name_is_what_open_mpi_s_hostfile_lexer_reads() -> None:
    assert HOST_NAME.match("user@node-01.example")
    assert not HOST_NAME.match("-node")
    assert not HOST_NAME.match("a" * 254)
