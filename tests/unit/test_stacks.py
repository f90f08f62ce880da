"""A rank's stacks from faulthandler's text, and every rank's stacks grouped into one report."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from hpcdist.forensics.pyspy import parse as parse_pyspy
from hpcdist.forensics.stacks import in_answers, own, parse, report
from hpcdist.launching.spawn import _catches, _descendants
from hpcdist.ranklist import rank_ranges

DUMP = """\
Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/work/hpcdist/forensics/watchdog.py", line 190 in _serve

Thread 0x00007f0000000003 (most recent call first):
  File "/work/x/train.py", line 9 in load

Current thread 0x00007f0000000001 (most recent call first):
  File "/work/.venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2501 in all_reduce
  File "/work/x/train.py", line 20 in step
  File "/work/x/train.py", line 30 in <module>
  File "<frozen runpy>", line 88 in _run_code
  File "/work/hpcdist/worker.py", line 85 in _run_in_process
  File "/work/hpcdist/worker.py", line 170 in main
"""
NAMES = {0x7F0000000001: "MainThread", 0x7F0000000002: "hpcdist-watchdog", 0x7F0000000003: "loader"}


def test_parse_names_threads_drops_hpcdists_own_and_the_runner_and_puts_the_main_thread_first() -> None:
    assert parse(DUMP, NAMES) == (
        (
            "MainThread",
            (
                "all_reduce (torch/distributed/distributed_c10d.py:2501)",
                "step (/work/x/train.py:20)",
                "<module> (/work/x/train.py:30)",
            ),
        ),
        ("loader", ("load (/work/x/train.py:9)",)),
    )


def test_a_thread_python_does_not_know_is_named_thread_and_a_repeated_dump_keeps_the_last() -> None:
    twice = DUMP + DUMP.replace("line 9 in load", "line 10 in load")
    assert parse(twice, {0x7F0000000001: "MainThread"})[1:] == (
        ("thread", ("load (/work/x/train.py:10)",)),
        ("thread", ("wait (/usr/lib/python3.11/threading.py:324)", "_serve (/work/hpcdist/forensics/watchdog.py:190)")),
    )


@pytest.mark.parametrize(
    ("ranks", "text"),
    [([3], "3"), ([0, 2, 3], "0,2-3"), ([8, 0, 1, 2, 3, 4, 5, 6], "0-6,8"), ([1, 2, 4, 5, 7], "1-2,4-5,7")],
)
def test_rank_ranges_are_python_hostlist_style(ranks: list[int], text: str) -> None:
    assert rank_ranges(ranks) == text


def _stack(top: str) -> tuple:
    return (("MainThread", (f"{top} (/x.py:1)", "<module> (/x.py:9)")),)


def test_report_merges_identical_stacks_smallest_group_first_and_names_the_silent() -> None:
    stacks = {0: _stack("wait"), 1: _stack("sleep"), 2: _stack("wait"), 3: _stack("wait")}
    assert report(stacks, missing=[4], headline="stacks:") == "\n".join(
        [
            "stacks:",
            "rank 1:",
            "  thread MainThread:",
            "    sleep (/x.py:1)",
            "    <module> (/x.py:9)",
            "ranks 0,2-3:",
            "  thread MainThread:",
            "    wait (/x.py:1)",
            "    <module> (/x.py:9)",
            "rank 4: did not answer, no stack (dead, or its main thread holds the GIL in C code)",
        ]
    )


def test_report_caps_frames_and_distinct_stacks_at_a_large_job() -> None:
    deep = (("MainThread", tuple(f"f{i} (/x.py:{i})" for i in range(50))),)
    lines = report({0: deep}).splitlines()
    assert lines[-1] == "    … 10 more frames" and len(lines) == 1 + 1 + 1 + 40 + 1
    each_alone = {rank: _stack(f"f{rank}") for rank in range(20)}
    assert report(each_alone).splitlines()[-1] == "ranks 12-19: 8 more distinct stacks, not shown"


def _own_with_a_waiter() -> dict[str, tuple[str, ...]]:
    """own() while a thread named 'waiter' waits."""
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="waiter")
    thread.start()
    try:
        return dict(own())
    finally:
        release.set()
        thread.join()


def test_own_dumps_every_thread_of_this_process_by_name_without_hpcdist_s_own_frames(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HPCDIST_DEBUG", raising=False)
    stacks = _own_with_a_waiter()
    assert stacks["MainThread"][0].startswith("_own_with_a_waiter (")  # hpcdist's capture frames left out
    assert not any("/hpcdist/" in frame for frame in stacks["MainThread"])
    assert stacks["waiter"][0].startswith("wait (") and "threading.py:" in stacks["waiter"][0]


def test_hpcdist_debug_keeps_hpcdist_s_own_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCDIST_DEBUG", "1")
    main = _own_with_a_waiter()["MainThread"]
    assert main[0].startswith("capture (") and "/hpcdist/forensics/stacks.py:" in main[0]


def test_ranks_whose_programs_finished_are_named_not_shown() -> None:
    answers = {
        0: {"phase": ("initialised", 1.0), "stacks": _stack("wait")},
        1: {"phase": ("finished", 2.0), "stacks": _stack("finish")},
        2: {"phase": ("finished", 2.0), "stacks": _stack("finish")},
    }
    found, finished = in_answers(answers)
    assert (found, finished) == ({0: _stack("wait")}, [1, 2])
    assert report(found, finished=finished).splitlines()[-1] == "ranks 1-2: finished, no stack"


def test_sigquit_finds_the_shims_under_a_launcher_that_handle_sigusr2_and_only_those() -> None:
    handles = "import faulthandler, signal, time; faulthandler.register(signal.SIGUSR2); print(1, flush=True); "
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            f"a = subprocess.Popen([sys.executable, '-c', {handles + 'time.sleep(30)'!r}, 'hpcdist.worker'])\n"
            "b = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', 'hpcdist.worker'])\n"
            "print(a.pid, b.pid, flush=True)\n"
            "time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert launcher.stdout is not None
        lines = sorted([launcher.stdout.readline(), launcher.stdout.readline()])  # "1": the handler is registered
        assert lines[0] == "1\n"
        handler, plain = map(int, lines[1].split())
        assert sorted(_descendants(launcher.pid, b"hpcdist.worker")) == sorted([handler, plain])
        assert [pid for pid in (handler, plain) if _catches(pid, signal.SIGUSR2)] == [handler]
    finally:
        for pid in _descendants(launcher.pid, b"hpcdist.worker"):
            os.kill(pid, signal.SIGKILL)
        launcher.kill()
        launcher.wait()


def test_py_spys_dump_reads_as_stacks_with_what_py_spy_saw_in_the_thread_name() -> None:
    dump = """\
