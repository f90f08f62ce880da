"""The shim's tagger in real processes: whole tagged lines, log files, event lines, a rank killed mid-way."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdist.contract import RankContract
from hpcdist.errors import UsageError
from hpcdist.events import Failed, Vanished, encode
from hpcdist.rank.tagger import start

TOKEN = "0123456789abcdef"
FAILED = encode(Failed(5, how="exit code 1"), TOKEN).rstrip("\n")  # the rank's own event line
LONG = "x" * 200_000  # three times what a pipe holds
# a "rank": starts the tagger as the shim does, then prints in every way a program can
RANK = """
import os, signal, subprocess, sys
from hpcdist.contract import RankContract
from hpcdist.events import Failed
from hpcdist.rank.tagger import start

contract = RankContract.from_environ(os.environ)
start(contract, 5, 12, "h")
print("first")
os.write(1, b"half a ")
os.write(1, b"line\\n")
print("x" * 200_000, file=sys.stderr)
contract.tell(Failed(5, how="exit code 1"))
subprocess.run(["sh", "-c", "echo child out; echo child err >&2"], check=True)
sys.stdout.write("no newline")
sys.stdout.flush()
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _rank(tmp_path: Path, how: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "HPCDIST_CONTROL": TOKEN, "HPCDIST_LOG_DIR": str(tmp_path / "logs"), **env}
    return subprocess.run([sys.executable, "-c", RANK, how], env=full, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_lines_arrive_whole_and_tagged_and_the_log_file_has_them_without_control_lines(tmp_path: Path,
                                                                                      how: str) -> None:  # fmt: skip
    done = _rank(tmp_path, how, HPCDIST_TAG="1")
    assert done.returncode == (-9 if how == "kill" else 0), done.stderr[-500:]
    assert done.stdout == "[h:5] first\n[h:5] half a line\n[h:5] child out\n[h:5] no newline\n"
    assert done.stderr == f"[h:5] {LONG}\n[h:5] {FAILED}\n[h:5] child err\n"
    log = (tmp_path / "logs" / "rank-005.log").read_text().splitlines()
    assert sorted(log) == sorted(["first", "half a line", LONG, "child out", "child err", "no newline"])
    assert FAILED not in "".join(log)


def test_numbered_tags_count_the_ranks_lines_over_both_streams(tmp_path: Path) -> None:
    done = _rank(tmp_path, "exit", HPCDIST_TAG="numbered")
    assert done.returncode == 0, done.stderr[-500:]
    tags = re.findall(r"^\[h:5:([0-9]+)\] ", done.stdout + done.stderr, re.MULTILINE)
    assert sorted(map(int, tags)) == list(range(1, 8))  # 4 lines on stdout, 3 on stderr (an event line too)
    out = re.findall(r"^\[h:5:([0-9]+)\] (.*)$", done.stdout, re.MULTILINE)
    assert [text for _, text in out] == ["first", "half a line", "child out", "no newline"]
    assert [int(n) for n, _ in out] == sorted(int(n) for n, _ in out)
    assert (tmp_path / "logs" / "rank-005.log").read_text().splitlines()[0] == "first"  # the log is not numbered


def test_a_rank_left_out_by_hpcdist_ranks_still_logs_and_still_sends_its_events(tmp_path: Path) -> None:
    done = _rank(tmp_path, "exit", HPCDIST_RANKS="0-4,6")
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout == "" and done.stderr == f"{FAILED}\n"  # untagged: no TAG=1
    assert len((tmp_path / "logs" / "rank-005.log").read_text().splitlines()) == 6


def test_nothing_asked_nothing_started() -> None:
    assert start(RankContract(), 0, 2, "h") is None


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"HPCDIST_TAG": "yes"}, "HPCDIST_TAG='yes': set it to 1 (prefix each line with [host:rank]) or 0"),
        ({"HPCDIST_RANKS": "0,12"}, "HPCDIST_RANKS '0,12': rank 12 does not exist in a job of 12 ranks"),
        ({"HPCDIST_LOG_DIR": "/proc/no/such"}, "cannot write the log file '/proc/no/such/rank-005.log'"),
    ],
)
def test_bad_settings_are_usage_errors(environ: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        start(RankContract.from_environ(environ), 5, 12, "h")
    assert message in str(raised.value)


def test_a_restart_appends_to_the_log_of_the_failed_attempt(tmp_path: Path) -> None:
    """The first attempt starts the file anew; a restart keeps the failed attempt's lines and marks where it begins."""
    for count in ("0", "1"):
        done = _rank(tmp_path, "exit", HPCDIST_RESTART_COUNT=count)
        assert done.returncode == 0, done.stderr[-500:]
    log = (tmp_path / "logs" / "rank-005.log").read_text().splitlines()
    assert log.count("first") == 2 and log.index("hpcdist: attempt 2 (HPCDIST_RESTART_COUNT=1) starts here") == 6
    done = _rank(tmp_path, "exit", HPCDIST_RESTART_COUNT="0")  # a new job: the file starts anew
    assert (tmp_path / "logs" / "rank-005.log").read_text().splitlines().count("first") == 1


BAR = """
import os, sys
from hpcdist.contract import RankContract
from hpcdist.rank.tagger import start

start(RankContract.from_environ(os.environ), 2, 4, "h")
for part in ("\\r 10%|#", "\\r 50%|#####", "\\r100%|##########"):
    os.write(2, part.encode())
os.write(2, b"\\n")
os.write(1, b"windows line\\r\\n")
"""


def test_a_progress_bar_is_redrawn_at_once_tagged_and_only_its_last_state_is_logged(tmp_path: Path) -> None:
    """tqdm redraws its bar with \\r: each redraw reaches the console tagged (not held to the newline), the log
    keeps the finished bar, and \\r\\n is one line end."""
    full = {**os.environ, "HPCDIST_TAG": "1", "HPCDIST_LOG_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", BAR], env=full, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"[h:2]  10%|#\r[h:2]  50%|#####\r[h:2] 100%|##########\n"
    assert done.stdout == b"[h:2] windows line\n"
    log = (tmp_path / "rank-002.log").read_bytes()
    assert sorted(log.splitlines(keepends=True)) == [b"100%|##########\n", b"windows line\n"]  # two pipes: any order


SAYS = """
import os, signal, sys
from hpcdist.contract import RankContract
from hpcdist.events import Done, Failed
from hpcdist.rank.tagger import start

contract = RankContract.from_environ(os.environ)
tagger = start(contract, 5, 12, "h")
print("working")
how = sys.argv[1]
if how == "done":
    contract.tell(Done(5))
if how == "drain":
    contract.tell(Failed(5, how="exit code 1"))
    tagger.drain()
    os.write(2, b"after the drain\\n")  # the rank's own stderr again: untagged, after every tagged line
    sys.exit(0)
os.kill(os.getpid(), signal.SIGKILL) if how in ("kill", "done") else os._exit(3)
"""


@pytest.mark.parametrize(("how", "vanished"), [("kill", True), ("exit", True), ("done", False)])
def test_a_rank_that_ends_without_a_word_is_reported_vanished_by_its_tagger(how: str, vanished: bool) -> None:
    done = subprocess.run([sys.executable, "-c", SAYS, how], env={**os.environ, "HPCDIST_CONTROL": TOKEN,
                          "HPCDIST_TAG": "1"}, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.stdout == "[h:5] working\n"
    assert done.stderr.endswith(encode(Vanished(5, host="h"), TOKEN)) is vanished, done.stderr


def test_without_a_token_the_tagger_reports_nothing() -> None:
    done = subprocess.run([sys.executable, "-c", SAYS, "kill"], env={**os.environ, "HPCDIST_TAG": "1"},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.stdout == "[h:5] working\n" and done.stderr == ""


def test_drain_hands_back_the_ranks_own_output_after_the_tagger_wrote_everything() -> None:
    done = subprocess.run([sys.executable, "-c", SAYS, "drain"], env={**os.environ, "HPCDIST_CONTROL": TOKEN,
                          "HPCDIST_TAG": "1"}, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout == "[h:5] working\n"
    assert done.stderr == f"[h:5] {FAILED}\nafter the drain\n"
