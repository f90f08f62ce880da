"""The hang report's first round without MPI: digests, a host's summary, the reporter's tally and what it fills in."""

from __future__ import annotations

from typing import Any

import pytest

from hpcdist.commcall import Call
from hpcdist.forensics import hung
from hpcdist.forensics.digest import Digest, Intake, Tally, digest, fan_in, hosts, key, merge, place, sent
from hpcdist.forensics.frdump import PART
from hpcdist.forensics.ledger import FINISHED, INITIALISED, Phase, describe_hang


def _calls(*ops: tuple[str, str], age: float = 5.0, pending: bool = True, shift: float = 0.0) -> list[Call]:
    """A rank's calls as its answer sends them: (op, peer) each on the world group, the last one waiting `age` s
    unless not `pending`; `shift` moves every time (which no key may see)."""
    calls = []
    for seq, (op, peer) in enumerate(ops, start=1):
        done = not pending or seq < len(ops)
        started = -age - shift if seq == len(ops) else -age - 10 * (len(ops) - seq) - shift
        calls.append(Call(op, peer, (4,), "float32", "world", 0 if peer else seq, started, None, done, False, seq))
    return calls


AR = ("all_reduce", "")


def test_equal_calls_at_other_times_have_one_key_and_any_field_the_report_reads_changes_it() -> None:
    base = key(_calls(AR, AR), INITIALISED)
    assert key(_calls(AR, AR, shift=3.2), INITIALISED) == base
    assert key(_calls(AR, AR, pending=False), INITIALISED) != base  # the last call ended
    assert key(_calls(AR, ("recv", "src=0")), INITIALISED) != base  # another call, another peer
    assert key(_calls(AR, ("recv", "src=0")), INITIALISED) != key(_calls(AR, ("recv", "src=1")), INITIALISED)
    assert key(_calls(AR, AR, AR), INITIALISED) != base  # another call number
    assert key(_calls(AR, AR), FINISHED) != base
    other = _calls(AR, AR)
    other[-1].shape = (8,)
    assert key(other, INITIALISED) != base


def test_a_digest_carries_the_age_its_line_shows_and_pickles_to_a_few_tens_of_bytes() -> None:
    import pickle

    assert digest(_calls(AR, AR, age=5.2), Phase(INITIALISED, 40.0)).age == pytest.approx(5.2)
    assert digest(_calls(AR, AR, pending=False), Phase(FINISHED, 1.5)).age == 1.5
    one = digest(_calls(*[AR] * 256), Phase(INITIALISED, 40.0))
    assert len(pickle.dumps((1, tuple(one)), protocol=pickle.HIGHEST_PROTOCOL)) < 64


def test_a_host_summary_has_one_state_per_key_with_its_ranks_and_age_range() -> None:
    summary = merge({4: Digest(7, INITIALISED, 5.1), 5: Digest(9, INITIALISED, 1.0), 6: Digest(7, INITIALISED, 5.3)})
    assert sent(summary) == {7: ((4, 6), INITIALISED, (5.1, 5.3)), 9: ((5,), INITIALISED, (1.0, 1.0))}


@pytest.mark.parametrize(
    ("environ", "rank", "ranks"),
    [
        ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}, 5, [4, 5, 6, 7]),
        ({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"}, 8, [8, 9]),  # the last host, cut at the world's size
        ({"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"}, 1, [1]),  # not consecutive: alone
        ({}, 3, [3]),
        ({"LOCAL_RANK": "x", "LOCAL_WORLD_SIZE": "4"}, 3, [3]),
    ],
)
def test_a_rank_places_its_host_as_the_default_placement_would(
    environ: dict[str, str], rank: int, ranks: list[int]
) -> None:
    assert place(environ, rank, 10) == ranks


def test_consecutive_hosts_are_led_by_their_lowest_live_rank_and_the_reporter_s_by_the_next() -> None:
    registered = {0: [0, 1, 2], 3: [3, 4, 5], 6: [6, 7, 8]}
    assert hosts(registered, 10, 0, set()) == ({1: [2], 3: [4, 5], 6: [7, 8]}, [9])  # rank 9 registered nowhere
    assert hosts(registered, 9, 0, {3}) == ({1: [2], 4: [5], 6: [7, 8]}, [])  # its leader failed: the next leads


