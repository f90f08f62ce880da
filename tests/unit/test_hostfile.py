"""Tests for hpcdist.launching.hostfile: hostfile / -H parsing, formatting and the -np check."""

from __future__ import annotations

import os
import re

import pytest

from hpcdist.errors import UsageError
from hpcdist.hosts import HostSlots
from hpcdist.launching.hostfile import (
    check_np,
    format_hostfile,
    parse_hostfile,
    parse_hosts_arg,
    read_hostfile_text,
    total_slots,
)

H = HostSlots
FORMS = "expected 'HOST slots=N [max_slots=M]' or 'HOST:N'"

SEED_HOSTFILE = "ip-26-0-162-46 slots=8\nip-26-0-162-239 slots=8\n"
SEED_HOSTS = (H("ip-26-0-162-46", 8), H("ip-26-0-162-239", 8))


def read_hostfile(path: str) -> tuple[HostSlots, ...]:
    """Read and parse a hostfile, as `hpcdist mpirun --hostfile` does."""
    return parse_hostfile(read_hostfile_text(path), path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SEED_HOSTFILE, SEED_HOSTS),
        ("localhost\n", (H("localhost", 1),)),
        ("node1 slots=4\n", (H("node1", 4),)),
        ("node1 slots=4 max_slots=6\n", (H("node1", 4, 6),)),
        ("node1 slots=4 max-slots=4\n", (H("node1", 4, 4),)),
        ("node1 max_slots=3 slots=2\n", (H("node1", 2, 3),)),
        ("node1 max_slots=3\n", (H("node1", 3, 3),)),  # a cap alone sets the slots too, as in Open MPI
        ("node1:4\nnode2:2\n", (H("node1", 4), H("node2", 2))),
        ("node1:4\nnode2\n", (H("node1", 4), H("node2", 1))),
        ("node1 slots=2\nnode2:3\n", (H("node1", 2), H("node2", 3))),
        ("# cluster\n\n  node1 slots=2   # two GPUs\n\t\n", (H("node1", 2),)),
        ("node1 slots=2", (H("node1", 2),)),
        ("node1 slots=2\r\nnode2 slots=2\r\n", (H("node1", 2), H("node2", 2))),
        ("10.0.0.1 slots=2\n", (H("10.0.0.1", 2),)),
        # Repeated bare lines add a slot each, in first-seen order (Open MPI does the same).
        ("b\na\nb\nb\n", (H("b", 3), H("a", 1))),
        ("node1 slots=2\nnode1\n", (H("node1", 3),)),
        ("node1 slots=2 max_slots=3\nnode1\n", (H("node1", 3, 3),)),
    ],
)
def test_parse_hostfile(text: str, expected: tuple[HostSlots, ...]) -> None:
    assert parse_hostfile(text, "hf") == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("node0\nnode1 slots\n", f"hostfiles/two:2: {FORMS}, got 'node1 slots'"),
        ("a b c\n", f"hostfiles/two:1: {FORMS}, got 'a b c'"),
        ("slots=4\n", f"hostfiles/two:1: {FORMS}, got 'slots=4'"),
        ("node1:4 slots=2\n", f"hostfiles/two:1: {FORMS}, got 'node1:4 slots=2'"),
        (":4\n", f"hostfiles/two:1: {FORMS}, got ':4'"),
        (
            "node1 cpus=4\n",
            f"hostfiles/two:1: unknown key 'cpus' in 'node1 cpus=4'; {FORMS}",
        ),
        (
            "node1 slots=2 slots=3\n",
            f"hostfiles/two:1: slots given twice in 'node1 slots=2 slots=3'; {FORMS}",
        ),
        (
            "node1 max_slots=2 max-slots=3\n",
            "hostfiles/two:1: max_slots given twice in 'node1 max_slots=2 max-slots=3'",
        ),
        (
            "\n\nnode1 slots=four\n",
            "hostfiles/two:3: slots must be a whole number of at least 1, got 'four' in 'node1 slots=four'",
        ),
        (
            "node1 slots=0\n",
            "hostfiles/two:1: slots must be a whole number of at least 1, got '0' in 'node1 slots=0'",
        ),
        (
            "node1 slots=-2\n",
            "hostfiles/two:1: slots must be a whole number of at least 1, got '-2'",
        ),
        (
            "node1 slots=2.5\n",
            "hostfiles/two:1: slots must be a whole number of at least 1, got '2.5'",
        ),
        (
            "node1 slots=\n",
            "hostfiles/two:1: slots must be a whole number of at least 1, got ''",
        ),
        (
            "node1 slots=2 max_slots=x\n",
            "hostfiles/two:1: max_slots must be a whole number of at least 1, got 'x'",
        ),
        (
            "node1:x\n",
            "hostfiles/two:1: slots must be a whole number of at least 1, got 'x' in 'node1:x'",
        ),
        (
            "node1:0\n",
            "hostfiles/two:1: slots must be a whole number of at least 1, got '0' in 'node1:0'",
        ),
        (
            "node1 slots=4 max_slots=2\n",
            "hostfiles/two:1: max_slots=2 is less than slots=4 in "
            "'node1 slots=4 max_slots=2'; raise max_slots or lower slots",
        ),
        (
            "node1 max_slots=2\nnode1\nnode1\n",  # max_slots alone is 2 slots (Open MPI): line 2 makes 3
            "hostfiles/two:2: repeating 'node1' makes 3 slots, more than its max_slots=2 "
            "from line 1; raise max_slots or drop this line",
        ),
        # Open MPI 5 rejects a second slot count for a host ("multiple definitions").
        (
            "node1 slots=8\nnode2 slots=8\nnode1 slots=8\n",
            "hostfiles/two:3: host 'node1' is already listed on line 1; Open MPI rejects a "
            "second slot count for the same host, so merge them into one line 'node1 slots=16'",
        ),
        (
            "node1\nnode1 slots=2\n",
            "hostfiles/two:2: host 'node1' is already listed on line 1;",
        ),
        ("node1:2\nnode1:2\n", "merge them into one line 'node1 slots=4'"),
        ("", "hostfiles/two: no hosts in hostfile; add lines like 'localhost slots=4'"),
        ("# only\n\n   \n", "hostfiles/two: no hosts in hostfile; add lines like 'localhost slots=4'"),
    ],
)
def test_parse_hostfile_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_hostfile(text, "hostfiles/two")
    assert message in str(info.value)


