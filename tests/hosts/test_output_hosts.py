"""Per-rank output across two hosts (network namespaces n1, n2), on Open MPI and MPICH: tags name each rank's
host, logs per rank."""

from __future__ import annotations

from pathlib import Path

from netns_hosts import Hosts

RANKS_ON = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}  # `n1 slots=2, n2 slots=2`, mapped by slot


def test_each_line_is_tagged_with_its_host_and_rank_and_logged_per_rank(mpi_cluster: Hosts, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    script = 'echo "out $RANK"; echo "err $RANK" >&2'
    result = mpi_cluster.launch(["--tag", "--ranks", "1-3", "--log-dir", str(logs), "--", "sh", "-c", script],
                            tmp_path).wait(180)  # fmt: skip
    assert result.returncode == 0, result.stderr
    for rank, host in RANKS_ON.items():
        shown = rank != 0
        assert (f"[{host}:{rank}] out {rank}\n" in result.stdout) is shown, result.stdout
        assert (f"[{host}:{rank}] err {rank}\n" in result.stderr) is shown, result.stderr
        assert sorted((logs / f"rank-00{rank}.log").read_text().splitlines()) == [f"err {rank}", f"out {rank}"]
