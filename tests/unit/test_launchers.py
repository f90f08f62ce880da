"""Tests for the launcher dialects: MPICH's and Intel MPI's Hydra argv tables, and which MPI a launcher is."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcdist import __version__, families, records
from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.families.base import AppContext, MpirunSpec
from hpcdist.hosts import HostSlots
from hpcdist.launching.families import detect_family, resolve_family
from hpcdist.launching.mpirun import build_mpirun_argv
from hpcdist.launching.world import World

PROG = ("python", "train.py")
TWO = (HostSlots("n1", 2), HostSlots("n2", 2))
UNEQUAL = (HostSlots("n1", 2), HostSlots("n2", 1))
MPICH = MpirunSpec(program=PROG, np=2, mpirun="mpiexec", family="mpich")
INTEL = records.replace(MPICH, family="intel")
NO_PIN = ["-genv", "I_MPI_PIN", "0"]
CONTEXTS = (
    AppContext(HostSlots("n1", 2), 2, (("CUDA_VISIBLE_DEVICES", "0,2"),)),
    AppContext(HostSlots("n2", 1), 1, (("CUDA_VISIBLE_DEVICES", "1"),)),
)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, ["mpiexec", "-n", "2", "-bind-to", "none", *PROG]),
        ({"np": 4, "hosts": TWO}, ["mpiexec", "-n", "4", "-hosts", "n1:2,n2:2", "-bind-to", "none", *PROG]),
        ({"np": 3, "hosts": UNEQUAL}, ["mpiexec", "-n", "3", "-hosts", "n1:2,n2:1", "-bind-to", "none", *PROG]),
        ({"hostfile": "hosts.txt"}, ["mpiexec", "-n", "2", "-f", "hosts.txt", "-bind-to", "none", *PROG]),
        ({"np": None}, ["mpiexec", "-bind-to", "none", *PROG]),  # inside a Slurm allocation: Hydra's slurm kernel
        (
            {"bind_to": "core", "map_by": "socket"},
            ["mpiexec", "-n", "2", "-bind-to", "core", "-map-by", "socket", *PROG],
        ),
        # Hydra passes the whole environment by default: a bare name needs nothing, a value is -genv
        (
            {"env": (("NCCL_DEBUG", None), ("MASTER_PORT", "1234"), ("OPTS", "a=b c"), ("EMPTY", ""))},
            ["mpiexec", "-n", "2", "-bind-to", "none", "-genv", "MASTER_PORT", "1234", "-genv", "OPTS", "a=b c",
             "-genv", "EMPTY", "", *PROG],
        ),
        # Open MPI-only settings have no Hydra counterpart and change nothing
        (
            {"as_root": True, "oversubscribe": True, "keepalive": True, "skip_fabric_probe": False},
            ["mpiexec", "-n", "2", "-bind-to", "none", *PROG],
        ),
        (
            {"extra": ("-print-all-exitcodes",)},
            ["mpiexec", "-n", "2", "-bind-to", "none", "-print-all-exitcodes", *PROG],
        ),
        # hosts are global in Hydra: one list, then one context per host with its own variables
        (
            {"np": 3, "contexts": CONTEXTS},
            ["mpiexec", "-bind-to", "none", "-hosts", "n1:2,n2:1",
             "-n", "2", "-env", "CUDA_VISIBLE_DEVICES", "0,2", *PROG, ":",
             "-n", "1", "-env", "CUDA_VISIBLE_DEVICES", "1", *PROG],
        ),
    ],
)  # fmt: skip
def test_mpich_argv(changes: dict[str, Any], expected: list[str]) -> None:
    assert build_mpirun_argv(records.replace(MPICH, **changes)) == expected


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, ["mpiexec", "-n", "2", *NO_PIN, *PROG]),
        ({"np": 4, "hosts": TWO}, ["mpiexec", "-n", "4", "-hosts", "n1,n2", "-ppn", "2", *NO_PIN, *PROG]),
        ({"np": 3, "hosts": TWO}, ["mpiexec", "-n", "3", "-hosts", "n1,n2", "-ppn", "2", *NO_PIN, *PROG]),
        # Intel MPI reads `-hosts n1:2` as a host named "n1:2": unequal slots become a context per host
        (
            {"np": 3, "hosts": UNEQUAL},
            ["mpiexec", *NO_PIN, "-n", "2", "-host", "n1", *PROG, ":", "-n", "1", "-host", "n2", *PROG],
        ),
        ({"np": 2, "hosts": UNEQUAL}, ["mpiexec", *NO_PIN, "-n", "2", "-host", "n1", *PROG]),
        ({"hostfile": "hosts.txt"}, ["mpiexec", "-n", "2", "-f", "hosts.txt", *NO_PIN, *PROG]),
        ({"bind_to": "core"}, ["mpiexec", "-n", "2", "-genv", "I_MPI_PIN_DOMAIN", "core", *PROG]),
        # the user's own pinning variables win over --bind-to
        (
            {"env": (("I_MPI_PIN_DOMAIN", "numa"), ("X", None))},
            ["mpiexec", "-n", "2", "-genv", "I_MPI_PIN_DOMAIN", "numa", *PROG],
        ),
        (
            {"np": 3, "contexts": CONTEXTS},
            ["mpiexec", *NO_PIN,
             "-n", "2", "-host", "n1", "-env", "CUDA_VISIBLE_DEVICES", "0,2", *PROG, ":",
             "-n", "1", "-host", "n2", "-env", "CUDA_VISIBLE_DEVICES", "1", *PROG],
        ),
    ],
)  # fmt: skip
def test_intel_argv(changes: dict[str, Any], expected: list[str]) -> None:
    assert build_mpirun_argv(records.replace(INTEL, **changes)) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (records.replace(MPICH, mca=(("pml", "ob1"),)), "--mca is Open MPI's; mpich's settings"),
        (records.replace(INTEL, mca=(("btl", "tcp"),)), "--mca is Open MPI's; intel's settings"),
        (records.replace(INTEL, map_by="node"), "--map-by node is not Intel MPI's"),
        (records.replace(INTEL, np=4, hosts=UNEQUAL, oversubscribe=True), "-np 4 is more than the 3 slots"),
        (
            records.replace(MPICH, family="lam"),
            "no launcher for MPI 'lam'; use one of openmpi, pals, mpich, intel, mvapich, srun",
        ),
        (records.replace(MPICH, np=0), "-np must be at least 1"),
    ],
)
def test_launcher_refusals(spec: MpirunSpec, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        build_mpirun_argv(spec)


def test_every_family_builds_its_launcher_s_command_line() -> None:
    mpis = ("openmpi", "pals", "mpich", "intel", "mvapich")  # the others start ranks in a scheduler's job
    assert set(families.names()) == {*mpis, "srun", "jsrun", "flux"}
    argv = {name: build_mpirun_argv(records.replace(MPICH, family=name))[0] for name in mpis}
    assert argv == dict.fromkeys(mpis, "mpiexec")
    assert build_mpirun_argv(records.replace(MPICH, family="srun", slurm=True))[0] == "mpiexec"
    assert build_mpirun_argv(records.replace(MPICH, family="mvapich")) == build_mpirun_argv(MPICH)  # Hydra


def test_resolve_family_takes_mpi_else_the_installation_else_open_mpi(tmp_path: Path) -> None:
    folder = _install(tmp_path, "mpirun", "mpiexec.hydra", "impi_info")
    which = World(environ={"PATH": str(folder)}).which
    assert resolve_family(str(folder / "mpirun"), None, which=which) == ("intel", str(folder / "mpiexec.hydra"))
    assert resolve_family(str(folder / "mpirun"), "mpich", which=which) == ("mpich", str(folder / "mpirun"))
    assert resolve_family("/nowhere/mpirun", None, which=which) == ("openmpi", "/nowhere/mpirun")
    with pytest.raises(UsageError, match=r"^--mpi 'lam' is not an MPI hpcdist knows"):
        resolve_family("mpirun", "lam", which=which)


# -- hpcdist mpirun --mpi / detection, through the CLI (--dry-run) -----------------------------------------------


def _install(tmp_path: Path, *files: str) -> Path:
    """A fake MPI installation: executable files in tmp_path/bin; its directory."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in files:
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)
    return folder


