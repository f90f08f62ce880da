"""Hang forensics without MPI: ledgers in, the first divergence out, in words."""

from __future__ import annotations

import time

from hpcdist.commcall import Call
from hpcdist.forensics import sources
from hpcdist.forensics.ledger import (
    FINISHED,
    INITIALISED,
    INITIALISING,
    RUNNING,
    Ledger,
    Phase,
    describe_hang,
    first_divergence,
)


def _ledger(*calls: tuple[str, str, str], pending_last: bool = True) -> list[Call]:
    """A rank's ledger from (op, peer, group) calls; the last one still waiting unless told otherwise."""
    ledger = Ledger()
    entries = [ledger.start(op, peer, (4,), "float32", group) for op, peer, group in calls]
    for entry in entries[:-1] if pending_last else entries:
        entry.done = True
    return ledger.snapshot()


WORLD_AR = ("all_reduce", "", "world")


def test_a_recv_whose_sender_is_elsewhere_is_named() -> None:
    ledgers = {
        0: _ledger(WORLD_AR, WORLD_AR),
        1: _ledger(WORLD_AR, WORLD_AR),
        2: _ledger(WORLD_AR, ("recv", "src=0", "world")),
    }
    assert first_divergence(ledgers) == "rank 2 waits in recv(src=0) #2 while rank 0 is in all_reduce #2"


def test_matching_send_and_recv_are_not_a_divergence() -> None:
    ledgers = {0: _ledger(("send", "dst=1", "world")), 1: _ledger(("recv", "src=0", "world"))}
    assert first_divergence(ledgers) is None


def test_a_different_collective_on_one_rank_is_named_against_the_others() -> None:
    ledgers = {r: _ledger(WORLD_AR, WORLD_AR) for r in (0, 2, 3)}
    ledgers[1] = _ledger(WORLD_AR, ("broadcast", "root=1", "world"))
    assert first_divergence(ledgers) == (
        "rank 1 is in broadcast(root=1) #2 shape=[4] dtype=float32 on group world while ranks 0,2-3 are in "
        "all_reduce #2 shape=[4] dtype=float32 on group world"
    )


def test_subgroup_collectives_are_compared_among_members_only() -> None:
    sub = ("all_reduce", "", "[0, 1]")
    ledgers = {0: _ledger(sub, WORLD_AR), 1: _ledger(sub, WORLD_AR), 2: _ledger(WORLD_AR), 3: _ledger(WORLD_AR)}
    assert first_divergence(ledgers) is None


def test_a_rank_outside_any_call_is_named() -> None:
    ledgers = {0: _ledger(WORLD_AR, WORLD_AR), 1: _ledger(WORLD_AR, pending_last=False)}
    assert first_divergence(ledgers) == (
        "rank 0 waits in all_reduce #2 while rank 1 is not in any communication call "
        "(its stack below shows where it is)"
    )


def test_the_ring_buffer_keeps_the_last_calls_and_their_group_order() -> None:
    ledger = Ledger(size=3)
    for _ in range(5):
        ledger.start("all_reduce", "", (1,), "float32", "world").done = True
    assert [(r.seq, r.gseq) for r in ledger.snapshot()] == [(3, 3), (4, 4), (5, 5)]
    assert ledger.pending() is None


def test_the_report_lists_every_rank_and_those_that_did_not_answer() -> None:
    ledgers = {0: _ledger(WORLD_AR), 1: _ledger(("recv", "src=0", "world"))}
    report = describe_hang(ledgers, missing=[2])
    assert "rank 0: waiting in all_reduce #1 shape=[4] dtype=float32 on group world" in report
    assert "rank 2: did not answer" in report
    assert report.endswith(
        "first divergence: rank 1 waits in recv(src=0) #1 while rank 0 is in all_reduce #1\n"
        "advice: a send or recv whose peer is in another call: check that every send has its recv, in the same order"
    )


def test_a_rank_whose_program_finished_is_named() -> None:
    ledgers = {0: _ledger(WORLD_AR, WORLD_AR), 1: _ledger(WORLD_AR, pending_last=False)}
    phases = {0: Phase(INITIALISED, 20.0), 1: Phase(FINISHED, 10.2)}
    assert first_divergence(ledgers, phases) == "rank 0 waits in all_reduce #2 while rank 1 finished its program"
    report = describe_hang(ledgers, [], phases)
    assert "  rank 1: finished its program 10.2 s ago; last call all_reduce #1" in report


def test_a_receiver_whose_sender_finished_is_named() -> None:
    ledgers = {0: _ledger(("recv", "src=1", "world")), 1: []}
    phases = {0: Phase(INITIALISED, 9.0), 1: Phase(FINISHED, 8.0)}
    assert first_divergence(ledgers, phases) == "rank 0 waits in recv(src=1) #1 while rank 1 finished its program"


