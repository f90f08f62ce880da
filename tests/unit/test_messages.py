"""The pure parts of hpcdist's messages: usage errors told once, Open MPI's help blocks, hosts that do not resolve."""

from __future__ import annotations

import pytest

from hpcdist.contract import RankContract
from hpcdist.doctor.probe import job_place, outside_the_job
from hpcdist.errors import UsageError
from hpcdist.events import Usage, encode, parse_event
from hpcdist.launching.hostnames import check_names_resolve, hostfile_line
from hpcdist.launching.options import MpirunOptions
from hpcdist.launching.output import Console, OutputOptions, OutputRouter
from hpcdist.launching.watch import MpirunWatch
from hpcdist.launching.world import World

TOKEN = "0123456789abcdef"


def test_hostfile_line_finds_both_hostfile_forms() -> None:
    text = "# hosts\nnode1 slots=2\n\nnode2:4  # second\nnode1\n"
    assert [hostfile_line(text, host) for host in ("node1", "node2", "node3")] == [2, 4, None]


def test_a_name_that_does_not_resolve_is_refused_and_a_launch_agent_skips_the_check(tmp_path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=1\nno-such-host.invalid slots=1\n")
    with pytest.raises(UsageError) as caught:
        check_names_resolve(MpirunOptions(hostfile=str(hostfile)), World())
    assert str(caught.value).startswith(f"host 'no-such-host.invalid' (from hostfile {hostfile} line 2) does not ")
    check_names_resolve(MpirunOptions(hostfile=str(hostfile), launch_agent="my-agent"), World())
    check_names_resolve(
        MpirunOptions(hosts="no-such-host.invalid:1"), World(environ={"PRTE_MCA_plm_ssh_agent": "my-agent"})
    )
    check_names_resolve(MpirunOptions(hosts="localhost:2"), World())


def test_only_the_hosts_a_selection_keeps_are_looked_up(tmp_path) -> None:
    """A host --include leaves out (or --exclude names) is never contacted, so its name need not resolve."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=3\nno-such-host.invalid slots=8\n")
    check_names_resolve(MpirunOptions(hostfile=str(hostfile), include="localhost"), World())
    check_names_resolve(MpirunOptions(hostfile=str(hostfile), exclude="no-such-host.invalid"), World())
    with pytest.raises(UsageError, match=r"host 'no-such-host.invalid' \(from hostfile .* line 2\) does not"):
        check_names_resolve(MpirunOptions(hostfile=str(hostfile), exclude="localhost"), World())


def test_a_daemon_whose_agent_failed_is_one_that_could_not_start() -> None:
    watch = MpirunWatch(family="openmpi")
    watch.feed(
        "stderr",
        b"A daemon failed to report back after being spawned. This could\n"
        b"  Local host:    n1\n  Remote host:   n2\n  Daemon exit status: 255\n",
    )
    status, message = watch.lost.verdict(255)
    assert status == 255 and message is not None
    assert message.startswith("mpirun could not start its daemon on host n2 (its launch agent, ssh unless ")
    assert "check that `ssh n2 true` works from here" in message


def test_tell_usage_writes_an_event_only_for_a_rank_of_hpcdist_mpirun(capfd) -> None:
    from hpcdist.runtime.process import RankProcess

    assert not RankProcess(RankContract(), rank=1).tell_usage("a mistake")  # no launcher listens
    assert not RankProcess(RankContract(token=TOKEN)).tell_usage("a mistake")  # no rank known
    rank = RankProcess(RankContract(token=TOKEN), rank=3)
    assert rank.tell_usage("a  mistake:\n  here") and rank.told == "a  mistake:\n  here"
    assert parse_event(capfd.readouterr().err, TOKEN) == Usage(3, "a  mistake:\n  here")


def test_the_first_usage_error_told_is_the_job_s_message_and_open_mpi_s_banners_go() -> None:
    watch = MpirunWatch(TOKEN)
    router = OutputRouter(OutputOptions(tag=False), 2)
    console = Console(watch, router)
    shown = console.feed(
        "stderr",
        f"[n1:1] {encode(Usage(1, 'first'), TOKEN)}[n1:0] {encode(Usage(0, 'second'), TOKEN)}"
        f"[n1:0] a rank's own line\n-----\n--------------------\nMPI_ABORT was invoked on rank 1\n"
        "--------------------\nmpirun's own line\n"
        "Abort(2) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 2) - process 1\n"
        "[n1:0] Abort(2) on node 0 (rank 0 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 2)\n".encode(),
    )
    assert shown == b"a rank's own line\n-----\nmpirun's own line\n"
    outcome, _ = watch.outcome(1)
    assert (outcome.status, outcome.usage) == (2, "first")


def test_after_a_usage_error_told_another_ranks_fatal_error_report_is_left_out() -> None:
    # measured on the namespace hosts: rank 0 told an unreachable rendezvous and called MPI_Abort; rank 3, on n2,
    # printed Open MPI's report of its closed socket before rank 0's own failure was heard
    watch = MpirunWatch(TOKEN)
    console = Console(watch, OutputRouter(OutputOptions(tag=False), 4))
    report = (
        "*** An error occurred in Socket closed\n*** reported by process [2810183681,3]\n*** on a NULL communicator\n"
    )
    shown = console.feed("stderr", f"[n1:0] {encode(Usage(0, 'unreachable'), TOKEN)}".encode())
    shown += console.feed("stderr", "".join(f"[n2:3] {line}\n" for line in report.splitlines()).encode())
    shown += console.feed("stderr", b"[n2:3] its own line\n")
    assert shown == b"its own line\n"


def test_an_interrupted_router_shows_the_ranks_but_not_mpirun() -> None:
    router = OutputRouter(OutputOptions(tag=True), 2)
    router.launcher_quiet = True
    assert router.feed("stderr", b"[n1:0] still here\nAbort is in progress...hit ctrl-c again\n") == (
        b"[n1:0] still here\n"
    )


def test_the_doctor_s_probes_leave_the_job_s_variables_behind() -> None:
    job = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "PATH": "/bin"}
    job |= {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    clean = outside_the_job(job)
    assert clean is not None and "RANK" not in clean and "WORLD_SIZE" not in clean
    assert clean["PATH"] == "/bin" and clean["OMPI_COMM_WORLD_RANK"] == "1"
    assert outside_the_job({"PATH": "/bin"}) is None
    assert job_place(job)[0] == 1
    rank, note = job_place({**job, "OMPI_COMM_WORLD_RANK": "0", "RANK": "0", "LOCAL_RANK": "0"})
    assert rank == 0 and note is not None and note.detail.startswith("run as rank 0 of 2 (openmpi launch)")
    assert job_place({}) == (0, None)
    assert job_place({"RANK": "3"}) == (0, None) and outside_the_job({"RANK": "3"}) is None  # stale: as if alone
