"""runtime/pmi.py: the PMI `finalize` on a socket, answered by a server thread speaking PMI-1 or PMI-2.

The e2e test (tests/e2e/test_mpich.py) proves it against Hydra; these pin the wire and the quiet cases.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Iterator

import pytest

from hpcdist.runtime.pmi import finalize

MPICH = "MPICH Version:      5.0.2"


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(the rank's end, the server's end) of a PMI socket."""
    rank, server = socket.socketpair()
    yield rank, server
    rank.close()
    server.close()


@pytest.mark.parametrize(
    ("version", "query", "answer"),
    [
        ("1", b"cmd=finalize\n", b"cmd=finalize_ack rc=0\n"),
        ("2", b"13    cmd=finalize;", b"27    cmd=finalize-response;rc=0;"),
    ],
)
def test_the_finalize_of_either_wire_is_sent_and_its_answer_read(
    pair: tuple[socket.socket, socket.socket], version: str, query: bytes, answer: bytes
) -> None:
    rank, server = pair
    received: list[bytes] = []

    def serve() -> None:
        received.append(server.recv(4096))
        server.sendall(answer)

    thread = threading.Thread(target=serve)
    thread.start()
    assert finalize(MPICH, {"PMI_FD": str(rank.fileno()), "PMI_VERSION": version}) is True
    thread.join(timeout=10)
    assert received == [query]


def test_a_server_that_never_answers_is_waited_for_until_the_timeout_and_named(
    pair: tuple[socket.socket, socket.socket], capsys: pytest.CaptureFixture[str]
) -> None:
    rank, server = pair
    assert finalize(MPICH, {"PMI_FD": str(rank.fileno()), "PMI_RANK": "3"}, timeout=0.2) is False
    assert server.recv(4096) == b"cmd=finalize\n"
    assert capsys.readouterr().err == (
        f"hpcdist: warning: rank 3 had no answer from its PMI server (PMI_FD={rank.fileno()}) to `finalize` within "
        "0.2 s; it exits anyway, and its launcher may report it as failed\n"
    )


def test_a_server_done_with_the_socket_is_left_quietly(
    pair: tuple[socket.socket, socket.socket], capsys: pytest.CaptureFixture[str]
) -> None:
    rank, server = pair
    server.close()  # Intel MPI's MPI_Finalize ends the PMI connection itself
    assert finalize(MPICH, {"PMI_FD": str(rank.fileno())}, timeout=5) is False
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("library", ["Open MPI v5.0.8", "Intel(R) MPI Library 2021.16 for Linux* OS"])
def test_other_mpis_are_not_sent_anything(pair: tuple[socket.socket, socket.socket], library: str) -> None:
    rank, server = pair
    assert finalize(library, {"PMI_FD": str(rank.fileno())}) is False
    server.setblocking(False)
    with pytest.raises(BlockingIOError):
        server.recv(4096)


def test_an_fd_that_is_no_longer_a_socket_is_not_written() -> None:
    with tempfile.TemporaryFile() as handle:
        assert finalize(MPICH, {"PMI_FD": str(handle.fileno())}) is False
        assert os.fstat(handle.fileno()).st_size == 0


@pytest.mark.parametrize("environ", [{}, {"PMI_FD": "x"}, {"PMI_FD": "9", "PMI_VERSION": "3"}])
def test_no_pmi_socket_or_an_unknown_wire_is_nothing_to_do(environ: dict[str, str]) -> None:
    assert finalize(MPICH, environ) is False
