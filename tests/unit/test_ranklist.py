"""The one rank-list formatter: ranges that --ranks reads back, and the first few ranges then a count."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hpcdist.ranklist import by_host, rank_ranges, ranks_text
from hpcdist.values import parse_ranks

_RANKS = st.sets(st.integers(0, 20_000), max_size=300)


@given(_RANKS)
def test_ranges_read_back_as_the_same_ranks(ranks: set[int]) -> None:
    text = rank_ranges(ranks)
    assert (parse_ranks(text) if ranks else frozenset()) == ranks


@given(_RANKS, st.integers(1, 10))
def test_a_capped_list_shows_the_first_ranges_and_counts_the_rest(ranks: set[int], most: int) -> None:
    text = rank_ranges(ranks, most)
    shown, _, rest = text.partition(",… and ")
    listed = parse_ranks(shown) if shown else frozenset()
    counted = int(rest.removesuffix(" more").replace(",", "")) if rest else 0
    assert listed == set(sorted(ranks)[: len(listed)])  # the lowest ranks, none skipped
    assert len(listed) + counted == len(ranks)
    assert shown.count(",") < most  # at most `most` ranges, so the text stays short at any N
    assert len(text) <= most * 12 + 30


def test_ten_thousand_scattered_ranks_make_one_short_line() -> None:
    text = ranks_text(range(0, 20_000, 2))
    assert text == "ranks 0,2,4,6,8,10,12,14,… and 9,992 more (10,000 ranks)"
    assert ranks_text([5]) == "rank 5"
    assert ranks_text([]) == "no rank"
    assert ranks_text([3, 0, 1, 2, 7]) == "ranks 0-3,7"


def test_by_host_names_few_hosts_and_counts_many() -> None:
    hosts = {rank: f"n{rank // 8}" for rank in range(10_000)}
    assert by_host([0, 1, 9], hosts) == "ranks 0-1,9 on n0, n1"
    assert by_host(range(10_000), hosts) == "ranks 0-9999 on 1,250 hosts"
    assert by_host([4], {}) == "rank 4"
