"""A DDP job with one rank stuck is reported at HPCDIST_TIMEOUT: the stuck rank named, and what the others wait in
(DDP's gradient all-reduce, issued from C++ and recorded by torch's Flight Recorder on gloo, by the mpi backend
itself on mpi)."""

from __future__ import annotations

import re
import time

import pytest
from launching import PROGRAMS, launch

TIMEOUT = 5
SLACK = 20  # abort and teardown of a 2-rank job on a loaded 2-core machine; torch's backstop is 60 + 15 s away


STUCK = ["before_backward", "in_backward", "in_step"]
# (backend, compiled mpi backend): gloo, the compiled mpi backend (the default where it builds), the Python one
CASES = [(b, "1", s) for b in ("gloo", "mpi") for s in STUCK] + [("mpi", "0", "before_backward")]


@pytest.mark.parametrize(("backend", "native", "stuck"), CASES)
def test_a_stuck_ddp_rank_is_named_at_the_timeout(hpcdist: str, backend: str, native: str, stuck: str) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", "2", "--", "python", str(PROGRAMS / "ddp_stuck.py")],
        timeout=150,
        BACKEND=backend,
        STUCK=stuck,
        HPCDIST_TIMEOUT=str(TIMEOUT),
        HPCDIST_MPI_NATIVE=native,
    )
    ended = time.time()
    err = result.stderr
    assert result.returncode != 0, err
    assert f"hpcdist: a communication call exceeded the {TIMEOUT} s timeout (HPCDIST_TIMEOUT)" in err, err
    ddp = "issued by autograd's backward pass: DDP's gradient all-reduce"
    waiting = re.search(rf"rank 0: waiting in all_reduce #\d+ shape=\[72\] dtype=float32 on group world "
                        rf"for ([\d.]+) s, {ddp}", err)  # fmt: skip
    assert waiting, err
    assert TIMEOUT <= float(waiting.group(1)) < TIMEOUT + 3, err
    assert re.search(
        rf"first divergence: rank 0 waits in all_reduce #\d+ \({ddp}\) while rank 1 is not in any communication "
        r"call \(its stack below shows where it is\)",
        err,
    ), err
    assert "advice: the other ranks wait for rank 1, which is busy elsewhere" in err, err
    assert "pass a larger timeout" not in err and "set a larger HPCDIST_TIMEOUT" not in err, err
    stuck_at = float(re.search(r"stuck at ([\d.]+)", err).group(1))  # type: ignore[union-attr]
    assert ended - stuck_at < TIMEOUT + SLACK, err
