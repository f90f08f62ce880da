"""`hpcdist mpirun --on-failure shrink` across the namespace hosts: a lost host ends the job (Open MPI's runtime
does), named with what to do; with --max-restarts the job goes on without it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from netns_hosts import ROOT, Hosts

SURVIVORS = str(ROOT / "tests" / "e2e" / "programs" / "survivors.py")


@pytest.mark.parametrize(
    ("how", "restarts"), [("host-killed", ["--max-restarts", "1", "--min-np", "2"]), ("link-cut", [])]
)
def test_a_lost_host_under_shrink_is_named_and_a_restart_goes_on_without_it(
    cluster: Hosts, tmp_path: Path, how: str, restarts: list[str]
) -> None:
    """Ranks 0-1 on n1, 2-3 on n2, in a loop of Allreduce; n2 dies, or its link is cut.

    PRRTE 3.0 (Open MPI 5.0.11) ends the whole job when it loses a daemon, --with-ft ulfm or not: hpcdist mpirun
    names the host and its ranks, says so, and with --max-restarts 1 --min-np 2 starts again on n1 alone.
    """
    argv = ["--on-failure", "shrink", *restarts, "--", "python", SURVIVORS, str(tmp_path), "-1", "wait"]
    launch = cluster.launch(argv, tmp_path)
    launch.wait_for_markers(tmp_path, "ready-*", 4, 180)
    broken = time.time()
    if how == "host-killed":
        cluster.kill("n2")
    else:
        cluster.link("n2", "down")
    result = launch.wait(120)
    seen = {path.name: round(float(path.read_text()) - broken, 2) for path in tmp_path.glob("seen-*")}
    print(
        f"\n{how}: the survivors saw it after {seen or 'never'} s; hpcdist mpirun ended {time.time() - broken:.1f} s "
        f"after the break, status {result.returncode}\n--- stdout ---\n{result.stdout}--- stderr ---\n{result.stderr}",
        file=sys.stderr,
    )
    err = result.stderr.replace("\0", "")
    assert "hpcdist: error: mpirun lost contact with host n2, where ranks 2-3 ran" in err, err
    # said once before the launch, as the job spans two hosts
    assert err.count("hpcdist mpirun: note: Open MPI 5.0.11's runtime ends the whole job when it loses a host") == 1
    assert "Open MPI's runtime ends the whole job when it loses a host's daemon, even under --on-failure shrink" in err
    assert "carry on (--on-failure shrink)" not in err  # no loss is said to be outlived: the job ended
    markers = {path.name: path.read_text() for path in tmp_path.glob("rank-*")}
    if restarts:
        assert result.returncode == 0, err
        assert "(leaving out host n2, with 2 ranks instead of 4)" in err
        assert markers == dict.fromkeys(("rank-0.txt", "rank-1.txt"), "2 1\n")  # attempt 2: ranks 0-1 on n1
    else:
        assert result.returncode == 1, err
