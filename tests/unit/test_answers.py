"""A rank's answer to the hang report stays under its size cap, keeping its phase and its last calls."""

from __future__ import annotations

import pickle
from typing import Any

from hpcdist.forensics.answers import KEEP_CALLS, KEEP_FRAMES, MAX_ANSWER, bounded
from hpcdist.forensics.frdump import PART


def _answer(calls: int, frames: int, dump: int) -> dict[str, Any]:
    ledger = [(i, "all_reduce", "", (4,), "float32", "world", i, 0.1, True, "") for i in range(calls)]
    stacks = (("MainThread", tuple(f"f{i} (a.py:{i})" for i in range(frames))),)
    return {"phase": ("initialised", 1.0), "ledger": ledger, "stacks": stacks, PART: {"torch_dump": b"x" * dump}}


def test_a_small_answer_goes_as_it_is() -> None:
    answer = _answer(10, 10, 100)
    assert bounded(answer) is answer


def test_a_large_answer_loses_the_dump_then_its_oldest_calls_then_deep_frames_and_says_how_large_it_was() -> None:
    answer = _answer(256, 5000, 1 << 20)
    trimmed = bounded(answer)
    assert len(pickle.dumps(trimmed, protocol=pickle.HIGHEST_PROTOCOL)) <= MAX_ANSWER
    assert trimmed["trimmed"] > 1 << 20 and trimmed[PART] == {}
    assert trimmed["ledger"] == answer["ledger"][-KEEP_CALLS:] and trimmed["phase"] == answer["phase"]
    assert trimmed["stacks"] == (("MainThread", answer["stacks"][0][1][:KEEP_FRAMES]),)
