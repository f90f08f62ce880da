"""Tests for hpcdist.launching.mpirun: the mpirun argv builder and the -x forwarding list."""

from __future__ import annotations

from typing import Any

import pytest

from hpcdist import records
from hpcdist.errors import UsageError
from hpcdist.families.base import MpirunSpec
from hpcdist.hosts import HostSlots
from hpcdist.launching.hostfile import parse_hostfile, parse_hosts_arg
from hpcdist.launching.mpirun import build_mpirun_argv, env_forwards, spans_hosts

PROG = ("python", "train.py")
BASE = MpirunSpec(program=PROG, np=2)
HEAD = ["mpirun", "-np", "2"]
PLACE = ["--bind-to", "none", "--map-by", "slot"]
NO_OFI = ["--mca", "btl", "^ofi"]
# TCP keepalive on PRRTE's daemon links for jobs on several hosts (a cut link noticed in ~5 s, not ~8 min)
KEEPALIVE = [
    "--prtemca", "oob_tcp_keepalive_time", "2",
    "--prtemca", "oob_tcp_keepalive_intvl", "1",
    "--prtemca", "oob_tcp_keepalive_probes", "3",
]  # fmt: skip


def spec(**changes: Any) -> MpirunSpec:
    """BASE with `changes` applied."""
    return records.replace(BASE, **changes)


def test_seed_hostfile_example() -> None:
    hosts = parse_hostfile("ip-26-0-162-46 slots=8\nip-26-0-162-239 slots=8\n", "hostfiles/two")
    assert hosts == (HostSlots("ip-26-0-162-46", 8), HostSlots("ip-26-0-162-239", 8))
    argv = build_mpirun_argv(MpirunSpec(program=PROG, np=16, hostfile="hostfiles/two"))
    assert argv == ["mpirun", "-np", "16", "--hostfile", "hostfiles/two", *PLACE, *NO_OFI, *PROG]


