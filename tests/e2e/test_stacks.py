"""Every rank's Python stacks, grouped: from a real hang, on a signal to a running job, and when a rank fails.

tests/e2e/programs/stacks.py: rank 1 stands apart (in `elsewhere`) while ranks 0, 2 and 3 wait in an all_reduce
(in `exchange`), so the report must hold exactly two groups, rank 1's first.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from launching import BIN, PROGRAMS, ROOT, launch

PROGRAM = str(PROGRAMS / "stacks.py")
APART = f"rank 1:\n  thread MainThread:\n    elsewhere ({PROGRAM}:"
WAITING = "ranks 0,2-3:\n  thread MainThread:\n    all_reduce (torch/distributed/distributed_c10d.py:"


def grouped(text: str, headline: str) -> list[str]:
    """The report's group lines and each group's top frame's function, from its headline on."""
    lines = text[text.index(headline) :].splitlines()[1:]
    groups = [(line, lines[i + 2].split()[0]) for i, line in enumerate(lines) if line.startswith("rank")]
    return [f"{line} {top}" for line, top in groups]


@pytest.mark.parametrize(
    ("api", "backend"),
    [("init", "gloo"), ("plain", "mpi"), ("launch", "gloo")],
    ids=["init-gloo", "plain-mpi", "launch"],
)
def test_a_hang_prints_every_ranks_stacks_grouped_the_rank_apart_first(hpcdist: str, api: str, backend: str) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", "4", "--", "python", PROGRAM] if api != "launch" else [sys.executable, PROGRAM],
        timeout=150,
        API=api,
        MODE="hang",
        BACKEND=backend,
        HPCDIST_TIMEOUT="4",
    )
    assert result.returncode != 0
    assert "first divergence: rank 0 waits in all_reduce #2 while rank 1 is not in any" in result.stderr
    headline = "hpcdist: every rank's Python stacks (most recent call first; identical stacks merged):"
    assert grouped(result.stderr, headline)[:2] == ["rank 1: elsewhere", "ranks 0,2-3: all_reduce"], result.stderr
    for group in (APART, WAITING):
        assert group in result.stderr
    report = result.stderr[result.stderr.index(headline) :]
    assert f"exchange ({PROGRAM}:" in report  # the waiting ranks' own frame under torch's
    assert "hpcdist-watchdog" not in report and "_serve" not in report  # hpcdist's threads are left out


def test_a_rank_holding_the_gil_cannot_answer_and_py_spy_reads_its_stack(hpcdist: str) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", "4", "--", "python", PROGRAM],
        timeout=150,
        API="plain",
        MODE="gil",
        HPCDIST_TIMEOUT="4",
    )
    assert result.returncode != 0
    assert "  rank 1: did not answer" in result.stderr  # the ledger's report cannot name what it does
    headline = "hpcdist: every rank's Python stacks (most recent call first; identical stacks merged):"
    assert grouped(result.stderr, headline)[:2] == ["rank 1: hold_the_gil", "ranks 0,2-3: all_reduce"], result.stderr
    assert "rank 1:\n  thread MainThread [py-spy: active+gil]:\n" in result.stderr


