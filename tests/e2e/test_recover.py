"""Survivors carry on (ULFM, --on-failure shrink): ranks SIGKILL themselves mid-loop, the others recover and go on.

Four ranks under Open MPI's `mpirun --with-ft ulfm --mca btl tcp,self`; the program is programs/shrink_kill.py.
Each survivor writes its committed steps (world size, all_reduce's sum), its recoveries and the errors it met.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from launching import BIN, PROGRAMS, launch
from ulfm import ULFM_MPIRUN

IDS = ["python-backend", "native-backend", "gloo"]
VALUE = {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0}  # what each start rank adds to the all_reduce


def run(backend: str, scenario: str, tmp_path: Path, native: str = "0", min_np: int = 1) -> dict[int, dict[str, Any]]:
    """Run the program; each survivor's record by its start rank."""
    argv = [*ULFM_MPIRUN, "-x", f"HPCDIST_MPI_NATIVE={native}", "-x", f"HPCDIST_MIN_NP={min_np}", str(BIN / "python")]
    argv.append(str(PROGRAMS / "shrink_kill.py"))
    result = launch([*argv, backend, scenario, str(tmp_path)], timeout=150)
    records = {int(path.stem[4:]): json.loads(path.read_text()) for path in tmp_path.glob("rank*.json")}
    assert records, f"no survivor finished:\n{result.stdout}\n{result.stderr[-3000:]}"
    return records


def expect_steps(record: dict[str, Any], worlds: list[list[int]], switches: list[int]) -> None:
    """Steps 0-7 committed once each; from each switch on, the world and the sum of its survivors' values."""
    assert [step for step, _, _ in record["steps"]] == list(range(8))
    for step, size, total in record["steps"]:
        world = worlds[sum(step >= at for at in switches)]
        assert (size, total) == (len(world), sum(VALUE[rank] for rank in world))


# ids without the word "mpi": pytest-mpi would skip such a test outside `--with-mpi` (this one runs mpirun itself)
@pytest.mark.parametrize(("backend", "native"), [("mpi", "0"), ("mpi", "1"), ("gloo", "0")], ids=IDS)
def test_one_killed_rank(backend: str, native: str, tmp_path: Path) -> None:
    records = run(backend, "one", tmp_path, native)
    assert sorted(records) == [0, 1, 3]
    for start, record in records.items():
        expect_steps(record, [[0, 1, 2, 3], [0, 1, 3]], [3])
        ((lost, before, after, rank, _),) = record["recoveries"]
        assert (lost, before, after, rank) == ([2], 4, 3, {0: 0, 1: 1, 3: 2}[start])
        kind, is_lost, text, lost, waiting = record["errors"][0]  # what the survivor's collective raised; who failed
        assert lost == [2]
        if backend == "mpi":  # the call that raised is over: a hang report would not show this rank waiting in it
            assert waiting == [], waiting
        if native == "1":  # the compiled backend raises torch's DistBackendError, naming the lost rank
            assert (kind, is_lost) == ("DistBackendError", False) and "rank 2 was lost" in text, text
        elif backend == "mpi":
            assert (kind, is_lost) == ("RanksLostError", True) and "rank 2 on " in text and " lost " in text, text
        else:  # gloo says a peer closed its connection
            assert kind == "RuntimeError", text
        # the subgroup [0, 2, 3] rebuilt over its survivors, now ranks 0 and 2
        assert record["subsums"] == ([[[0, 2], 5.0]] if start in (0, 3) else [])


@pytest.mark.parametrize("native", ["0", "1"], ids=IDS[:2])
def test_a_rank_killed_in_the_middle_of_a_ring(native: str, tmp_path: Path) -> None:
    # 64 MiB all_reduces go round the backend's ring; rank 2 dies 50 ms into one: the survivors' ring fails with
    # its next segments in flight, completes them after the revoke, and their next rings are exact
    records = run("mpi", "ring", tmp_path, native=native)
    assert sorted(records) == [0, 1, 3]
    for start, record in records.items():
        expect_steps(record, [[0, 1, 2, 3], [0, 1, 3]], [3])
        ((lost, before, after, rank, _),) = record["recoveries"]
        assert (lost, before, after, rank) == ([2], 4, 3, {0: 0, 1: 1, 3: 2}[start])
        kind, _, text, _, _ = record["errors"][0]
        said = "rank 2 was lost" if native == "1" else "rank 2 on "
        assert "all_reduce" in text and said in text, (kind, text)


@pytest.mark.parametrize("native", ["0", "1"], ids=IDS[:2])
def test_a_ring_whose_live_peers_are_away_ends_on_the_failure_it_knows_of(native: str, tmp_path: Path) -> None:
    # rank 2 dies before its 64 MiB all_reduce; ranks 1 and 3 stay out of MPI until rank 0's has raised, so rank 0's
    # ring messages to and from them stay pending, and nobody revokes: rank 0 ends its wait on the failure it knows of
    records = run("mpi", "away", tmp_path, native=native)
    assert sorted(records) == [0, 1, 3]
    for record in records.values():
        expect_steps(record, [[0, 1, 2, 3], [0, 1, 3]], [3])
    assert records[0]["took"][0] < 20, records[0]  # ranks 1 and 3 come back after 60 s at most
    kind, _, text, _, _ = records[0]["errors"][0]
    assert "all_reduce" in text and ("rank 2 was lost" if native == "1" else "rank 2 on ") in text, (kind, text)


