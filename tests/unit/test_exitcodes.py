"""Tests for hpcdist.launching.exitcodes: the launcher's exit-code report taken out of its output, put on the ranks.

How each family reads the report's lines is tests/unit/test_families.py's.
"""

from __future__ import annotations

import pytest

from hpcdist import families
from hpcdist.launching.exitcodes import ExitCodeWatch, describe_exit_codes, ranks_of

# measured: MPICH 5.0.2 in a 2-node Slurm job (rank 3 os._exit(3)); Intel MPI 2021.19 on one host
MPICH_TWO_NODES = ["[mpiexec@node1] Exit codes: [node1] 0,0", "[node2] 0,768"]
INTEL = ["[mpiexec@vm] Exit codes: [localhost:0] 137,137,3,137"]
MPICH, INTEL_MPI = families.lookup("mpich"), families.lookup("intel")


def test_ranks_fill_the_hosts_in_turn_and_must_agree_with_the_hosts_the_ranks_named() -> None:
    hosts = MPICH.exit_codes(MPICH_TWO_NODES)
    assert ranks_of(hosts, {0: "node1", 3: "node2"}) == {0: "exit code 0", 1: "exit code 0", 2: "exit code 0",
                                                         3: "exit code 3"}  # fmt: skip
    assert ranks_of(hosts, {1: "node2"}) == {}  # not filled in turn (e.g. round robin): no rank is named
    assert ranks_of(INTEL_MPI.exit_codes(INTEL), {2: "vm"})[2] == "exit code 3"  # one host: Hydra says localhost


def test_describe_exit_codes_groups_ranks() -> None:
    killed = "killed by SIGKILL"
    endings = {0: killed, 1: killed, 2: "exit code 3", 3: killed, 4: "exit code 0"}
    assert describe_exit_codes(endings) == "ranks 0-1,3 killed by SIGKILL; rank 2 exit code 3"
    assert describe_exit_codes({0: "exit code 0"}) == ""


def test_the_watch_keeps_the_block_however_the_output_is_cut() -> None:
    watch = ExitCodeWatch(MPICH)
    text = b"[rank 0] hello\n[mpiexec@node1] Exit codes: [node1] 0,0\n[node2] 0,768\n"
    shown = b"".join(watch.feed("stdout", text[at : at + 7]) for at in range(0, len(text), 7))
    shown += watch.feed("stdout", b"")
    assert watch.endings({}) == {0: "exit code 0", 1: "exit code 0", 2: "exit code 0", 3: "exit code 3"}
    assert shown == b"[rank 0] hello\n"  # hpcdist asked for the block: it is read, never shown


@pytest.mark.parametrize("cut", [1, 5, 64])
def test_the_block_is_taken_out_and_everything_else_shown(cut: int) -> None:
    watch = ExitCodeWatch(families.listening(None))
    text = (
        b"[rank 1] [0] a line\n[mpiexec@vm] Exit codes: [localhost] 0,0,0\n[rank 2] after\n"
        b"[mpiexec@] not the block\n10%|#  |\r20%|## |"
    )  # a progress bar without a line end passes at once
    shown = b"".join(watch.feed("stdout", text[at : at + cut]) for at in range(0, len(text), cut))
    assert shown == b"[rank 1] [0] a line\n[rank 2] after\n[mpiexec@] not the block\n10%|#  |\r20%|## |"
    assert watch.feed("stdout", b"") == b""
    assert watch.lines == ["[mpiexec@vm] Exit codes: [localhost] 0,0,0"]


def test_a_launcher_that_reports_no_exit_codes_has_nothing_taken_out() -> None:
    watch = ExitCodeWatch(families.lookup("openmpi"))
    text = b"[mpiexec@node1] Exit codes: [node1] 0,0\n"
    assert watch.feed("stdout", text) + watch.feed("stdout", b"") == text
    assert watch.endings({}) == {}
