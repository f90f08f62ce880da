"""`hpcdist mpirun` across the namespace hosts (n1 to n4): workloads, rendezvous, lost hosts.

The tests taking `mpi_cluster` run on Open MPI and on MPICH (tests/hosts/conftest.py); the rest on Open MPI, or on
the MPIs their parameters name.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from netns_hosts import ADDRESSES, BIN, FOUR_HOSTS, PROGRAMS, ROOT, TWO_HOSTS, Hosts, ranks_on

NP = 4
HPCDIST = str(BIN / "hpcdist")
FAIL_PROGRAM = ROOT / "tests" / "e2e" / "programs" / "fail.py"  # rank $FAIL_RANK fails as $FAIL_HOW says
FOUR_BY_TWO = dict.fromkeys(FOUR_HOSTS, 2)  # 8 ranks, two on each of the four hosts


def _collectives(stdout: str) -> None:
    lines = set(stdout.splitlines())
    assert {f"rank {r}: received {100 + r:g} from rank 0" for r in range(1, NP)} <= lines
    assert {f"rank {r}: broadcast from rank 0 -> [42.0, 43.0, 44.0, 45.0]" for r in range(NP)} <= lines
    assert {f"rank {r}: all_reduce SUM over all ranks -> [10.0, 20.0, 30.0]" for r in range(NP)} <= lines
    assert {f"rank {r}: all_reduce SUM over new_group([0, 1]) -> [3.0, 6.0, 9.0]" for r in (0, 1)} <= lines


def _ddp(stdout: str) -> None:
    digests = {line.split()[4] for line in stdout.splitlines() if f"identical on all {NP} ranks" in line}
    count = sum(f"identical on all {NP} ranks" in line for line in stdout.splitlines())
    assert count == NP and len(digests) == 1, stdout


# A workload across the hosts is one entry: the `hpcdist run` arguments, a check of stdout, and the hosts' slots.
# The collectives run one rank on each of the four hosts (every pair of ranks over TCP), DDP two ranks on each of
# two hosts (shared memory within a host too). (Each rank's marker, written after the workload returns, is checked
# for every entry.)
WORKLOADS: dict[str, tuple[list[str], Callable[[str], None], dict[str, int]]] = {
    "collectives-gloo": (["p2p", "broadcast", "allreduce", "--backend", "gloo"], _collectives, FOUR_HOSTS),
    "collectives-mpi": (["p2p", "broadcast", "allreduce", "--backend", "mpi"], _collectives, FOUR_HOSTS),
    "ddp-gloo": (["ddp", "--epochs", "2", "--samples", "512", "--backend", "gloo"], _ddp, TWO_HOSTS),
    "ddp-mpi": (["ddp", "--epochs", "2", "--samples", "512", "--backend", "mpi"], _ddp, TWO_HOSTS),
}
# Each workload on Open MPI and MPICH, but DDP over gloo on Open MPI alone: what MPICH changes (the launch, the
# environment, the rendezvous) its collectives check at four hosts, and gloo's DDP is the same over either.
CASES = [(w, mpi) for w in sorted(WORKLOADS) for mpi in ("openmpi", "mpich") if (w, mpi) != ("ddp-gloo", "mpich")]


def _markers(directory: Path, prefix: str = "rank") -> dict[int, dict]:
    found = {}
    for path in directory.glob(f"{prefix}*"):
        found[int(path.name[len(prefix) :])] = json.loads(path.read_text())
    return found


@pytest.mark.parametrize(("workload", "mpi"), CASES)
def test_a_workload_runs_across_the_hosts(
    cluster: Hosts, tmp_path: Path, workload: str, mpi: str, request: pytest.FixtureRequest
) -> None:
    args, check, slots = WORKLOADS[workload]
    hosts = cluster if mpi == "openmpi" else cluster.on_mpich(request.getfixturevalue("mpich_python"))
    program = [sys.executable, str(PROGRAMS / "marked.py"), "-m", "hpcdist", "run", *args]
    result = hosts.launch(["--", *program], tmp_path, slots=slots, TEST_UNFORWARDED="1").wait(240)
    assert result.returncode == 0, result.stderr
    check(result.stdout)
    markers = _markers(tmp_path)
    assert sorted(markers) == list(range(NP)), result.stderr
    for rank, marker in markers.items():
        assert marker["status"] == 0, marker
        assert marker["host"] == ranks_on(slots)[rank], marker
        # never loopback when ranks span hosts: rank 0's address on the subnet the hosts share
        assert marker["master_addr"] == ADDRESSES["n1"], marker
        assert marker["gloo_ifname"] == "eth0", marker
        # the agent passes only what ssh would: under Open MPI the other hosts see just what hpcdist forwarded (it
        # still worked); Hydra passes mpiexec's whole environment to every rank (-genvall is its default)
        assert marker["unforwarded"] is (mpi == "mpich" or marker["host"] == "n1"), marker


def test_a_rank_raising_on_the_second_host_ends_the_job_and_is_named(mpi_cluster: Hosts, tmp_path: Path) -> None:
    """Rank 2 (on n2) raises after the rendezvous while the others wait in a barrier: the job ends, naming it."""
    program = ["python", str(FAIL_PROGRAM)]
    result = mpi_cluster.launch(["-x", "FAIL_RANK", "-x", "FAIL_HOW", "--", *program], tmp_path,
                                FAIL_RANK="2", FAIL_HOW="raise").wait(180)  # fmt: skip
    print(
        f"\n{mpi_cluster.mpi}: status {result.returncode} after {result.seconds:.1f} s\n--- stderr ---\n"
        f"{result.stderr}",
        file=sys.stderr,
    )
    assert result.returncode == 1, result.stderr
    assert "[rank 2] ValueError: deliberate failure on rank 2" in result.stderr
    assert "hpcdist: first failure: rank 2 on n2 failed with exit code 1" in result.stderr
    assert result.stderr.count("[rank 2] ValueError: deliberate failure on rank 2") == 1  # its traceback, once
    assert result.seconds < 60  # the others wait in a barrier: only MPI_Abort ends them


def test_a_rendezvous_other_hosts_cannot_reach_is_reported_per_host(mpi_cluster: Hosts, tmp_path: Path) -> None:
    # MASTER_ADDR=127.0.0.1 from a single-host habit: the ranks on n2 would connect to themselves.
    program = [HPCDIST, "run", "p2p", "--backend", "gloo"]
    result = mpi_cluster.launch(["-x", "MASTER_ADDR=127.0.0.1", "--", *program], tmp_path).wait(180)
    assert result.returncode != 0
    assert "hpcdist: error: rank " in result.stderr, result.stderr
    assert " on n1: the rendezvous 127.0.0.1:" in result.stderr, result.stderr
    assert "is unreachable from 1 of 2 hosts (2 of 4 ranks):" in result.stderr
    probe = "rank 2 on n2 (2 rank(s) there; no interface on its subnet) cannot reach the rendezvous 127.0.0.1:"
    assert probe in result.stderr  # one probe for the host, from its first rank
    assert "rank 3 on n2" not in result.stderr.split("unreachable from", 1)[1]
    assert "(connection refused)" in result.stderr
    assert "rank 1 on n1" not in result.stderr.split("unreachable from", 1)[1]
    assert result.seconds < 90


def _start_and_wait_until_ready(cluster: Hosts, tmp_path: Path):
    """Eight ranks, two on each of the four hosts, that have rendezvoused, each having written `readyN`, then sleep."""
    script = 'touch "$HPCDIST_MARKER_DIR/ready$RANK" && exec sleep 600'
    launch = cluster.launch(["--", "sh", "-c", script], tmp_path, slots=FOUR_BY_TWO)
    launch.wait_for_markers(tmp_path, "ready*", 8, 180)
    return launch


@pytest.mark.parametrize("how", ["host-killed", "link-cut"])
def test_a_lost_host_among_four_ends_the_job_non_zero_and_names_it(cluster: Hosts, tmp_path: Path, how: str) -> None:
    """n3 (ranks 4 and 5) of n1..n4 is lost while 8 ranks run: the job ends, naming n3 alone and its ranks, and the
    others in one line."""
    launch = _start_and_wait_until_ready(cluster, tmp_path)
    broken = time.monotonic()
    if how == "host-killed":
        cluster.kill("n3")
    else:
        cluster.link("n3", "down")
    result = launch.wait(120)
    seconds = time.monotonic() - broken
    print(
        f"\n{how}: hpcdist mpirun ended {seconds:.1f} s after the break, status {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}--- stderr ---\n{result.stderr}",
        file=sys.stderr,
    )
    assert result.returncode != 0, result.stderr  # plain mpirun returns 0 here
    # Open MPI's own report: the daemon on n3 stopped answering (noticed by TCP keepalive when the link
    # is cut), or, when everything on n3 is killed, its launch agent (ssh's stand-in) died (on stdout).
    output = result.stdout + result.stderr
    assert "PRTE has lost communication with a remote daemon" in output or "A daemon failed to report back" in output
    assert "hpcdist: error: mpirun lost contact with host n3, where ranks 4-5 ran (" in result.stderr
    for other in ("n2", "n4"):
        assert f"lost contact with host {other}" not in result.stderr, result.stderr
    # PRRTE ends the others without a word: hpcdist mpirun says so, in one line, by host
    assert "hpcdist: ranks 0-3,6-7 on n1, n2, n4 were ended by the launcher" in result.stderr
    assert seconds < (20 if how == "link-cut" else 15)


def test_a_restart_leaves_the_lost_host_out_and_runs_with_fewer_ranks(cluster: Hosts, tmp_path: Path) -> None:
    """--max-restarts 1 --min-np 2: n3 of four hosts dies while 8 ranks run; attempt 2 runs 6 ranks on the three
    hosts left and succeeds, having removed the dead daemon's session directory."""
    script = (
        'touch "$HPCDIST_MARKER_DIR/ready$RANK-$HPCDIST_RESTART_COUNT" && '
        '[ "$HPCDIST_RESTART_COUNT" = 1 ] || exec sleep 600'
    )
    args = ["--max-restarts", "1", "--min-np", "2", "--", "sh", "-c", script]
    launch = cluster.launch(args, tmp_path, slots=FOUR_BY_TWO)
    launch.wait_for_markers(tmp_path, "ready*-0", 8, 180)
    # the killed daemon's session directory, which would stop a later daemon given its pid (launching/sessions.py)
    left = [path for pid in cluster.pids("n3") if (path := Path(tempfile.gettempdir()) / f"prted.{pid}").is_dir()]
    assert len(left) == 1, cluster.pids("n3")
    cluster.kill("n3")
    result = launch.wait(120)
    print(f"\n--- stdout ---\n{result.stdout}--- stderr ---\n{result.stderr}", file=sys.stderr)
    assert result.returncode == 0, result.stderr
    assert not left[0].exists()  # removed by attempt 2's start
    assert sorted(p.name for p in tmp_path.glob("ready*")) == sorted(
        [*(f"ready{r}-0" for r in range(8)), *(f"ready{r}-1" for r in range(6))]
    )
    err = result.stderr.replace("\0", "")
    assert (
        "hpcdist: attempt 1/2 ended with exit code 1 (lost host n3); restarting in 1.0 s "
        "(leaving out host n3, with 6 ranks instead of 8)"
    ) in err
    assert "hpcdist:   attempt 2/2: exit code 0; 6 ranks on n1:2,n2:2,n4:2" in err