def test_seed_hosts_example() -> None:
    # mpirun -np 4 -H 104.171.200.62:2,104.171.200.182:2 -x MASTER_ADDR=104.171.200.62
    #   -x MASTER_PORT=1234 -x PATH -bind-to none -map-by slot -mca pml ob1 -mca btl ^openib
    env = env_forwards({}, ["MASTER_ADDR=104.171.200.62", "MASTER_PORT=1234", "PATH"])
    argv = build_mpirun_argv(
        MpirunSpec(
            program=PROG,
            np=4,
            hosts=parse_hosts_arg("104.171.200.62:2,104.171.200.182:2"),
            env=env,
            mca=(("pml", "ob1"), ("btl", "^openib")),
            bind_to="none",
            map_by="slot",
        )
    )
    assert argv == [
        "mpirun", "-np", "4",
        "-H", "104.171.200.62:2,104.171.200.182:2",
        "--bind-to", "none", "--map-by", "slot",
        "--mca", "pml", "ob1", "--mca", "btl", "^openib,ofi",
        "-x", "MASTER_ADDR=104.171.200.62", "-x", "MASTER_PORT=1234", "-x", "PATH",
        "python", "train.py",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, [*HEAD, *PLACE, *NO_OFI, *PROG]),
        ({"hostfile": "hostfiles/localhost"}, [*HEAD, "--hostfile", "hostfiles/localhost", *PLACE, *NO_OFI, *PROG]),
        ({"hosts": (HostSlots("a", 2, 4), HostSlots("b", 1))}, [*HEAD, "-H", "a:2,b:1", *PLACE, *NO_OFI, *PROG]),
        ({"hostfile": "hf", "hosts": (HostSlots("a", 2),)}, [*HEAD, "--hostfile", "hf", *PLACE, *NO_OFI, *PROG]),
        (
            {"bind_to": "core", "map_by": "ppr:1:socket"},
            [*HEAD, "--bind-to", "core", "--map-by", "ppr:1:socket", *NO_OFI, *PROG],
        ),
        ({"oversubscribe": True}, [*HEAD, *PLACE, "--oversubscribe", *NO_OFI, *PROG]),
        ({"as_root": True}, [*HEAD, *PLACE, "--allow-run-as-root", *NO_OFI, *PROG]),
        (
            {"oversubscribe": True, "as_root": True},
            [*HEAD, *PLACE, "--oversubscribe", "--allow-run-as-root", *NO_OFI, *PROG],
        ),
        ({"skip_fabric_probe": False}, [*HEAD, *PLACE, *PROG]),
        (
            {"mca": (("pml", "ob1"), ("coll", "^hcoll"))},
            [*HEAD, *PLACE, "--mca", "pml", "ob1", "--mca", "coll", "^hcoll", *NO_OFI, *PROG],
        ),
        ({"mca": (("btl", "^openib"),)}, [*HEAD, *PLACE, "--mca", "btl", "^openib,ofi", *PROG]),
        ({"mca": (("btl", "^openib,ofi"),)}, [*HEAD, *PLACE, "--mca", "btl", "^openib,ofi", *PROG]),
        ({"mca": (("btl", "^ofi,openib"),)}, [*HEAD, *PLACE, "--mca", "btl", "^ofi,openib", *PROG]),
        ({"mca": (("btl", "^ofi"),)}, [*HEAD, *PLACE, *NO_OFI, *PROG]),
        ({"mca": (("btl", "self,tcp"),)}, [*HEAD, *PLACE, "--mca", "btl", "self,tcp", *PROG]),
        ({"mca": (("btl", "self,ofi"),)}, [*HEAD, *PLACE, "--mca", "btl", "self,ofi", *PROG]),
        (
            {"mca": (("btl", "^openib"),), "skip_fabric_probe": False},
            [*HEAD, *PLACE, "--mca", "btl", "^openib", *PROG],
        ),
        # Only the `btl` framework list is touched, not btl_* parameters.
        (
            {"mca": (("btl_tcp_if_include", "eth0"),)},
            [*HEAD, *PLACE, "--mca", "btl_tcp_if_include", "eth0", *NO_OFI, *PROG],
        ),
        (
            {"env": (("NCCL_DEBUG", None), ("MASTER_PORT", "1234"), ("EMPTY", ""))},
            [*HEAD, *PLACE, *NO_OFI, "-x", "NCCL_DEBUG", "-x", "MASTER_PORT=1234", "-x", "EMPTY=", *PROG],
        ),
        ({"env": (("OPTS", "a=b c"),)}, [*HEAD, *PLACE, *NO_OFI, "-x", "OPTS=a=b c", *PROG]),
        (
            {"extra": ("--report-bindings", "--tag-output")},
            [*HEAD, *PLACE, *NO_OFI, "--report-bindings", "--tag-output", *PROG],
        ),
        ({"mpirun": "/opt/ompi/bin/mpirun", "np": 1}, ["/opt/ompi/bin/mpirun", "-np", "1", *PLACE, *NO_OFI, *PROG]),
        ({"keepalive": True}, [*HEAD, *PLACE, *NO_OFI, *KEEPALIVE, *PROG]),
        (
            {"keepalive": True, "skip_fabric_probe": False, "env": (("X", "1"),)},
            [*HEAD, *PLACE, *KEEPALIVE, "-x", "X=1", *PROG],
        ),
    ],
)
def test_build_mpirun_argv(changes: dict[str, object], expected: list[str]) -> None:
    assert build_mpirun_argv(spec(**changes)) == expected


def test_build_mpirun_argv_full_order() -> None:
    argv = build_mpirun_argv(
        MpirunSpec(
            program=("hpcdist-shim", "--", "python", "-m", "job"),
            np=8,
            hosts=(HostSlots("n1", 4), HostSlots("n2", 4)),
            env=(("NCCL_DEBUG", None), ("X", "1")),
            mca=(("pml", "ob1"),),
            bind_to="core",
            map_by="node",
            oversubscribe=True,
            as_root=True,
            extra=("--tag-output",),
        )
    )
    assert argv == [
        "mpirun", "-np", "8", "-H", "n1:4,n2:4", "--bind-to", "core", "--map-by", "node",
        "--oversubscribe", "--allow-run-as-root",
        "--mca", "pml", "ob1", "--mca", "btl", "^ofi",
        "-x", "NCCL_DEBUG", "-x", "X=1", "--tag-output",
        "hpcdist-shim", "--", "python", "-m", "job",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("hosts", "environ", "expected"),
    [
        ((HostSlots("n1", 2), HostSlots("n2", 2)), {}, True),
        ((HostSlots("n1", 2),), {}, False),
        ((HostSlots("n1", 2), HostSlots("n1", 1)), {}, False),  # one host listed twice
        ((HostSlots("localhost", 4),), {"SLURM_JOB_NUM_NODES": "2"}, False),  # the host list wins
        ((), {"SLURM_JOB_NUM_NODES": "2"}, True),  # mpirun inside a Slurm allocation reads it itself
        ((), {"SLURM_JOB_NUM_NODES": "1"}, False),
        ((), {"SLURM_NNODES": "3"}, True),
        ((), {}, False),
    ],
)
def test_spans_hosts(hosts: tuple[HostSlots, ...], environ: dict[str, str], expected: bool) -> None:
    assert spans_hosts(hosts, environ) is expected


