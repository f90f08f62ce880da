"""A rank whose process is frozen (SIGSTOP, its cgroup frozen) while its tagger still beats: `hpcdist mpirun` names
it frozen, with how, within the heartbeat limit, and ends the job; under --on-failure shrink it is ended and the
others carry on. Four ranks, a 6 s limit."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from launching import PROGRAMS, ROOT, crowded, launch, wait_for

from hpcdist.rank.frozen import cgroup_mounts

pytestmark = pytest.mark.e2e

HOST = socket.gethostname().split(".")[0]
LIMIT = 6  # --heartbeat-timeout: the job ends within it and 10 s more
NP = 4


def frozen_job(hpcdist: str, markers: Path, freeze: Callable[[int], None], rank: int = 2) -> tuple[int, str]:
    """Run the 4-rank job, `freeze` `rank`'s process once every rank runs; the job's status and stderr, which must
    come within the limit and 10 s more."""
    argv = [hpcdist, "mpirun", "-np", str(NP), "--heartbeat-timeout", str(LIMIT), "--", "python"]
    argv.append(str(PROGRAMS / "frozen_target.py"))
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "MARKERS": str(markers)}
    with subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True) as job:
        try:
            wait_for(f"the {NP} ranks to run", lambda: len(list(markers.glob("pid-*"))) == NP, job=job)
            freeze(int((markers / f"pid-{rank}").read_text()))
            _, err = job.communicate(timeout=LIMIT + 10)
        finally:
            job.kill()
    return job.returncode, err


def test_a_stopped_rank_is_named_frozen_and_ends_the_job(hpcdist: str, tmp_path: Path) -> None:
    status, err = frozen_job(hpcdist, tmp_path, lambda pid: os.kill(pid, signal.SIGSTOP))
    assert (status, err) == (
        1,
        f"{crowded(NP)}hpcdist: rank 2 on {HOST} frozen: stopped (state T) for {LIMIT} s; ending the job\n"
        f"hpcdist: ranks 0-1,3 on {HOST} were ended by the launcher\n",
    )


def test_a_rank_whose_cgroup_is_frozen_is_named_frozen(hpcdist: str, tmp_path: Path) -> None:
    v2, _ = cgroup_mounts()
    assert v2 is not None and os.geteuid() == 0, "cgroup v2 is not mounted here, or this is not root"
    group = Path(v2) / f"hpcdist-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()

    def freeze(pid: int) -> None:  # the rank's process alone: its tagger, beating, stays where it is
        (group / "cgroup.procs").write_text(str(pid))
        (group / "cgroup.freeze").write_text("1")

    try:
        status, err = frozen_job(hpcdist, tmp_path, freeze)
    finally:
        (group / "cgroup.freeze").write_text("0")
        wait_for("the frozen cgroup to empty", lambda: (group / "cgroup.procs").read_text() == "", 30)
        group.rmdir()
    assert status == 1, err
    first = err.removeprefix(crowded(NP)).splitlines()[0]
    assert first == f"hpcdist: rank 2 on {HOST} frozen: in a frozen cgroup for {LIMIT} s; ending the job", err


def test_under_shrink_a_stopped_rank_is_ended_and_the_others_finish(hpcdist: str, tmp_path: Path) -> None:
    argv = [hpcdist, "mpirun", "-np", str(NP), "--on-failure", "shrink", "--heartbeat-timeout", str(LIMIT), "--"]
    result = launch([*argv, "python", str(PROGRAMS / "shrink_kill.py"), "mpi", "frozen", str(tmp_path)], timeout=150)
    assert result.returncode == 0, result.stderr
    assert (
        f"hpcdist: rank 2 on {HOST} failed (frozen: stopped (state T) for {LIMIT} s); 3 ranks carry on" in result.stderr
    ), result.stderr  # whole: pytest's own rendering cuts the middle, where an earlier loss would be named
    records = {int(path.stem[4:]): json.loads(path.read_text()) for path in tmp_path.glob("rank*.json")}
    assert sorted(records) == [0, 1, 3], result.stderr
    for record in records.values():  # the 3 survivors went on from step 3 to the last, summing their own values
        assert [step for step, _, _ in record["steps"]] == list(range(8))
        assert {(size, total) for step, size, total in record["steps"] if step >= 3} == {(3, 1.0 + 2.0 + 4.0)}


def test_a_frozen_leader_of_the_hosts_beat_leaves_its_host_seen_and_is_named_alone(
    hpcdist: str, tmp_path: Path
) -> None:
    """Rank 0's helper process speaks for the host's beats; stopped, rank 1's takes over within 2.5 beats, so only
    rank 0 (its own beat unsent) is named silent, and the host is not lost."""
    stopped: list[int] = []

    def stop_its_helper(pid: int) -> None:
        helper = int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])  # the rank's first child
        os.kill(helper, signal.SIGSTOP)
        stopped.append(helper)

    try:
        status, err = frozen_job(hpcdist, tmp_path, stop_its_helper, rank=0)
    finally:
        for helper in stopped:
            os.kill(helper, signal.SIGCONT)  # it reads its rank's pipes to their end and goes
    assert status == 1, err
    first = err.removeprefix(crowded(NP)).splitlines()[0]
    assert first == f"hpcdist: rank 0 on {HOST} silent: no heartbeat for {LIMIT} s; ending the job", err