@pytest.mark.parametrize("launcher", ["hpcdist", "mpirun", "launch"])
def test_a_failing_rank_prints_the_stacks_the_others_wait_in(hpcdist: str, launcher: str) -> None:
    """A hpcdist.init job, in its with-block, under hpcdist mpirun (the shim) and Open MPI's own mpirun; a function
    run by hpcdist.launch."""
    argv = {
        "hpcdist": [hpcdist, "mpirun", "-np", "4", "--"],
        "mpirun": [str(BIN / "mpirun"), "-np", "4", "--oversubscribe"],
        "launch": [],
    }[launcher]
    result = launch(
        [*argv, sys.executable, PROGRAM],
        timeout=150,
        API="launch" if launcher == "launch" else "init",
        MODE="fail",
        HPCDIST_TIMEOUT="600",  # longer than the launch may take: the gather must not wait for it
    )
    assert result.returncode != 0
    if launcher == "launch":  # after hpcdist.init's with-block, the peers it let go may abort before the traceback
        assert result.returncode == 1 and "RuntimeError: rank 1 gave up" in result.stderr
    headline = "hpcdist: rank 1 failed; the other ranks' Python stacks (most recent call first; identical merged):"
    assert grouped(result.stderr, headline)[:1] == ["ranks 0,2-3: all_reduce"], result.stderr


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_sigquit_to_hpcdist_mpirun_and_sigusr2_to_a_rank_print_every_ranks_stacks_and_the_job_goes_on(
    hpcdist: str, tmp_path: Path, mpi: str, request: pytest.FixtureRequest
) -> None:
    command = [hpcdist] if mpi == "openmpi" else [str(request.getfixturevalue("mpich_python")), "-m", "hpcdist"]
    go = tmp_path / "go"
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    env.update(API="plain", MODE="signal", BACKEND="gloo", GO=str(go), HPCDIST_TIMEOUT="90")
    proc = subprocess.Popen(
        [*command, "mpirun", "-np", "4", "--", "python", PROGRAM],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=lambda s=s, into=into: into.extend(s), daemon=True)
        for s, into in ((proc.stdout, out), (proc.stderr, err))
    ]
    for reader in readers:
        reader.start()
    headline = "hpcdist: SIGUSR2: every rank's Python stacks"

    def said(test: str, what: list[str], count: int = 1, seconds: float = 90) -> bool:
        """Whether `test` is in `what` `count` times within `seconds` (the job still running)."""
        deadline = time.monotonic() + seconds
        while "".join(what).count(test) < count:
            assert proc.poll() is None, f"the job ended before {test!r}: {''.join(out + err)}"
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)  # between two looks at the output
        return True

    try:
        for rank in range(4):  # past the first all_reduce: 0, 2, 3 go into the second, rank 1 into elsewhere()
            assert said(f"rank {rank} past the first\n", out), f"rank {rank} never got past the first all_reduce"
        proc.send_signal(signal.SIGQUIT)  # Ctrl-\
        assert said(headline, err), f"no {headline!r} after SIGQUIT: {''.join(out + err)}"
        pids = dict(line.split(" pid ") for line in "".join(out).splitlines() if " pid " in line)
        deadline = time.monotonic() + 90
        # one rank signalled: rank 0 asks the others. Asked again until a second report comes: asks in the quiet
        # time after a report (dumps that soon belong to it) make none
        while not said(headline, err, 2, seconds=1):
            assert time.monotonic() < deadline, f"no second {headline!r} after 90 s of SIGUSR2: {''.join(err)}"
            os.kill(int(pids["rank 2"]), signal.SIGUSR2)
        go.touch()
        assert proc.wait(60) == 0, "".join(err)
    finally:
        proc.kill()
    for reader in readers:
        reader.join(5)
    stderr = "".join(err)
    for n in range(2):
        report = stderr.split(headline)[n + 1]
        assert grouped(headline + report, headline)[:2] == ["rank 1: elsewhere", "ranks 0,2-3: all_reduce"], stderr
        assert "did not answer" not in report.split("hpcdist:")[0]
    assert sorted(line for line in "".join(out).splitlines() if line.endswith("done")) == [
        f"rank {rank} done" for rank in range(4)
    ]


def test_at_eight_ranks_a_failure_s_stacks_come_from_a_few_ranks_of_each_state(hpcdist: str, tmp_path) -> None:
    """The failed rank gathers as a hang report does: every rank's summary first, then full answers (stacks) from the
    first two and the last of the ranks in each state, so what it receives grows with the states, not the ranks. It
    fails once the others are about to enter their second all_reduce, so that they are all in one state (a rank
    still finishing its first one, on a loaded machine, is a state of its own)."""
    result = launch(
        [hpcdist, "mpirun", "-np", "8", "--", sys.executable, PROGRAM],
        timeout=180,
        API="init",
        MODE="fail",
        ENTERED=str(tmp_path),
        HPCDIST_TIMEOUT="600",
        HPCDIST_DEBUG="1",
    )
    assert result.returncode == 1, result.stderr
    headline = "hpcdist: rank 1 failed; the other ranks' Python stacks (most recent call first; identical merged):"
    assert grouped(result.stderr, headline) == ["ranks 0,2,7: all_reduce"], result.stderr
    said = "hpcdist: ranks 0,2,7 answered in full; the other 4 ranks sent a summary of their state"
    assert result.stderr.count(said) == 1, result.stderr
    # no host's leader registered with rank 1: each other rank sent it a summary directly, then three answered in full
    intake = re.search(
        r"hpcdist: rank 1 received (\d+) messages \([\d,]+ bytes\): (.*) for the other ranks' stacks", result.stderr
    )
    assert intake is not None, result.stderr
    assert intake[1] == "10" and intake[2].startswith("3 full answers") and "7 rank summaries" in intake[2], intake[0]