V = f"HPCDIST_VERSION {__version__}"
PER_RUN = "-genv HPCDIST_CONTROL '<per-launch token>' -genv HPCDIST_RUN_ID '<per-launch run id>'"  # Hydra's form


def _dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["mpirun", "--dry-run", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_mpich_is_told_by_the_files_beside_its_mpiexec(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = _install(tmp_path, "mpiexec", "mpiexec.hydra", "mpichversion", "hydra_pmi_proxy")
    status, out, err = _dry_run(capsys, "--mpirun", str(folder / "mpiexec"), "-np", "2", "--", "python", "x.py")
    assert status == 0, err
    shim = f"{sys.executable} -m hpcdist.worker --"
    ours = f"-genv {V} -genv HPCDIST_HEARTBEAT 5 -genv HPCDIST_TAG numbered -genv HPCDIST_OUTPUT_RATE 4194304"
    ours += " -genv HPCDIST_MPI mpich -genv HPCDIST_SCHEDULER none"
    assert out == (
        f"{folder}/mpiexec -n 2 -hosts localhost:2 -print-all-exitcodes -bind-to none {ours} {PER_RUN} {shim} python "
        "x.py\n"
    )


def test_intel_mpis_mpirun_script_is_replaced_by_the_hydra_beside_it(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:  # fmt: skip
    folder = _install(tmp_path, "mpirun", "mpiexec", "mpiexec.hydra", "hydra_bstrap_proxy", "impi_info")
    status, out, err = _dry_run(capsys, "--mpirun", str(folder / "mpirun"), "-np", "2", "--bare", "--", "x")
    assert status == 0, err
    assert out == f"{folder}/mpiexec.hydra -n 2 -hosts localhost -ppn 2 -genv I_MPI_PIN 0 -genv {V} {PER_RUN} x\n"


def test_an_open_mpi_hostfile_reaches_hydra_as_hosts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n1 slots=2\nn2 slots=2 max_slots=4\n")
    status, out, err = _dry_run(capsys, "--mpi", "mpich", "--mpirun", "mpiexec", "--hostfile", str(hostfile),
                                "--bare", "--", "x")  # fmt: skip
    assert status == 0, err
    assert out == f"mpiexec -n 4 -hosts n1:2,n2:2 -bind-to none -genv {V} {PER_RUN} x\n"


def test_an_unknown_installation_stays_open_mpi(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = _install(tmp_path, "mpirun")
    status, out, err = _dry_run(capsys, "--mpirun", str(folder / "mpirun"), "-np", "1", "--bare", "--", "x")
    assert status == 0, err
    assert out.startswith(f"{folder}/mpirun -np 1 -H localhost:1 --bind-to none --map-by slot ")


@pytest.mark.parametrize(("argv", "message"), [
    (["--mpi", "lam", "-np", "2", "--", "x"], "hpcdist: error: --mpi 'lam' is not an MPI hpcdist knows; use one of "
                                              "openmpi, pals, mpich, intel, mvapich, srun, jsrun, flux\n"),
    (["--mpi", "mpich", "--mca", "btl", "tcp", "-np", "2", "--", "x"], "hpcdist: error: --mca is Open MPI's; mpich's "
     "settings are environment variables (MPIR_CVAR_*, FI_*, I_MPI_*): pass them with -x NAME=VALUE, or use --mpi "
     "openmpi\n"),
])  # fmt: skip
def test_bad_mpi_choices_are_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    status, out, err = _dry_run(capsys, "--mpirun", "mpiexec", *argv)
    assert (status, out, err) == (2, "", message)


def test_detect_family_follows_debians_alternatives(tmp_path: Path) -> None:
    folder = _install(tmp_path, "mpirun.mpich", "mpirun.openmpi", "ompi_info", "mpichversion")
    (folder / "mpirun").symlink_to(folder / "mpirun.mpich")  # /usr/bin/mpirun -> /etc/alternatives -> mpirun.mpich
    which = World(environ={"PATH": str(folder)}).which
    assert detect_family(str(folder / "mpirun"), which) == "mpich"
    assert detect_family("mpirun", which) == "mpich"  # a name, found on the world's PATH
    (folder / "mpirun").unlink()
    (folder / "mpirun").symlink_to(folder / "mpirun.openmpi")
    assert detect_family(str(folder / "mpirun"), which) == "openmpi"
    assert detect_family(str(tmp_path / "no-such-mpirun"), which) is None
    assert detect_family("no-such-mpirun-on-path", which) is None


AGENT = "/opt/site/agent"
NO_PMIX = ["env", "SLURM_MPI_TYPE=none"]
OPEN_MPI = records.replace(MPICH, family="openmpi", mpirun="mpirun", skip_fabric_probe=False)


@pytest.mark.parametrize(("spec", "expected"), [
    # --launch-agent: each family's way of taking the remote shell
    (records.replace(OPEN_MPI, launch_agent="ssh -x"),
     ["mpirun", "-np", "2", "--bind-to", "none", "--map-by", "slot", "--prtemca", "plm_ssh_agent", "ssh -x", *PROG]),
    (records.replace(MPICH, launch_agent=AGENT),
     ["mpiexec", "-n", "2", "-launcher", "ssh", "-launcher-exec", AGENT, "-bind-to", "none", *PROG]),
    (records.replace(INTEL, launch_agent=AGENT, hosts=TWO, np=4),
     ["mpiexec", "-n", "4", "-hosts", "n1,n2", "-ppn", "2", "-launcher", "ssh", "-launcher-exec", AGENT, *NO_PIN,
      *PROG]),
    # inside a Slurm allocation: Hydra's proxies start by srun; Open MPI's PRRTE finds Slurm by itself
    # (srun's --mpi none for the proxies: a site's MpiDefault=pmix gave the ranks PMIX_* and MPI_Init aborted)
    (records.replace(MPICH, slurm=True, np=4), [*NO_PMIX, "mpiexec", "-n", "4", "-launcher", "slurm", "-bind-to",
                                                    "none", *PROG]),
    (records.replace(INTEL, slurm=True, np=4), [*NO_PMIX, "mpiexec", "-n", "4", "-launcher", "slurm", *NO_PIN,
                                                    *PROG]),
    (records.replace(OPEN_MPI, slurm=True), ["mpirun", "-np", "2", "--bind-to", "none", "--map-by", "slot", *PROG]),
    # the agent wins over srun when both are asked for (hosts still from Slurm's kernel)
    (records.replace(MPICH, slurm=True, launch_agent=AGENT),
     ["mpiexec", "-n", "2", "-launcher", "ssh", "-launcher-exec", AGENT, "-bind-to", "none", *PROG]),
    # a run hpcdist itself watches: Hydra prints every rank's exit status for the monitor
    (records.replace(MPICH, exit_codes=True, slurm=True),
     [*NO_PMIX, "mpiexec", "-n", "2", "-print-all-exitcodes", "-launcher", "slurm", "-bind-to", "none", *PROG]),
    (records.replace(INTEL, exit_codes=True), ["mpiexec", "-n", "2", "-print-all-exitcodes", *NO_PIN, *PROG]),
    (records.replace(OPEN_MPI, exit_codes=True), ["mpirun", "-np", "2", "--bind-to", "none", "--map-by", "slot",
                                                      *PROG]),
])  # fmt: skip
def test_launch_agent_slurm_and_exit_code_argv(spec: MpirunSpec, expected: list[str]) -> None:
    assert build_mpirun_argv(spec) == expected


@pytest.mark.parametrize(("spec", "message"), [
    (records.replace(MPICH, launch_agent="ssh -p 2222"), "--launch-agent 'ssh -p 2222': mpich's Hydra runs the "
     "agent as one program (execvp of the whole text, measured), so it takes no arguments here; put the command in a "
     "script and pass the script's path"),
    (records.replace(INTEL, launch_agent="ssh -x"), "--launch-agent 'ssh -x': intel's Hydra runs the agent"),
    (records.replace(OPEN_MPI, launch_agent=" "), "--launch-agent needs a command that reaches another host, "
     "e.g. --launch-agent ssh"),
])  # fmt: skip
def test_launch_agent_refusals(spec: MpirunSpec, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        build_mpirun_argv(spec)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(("family", "expected"), [
    ("openmpi", f"mpirun -np 2 -H n1:1,n2:1 --bind-to none --map-by slot --prtemca plm_ssh_agent {AGENT} -x "
                f"HPCDIST_VERSION={__version__} -x 'HPCDIST_CONTROL=<per-launch token>' -x "
                "'HPCDIST_RUN_ID=<per-launch run id>' x\n"),
    ("mpich", f"mpirun -n 2 -hosts n1:1,n2:1 -launcher ssh -launcher-exec {AGENT} -bind-to none -genv {V} {PER_RUN} "
              "x\n"),
    ("intel", f"mpirun -n 2 -hosts n1,n2 -ppn 1 -launcher ssh -launcher-exec {AGENT} -genv I_MPI_PIN 0 -genv {V} "
              f"{PER_RUN} x\n"),
])  # fmt: skip
def test_dry_run_prints_the_launch_agent_in_each_dialect(
    capsys: pytest.CaptureFixture[str], family: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)  # no --allow-run-as-root, as for a user
    for name in [n for n in os.environ if n == "PYTHONPATH" or n.startswith(("HPCDIST_", "NCCL_", "GLOO_", "TORCH_"))]:
        monkeypatch.delenv(name)  # forwarded by -x when set (the Makefile sets HPCDIST_MPICH_VENV)
    status, out, err = _dry_run(capsys, "--mpi", family, "--mpirun", "mpirun", "-H", "n1:1,n2:1", "--launch-agent",
                                AGENT, "--bare", "--", "x")  # fmt: skip
    assert (status, err) == (0, "")
    assert out.replace("--mca btl '^ofi' ", "").replace(KEEP, "") == expected


KEEP = "--prtemca oob_tcp_keepalive_time 2 --prtemca oob_tcp_keepalive_intvl 1 --prtemca oob_tcp_keepalive_probes 3 "