def test_read_hostfile(tmp_path) -> None:
    path = tmp_path / "seed"
    path.write_text(SEED_HOSTFILE)
    assert read_hostfile(str(path)) == SEED_HOSTS


def test_read_hostfile_errors_name_the_file(tmp_path) -> None:
    path = tmp_path / "bad"
    path.write_text("node1 slots=8\nnode2 slots\n")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:2: expected 'HOST slots=N"):
        read_hostfile(str(path))


@pytest.mark.parametrize("name", ["missing", "."])
def test_read_hostfile_unreadable(tmp_path, name: str) -> None:
    path = str(tmp_path / name)
    with pytest.raises(UsageError) as info:
        read_hostfile(path)
    message = str(info.value)
    assert message.startswith(f"cannot read hostfile {path!r} (from {os.getcwd()}): ")
    assert "hostfiles/localhost" not in message  # a file of the checkout, which a user's directory lacks
    assert "'HOST slots=N' line per host" in message and "-H HOST:N[,HOST:N]" in message


def test_read_hostfile_not_text(tmp_path) -> None:
    path = tmp_path / "binary"
    path.write_bytes(b"\xff\xfe\x00node")
    with pytest.raises(UsageError, match="cannot read hostfile"):
        read_hostfile(str(path))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("104.171.200.62:2,104.171.200.182:2", (H("104.171.200.62", 2), H("104.171.200.182", 2))),
        ("a,b", (H("a", 1), H("b", 1))),
        ("localhost:4", (H("localhost", 4),)),
        ("a:2,b", (H("a", 2), H("b", 1))),
        ("a, b:3", (H("a", 1), H("b", 3))),
        ("b,a,b:2", (H("b", 3), H("a", 1))),
    ],
)
def test_parse_hosts_arg(value: str, expected: tuple[HostSlots, ...]) -> None:
    assert parse_hosts_arg(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "-H '': bad host entry ''; expected -H HOST[:N][,HOST[:N]...], e.g. -H node1:4"),
        ("a,,b", "-H 'a,,b': bad host entry ''; expected -H HOST[:N]"),
        ("a,", "-H 'a,': bad host entry ''"),
        ("a:", "-H 'a:': bad host entry 'a:'"),
        (":2", "-H ':2': bad host entry ':2'"),
        ("a=2", "-H 'a=2': bad host entry 'a=2'"),
        ("a b:2", "-H 'a b:2': bad host entry 'a b:2'"),
        ("a:x", "-H 'a:x': slots must be a whole number of at least 1, got 'x' in 'a:x'"),
        ("a:2,b:0", "-H 'a:2,b:0': slots must be a whole number of at least 1, got '0' in 'b:0'"),
        ("a:2:3", "-H 'a:2:3': slots must be a whole number of at least 1, got '2:3'"),
    ],
)
def test_parse_hosts_arg_errors(value: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_hosts_arg(value)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [((), 0), (SEED_HOSTS, 16), ((H("a", 1), H("b", 3, 5)), 4)],
)
def test_total_slots(hosts: tuple[HostSlots, ...], expected: int) -> None:
    assert total_slots(hosts) == expected