def test_ranks_two_registrations_name_and_ranks_out_of_range_are_asked_directly() -> None:
    by_node = {0: [0, 1, 2, 3], 1: [1, 2, 3, 4]}  # --map-by node, read as consecutive: both overlap
    assert hosts(by_node, 8, 0, set()) == ({}, [1, 2, 3, 4, 5, 6, 7])
    assert hosts({4: [4, 5, 6, 7, 8]}, 8, 0, set()) == ({}, [1, 2, 3, 4, 5, 6, 7])


def _answers(calls: dict[int, list[Call]], phases: dict[int, Phase]) -> dict[int, dict[str, Any]]:
    return {
        rank: {"phase": phases[rank], "ledger": rows, "stacks": (), PART: {"clock_ns": 1}}
        for rank, rows in calls.items()
    }


def test_filled_answers_give_the_same_report_and_verdict_as_every_rank_s_full_answer() -> None:
    # 24 ranks on 4 hosts of 6: rank 13 is elsewhere, rank 9 waits in a recv, the others in all_reduce #2
    calls = {rank: _calls(AR, AR, age=5.0 + rank % 6 / 10) for rank in range(24)}
    calls[13] = _calls(AR, pending=False)
    calls[9] = _calls(AR, ("recv", "src=13"), age=5.5)
    phases = {rank: Phase(INITIALISED, 60.0) for rank in range(24)}
    truth = _answers(calls, phases)
    tally = Tally()
    for first in range(0, 24, 6):
        host = range(first, first + 6)
        tally.add(sent(merge({rank: digest(calls[rank], phases[rank]) for rank in host})))
    chosen = tally.chosen()
    assert chosen == [0, 1, 9, 13, 23]  # the first two and the last of the big state, and each rank apart
    filled = tally.filled({rank: truth[rank] for rank in chosen})
    assert sorted(filled) == list(range(24)) and "stacks" not in filled[5] and "stacks" in filled[1]
    ledgers = {rank: answer["ledger"] for rank, answer in filled.items()}
    report = describe_hang(ledgers, [], {rank: answer["phase"] for rank, answer in filled.items()})
    assert report == describe_hang(calls, [], phases)
    assert "for 5.0-5.5 s" in report  # the ages of every host, not only of the ranks that answered in full
    assert hung.verdict(ledgers, phases, [], 4.0) == hung.verdict(calls, phases, [], 4.0)


def test_a_state_that_no_rank_answered_in_full_for_is_left_out() -> None:
    tally = Tally()
    tally.add(merge({0: Digest(1, INITIALISED, 5.0), 1: Digest(2, INITIALISED, 5.0)}))
    tally.add(merge({1: Digest(3, INITIALISED, 9.0)}))  # a rank heard from twice keeps what it said first
    assert tally.keys == {0: 1, 1: 2}
    only = {0: {"phase": Phase(INITIALISED, 1.0), "ledger": _calls(AR)}}
    assert sorted(tally.filled(only)) == [0]


@pytest.mark.parametrize("direct", [False, True])
def test_the_fan_in_emulator_adds_up_every_rank_in_its_state(direct: bool) -> None:
    seconds, tally = fan_in(100, 8, states=3, direct=direct, repeats=1)
    assert seconds >= 0
    assert {state: sorted(ranks) for state, (_, ranks) in tally.states.items()} == {
        state: list(range(state, 100, 3)) for state in range(3)
    }
    assert tally.chosen() == sorted({0, 3, 99, 1, 4, 97, 2, 5, 98})
    assert min(tally.ages.values()) == 5.0 and max(tally.ages.values()) == pytest.approx(5.6)


def test_an_intake_counts_messages_and_bytes_by_kind() -> None:
    intake = Intake()
    intake.count("full answer", 900)
    intake.count("host summary", 80)
    intake.count("full answer", 1100)
    intake.count("rank summary", 50)
    intake.count("rank summary", 50)
    assert intake.kinds["full answer"] == (2, 2000)
    assert str(intake) == (
        "5 messages (2,180 bytes): 2 full answers (2,000 bytes), 1 host summary (80 bytes), "
        "2 rank summaries (100 bytes)"
    )