def test_the_doctor_checks_the_rendezvous_address_a_job_uses(cluster: Hosts, tmp_path: Path) -> None:
    """n1 has a second interface, and its hostname resolves to it; only eth0 (10.250.0.0/24) reaches n2.

    A job's rank 0 offers the address on the subnet the hosts share; the doctor's rendezvous probe runs the
    same code, so it reports that address and passes (choosing by hostname, it used to pick eth1 and fail).
    """
    cluster.second_interface("n1", "10.251.0.1")
    job = tmp_path / "job"
    job.mkdir()
    program = [sys.executable, str(PROGRAMS / "marked.py"), "-m", "hpcdist", "env"]
    result = cluster.launch(["--", *program], job).wait(240)
    assert result.returncode == 0, result.stderr
    job_addrs = {marker["master_addr"] for marker in _markers(job).values()}
    assert job_addrs == {ADDRESSES["n1"]}, result.stderr

    doctor = tmp_path / "doctor"
    doctor.mkdir()
    result = cluster.launch(["doctor", "--hostfile", str(cluster.hostfile), "--json"], doctor, doctor=True).wait(240)
    checks = json.loads(result.stdout)["checks"]
    rendezvous = [c for c in checks if c["area"] == "rendezvous"]
    assert [c["status"] for c in rendezvous] == ["pass"], checks
    assert f"rank 0's rendezvous at {ADDRESSES['n1']}:" in rendezvous[0]["detail"], rendezvous


def test_ranks_placed_round_robin_get_their_hosts_group_rank(cluster: Hosts, tmp_path: Path) -> None:
    """Open MPI's --map-by node puts ranks 0 and 2 on n1, 1 and 3 on n2: the hosts' blocks of ranks are broken,
    so the rendezvous finds each host's place through a node communicator, in order of the hosts' first ranks."""
    code = "import os, socket; print('place', os.environ['RANK'], socket.gethostname(), os.environ['GROUP_RANK'], "
    code += "os.environ['GROUP_WORLD_SIZE'])"
    result = cluster.launch(["--map-by", "node", "--", sys.executable, "-c", code], tmp_path).wait(180)
    assert result.returncode == 0, result.stderr
    places = sorted(line.split()[-4:] for line in result.stdout.splitlines() if "place " in line)
    assert places == [["0", "n1", "0", "2"], ["1", "n2", "1", "2"], ["2", "n1", "0", "2"], ["3", "n2", "1", "2"]]