Process 4320: /usr/bin/python3 train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4320 (active+gil): "MainThread"
    hold (train.py:3)
    <module> (train.py:4)
Thread 4330 (idle): "hpcdist-watchdog"
    wait (threading.py:324)
"""
    assert parse_pyspy(dump) == (("MainThread [py-spy: active+gil]", ("hold (train.py:3)", "<module> (train.py:4)")),)


SPIED = """
import os, subprocess, sys, time
sleeper = [sys.executable, "-c", "import sys, time; sys.stdout.write('up\\\\n'); sys.stdout.flush(); time.sleep(60)"]
ranks = [subprocess.Popen(sleeper, env={**os.environ, "OMPI_COMM_WORLD_RANK": str(r)}, stdout=subprocess.PIPE)
         for r in range(20)]
for rank in ranks:
    rank.stdout.readline()  # each runs its Python now
spy = [sys.executable, "-c", "from hpcdist.forensics.pyspy import spy; print(sorted(spy(list(range(20)))))"]
print(subprocess.run(spy, capture_output=True, text=True, timeout=120).stdout, end="")
for rank in ranks:
    rank.kill()
"""


def test_py_spy_reads_at_most_sixteen_ranks_of_a_host() -> None:
    """Ranks that could not answer are read by py-spy, 8 at a time and 16 at most: 64 ranks a host stay seconds."""
    done = subprocess.run([sys.executable, "-c", SPIED], capture_output=True, text=True, timeout=180)
    assert done.stdout == f"{list(range(16))}\n", done.stderr