@pytest.mark.parametrize(
    ("hosts", "style", "expected"),
    [
        (SEED_HOSTS, "openmpi", SEED_HOSTFILE),
        ((H("a", 2, 4), H("b", 1)), "openmpi", "a slots=2 max_slots=4\nb slots=1\n"),
        ((H("a", 2, 4), H("b", 1)), "mpich", "a:2\nb:1\n"),
        ((), "openmpi", ""),
    ],
)
def test_format_hostfile(hosts: tuple[HostSlots, ...], style: str, expected: str) -> None:
    assert format_hostfile(hosts, style) == expected
    if hosts:
        parsed = parse_hostfile(expected, "formatted")
        assert parsed == (hosts if style == "openmpi" else tuple(H(h.host, h.slots) for h in hosts))


def test_format_hostfile_default_style() -> None:
    assert format_hostfile([H("localhost", 4)]) == "localhost slots=4\n"


def test_format_hostfile_unknown_style() -> None:
    with pytest.raises(UsageError, match="unknown hostfile style 'slurm'; use one of openmpi, pals, mpich, intel"):
        format_hostfile(SEED_HOSTS, "slurm")


@pytest.mark.parametrize(
    ("np", "hosts", "oversubscribe"),
    [
        (16, SEED_HOSTS, False),
        (1, SEED_HOSTS, False),
        (17, SEED_HOSTS, True),
        (6, (H("a", 2, 4), H("b", 2)), True),  # b has no cap, so the total is unbounded
        (8, (H("a", 2, 4), H("b", 2, 4)), True),
    ],
)
def test_check_np_ok(np: int, hosts: tuple[HostSlots, ...], oversubscribe: bool) -> None:
    check_np(np, hosts, oversubscribe)


@pytest.mark.parametrize(
    ("np", "hosts", "oversubscribe", "message"),
    [
        (0, SEED_HOSTS, False, "-np must be at least 1, got 0"),
        (-3, SEED_HOSTS, True, "-np must be at least 1, got -3"),
        (
            17,
            SEED_HOSTS,
            False,
            "-np 17 is more than the 16 slots in the host list; pass --oversubscribe or give "
            "the hosts more slots (e.g. 'node1 slots=8' in the hostfile or -H node1:8)",
        ),
        (
            9,
            (H("a", 2, 4), H("b", 2, 4)),
            True,
            "-np 9 is more than the 8 max_slots in the host list, which --oversubscribe "
            "cannot exceed; raise or remove max_slots in the hostfile",
        ),
    ],
)
def test_check_np_errors(np: int, hosts: tuple[HostSlots, ...], oversubscribe: bool, message: str) -> None:
    with pytest.raises(UsageError) as info:
        check_np(np, hosts, oversubscribe)
    assert str(info.value) == message


def test_host_slots_is_frozen() -> None:
    with pytest.raises(AttributeError):
        H("a", 1).slots = 2  # type: ignore[misc]
