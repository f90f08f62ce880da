"""A rank's output budget: a burst, then its rate; what it holds back is counted and said once in a while."""

from __future__ import annotations

import pytest

from hpcdist import settings
from hpcdist.errors import UsageError
from hpcdist.rank.budget import Budget


def test_a_burst_then_the_rate_and_the_held_back_lines_are_said_with_where_they_are() -> None:
    now = [0.0]
    budget = Budget(2000, clock=lambda: now[0])  # a burst of 20,000 bytes (10 s), then 2,000 a second
    assert sum(budget.take(100) for _ in range(300)) == 200
    assert (budget.lines, budget.bytes) == (100, 10_000)
    now[0] = 1.0
    assert [budget.take(100) for _ in range(21)] == [True] * 20 + [False]
    said = budget.held_back("every line is in logs/rank-001.log")
    assert said == (
        b"hpcdist: this rank printed faster than its 2,000 bytes/s to the launcher: 101 lines (10,100 bytes) not "
        b"shown; every line is in logs/rank-001.log"
    )
    budget.take(10**6)
    assert budget.held_back("") == b""  # said 0 s ago: a steady flood is told once in ten seconds
    assert budget.held_back("x", final=True).startswith(b"hpcdist: this rank printed faster than its 2,000 bytes/s")


def test_the_rate_is_the_launchers_share_and_a_bad_value_is_a_usage_error() -> None:
    assert settings.output_rate({}, 4) == 2 << 20 and settings.output_rate({}, 10_000) == 1024
    assert settings.output_rate({"HPCDIST_OUTPUT_RATE": ""}, 4) == 2 << 20
    assert settings.output_rate({"HPCDIST_OUTPUT_RATE": "0"}, 4) == 0  # no limit
    assert settings.output_rate({"HPCDIST_OUTPUT_RATE": "65536"}, 4) == 65536
    with pytest.raises(UsageError, match=r"^HPCDIST_OUTPUT_RATE='fast': give the bytes per second"):
        settings.output_rate({"HPCDIST_OUTPUT_RATE": "fast"}, 4)
