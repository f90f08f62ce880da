"""The hang report gathers each rank's summary through its host's lowest rank, on 8 ranks as 4 hosts of 2 (each
rank given its place on an emulated host), then the full answers of a few ranks of each state."""

from __future__ import annotations

import re

from launching import BIN, PROGRAMS, launch

# Each rank's place as on 4 hosts of 2 consecutive ranks, in Open MPI's variables and torch's alike
HOSTS_OF_TWO = (
    "L=$((OMPI_COMM_WORLD_RANK % 2)); export OMPI_COMM_WORLD_LOCAL_RANK=$L OMPI_COMM_WORLD_LOCAL_SIZE=2 "
    'LOCAL_RANK=$L LOCAL_WORLD_SIZE=2; exec "$@"'
)
WAITING = r"  rank {}: waiting in all_reduce #2 shape=\[4\] dtype=float32 on group world for \d+\.\d s\n"
SKIP = (
    "first divergence: rank 0 waits in all_reduce #2 while rank 1 is not in any communication call "
    "(its stack below shows where it is)"
)


def _hang(hpcdist: str, **env: str) -> str:
    """hang.py's `skip` (rank 1 sleeps) on 8 ranks as 4 hosts: what it printed on stderr (it must fail)."""
    program = [str(BIN / "python"), str(PROGRAMS / "hang.py")]
    argv = [hpcdist, "mpirun", "-np", "8", "--", "sh", "-c", HOSTS_OF_TWO, "sh", *program]
    # 8 ranks importing torch on 2 shared cores may take minutes to meet: the start-up may, the calls may not
    timing = {"HPCDIST_TIMEOUT": "5", "HPCDIST_STARTUP_TIMEOUT": "200"}
    result = launch(argv, timeout=280, HANG="skip", HPCDIST_DEBUG="1", BACKEND="gloo", **timing, **env)
    assert result.returncode != 0
    assert "hpcdist: a communication call exceeded the 5 s timeout (HPCDIST_TIMEOUT)" in result.stderr
    assert SKIP in result.stderr, result.stderr
    return result.stderr


def _intake(err: str) -> dict[str, int]:
    """The messages rank 0 received for the report, by kind, from its line (HPCDIST_DEBUG); their total checked."""
    line = re.search(r"hpcdist: rank 0 received (\d+) messages \([\d,]+ bytes\): (.*) for this report", err)
    assert line, err
    kinds = {kind: int(number) for number, kind in re.findall(r"(\d+) ([a-z ]+) \([\d,]+ bytes\)", line.group(2))}
    assert sum(kinds.values()) == int(line.group(1)), err
    return kinds


def test_rank_0_takes_a_message_per_host_and_per_state_not_one_per_rank(hpcdist: str) -> None:
    err = _hang(hpcdist)
    assert "  rank 1: not communicating; last call all_reduce #1\n" in err, err
    for rank in (0, 2, 3, 4, 5, 6, 7):
        assert re.search(WAITING.format(rank), err), err
    # hosts 2-3, 4-5, 6-7 each register once and send one summary; rank 1, rank 0's host-mate, its own; then
    # the full answers: rank 1 (alone in its state), and ranks 2 and 7 of the others (rank 0's is its own)
    assert _intake(err) == {"full answers": 3, "host registrations": 3, "host summaries": 3, "rank summary": 1}
    assert "hpcdist: ranks 0-2,7 answered in full; the other 4 ranks sent a summary of their state" in err, err
    assert "ranks 0,2,7:\n  thread MainThread:" in err and "rank 1:\n  thread MainThread:" in err, err


def test_a_frozen_leader_s_host_is_asked_directly_and_the_leader_named(hpcdist: str) -> None:
    err = _hang(hpcdist, STOP="4")  # rank 4 leads ranks 4-5
    assert "  rank 4: did not answer (dead, stuck outside Python, or a program that never imported torch)" in err, err
    assert re.search(WAITING.format(5), err), err
    # ranks 4 and 5 asked directly after 1.5 s: rank 5 answers, rank 4 never does
    assert _intake(err) == {"full answers": 3, "host registrations": 3, "host summaries": 2, "rank summaries": 2}