def test_a_rank_that_never_initialised_is_named_against_those_waiting_in_init() -> None:
    ledgers: dict[int, list[Call]] = {0: [], 1: [], 2: [], 3: []}
    phases = {
        0: Phase(INITIALISING, 61.0),
        1: Phase(RUNNING, 62.0),
        2: Phase(INITIALISING, 61.5),
        3: Phase(FINISHED, 1.0),
    }
    assert first_divergence(ledgers, phases) == (
        "rank 0 waits in init_process_group while rank 1 never initialised (its program has not called "
        "init_process_group) and rank 3 finished its program"
    )
    report = describe_hang(ledgers, [], phases)
    assert "  rank 0: waiting in init_process_group for 61.0 s" in report
    assert "  rank 1: running its program, which has not called init_process_group" in report
    assert "  rank 3: finished its program 1.0 s ago; no communication call" in report


def test_the_phase_is_what_the_rank_entered_last() -> None:
    ledger = Ledger()
    assert ledger.state().name == RUNNING
    ledger.enter(INITIALISING)
    ledger.enter(INITIALISED)
    state = ledger.state()
    assert state.name == INITIALISED and 0 <= state.age < 1


def test_the_advice_fits_the_case() -> None:
    elsewhere = {0: _ledger(WORLD_AR, WORLD_AR), 1: _ledger(WORLD_AR, pending_last=False)}
    mismatch = {0: _ledger(WORLD_AR), 1: _ledger(("broadcast", "root=1", "world"))}
    same = {0: _ledger(WORLD_AR, WORLD_AR), 1: _ledger(WORLD_AR, WORLD_AR)}
    advice = {name: describe_hang(ledgers, []).splitlines()[-1] for name, ledgers in
              (("elsewhere", elsewhere), ("mismatch", mismatch), ("same", same))}  # fmt: skip
    assert advice["elsewhere"] == (
        "advice: the other ranks wait for rank 1, which is busy elsewhere or stuck outside communication; a larger "
        "timeout helps only if that work is meant to take this long"
    )
    assert advice["mismatch"].startswith("advice: the ranks' calls differ at the same point of the group")
    assert advice["same"].startswith("advice: every rank is in the same call and still waiting")
    assert "larger" not in advice["mismatch"] and "HPCDIST_TIMEOUT" in advice["same"]


def test_a_call_issued_during_backward_is_named_as_such() -> None:
    ledger = Ledger()
    ledger.start("barrier", "", (), "", "world").done = True
    backend = Call("all_reduce", "", (6,), "float32", "world", 2, time.monotonic(), None, False, True)
    sources.register("test", lambda: [backend.copy()], lambda: None, lambda size: None)
    try:
        records = sources.snapshot(ledger)
    finally:
        sources._SOURCES.pop("test")
    assert [(r.seq, r.op, r.dtype, r.gseq, r.done) for r in records] == [
        (1, "barrier", "", 1, True),
        (2, "all_reduce", "float32", 2, False),
    ]
    ledgers = {0: records, 1: records[:1]}
    assert first_divergence(ledgers) == (
        "rank 0 waits in all_reduce #2 (issued by autograd's backward pass: DDP's gradient all-reduce) while rank 1 "
        "is not in any communication call (its stack below shows where it is)"
    )


def test_a_flight_recorder_entry_that_repeats_a_dist_call_is_dropped_and_lends_it_its_state() -> None:
    mine = [Call("all_reduce", "", (4,), "float32", "world", 1, 10.0, 10.5, True, False, 1)]
    recorded = [
        Call("all_reduce", "", (4,), "float32", "world", 7, 10.001, None, False, False),  # the same call, in flight
        Call("all_reduce", "", (9,), "float32", "world", 8, 10.002, None, False, True),
    ]
    extra = sources._unmatched(mine, recorded)
    assert extra == recorded[1:]
    assert mine == [Call("all_reduce", "", (4,), "float32", "world", 7, 10.0, 10.5, False, False, 1)]


def test_the_trace_takes_a_backends_calls_since_it_began_with_their_ends() -> None:
    kept: list[int] = []
    calls = [
        Call("broadcast", "root=0", (4,), "float32", "world", 1, 10.0, 10.5, True, False),
        Call("all_reduce", "", (6,), "float32", "world", 2, 20.0, 20.25, True, True),
        Call("all_reduce", "", (6,), "float32", "world", 3, 30.0, None, False, True),
    ]
    sources.register("test", lambda: calls, lambda: None, kept.append)
    try:
        sources.keep(1000)
        timed = sources.timed(15.0, [])
    finally:
        sources._SOURCES.pop("test")
    assert kept == [1000]
    assert timed == calls[1:]


def test_at_ten_thousand_ranks_the_report_is_a_few_lines_ranks_in_one_state_sharing_one() -> None:
    alike, apart = _ledger(WORLD_AR, WORLD_AR), _ledger(WORLD_AR, ("broadcast", "root=1", "world"))
    ledgers = {rank: alike for rank in range(10_000) if rank not in (1, 7)} | {1: apart}
    report = describe_hang(ledgers, [7]).splitlines()
    age = f"{alike[-1].age:.1f}"
    assert report[1:4] == [
        f"  rank 1: waiting in broadcast(root=1) #2 shape=[4] dtype=float32 on group world for {apart[-1].age:.1f} s",
        f"  ranks 0,2-6,8-9999: waiting in all_reduce #2 shape=[4] dtype=float32 on group world for {age} s",
        "  rank 7: did not answer (dead, stuck outside Python, or a program that never imported torch)",
    ]
    assert report[4].startswith("first divergence: rank 1 is in broadcast(root=1) #2") and len(report) <= 6
