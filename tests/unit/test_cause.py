"""The rank that began a failure is named first: what the ranks say (forensics.cause), and the launcher's rule."""

from __future__ import annotations

import pytest

from hpcdist.contract import RankContract
from hpcdist.events import Event, Failed, Finished, Hang, Vanished, encode, parse_event
from hpcdist.families.base import RankAborted, RankKilled
from hpcdist.forensics import cause
from hpcdist.forensics.ledger import FINISHED, INITIALISED, RUNNING, Ledger, Phase
from hpcdist.launching.blame import named
from hpcdist.launching.book import RankBook
from hpcdist.launching.restarts import describe_end
from hpcdist.launching.watch import MpirunWatch

TOKEN = "0123456789abcdef"


def _line(event: Event) -> bytes:
    return f"[vm:{event.rank}] {encode(event, TOKEN)}".encode()


def _watch(*lines: bytes) -> MpirunWatch:
    watch = MpirunWatch(TOKEN)
    for line in lines:
        watch.feed("stderr", line)
    return watch


RAISED = _line(Failed(2, how="exit code 1", host="vm", at=100.5))  # raised outside any call
CASUALTY_0 = _line(Failed(0, how="exit code 1", host="vm", after_peer=True, call="all_reduce#2", at=100.4))
CASUALTY_3 = _line(Failed(3, how="exit code 1", host="vm", call="all_reduce#2", at=100.6))  # its call failed; no peer


@pytest.mark.parametrize(
    "order", [(RAISED, CASUALTY_0, CASUALTY_3), (CASUALTY_0, CASUALTY_3, RAISED), (CASUALTY_3, RAISED, CASUALTY_0)]
)
def test_the_rank_that_failed_outside_any_call_is_named_first_however_the_launcher_heard_them(order: tuple) -> None:
    outcome, _ = _watch(*order).outcome(1)
    assert list(outcome.failed) == [2, 0, 3]  # the cause, then the casualties by their own clocks
    assert outcome.causes() == [2]
    assert outcome.headline() == "first failure: rank 2 on vm failed with exit code 1; then ranks 0,3 failed after it"
    assert describe_end(outcome) == "exit code 1 (rank 2 on vm failed with exit code 1)"


def test_two_ranks_failing_on_their_own_are_named_by_their_own_clocks() -> None:
    late = _line(Failed(1, how="exit code 1", host="vm", at=100.9))
    outcome, _ = _watch(late, CASUALTY_0, RAISED).outcome(1)
    assert outcome.causes() == [2, 1] and list(outcome.failed) == [2, 1, 0]
    assert outcome.headline().startswith("first failure: rank 2 on vm failed with exit code 1; rank 1 on vm failed")


def test_a_rank_that_finished_before_the_others_failed_waiting_for_it_is_blamed() -> None:
    finished = _line(Finished(1, at=99.0))
    outcome, _ = _watch(finished, CASUALTY_3, CASUALTY_0).outcome(1)
    assert outcome.causes() == [1]
    assert outcome.headline() == (
        "first failure: rank 1 finished its program while ranks 0,3 waited in all_reduce #2; "
        "then ranks 0,3 failed after it"
    )


def test_a_rank_that_finished_after_the_failure_is_not_blamed() -> None:
    outcome, _ = _watch(CASUALTY_0, _line(Finished(1, at=101.0))).outcome(1)
    assert outcome.causes() == [0] and 1 not in outcome.failed


def test_a_finished_rank_is_not_blamed_for_a_failure_of_its_own() -> None:
    outcome, _ = _watch(_line(Finished(1, at=99.0)), RAISED, CASUALTY_0).outcome(1)
    assert outcome.causes() == [2] and 1 not in outcome.failed


def test_the_hang_reports_verdict_names_the_finished_rank_and_its_abort_comes_after() -> None:
    hang = _line(Hang(0, finished=(3,), waiting=(0, 1, 2), call="all_reduce#2", at=105.0))
    abort = _line(Failed(0, how="called MPI_Abort", host="vm"))
    vanished = encode(Vanished(1, host="vm"), TOKEN).encode()  # killed by the abort: not named
    outcome, _ = _watch(_line(Finished(3, at=99.0)), hang, abort, vanished).outcome(1)
    assert list(outcome.failed) == [3, 0]
    assert outcome.headline() == (
        "first failure: rank 3 finished its program while ranks 0-2 waited in all_reduce #2; "
        "then rank 0 failed after it"
    )


