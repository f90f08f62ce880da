"""What lost ranks are called: RanksLost's message, Recovery's line, and the variables shrink mode reads."""

from __future__ import annotations

import pytest

from hpcdist import RanksLost, TooFewRanks, UsageError
from hpcdist.contract import RankContract
from hpcdist.resilience.membership import Recovery


@pytest.mark.parametrize(
    ("ranks", "hosts", "during", "text"),
    [
        (
            [2],
            {2: "n1"},
            "all_reduce #57 on world",
            "rank 2 on n1 was lost (process failed) during all_reduce #57 on world",
        ),
        ([3, 2], {2: "n2", 3: "n2", 0: "n1"}, "step 120", "ranks 2-3 on n2 were lost (process failed) during step 120"),
        ([5], {}, "", "rank 5 was lost (process failed)"),
    ],
)
def test_ranks_lost_names_ranks_and_hosts(ranks: list[int], hosts: dict[int, str], during: str, text: str) -> None:
    error = RanksLost(ranks, hosts, during)
    assert str(error) == text
    assert error.ranks == tuple(sorted(ranks))
    assert error.hosts == {rank: host for rank, host in hosts.items() if rank in ranks}
    assert error.during == during


def test_too_few_ranks_is_ranks_lost() -> None:
    error = TooFewRanks([1], {1: "n1"}, "commit", why="1 rank is left, fewer than --min-np 2")
    assert isinstance(error, RanksLost)
    assert (str(error), error.ranks) == ("1 rank is left, fewer than --min-np 2", (1,))


def test_recovery_line() -> None:
    recovery = Recovery((2, 3), {2: "n2", 3: "n2"}, 4, 2, 0, 0.414, during="all_reduce #57 on world")
    assert recovery.line(120) == (
        "hpcdist: ranks 2-3 on n2 lost (process failed during all_reduce #57 on world); 2 of 4 ranks carry on "
        "from step 120 (recovered in 0.41 s)"
    )
    assert Recovery((1,), {}, 2, 1, 0, 0.05).line() == (
        "hpcdist: rank 1 lost (process failed); 1 of 2 ranks carries on (recovered in 0.05 s)"
    )
    assert Recovery((1, 2), {}, 4, 4, 0, 0.5, joined=(4, 5)).line(21) == (
        "hpcdist: ranks 1-2 lost (process failed); 2 of 4 ranks carry on and 2 spares join them: 4 ranks again "
        "from step 21 (recovered in 0.50 s)"
    )
    assert (
        "; 2 of 3 ranks carry on and 1 spare joins them: 3 ranks again ("
        in Recovery((0,), {}, 3, 3, 0, 1, joined=(3,)).line()
    )


def test_shrink_mode_and_min_np_from_the_contract() -> None:
    assert RankContract.from_environ({"HPCDIST_ON_FAILURE": "shrink"}).shrinks
    assert not RankContract.from_environ({"HPCDIST_ON_FAILURE": "end"}).shrinks and not RankContract().shrinks
    assert (RankContract().min_np, RankContract.from_environ({"HPCDIST_MIN_NP": "3"}).min_np) == (1, 3)
    with pytest.raises(UsageError, match=r"^HPCDIST_MIN_NP=0 is not a positive whole number"):
        RankContract.from_environ({"HPCDIST_MIN_NP": "0"})