@pytest.mark.parametrize("backend", ["mpi", "gloo"], ids=["python-backend", "gloo"])
def test_two_failures_one_after_the_other(backend: str, tmp_path: Path) -> None:
    records = run(backend, "two", tmp_path)
    assert sorted(records) == [0, 3]
    for start, record in records.items():
        expect_steps(record, [[0, 1, 2, 3], [0, 1, 3], [0, 3]], [2, 5])
        assert [recovery[:4] for recovery in record["recoveries"]] == [
            [[2], 4, 3, {0: 0, 3: 2}[start]],
            [[1], 3, 2, {0: 0, 3: 1}[start]],
        ]
        assert record["subsums"] == [[[0, 2], 5.0], [[0, 1], 5.0]]


@pytest.mark.parametrize("backend", ["mpi", "gloo"], ids=["python-backend", "gloo"])
@pytest.mark.parametrize("scenario", ["during", "rebuild"])
def test_a_failure_during_the_recovery(backend: str, scenario: str, tmp_path: Path) -> None:
    # rank 2 dies; rank 3 dies as soon as it hears of it (during), or once the world is shrunk (rebuild)
    records = run(backend, scenario, tmp_path)
    assert sorted(records) == [0, 1]
    for start, record in records.items():
        expect_steps(record, [[0, 1, 2, 3], [0, 1]], [3])
        lost = sorted({rank for recovery in record["recoveries"] for rank in recovery[0]})
        assert lost == [2, 3]
        assert record["recoveries"][0][1] == 4
        assert record["recoveries"][-1][2:4] == [2, start]
        assert record["subsums"][-1:] == ([[[0], 1.0]] if start == 0 else [])


def test_fewer_survivors_than_min_np(tmp_path: Path) -> None:
    records = run("mpi", "one", tmp_path, min_np=4)
    assert sorted(records) == [0, 1, 3]
    for record in records.values():
        ranks, text = record["too_few"]
        assert ranks == [2]
        assert "rank 2 on " in text and "3 ranks are left, fewer than --min-np 4" in text, text


def test_every_rank_gets_the_same_agreement_while_its_threads_call_mpi(tmp_path: Path) -> None:
    # the step's agreement, 100 times over 4 ranks, while a thread of each rank probes and tests receives as the hang
    # watchdog and the failure detector do; each round, some ranks clear their own bit
    launch([*ULFM_MPIRUN, str(BIN / "python"), str(PROGRAMS / "agreements.py"), str(tmp_path)], timeout=120)
    expected = [0b1111 & ~sum(1 << rank for rank in range(4) if (i + rank) % 3 == 0) for i in range(100)]
    for rank in range(4):
        assert json.loads((tmp_path / f"agree{rank}.json").read_text()) == expected, f"rank {rank}"


def test_a_survivors_sys_exit_is_the_jobs_status_after_every_atexit_hook(hpcdist: str) -> None:
    # rank 2 dies, ranks 0 and 1 recover; rank 0 registered an atexit hook before the failure and ends with sys.exit(3)
    argv = [hpcdist, "mpirun", "--on-failure", "shrink", "--oversubscribe", "-np", "3", "--", str(BIN / "python")]
    result = launch([*argv, str(PROGRAMS / "survivor_exit.py")], timeout=120)
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stdout.count("rank 0: its atexit hook ran\n") == 1, result.stdout + result.stderr
    assert sorted(line for line in result.stdout.splitlines() if "recovered" in line) == [
        "rank 0: recovered, 2 ranks",
        "rank 1: recovered, 2 ranks",
    ], result.stdout


@pytest.mark.parametrize("subgroup", ["gloo", "mpi4py"])
def test_a_subgroups_call_waiting_on_a_survivor_that_left_for_the_recovery_fails_and_the_job_shrinks(
    hpcdist: str, tmp_path: Path, subgroup: str
) -> None:
    # the mpi default group, a subgroup [0, 1]: rank 0 waits in it for rank 1, which met rank 3's loss in a world call
    # and recovers; the recovery revokes the mpi subgroup's communicator, or MPI's failure detector cuts gloo's
    # connections, so rank 0's call fails and it recovers too, instead of waiting out the 30 s timeout and the job
    # ending. Told in one line: neither torch's warning that the shrink destroys the subgroup (hpcdist remakes it)
    # nor Open MPI's libnbc line about the revoked call
    argv = [hpcdist, "mpirun", "--on-failure", "shrink", "--oversubscribe", "-np", "4", "--", str(BIN / "python")]
    program = [str(PROGRAMS / "subgroup_wait.py"), str(tmp_path), subgroup]
    result = launch([*argv, *program], timeout=120, HPCDIST_TIMEOUT="30")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "hang" not in result.stderr, result.stderr
    assert "Shrinking default group" not in result.stderr and "NBC" not in result.stderr, result.stderr
    loss = "hpcdist: rank 3 on "
    assert result.stderr.count(loss) == 1 and "3 ranks carry on (--on-failure shrink)" in result.stderr, result.stderr
    records = {int(path.stem[4:]): json.loads(path.read_text()) for path in tmp_path.glob("rank*.json")}
    assert sorted(records) == [0, 1, 2], result.stdout + result.stderr
    for start, record in records.items():
        assert record["raised"][1] == [3], record  # who failed, as each survivor learnt it after its call raised
        assert (record["size"], record["world"]) == (3, 6.0)  # 1 + 2 + 3 over the shrunk world
        assert record["sub"] == (11.0 if start < 2 else 100.0)  # the subgroup's 1 + 10; rank 2, not in it, its own
