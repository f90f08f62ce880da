"""Hang forensics end to end: a mismatched program ends at the timeout with the first divergence named."""

from __future__ import annotations

import pytest
from launching import PROGRAMS, launch

P2P = "first divergence: rank 2 waits in recv(src=0) #2 while rank 0 is in all_reduce #2"
COLLECTIVE = (
    "first divergence: rank 1 is in broadcast(root=1) #2 shape=[4] dtype=float32 on group world "
    "while ranks 0,2-3 are in all_reduce #2 shape=[4] dtype=float32 on group world"
)
SKIP = (
    "first divergence: rank 0 waits in all_reduce #2 while rank 1 is not in any communication call "
    "(its stack below shows where it is)"
)


# MPI matches collectives by order, not by kind: on the mpi backend a broadcast against an all_reduce
# completes (with undefined data) instead of hanging, so that case is gloo's only.
@pytest.mark.parametrize(
    ("backend", "hang", "divergence"),
    [
        ("gloo", "p2p", P2P),
        ("mpi", "p2p", P2P),
        ("gloo", "collective", COLLECTIVE),
        ("gloo", "skip", SKIP),
        ("mpi", "skip", SKIP),
    ],
)
def test_a_hang_ends_at_the_timeout_naming_the_first_divergence(
    hpcdist: str, backend: str, hang: str, divergence: str
) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", "4", "--", "python", str(PROGRAMS / "hang.py")],
        timeout=150,
        HANG=hang,
        HPCDIST_TIMEOUT="5",
        BACKEND=backend,
    )
    assert result.returncode != 0
    assert "hpcdist: a communication call exceeded the 5 s timeout (HPCDIST_TIMEOUT)" in result.stderr
    assert divergence in result.stderr, result.stderr  # and the job ended: rank 1 of `skip` sleeps 600 s
