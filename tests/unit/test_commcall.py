"""One record type for a communication call: the Python group's record, the answer's bytes, the clocks (the compiled
ledger's Calls are tested under MPI, tests/mpi/test_mpi_backend.py)."""

from __future__ import annotations

import pickle

import torch

from hpcdist.commcall import FIELDS, Call
from hpcdist.forensics.ledger import Ledger
from hpcdist.mpi_backend import record


def test_the_python_groups_record_sets_every_field_and_leaves_as_a_plain_call() -> None:
    record.enable()
    try:
        call = record.start("all_reduce", "", [torch.ones(2, 3, dtype=torch.float64)], "world", 4, watched=False)
        assert record.oldest() is None  # nobody waits on it yet
        record.watched(call)
        assert record.oldest() == call.started
        record.ended(call)
        assert record.oldest() is None
        mine = [c for c in record.calls() if c.started == call.started]
    finally:
        record.enable(False)
    assert mine == [Call("all_reduce", "", (2, 3), "float64", "world", 4, call.started, call.ended, True, False)]
    assert type(mine[0]) is Call and call.ended is not None and call.ended >= call.started


def test_the_ledger_records_every_field_of_a_call() -> None:
    ledger = Ledger()
    ledger.start("barrier", "", (), "", "world")
    entry = ledger.start("send", "dst=1", (2,), torch.int64, "[0, 1]")
    assert [getattr(entry, name) for name in FIELDS] == [
        "send", "dst=1", (2,), torch.int64, "[0, 1]", 0, entry.started, None, False, False, 2
    ]  # fmt: skip
    entry.finish()
    assert entry.done and entry.ended is not None and entry.ended >= entry.started


def test_a_ledger_of_256_calls_travels_in_fewer_bytes_than_its_former_records_did() -> None:
    ledger = Ledger(size=256)
    for i in range(256):
        op, peer, group = ("recv", "src=3", "[0, 1, 2, 3]") if i % 8 == 7 else ("all_reduce", "", "world")
        entry = ledger.start(op, peer, (1024,), torch.float32, group)
        if i < 255:
            entry.finish()
    sent = ledger.snapshot()
    data = pickle.dumps({"phase": ledger.state(), "ledger": sent}, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(data) <= 9_000  # 8,625 here; 10,650 with the ledger's former records (an age instead of the times)
    back = pickle.loads(data)["ledger"]
    assert back == sent and all(type(c) is Call for c in back)
    assert (back[-1].label(), back[-1].done, back[0].dtype) == ("recv(src=3) #256", False, "float32")
    assert back[0].done and back[0].ended is None  # whether it ended travels, not when


def test_an_answer_sends_times_relative_to_itself_and_a_trace_moves_them_onto_its_clock() -> None:
    call = Call("broadcast", "root=0", (4,), "float32", "world", 3, 100.0, 100.5, True, seq=9)
    moved = call.moved(-101.0)
    assert (moved.started, moved.ended, moved.age) == (-1.0, -0.5, 1.0)
    assert call.moved(2.0).ended == 102.5 and Call("recv", "src=1", (), "", "world", 0, 5.0).moved(1.0).ended is None
    assert call.label() == "broadcast(root=0) #9"
    assert Call("all_reduce", "", (4,), "float32", "world", 1, 0.0, backward=True, seq=2).waiting() == (
        "all_reduce #2 (issued by autograd's backward pass: DDP's gradient all-reduce)"
    )
