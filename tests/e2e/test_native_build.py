"""The compiled mpi backend's first use: one build for many ranks, a missing compiler said once, a read-only cache.

Each job gets a cache of its own ($HPCDIST_CACHE_DIR); only the first test compiles (about 30 s of CPU).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from launching import BIN, launch

pytestmark = pytest.mark.timeout(900)  # a build takes about 30 s of CPU, several times that on a loaded machine

SUM = """
import torch, torch.distributed as dist
import hpcdist
from hpcdist import mpi_backend
hpcdist.init(backend="mpi")
t = torch.full((3,), float(dist.get_rank() + 1))
dist.all_reduce(t)
print(f"rank {dist.get_rank()} native={mpi_backend.native_active()} sum={t.tolist()}")
"""
BUILDING = "hpcdist: building the native mpi backend once"
STAND_IN = "#!/bin/sh\necho 'c++: fatal error: this c++ is a stand-in that compiles nothing' >&2\nexit 1\n"


def build_key() -> str:
    """This venv's build key, as a rank computes it."""
    code = "from hpcdist.mpi_backend.building import key; print(key())"
    result = launch([sys.executable, "-c", code], timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def sums(result_stdout: str, ranks: int, native: bool) -> list[str]:
    """The ranks' lines that a correct job prints, in rank order, missing ones left out."""
    total = float(sum(range(1, ranks + 1)))
    expected = [f"rank {rank} native={native} sum=[{total}, {total}, {total}]" for rank in range(ranks)]
    return [line for line in expected if line in result_stdout.splitlines()]


def without_cxx(directory: Path) -> str:
    """A PATH with this venv's bin and everything on the current PATH but `c++` (links in `directory`)."""
    directory.mkdir()
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if not os.path.isdir(entry) or Path(entry) == BIN:
            continue
        for name in os.listdir(entry):
            if name != "c++" and not (directory / name).exists():
                (directory / name).symlink_to(Path(entry) / name)
    assert shutil.which("c++", path=str(directory)) is None
    return f"{BIN}{os.pathsep}{directory}"


def test_four_ranks_on_an_empty_cache_build_it_once_and_all_load_it_and_the_next_job_only_loads(
    hpcdist: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    argv = [hpcdist, "mpirun", "-np", "4", "--", "python", "-c", SUM]
    first = launch(argv, timeout=900, HPCDIST_MPI_NATIVE="1", HPCDIST_CACHE_DIR=str(cache))
    assert first.returncode == 0, first.stderr
    assert len(sums(first.stdout, 4, native=True)) == 4, first.stdout + first.stderr
    assert first.stderr.count(BUILDING) == 1, first.stderr  # one process built it, the other three waited
    built_in = re.findall(r"hpcdist: built the native mpi backend in \d+ s", first.stderr)
    assert len(built_in) == 1, first.stderr
    key = build_key()
    assert sorted(p.name for p in (cache / "native").iterdir()) == [key, f"{key}.lock"]  # no build left half-done
    module = cache / "native" / key / f"hpcdist_native_{key}.so"
    built = module.stat()

    second = launch(argv, timeout=600, HPCDIST_MPI_NATIVE="1", HPCDIST_CACHE_DIR=str(cache))
    assert second.returncode == 0, second.stderr
    assert len(sums(second.stdout, 4, native=True)) == 4, second.stdout + second.stderr
    assert "native mpi backend" not in second.stderr, second.stderr
    assert (module.stat().st_ino, module.stat().st_mtime_ns) == (built.st_ino, built.st_mtime_ns)


def test_without_a_compiler_the_first_job_says_so_once_and_later_jobs_retry_only_when_one_appears(
    hpcdist: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    path = without_cxx(tmp_path / "bin")
    argv = [hpcdist, "mpirun", "-np", "2", "--", "python", "-c", SUM]
    env = {"PATH": path, "CXX": "", "HPCDIST_CACHE_DIR": str(cache), "HPCDIST_MPI_NATIVE": "auto"}
    failed = cache / "native" / f"{build_key()}.failed"

    first = launch(argv, timeout=300, **env)
    assert first.returncode == 0, first.stderr
    assert len(sums(first.stdout, 2, native=False)) == 2, first.stdout + first.stderr
    said = (
        "hpcdist: the native mpi backend is unavailable, using the Python one: no C++ compiler: `c++` is not on "
        "PATH and $CXX is unset; install one (apt-get install g++) or set HPCDIST_MPI_NATIVE=0 to use the Python "
        f"backend knowingly; later jobs do not retry until the compiler, torch, Python, MPI or hpcdist changes "
        f"(recorded in {failed}: remove it to retry now)"
    )
    assert first.stderr.count(said) == 1, first.stderr
    assert "ninja" not in first.stderr and BUILDING not in first.stderr, first.stderr
    recorded = failed.stat().st_mtime_ns

    second = launch(argv, timeout=300, **env)
    assert second.returncode == 0, second.stderr
    assert len(sums(second.stdout, 2, native=False)) == 2, second.stdout + second.stderr
    assert "native mpi backend" not in second.stderr, second.stderr
    assert failed.stat().st_mtime_ns == recorded  # not retried: the record was only read

    by_hand = launch([sys.executable, "-m", "hpcdist.mpi_backend.native"], timeout=300, **env)
    assert by_hand.returncode == 2, by_hand.stderr
    assert by_hand.stderr.startswith("hpcdist: error: no C++ compiler: `c++` is not on PATH"), by_hand.stderr
    assert failed.stat().st_mtime_ns > recorded  # building it by hand retries, whatever the record says

    asked = launch(argv, timeout=300, **{**env, "HPCDIST_MPI_NATIVE": "1"})
    assert asked.returncode == 2, asked.stderr
    assert "hpcdist: error: no C++ compiler: `c++` is not on PATH and $CXX is unset; install one" in asked.stderr

    stand_in = tmp_path / "compilers" / "c++"  # a compiler appears on PATH: the build is retried, and said once more
    stand_in.parent.mkdir()
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    third = launch(argv, timeout=300, **{**env, "PATH": f"{path}{os.pathsep}{stand_in.parent}"})
    assert third.returncode == 0, third.stderr
    assert len(sums(third.stdout, 2, native=False)) == 2, third.stdout + third.stderr
    reason = f"building it with {stand_in} failed: c++: fatal error: this c++ is a stand-in that compiles nothing"
    assert third.stderr.count(f"using the Python one: {reason}; later jobs do not retry") == 1, third.stderr
    assert "ninja: build stopped" not in third.stderr, third.stderr
    assert json.loads(failed.read_text())["reason"] == reason
    assert not list((cache / "native").glob("*.tmp-*")), "the failed build's directory is removed"


def test_a_read_only_cache_with_a_prebuilt_module_loads_it(hpcdist: str, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root (as root, chmod would not stop a write)")
    key = build_key()
    prebuilt = Path(sys.prefix) / "share" / "hpcdist" / "native" / key
    assert (prebuilt / f"hpcdist_native_{key}.so").is_file(), f"`make env` builds {prebuilt}"
    shutil.copytree(prebuilt, tmp_path / "source" / "native" / key)
    cache = tmp_path / "read-only"
    cache.mkdir()
    subprocess.run(["mount", "--bind", str(tmp_path / "source"), str(cache)], check=True, timeout=30)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(cache)], check=True, timeout=30)
        with pytest.raises(OSError, match="Read-only file system"):
            (cache / "native" / "probe").touch()
        result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", "-c", SUM], timeout=300,
                        HPCDIST_MPI_NATIVE="1", HPCDIST_CACHE_DIR=str(cache))  # fmt: skip
    finally:
        subprocess.run(["umount", str(cache)], check=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert len(sums(result.stdout, 2, native=True)) == 2, result.stdout + result.stderr
    assert "native mpi backend" not in result.stderr, result.stderr


def test_a_rank_waiting_too_long_for_anothers_build_says_who_waited_for_whom_where(
    hpcdist: str, tmp_path: Path
) -> None:
    native = tmp_path / "cache" / "native"
    native.mkdir(parents=True)
    lock = native / f"{build_key()}.lock"
    lock.write_text("builder-host:4242\n")  # as a process that builds writes itself there
    with lock.open() as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", "-c", SUM], timeout=300, HPCDIST_MPI_NATIVE="1",
                        HPCDIST_CACHE_DIR=str(tmp_path / "cache"), HPCDIST_MPI_BUILD_WAIT="3")  # fmt: skip
    assert result.returncode == 2, result.stderr
    waited = r"hpcdist: error: rank [01] \(\S+:\d+\) waited 3 s for the native mpi backend's build by "
    waited += rf"builder-host:4242 in {re.escape(str(native))}; "
    assert re.search(waited, result.stderr), result.stderr
    assert not (native / lock.name.replace(".lock", "")).exists()
