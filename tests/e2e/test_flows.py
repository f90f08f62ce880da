"""What flows to hpcdist mpirun stays bounded: a rank that floods its output is held to its rate."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from launching import PROGRAMS, launch

HOST = socket.gethostname().split(".")[0]
LINES = 200_000  # 19 MB from one rank
RATE = 20_000  # bytes per second each rank may send to the launcher (a burst of 200 KB)


def test_a_flooding_rank_is_held_to_its_rate_says_so_and_its_log_keeps_every_line(hpcdist: str, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    argv = [hpcdist, "mpirun", "-np", "3", "--tag", "--log-dir", str(logs), "--", "python", str(PROGRAMS / "flood.py")]
    result = launch(argv, timeout=120, FLOOD_RANK="1", FLOOD_LINES=str(LINES), FLOOD_STATUS="3",
                    HPCDIST_OUTPUT_RATE=str(RATE))  # fmt: skip
    assert result.returncode == 3, result.stderr[-3000:]
    console = result.stdout + "\n" + result.stderr.split("\nhpcdist: first failure:", 1)[0]  # not the summary
    lines = re.findall(rf"^\[{HOST}:1\] (.*)$", console, re.MULTILINE)
    notes = [line for line in lines if line.startswith("hpcdist: this rank printed faster")]
    held = [
        re.fullmatch(
            r"hpcdist: this rank printed faster than its 20,000 bytes/s to the launcher: ([0-9,]+) lines? "
            rf"\(([0-9,]+) bytes\) not shown; every line is in {re.escape(str(logs / 'rank-001.log'))}"
            r"(?:; its last lines follow)?",
            note,
        )
        for note in notes
    ]
    assert held and all(held), notes
    # each line of the flood was shown or counted as held back (the failure is hpcdist's summary's to tell)
    assert len(lines) - len(notes) + sum(int(match[1].replace(",", "")) for match in held if match) == LINES
    flood = [line[6:13] for line in lines if line.startswith("flood ")]
    assert len(flood) * 95 <= 10 * RATE + RATE * result.seconds + 20 * 95  # the burst, the rate, its last lines
    assert flood == sorted(flood) and flood[0] == "0000000"  # the first lines, in order, then what the rate let by
    logged = (logs / "rank-001.log").read_text().splitlines()
    assert [line[6:13] for line in logged] == [f"{i:07d}" for i in range(LINES)]  # every line, and only those
    # the job still ends at once with the right summary, naming the rank
    assert f"hpcdist: first failure: rank 1 on {HOST} failed with exit code 3" in result.stderr
    assert "failed (exit code 3); its last" not in result.stderr  # shown after the note, not again in a summary
    assert f"hpcdist: each rank's whole output: {logs / 'rank-000.log'} … rank-002.log\n" in result.stderr
    assert f"[{HOST}:0] rank 0 done" in result.stdout and f"[{HOST}:2] rank 2 done" in result.stdout


def test_a_hang_at_eight_ranks_reports_the_seven_alike_as_one_group(hpcdist: str) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", "8", "--", "python", str(PROGRAMS / "hang.py")],
        timeout=400,
        HANG="collective",
        HPCDIST_TIMEOUT="15",
        BACKEND="gloo",
    )
    assert result.returncode != 0
    assert (
        "first divergence: rank 1 is in broadcast(root=1) #2 shape=[4] dtype=float32 on group world while "
        "ranks 0,2-7 are in all_reduce #2 shape=[4] dtype=float32 on group world"
    ) in result.stderr, result.stderr[-4000:]
    # rank 0 took full answers from the rank apart and from the first two and the last of the seven alike; the other
    # four sent a summary of their state, and the report says that their stacks are not shown
    assert (
        "hpcdist: ranks 0-2,7 answered in full; the other 4 ranks sent a summary of their state and are shown with "
        "the calls of a rank in the same state (only the ranks that answered in full give stacks)"
    ) in result.stderr, result.stderr[-4000:]
    stacks = result.stderr.split("hpcdist: every rank's Python stacks", 1)[1].splitlines()
    groups = [line for line in stacks if line.startswith(("rank", "ranks"))]
    assert groups[:2] == ["rank 1:", "ranks 0,2,7:"], stacks  # the rank apart first, then those alike as one
