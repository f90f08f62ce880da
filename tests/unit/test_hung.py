"""Under --on-failure shrink: which hung ranks end themselves (forensics.hung), and a told rank's own check."""

from __future__ import annotations

import os
import signal

import pytest

from hpcdist.commcall import Call
from hpcdist.contract import RankContract
from hpcdist.forensics import hung
from hpcdist.forensics.ledger import FINISHED, INITIALISED, Phase


def _sent(seq: int, op: str, peer: str, group: str, gseq: int, age: float, done: bool) -> Call:
    """A call as a rank's answer sends it: started `age` seconds before the answer."""
    return Call(op, peer, (1,), "float32", group, gseq, -age, None, done, False, seq)


DONE = _sent(1, "all_reduce", "", "world", 1, 9.0, True)


def _waiting(age: float) -> list[Call]:
    return [DONE, _sent(2, "all_reduce", "", "world", 2, age, False)]


def _phases(*ranks: int, name: str = INITIALISED) -> dict[int, Phase]:
    return {rank: Phase(name, 10.0) for rank in ranks}


def test_the_rank_in_no_call_while_the_others_wait_past_the_timeout_is_ended() -> None:
    ledgers = {0: _waiting(5.2), 1: _waiting(5.1), 2: [DONE], 3: _waiting(5.0)}
    ending, why = hung.verdict(ledgers, _phases(0, 1, 2, 3), [], 5.0)
    assert ending == [2]
    assert why == (
        "ranks 0-1,3 waited up to 5.2 s in all_reduce #2, past the 5 s timeout (HPCDIST_TIMEOUT), "
        "while it was in no communication call"
    )


def _call(op: str, peer: str, group: str, age: float) -> list[Call]:
    return [DONE, _sent(2, op, peer, group, 0 if peer else 2, age, False)]


def test_only_the_ranks_a_late_call_waits_for_are_ended_not_those_computing_meanwhile() -> None:
    ledgers = {0: _call("recv", "src=1", "world", 6.0), 1: [DONE], 2: [DONE], 3: [DONE]}
    assert hung.verdict(ledgers, _phases(0, 1, 2, 3), [], 5.0)[0] == [1]
    ledgers = {0: _call("all_reduce", "", "[0, 1, 2]", 6.0), 1: _call("all_reduce", "", "[0, 1, 2]", 6.0), 2: [DONE],
               3: [DONE]}  # fmt: skip
    ending, why = hung.verdict(ledgers, _phases(0, 1, 2, 3), [], 5.0)
    assert ending == [2] and why.startswith("ranks 0-1 waited up to 6.0 s in all_reduce #2")
    ending, why = hung.verdict(ledgers, _phases(0, 1, 2, 3), [], 5.0, renumbered=True)  # ranks of a shrunk group
    assert ending == [] and why.startswith("the late calls wait for no rank known by number")
    ending, why = hung.verdict({0: _call("recv", "src=any", "world", 6.0), 1: [DONE]}, _phases(0, 1), [], 5.0)
    assert ending == [] and why.startswith("the late calls wait for no rank known by number")


def test_a_rank_that_is_only_slower_than_the_others_within_the_timeout_is_left_alone() -> None:
    ledgers = {0: _waiting(4.9), 1: [DONE]}  # an alarm from a call that has ended since, or a rank still on time
    assert hung.verdict(ledgers, _phases(0, 1), [], 5.0) == ([], "")


@pytest.mark.parametrize(
    ("ledgers", "phases", "missing", "why"),
    [
        ({0: _waiting(6), 1: [DONE]}, _phases(0, 1), [2], "rank 2 did not answer (stuck in C code that holds the GIL)"),
        ({0: _waiting(6), 1: [DONE]}, {**_phases(0), 1: Phase(FINISHED, 1.0)}, [], "rank 1 finished or never"),
        (
            {0: _waiting(6), 1: _waiting(6)},
            _phases(0, 1),
            [],
            "every rank the late calls wait for is in a communication call",
        ),
    ],
)
def test_a_hang_that_no_rank_ending_itself_resolves_ends_the_job(
    ledgers: dict[int, list[Call]], phases: dict[int, Phase], missing: list[int], why: str
) -> None:
    ending, said = hung.verdict(ledgers, phases, missing, 5.0)
    assert ending == [] and said.startswith(why)


def test_a_told_rank_that_made_a_call_since_it_answered_goes_on(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))  # this test's own process stays
    answered = hung.progress([DONE])
    hung.heard(RankContract(), 2, (answered, "why"), _waiting(0.1))  # it arrived in all_reduce #2 after its answer
    hung.heard(
        RankContract(),
        2,
        (answered, "why"),
        [*_waiting(0.1)[:1], _sent(2, "all_reduce", "", "world", 2, 0.1, True)],
    )
    assert killed == []
    assert capfd.readouterr().err.count("hpcdist: rank 2 arrived after the hang verdict, so it goes on") == 2
    hung.heard(RankContract(), 2, (answered, "ranks 0-1,3 waited"), [DONE])  # still where it answered from
    assert killed == [(os.getpid(), signal.SIGKILL)]
    err = capfd.readouterr().err
    assert err.startswith("hpcdist: rank 2 hung and ends itself (--on-failure shrink): ranks 0-1,3 waited; its Python")
    assert "test_a_told_rank_that_made_a_call_since_it_answered_goes_on (" in err  # its own stack, this frame in it
