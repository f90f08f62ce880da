"""Per-rank output end to end: real `hpcdist mpirun -np 4`, tagged whole lines, log files, rank filter, failure tail."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from launching import PROGRAMS, crowded, launch

NP = 4
LINES = 60
HOST = socket.gethostname().split(".")[0]
CHATTER = ["python", str(PROGRAMS / "chatter.py")]
FAIL_AFTER = ["python", str(PROGRAMS / "fail_after.py")]
LINE = re.compile(r"R(?P<rank>[0-9]+) L(?P<i>[0-9]+) (?P<filler>[a-z]*) end")


def _expected(rank: int) -> set[int]:
    return set(range(LINES + 1))  # LINES lines, then the last one without a newline


def _check_lines(text: str, tagged: bool) -> dict[int, list[int]]:
    """Every line of `text` is one whole line of one rank, tagged as that rank when `tagged`; rank -> its lines."""
    seen: dict[int, list[int]] = {}
    for line in text.splitlines():
        tag = ""
        if tagged:
            match = re.match(r"\[([^:\]]+):([0-9]+)\] ", line)
            assert match, f"untagged line: {line[:120]!r}"
            assert match[1] == HOST, line[:120]
            tag, line = match[2], line[match.end() :]
        whole = LINE.fullmatch(line)
        assert whole, f"a line cut or mixed with another: {line[:80]!r}...{line[-40:]!r}"
        rank = int(whole["rank"])
        assert not tagged or int(tag) == rank, f"rank {rank}'s line tagged as rank {tag}"
        assert set(whole["filler"]) <= {chr(ord("a") + rank)}, f"rank {rank}'s line holds another rank's text"
        seen.setdefault(rank, []).append(int(whole["i"]))
    return seen


def _all(result_out: str, result_err: str, tagged: bool) -> dict[int, set[int]]:
    out, err = _check_lines(result_out, tagged), _check_lines(result_err, tagged)
    return {r: set(out.get(r, [])) | set(err.get(r, [])) for r in set(out) | set(err)}


def test_every_line_arrives_whole_and_tagged_with_its_host_and_rank(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", str(NP), "--tag", "--", *CHATTER], LINES_PER_RANK=str(LINES))
    assert result.returncode == 0, result.stderr[-2000:]
    err = result.stderr.removeprefix(crowded(NP))  # the line said first for more ranks than CPUs
    assert _all(result.stdout, err, tagged=True) == {r: _expected(r) for r in range(NP)}
    assert "@@hpcdist" not in result.stdout + result.stderr


@pytest.mark.parametrize("option", ["--no-tag", None])  # untagged by default when the output is no terminal
def test_no_tag_prints_the_same_whole_lines_bare(hpcdist: str, option: str | None) -> None:
    argv = [hpcdist, "mpirun", "-np", str(NP), *([option] if option else []), "--", *CHATTER]
    result = launch(argv, LINES_PER_RANK=str(LINES))
    assert result.returncode == 0, result.stderr[-2000:]
    err = result.stderr.removeprefix(crowded(NP))
    assert _all(result.stdout, err, tagged=False) == {r: _expected(r) for r in range(NP)}


def test_ranks_selects_the_console_and_log_dir_keeps_every_rank_in_its_own_file(hpcdist: str, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    result = launch(
        [hpcdist, "mpirun", "-np", str(NP), "--tag", "--ranks", "1,3", "--log-dir", str(logs), "--", *CHATTER],
        LINES_PER_RANK=str(LINES),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    err = result.stderr.removeprefix(crowded(NP))
    assert _all(result.stdout, err, tagged=True) == {1: _expected(1), 3: _expected(3)}
    assert sorted(p.name for p in logs.iterdir()) == [f"rank-00{r}.log" for r in range(NP)]
    for rank in range(NP):
        text = (logs / f"rank-00{rank}.log").read_text()
        assert "@@hpcdist" not in text
        assert {r: set(i) for r, i in _check_lines(text, tagged=False).items()} == {rank: _expected(rank)}


def test_a_non_python_programs_lines_are_tagged_too(hpcdist: str, tmp_path: Path) -> None:
    script = 'echo "out $RANK"; echo "err $RANK" >&2; printf "no newline $RANK"'
    result = launch([hpcdist, "mpirun", "-np", "2", "--tag", "--log-dir", str(tmp_path), "--", "sh", "-c", script])
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        assert f"[{HOST}:{rank}] out {rank}\n" in result.stdout
        assert f"[{HOST}:{rank}] no newline {rank}\n" in result.stdout
        assert f"[{HOST}:{rank}] err {rank}\n" in result.stderr
        lines = (tmp_path / f"rank-00{rank}.log").read_text().splitlines()
        assert sorted(lines) == sorted([f"out {rank}", f"err {rank}", f"no newline {rank}"])


def _summary(stderr: str, header: str) -> list[str]:
    """The lines under the failure summary's `header`."""
    assert header in stderr, stderr[-3000:]
    return stderr.split(header, 1)[1].splitlines()


