"""Hang forensics end to end: a mismatched program ends at the timeout with the first divergence named."""

from __future__ import annotations

import pytest
from launching import PROGRAMS, launch


@pytest.mark.parametrize(
    ("hang", "divergence"),
    [
        ("p2p", "first divergence: rank 2 waits in recv(src=0) #2 while rank 0 is in all_reduce #2"),
        ("collective", "first divergence: rank 1 is in broadcast(root=1) #2 shape=[4] dtype=float32 on group world "
                       "while ranks 0, 2, 3 are in all_reduce #2 shape=[4] dtype=float32 on group world"),
    ],
)
def test_a_hang_ends_at_the_timeout_naming_the_first_divergence(hpcdist: str, hang: str, divergence: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "4", "--", "python", str(PROGRAMS / "hang.py")],
                    timeout=150, HANG=hang, HPCDIST_TIMEOUT="5")
    assert result.returncode != 0
    assert "hpcdist: a communication call exceeded the 5 s timeout (HPCDIST_TIMEOUT)" in result.stderr
    assert divergence in result.stderr, result.stderr
    assert result.seconds < 5 + 60  # the timeout plus start-up on a loaded 2-core machine, not torch's backstop
