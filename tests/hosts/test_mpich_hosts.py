"""A lost host under MPICH across the namespace hosts: Hydra's ssh launcher with tests/hosts/agent.

mpiexec runs inside n1 with hostname n1 and starts its proxies on the other hosts through the agent
(HYDRA_LAUNCHER_EXEC, as PRRTE's plm_ssh_agent for Open MPI); the MPICH venv is tests/conftest.py's. The workloads
and a failing rank across the hosts run on MPICH as on Open MPI in test_multihost.py.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from netns_hosts import FOUR_HOSTS, Hosts

from hpcdist import proctree
from hpcdist.waits import poll_until

NP = 4
FOUR_BY_TWO = dict.fromkeys(FOUR_HOSTS, 2)  # 8 ranks, two on each of the four hosts


def assert_ended_on(cluster: Hosts, host: str) -> None:
    """What ran on `host` (Hydra's proxy, its ranks) ends with the job, within 10 s: a process may take a moment."""

    def left() -> list[int]:
        return [pid for pid in cluster.pids(host) if proctree.running(pid)]

    def explain() -> str:
        return f"still running on {host} 10 s after the job ended: {left()}"

    poll_until(lambda: not left(), time.monotonic() + 10, explain, error=AssertionError)


def test_a_lost_host_among_four_ends_the_mpich_job_at_once(cluster: Hosts, mpich_python: Path, tmp_path: Path) -> None:
    """Everything on n3 of n1..n4 (8 ranks, 2 per host) is killed: Hydra ends the job at once."""
    script = 'touch "$HPCDIST_MARKER_DIR/ready$RANK" && exec sleep 600'
    launch = cluster.on_mpich(mpich_python).launch(["--", "sh", "-c", script], tmp_path, slots=FOUR_BY_TWO)
    launch.wait_for_markers(tmp_path, "ready*", 8, 120)
    broken = time.monotonic()
    cluster.kill("n3")
    result = launch.wait(60)
    seconds = time.monotonic() - broken
    print(
        f"\nhpcdist mpirun ended {seconds:.1f} s after n3 was killed, status {result.returncode}\n"
        f"--- stderr ---\n{result.stderr}",
        file=sys.stderr,
    )
    assert result.returncode != 0, result.stderr
    # Hydra names no host: `[mpiexec@n1] control_cb (…): assert (!closed) failed`
    assert "assert (!closed) failed" in result.stderr
    assert "hpcdist: error: mpirun lost contact with a remote host (it names none)" in result.stderr
    assert seconds < 15
    assert_ended_on(cluster, "n1")


def test_a_cut_link_among_four_hosts_with_idle_ranks_ends_the_mpich_job_by_heartbeat(
    cluster: Hosts, mpich_python: Path, tmp_path: Path
) -> None:
    """Hydra has no keepalive: ranks that only sleep behind a cut link ran on for good; hpcdist's heartbeat ends it,
    naming n3 and its ranks 4 and 5 alone of 8 ranks on n1..n4."""
    script = 'touch "$HPCDIST_MARKER_DIR/ready$RANK" && exec sleep 600'
    args = ["--heartbeat-timeout", "6", "--", "sh", "-c", script]
    launch = cluster.on_mpich(mpich_python).launch(args, tmp_path, slots=FOUR_BY_TWO)
    launch.wait_for_markers(tmp_path, "ready*", 8, 120)
    broken = time.monotonic()
    cluster.link("n3", "down")
    result = launch.wait(60)
    seconds = time.monotonic() - broken
    print(
        f"\nhpcdist mpirun ended {seconds:.1f} s after n3's link was cut, status {result.returncode}\n"
        f"--- stderr ---\n{result.stderr}",
        file=sys.stderr,
    )
    assert result.returncode != 0, result.stderr
    lost = "hpcdist: host n3 lost: no heartbeat from ranks 4-5 for 6 s (check that the host is up and reachable"
    assert result.stderr.count(lost) == 1 and result.stderr.count("host n3 lost") == 1, result.stderr  # said once
    # the ranks on the other hosts, ended by hpcdist mpirun's SIGTERM, are said in one line (not each in its own)
    assert not re.search(r"rank [0-367] on n[124] failed", result.stderr), result.stderr
    assert "hpcdist: ranks 0-3,6-7 on n1, n2, n4 were ended by the launcher (killed by SIGTERM)\n" in result.stderr
    assert "hpcdist: error:" not in result.stderr and "first failure" not in result.stderr  # not again
    assert 5 <= seconds < 30  # the last beat heard came up to one interval (1 s) before the cut
    assert_ended_on(cluster, "n1")


def test_a_restart_after_a_silent_host_leaves_it_out(cluster: Hosts, mpich_python: Path, tmp_path: Path) -> None:
    """The heartbeat names the host Hydra cannot: --max-restarts runs attempt 2 on n1 alone, with 2 ranks."""
    script = (
        'touch "$HPCDIST_MARKER_DIR/ready$RANK-$HPCDIST_RESTART_COUNT" && '
        '[ "$HPCDIST_RESTART_COUNT" = 1 ] || exec sleep 600'
    )
    args = ["--heartbeat-timeout", "6", "--max-restarts", "1", "--min-np", "2", "--", "sh", "-c", script]
    launch = cluster.on_mpich(mpich_python).launch(args, tmp_path)
    launch.wait_for_markers(tmp_path, "ready*-0", NP, 120)
    cluster.link("n2", "down")
    result = launch.wait(120)
    print(f"\n--- stderr ---\n{result.stderr}", file=sys.stderr)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.glob("ready*")) == sorted(
        [*(f"ready{r}-0" for r in range(NP)), "ready0-1", "ready1-1"]
    )
    assert "(leaving out host n2, with 2 ranks instead of 4)" in result.stderr
    assert "hpcdist:   attempt 2/2: exit code 0; 2 ranks on n1:2" in result.stderr
