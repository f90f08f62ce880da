"""The crowded rule on a node's affinity masks: a rank per core, or some ranks taking turns on fewer cores."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcdist.mpi_backend.crowding import crowded, mask_cores

CASES = [
    ("one rank", [{0}], False),
    ("no ranks", [], False),
    ("mpiexec's default: a core per rank", [{0}, {1}], False),
    ("--bind-to none, as many ranks as cores", [{0, 1}, {0, 1}], False),
    ("--bind-to none, 4 ranks on 2 cores", [{0, 1}] * 4, True),
    ("two ranks pinned to one core", [{0}, {0}], True),
    ("pinned pair beside a free rank", [{0}, {0}, {0, 1, 2, 3}], True),
    ("one pinned, one anywhere", [{0}, {0, 1}], False),
    ("three ranks on two cores they all may use, a fourth core unused", [{0, 1}, {0, 1}, {0, 1}, {2, 3}], True),
    ("a chain that needs ranks moved along", [{0}, {0, 1}, {1, 2}, {2, 3}], False),
    ("a chain one core short", [{0}, {0, 1}, {1}, {2, 3}], True),
    ("sockets: two ranks on each of two 2-core sockets", [{0, 1}, {0, 1}, {2, 3}, {2, 3}], False),
    ("hpcdist mpirun --bind auto: disjoint core sets", [{0, 1, 2}, {3, 4, 5}], False),
]


@pytest.mark.parametrize(("masks", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_crowded_when_ranks_cannot_each_have_a_core(masks: list[set[int]], expected: bool) -> None:
    assert crowded(masks) is expected


def _hall_fails(masks: list[set[int]]) -> bool:
    """By the definition: some set of ranks has fewer CPUs among them than ranks."""
    ranks = range(len(masks))
    return any(
        len(set().union(*(masks[r] for r in subset))) < len(subset)
        for size in range(1, len(masks) + 1)
        for subset in itertools.combinations(ranks, size)
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sets(st.integers(0, 5), min_size=1), max_size=7))
def test_the_matching_agrees_with_halls_condition(masks: list[set[int]]) -> None:
    assert crowded(masks) is _hall_fails(masks)


def test_a_bitmask_names_its_cpus() -> None:
    assert mask_cores(0b1011) == [0, 1, 3]
    assert mask_cores(1 << 130) == [130]