def test_a_rank_that_never_initialised_or_is_in_no_call_is_blamed_by_the_hang_report() -> None:
    hang = _line(Hang(0, idle=(1,), uninit=(3,), waiting=(0, 2), call="barrier#1", at=105.0))
    outcome, _ = _watch(hang, _line(Failed(0, how="called MPI_Abort", host="vm"))).outcome(1)
    assert outcome.causes() == [1, 3]
    assert outcome.failed[1] == "was in no communication call while ranks 0,2 waited in barrier #1"
    assert outcome.failed[3] == "never initialised while ranks 0,2 waited in barrier #1"


def test_a_hang_where_every_rank_waits_names_the_reporter_as_before() -> None:
    hang = _line(Hang(0, waiting=(0, 1), call="all_reduce#1", at=105.0))
    outcome, _ = _watch(hang, _line(Failed(0, how="called MPI_Abort", host="vm"))).outcome(1)
    assert outcome.causes() == [0]


def test_a_rank_that_failed_in_a_call_of_its_own_with_no_other_failure_is_the_cause() -> None:
    outcome, _ = _watch(CASUALTY_3).outcome(1)
    assert outcome.causes() == [3] and outcome.headline() == "first failure: rank 3 on vm failed with exit code 1"


def test_tell_hang_sorts_the_ranks_into_blamed_and_waiting(capfd: pytest.CaptureFixture[str]) -> None:
    waiting, done = Ledger(), Ledger()
    waiting.start("all_reduce", "", (4,), "float32", "world")
    done.start("all_reduce", "", (4,), "float32", "world").done = True
    ledgers = {0: waiting.snapshot(), 1: done.snapshot(), 2: waiting.snapshot(), 3: done.snapshot(), 4: []}
    phases = {0: Phase(INITIALISED, 1), 1: Phase(FINISHED, 1), 2: Phase(INITIALISED, 1), 3: Phase(INITIALISED, 1)}
    cause.tell_hang(RankContract(token=TOKEN), 0, ledgers, {**phases, 4: Phase(RUNNING, 1)})
    event = parse_event(capfd.readouterr().err, TOKEN)
    assert isinstance(event, Hang) and event.at is not None
    assert event == Hang(0, finished=(1,), idle=(3,), uninit=(4,), waiting=(0, 2), call="all_reduce#1", at=event.at)


def test_a_failure_is_told_with_the_call_it_came_out_of() -> None:
    import torch.distributed as dist

    from hpcdist.forensics import recording

    recording.instrument(dist)  # the ledger's wrapper around dist.barrier
    try:
        dist.barrier()  # no process group: torch raises inside the recorded call
    except (RuntimeError, ValueError) as exc:
        call = cause.failed_call(exc)
    assert call.startswith("barrier#")
    assert cause.failed_call(ValueError("outside")) == ""


def _outcome(rank: int, ok: bool, time: float, casualty: bool = False) -> dict:
    if ok:
        return {"rank": rank, "host": "vm", "ok": True, "value": b"", "time": time}
    kind, message = ("RuntimeError", "Connection closed by peer") if casualty else ("ValueError", "NaN")
    return {"rank": rank, "host": "vm", "ok": False, "kind": kind, "message": message, "traceback": "tb",
            "exception": None, "time": time, "casualty": casualty}  # fmt: skip


def test_hpcdist_launch_names_the_rank_that_raised_on_its_own_before_an_earlier_casualty() -> None:
    from hpcdist.calling.calls import first_failure

    error = first_failure({0: _outcome(0, False, 1.0, casualty=True), 2: _outcome(2, False, 2.0)})
    assert error is not None and error.rank == 2 and str(error).startswith("rank 2 on vm raised ValueError: NaN")


def test_hpcdist_launch_names_a_rank_that_returned_while_the_others_still_communicated_with_it() -> None:
    from hpcdist.calling.calls import first_failure

    outcomes = {0: _outcome(0, False, 2.0, casualty=True), 1: _outcome(1, True, 1.0), 2: _outcome(2, True, 3.0)}
    error = first_failure(outcomes)
    assert error is not None and error.rank == 1
    assert str(error).startswith(
        "rank 1 on vm returned while rank 0 still communicated with it; then rank 0 raised RuntimeError: Connection"
    )
    outcomes[1]["time"] = 2.5  # it returned after the casualty raised: the casualty is all there is to name
    assert first_failure(outcomes).rank == 0  # type: ignore[union-attr]


def test_ranks_known_only_from_the_launcher_come_after_those_that_told_and_an_abort_after_a_kill() -> None:
    """Under load a peer whose MPI ended it for another's failure (Open MPI: 'called abort') can be heard first."""
    book = RankBook()
    book.reported(RankAborted(31, "n1"))
    book.reported(RankKilled(2, "n1", 9))
    book.hear(Failed(101, how="exit code 1", host="n4", at=100.5), 0.0)
    assert list(named(book, 1, False, {}, None)) == [101, 2, 31]