def test_a_failed_ranks_last_lines_are_shown_even_when_ranks_hid_it(hpcdist: str, tmp_path: Path) -> None:
    # 30 lines: before its traceback, the failed rank prints the other ranks' Python stacks (about 8 lines)
    result = launch([hpcdist, "mpirun", "-np", str(NP), "--tag", "--ranks", "0", "--tail", "30", "--", *FAIL_AFTER],
                    FAIL_RANK="2", FAIL_HOW="raise", MARKERS=str(tmp_path), timeout=120)  # fmt: skip
    assert result.returncode == 1, result.stderr
    tail = _summary(result.stderr, f"hpcdist: rank 2 on {HOST} failed (exit code 1); its last 30 lines:\n")
    assert "hpcdist: rank 2 failed; the other ranks' Python stacks" in "\n".join(tail), tail
    assert len(tail) == 30 and all(line.startswith(f"[{HOST}:2] ") for line in tail), tail
    bare = [line.removeprefix(f"[{HOST}:2] ") for line in tail]
    assert bare[-1] == "[rank 2] RuntimeError: deliberate failure on rank 2"  # its shim, heard, says no more
    assert "[rank 2] RuntimeError: deliberate failure on rank 2" in bare, result.stderr[-4000:]
    printed = [line for line in bare if line.startswith("rank 2 line ")]
    assert printed == [f"rank 2 line {i}" for i in range(50 - len(printed), 50)] and len(printed) >= 10
    # on the console before the summary: rank 0 only, and never a control line
    console = result.stdout + result.stderr.split("hpcdist: rank 2 on", 1)[0]
    assert "[" + HOST + ":0] rank 0 line 49" in console
    assert f"[{HOST}:1]" not in console and f"[{HOST}:2]" not in console and "@@hpcdist" not in result.stderr


@pytest.mark.parametrize("tail", [None, "5"])
def test_a_rank_killed_by_a_signal_still_has_its_tail_shown(hpcdist: str, tmp_path: Path, tail: str | None) -> None:
    option = ["--tail", tail] if tail else []  # and untagged (no terminal): the header names the rank
    result = launch([hpcdist, "mpirun", "-np", str(NP), "--ranks", "0", *option, "--", *FAIL_AFTER],
                    FAIL_RANK="1", FAIL_HOW="kill", MARKERS=str(tmp_path), timeout=120)  # fmt: skip
    assert result.returncode != 0, result.stderr
    count = int(tail or 20)
    lines = _summary(result.stderr, f"failed (killed by SIGKILL); its last {count} lines:\n")
    assert f"hpcdist: rank 1 on {HOST} failed (killed by SIGKILL)" in result.stderr
    assert lines == [f"rank 1 line {i}" for i in range(50 - count, 50)]


def test_a_rank_that_raises_at_once_has_its_traceback_last_in_every_summary(hpcdist: str, tmp_path: Path) -> None:
    # Its 30 lines on stdout and its traceback on stderr reach mpirun's two pipes at the same moment, in either
    # order; the summary keeps the order in which the rank wrote them, as its log file does.
    program = ["python", str(PROGRAMS / "fail_in_barrier.py")]
    header = f"hpcdist: rank 2 on {HOST} failed (exit code 1); its last 8 lines:\n"
    for run in range(5):
        logs = tmp_path / f"logs{run}"
        argv = [hpcdist, "mpirun", "-np", str(NP), "--tag", "--ranks", "0", "--log-dir", str(logs), "--tail", "8"]
        result = launch([*argv, "--", *program], FAIL_RANK="2", timeout=120)
        assert result.returncode == 1, result.stderr[-3000:]
        tail = [line.removeprefix(f"[{HOST}:2] ") for line in _summary(result.stderr, header)]
        logged = (logs / "rank-002.log").read_text().splitlines()
        assert "[rank 2] ValueError: NaN in the gradients on rank 2" in logged, logged
        assert "[rank 2] ValueError: NaN in the gradients on rank 2" in tail, f"run {run + 1} of 5: {tail}"
        assert tail == logged[-8:], f"run {run + 1} of 5: the summary {tail} is not the log's last 8 lines"