def test_a_two_host_job_gets_the_keepalive_settings_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    from hpcdist.cli import main

    assert main(["mpirun", "--dry-run", "--mpirun", "mpirun", "-H", "n1:2,n2:2", "--", "python", "x.py"]) == 0
    two = capsys.readouterr().out
    assert " ".join(KEEPALIVE) in two
    assert main(["mpirun", "--dry-run", "--mpirun", "mpirun", "-H", "n1:2", "--", "python", "x.py"]) == 0
    assert "--prtemca" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"np": 0}, "-np must be at least 1, got 0"),
        ({"np": -1}, "-np must be at least 1, got -1"),
        ({"program": ()}, "no program to run; put it after '--', e.g. -np 2 -- python train.py"),
        ({"env": (("1BAD", "x"),)}, "-x '1BAD': not a valid variable name;"),
        ({"env": (("A-B", None),)}, "-x 'A-B': not a valid variable name;"),
        ({"env": (("", "x"),)}, "-x '': not a valid variable name;"),
        ({"bind_to": ""}, "--bind-to needs a value such as none, core or socket"),
        ({"map_by": " "}, "--map-by needs a value such as slot, node or ppr:1:socket"),
    ],
)
def test_build_mpirun_argv_errors(changes: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as info:
        build_mpirun_argv(spec(**changes))
    assert message in str(info.value)


ENVIRON = {
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "NCCL_DEBUG": "INFO",
    "GLOO_SOCKET_IFNAME": "eth0",
    "HPCDIST_RUN_ID": "7",
    "OMP_NUM_THREADS": "1",
    "PYTHONPATH": "/src",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "PATH": "/usr/bin",
    "HOME": "/root",
    "NCCL": "not a prefix match",
    "TORCHELASTIC_RUN_ID": "no underscore after TORCH",
    "NCCL_BAD-NAME": "skipped: not a shell name",
}
AUTO = (
    ("CUDA_VISIBLE_DEVICES", None),
    ("GLOO_SOCKET_IFNAME", None),
    ("HPCDIST_RUN_ID", None),
    ("MASTER_ADDR", None),
    ("MASTER_PORT", None),
    ("NCCL_DEBUG", None),
    ("OMP_NUM_THREADS", None),
    ("PYTHONPATH", None),
    ("TORCH_DISTRIBUTED_DEBUG", None),
)


@pytest.mark.parametrize(
    ("environ", "user", "expected"),
    [
        ({}, [], ()),
        ({"PATH": "/bin", "HOME": "/root"}, [], ()),
        (ENVIRON, [], AUTO),
        (ENVIRON, ["PATH"], (*AUTO, ("PATH", None))),
        (
            {},
            ["MASTER_ADDR=104.171.200.62", "MASTER_PORT=1234", "PATH"],
            (("MASTER_ADDR", "104.171.200.62"), ("MASTER_PORT", "1234"), ("PATH", None)),
        ),
        (
            {"NCCL_DEBUG": "INFO", "MASTER_PORT": "29500", "OMP_NUM_THREADS": "1"},
            ["MASTER_PORT=1234", "B", "A=x=y", "E="],
            (
                ("NCCL_DEBUG", None),
                ("OMP_NUM_THREADS", None),
                ("MASTER_PORT", "1234"),
                ("B", None),
                ("A", "x=y"),
                ("E", ""),
            ),
        ),
        ({"NCCL_DEBUG": "INFO"}, ["NCCL_DEBUG"], (("NCCL_DEBUG", None),)),
        ({}, ["A=1", "B", "A=2"], (("A", "2"), ("B", None))),
    ],
)
def test_env_forwards(environ: dict[str, str], user: list[str], expected: tuple[tuple[str, str | None], ...]) -> None:
    assert env_forwards(environ, user) == expected


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("1ABC=2", "-x '1ABC=2': '1ABC' is not a valid variable name;"),
        ("MY-VAR", "-x 'MY-VAR': 'MY-VAR' is not a valid variable name;"),
        ("=value", "-x '=value': '' is not a valid variable name;"),
        ("", "-x '': '' is not a valid variable name;"),
        ("A B=1", "-x 'A B=1': 'A B' is not a valid variable name;"),
    ],
)
def test_env_forwards_errors(item: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        env_forwards({}, ["OK=1", item])
    assert message in str(info.value)
    assert "-x NAME or -x NAME=VALUE" in str(info.value)
