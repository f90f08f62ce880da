"""Rank lists as text, the same in every report: ranges (`0-3,7`), the first few then a count (a leaf: pure).

The ranges are those `--ranks` takes (and the contract's rank list: `values.parse_ranks` reads them back). A list of
any length is shown as its first MOST_SPANS ranges and a count of the rest, so a report about 10,000 ranks stays
a line: `ranks 0-3,7,… and 9,995 more (10,000 ranks)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["MOST_SPANS", "by_host", "rank_ranges", "ranks_text", "spans"]

MOST_SPANS = 8  # ranges shown before the rest is counted


def spans(ranks: Iterable[int]) -> list[tuple[int, int]]:
    """The ranks as sorted runs of consecutive ranks, (first, last) each; duplicates count once."""
    runs: list[tuple[int, int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], rank)
        else:
            runs.append((rank, rank))
    return runs


def rank_ranges(ranks: Iterable[int], most: int | None = None) -> str:
    """'0-3,7'; with `most`, only the first `most` ranges, then ',… and 9,995 more' (the ranks not shown)."""
    runs = spans(ranks)
    shown = runs if most is None else runs[:most]
    text = ",".join(str(first) if first == last else f"{first}-{last}" for first, last in shown)
    rest = sum(last - first + 1 for first, last in runs[len(shown) :])
    return f"{text},… and {rest:,} more" if rest else text


def ranks_text(ranks: Iterable[int], most: int | None = MOST_SPANS) -> str:
    """'rank 2', 'ranks 0-3,7', or past `most` ranges 'ranks 0-3,7,… and 9,995 more (10,000 ranks)'; 'no rank'."""
    listed = sorted(set(ranks))
    if not listed:
        return "no rank"
    if len(listed) == 1:
        return f"rank {listed[0]}"
    text = rank_ranges(listed, most)
    return f"ranks {text} ({len(listed):,} ranks)" if "…" in text else f"ranks {text}"


def by_host(ranks: Iterable[int], hosts: Mapping[int, str], most: int | None = MOST_SPANS) -> str:
    """'ranks 0-3,7 on n1, n2' ('… on 1,250 hosts' past `most` hosts): where the ranks ran, where known."""
    listed = sorted(set(ranks))
    where = sorted({hosts[rank] for rank in listed if hosts.get(rank)})
    if not where:
        return ranks_text(listed, most)
    named = ", ".join(where) if most is None or len(where) <= most else f"{len(where):,} hosts"
    return f"{ranks_text(listed, most)} on {named}"
