"""The pure part of the plugin: combining per-rank outcomes and their wire format."""

from __future__ import annotations

import pytest

from hpcdist.testing.agreement import SLOT_BYTES, Outcome, combine, pack, unpack


def _o(kind: str, reason: str = "", nodeid: str = "t.py::test_a") -> Outcome:
    return Outcome(nodeid, "call", kind, reason)


@pytest.mark.parametrize("kind", ["passed", "failed", "skipped", "xfailed", "xpassed"])
def test_the_same_outcome_everywhere_stands(kind: str) -> None:
    assert combine([_o(kind, "why")] * 4) is None


def test_one_failing_rank_fails_everyone_and_is_named_with_its_reason() -> None:
    verdict = combine([_o("passed"), _o("failed", "AssertionError: boom"), _o("passed"), _o("passed")])
    assert verdict is not None and verdict.kind == "failed"
    assert verdict.message.splitlines()[0] == "call failed on rank 1 of 4 (rank 1: AssertionError: boom):"
    assert "  rank 1: AssertionError: boom" in verdict.message
    assert "(passed on ranks 0,2-3)" in verdict.message


def test_several_failing_ranks_are_all_listed() -> None:
    verdict = combine([_o("failed", "E0"), _o("passed"), _o("failed", "E2")])
    assert verdict is not None and "failed on ranks 0,2 of 3" in verdict.message
    assert "rank 0: E0" in verdict.message and "rank 2: E2" in verdict.message


def test_a_skip_on_some_ranks_only_is_a_failure() -> None:
    verdict = combine([_o("skipped", "no GPU here"), _o("passed")])
    assert verdict is not None and verdict.kind == "failed"
    assert "skipped on rank 0 of 2 but not on the others" in verdict.message and "no GPU here" in verdict.message


def test_an_expected_failure_on_some_ranks_is_an_expected_failure_everywhere() -> None:
    verdict = combine([_o("xfailed", "known bug"), _o("xpassed")])
    assert verdict is not None and verdict.kind == "xfailed" and "known bug" in verdict.message


def test_ranks_running_different_tests_fail_loudly() -> None:
    verdict = combine([_o("passed", nodeid="t.py::a"), _o("passed", nodeid="t.py::b")])
    assert verdict is not None and verdict.kind == "failed" and "rank 1 runs t.py::b" in verdict.message


def test_pack_is_fixed_size_and_round_trips_even_for_huge_reasons() -> None:
    small = _o("failed", "E: x")
    assert len(pack(small)) == SLOT_BYTES and unpack(pack(small)) == small
    huge = Outcome("t.py::" + "n" * 3000, "teardown", "failed", "é" * 5000)
    back = unpack(pack(huge))
    assert len(pack(huge)) == SLOT_BYTES and (back.when, back.kind) == ("teardown", "failed")
    assert back.nodeid.endswith("nnn")
