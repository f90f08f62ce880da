"""Start-up waits yield the core before they sleep, and the watchdog's finishing agreement is tested often at first:
a rank asleep holds up each level of a collective's tree by its pause."""

from __future__ import annotations

import threading
import time

import pytest

from hpcdist import waits
from hpcdist.errors import RendezvousTimeout
from hpcdist.forensics import watchdog


class _Request:
    """An MPI request that completes on its `after`-th test."""

    def __init__(self, after: int) -> None:
        self.after, self.tests = after, 0

    def Test(self) -> bool:  # noqa: N802 - mpi4py's name
        self.tests += 1
        return self.tests >= self.after


class _Comm:
    rank, size = 3, 8


def test_a_start_up_wait_yields_the_core_and_never_sleeps_while_its_peers_are_in_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    request = _Request(after=500)
    waits.wait_peers(_Comm(), request, 10.0, "every rank's place", "HPCDIST_TIMEOUT")
    assert request.tests == 500
    assert slept == []


def test_a_start_up_wait_sleeps_once_its_yielding_time_is_over(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    monkeypatch.setattr(waits, "_YIELD", 0.0)
    waits.wait_peers(_Comm(), _Request(after=12), 10.0, "every rank's place", "HPCDIST_TIMEOUT")
    assert len(slept) == 11
    assert slept[:2] == [1e-5, 2e-5]
    assert max(slept) == 0.01  # doubling from 10 µs, capped at 10 ms


def test_a_start_up_wait_that_times_out_names_the_rank_what_it_waited_for_and_the_setting() -> None:
    with pytest.raises(RendezvousTimeout) as caught:
        waits.wait_peers(_Comm(), _Request(after=10**9), 0.05, "rank 0's rendezvous address", "HPCDIST_TIMEOUT")
    message = str(caught.value)
    assert message.startswith("rank 3 of 8 on ")
    assert "waited 0.05 s for rank 0's rendezvous address" in message
    assert "raise HPCDIST_TIMEOUT" in message


def test_the_watchdog_tests_a_young_finishing_agreement_each_millisecond_until_it_completes() -> None:
    barrier = _Request(after=5)
    seen = {"barrier": barrier, "posted": time.monotonic()}
    began = time.monotonic()
    assert watchdog._agreed_soon(seen, threading.Event())
    assert barrier.tests == 5
    assert time.monotonic() - began < watchdog._POLL


def test_an_older_finishing_agreement_is_tested_every_10_ms_until_the_next_cycle_is_due() -> None:
    barrier = _Request(after=10**9)
    seen = {"barrier": barrier, "posted": time.monotonic() - watchdog._QUICK - 1}
    began = time.monotonic()
    assert not watchdog._agreed_soon(seen, threading.Event())
    assert time.monotonic() - began >= watchdog._POLL
    assert 1 <= barrier.tests <= watchdog._POLL / watchdog._LATER + 1


def test_a_stopping_watchdog_does_not_test_the_agreement() -> None:
    barrier, stopping = _Request(after=1), threading.Event()
    stopping.set()
    assert not watchdog._agreed_soon({"barrier": barrier, "posted": time.monotonic()}, stopping)
    assert barrier.tests == 0
    assert not watchdog._agreed_soon({"barrier": None}, threading.Event())
