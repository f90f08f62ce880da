"""Generated scripts, run for real, decide where they run: Open MPI's root permission, torchrun's free port.

An `hpcdist sbatch --launch mpirun` script (its mpirun needs no Slurm on one node) and an `hpcdist mpirun --script`
script each run as root and as nobody, the same file; `hpcdist torchrun`'s printed line runs twice at once on this
machine, each job on a port of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from launching import BIN, ROOT

pytestmark = pytest.mark.timeout(600)

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"  # this Python may lie where nobody cannot read (e.g. under /root)
SITE = next(Path(sys.prefix, "lib").glob("python3.*/site-packages"))
RANK_SAYS = (
    'import os; print("rank", os.environ.get("RANK") or os.environ["OMPI_COMM_WORLD_RANK"], os.getuid(), '
    'os.environ.get("OMPI_ALLOW_RUN_AS_ROOT", "-"))'
)
ALLOWANCE = 'if [ "$(id -u)" -eq 0 ]; then\n    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\nfi\n'


def _printed(*argv: str) -> str:
    """What the installed `hpcdist ARGV` prints (it must succeed)."""
    done = subprocess.run([str(BIN / "hpcdist"), *argv], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _run_script(script: Path, uid: int | None) -> subprocess.CompletedProcess[str]:
    """Run `script` with bash as `uid` (None: as this process), in an environment with no root permission in it."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(script.parent), "LANG": "C.UTF-8", "PYTHONPATH": f"{ROOT}:{SITE}"}
    return subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=240, cwd=script.parent, env=env, user=uid
    )


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder anyone may read (pytest's tmp_path lies under a folder closed to other users)."""
    folder = Path(tempfile.mkdtemp(prefix="hpcdist-anyone-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("how", ["sbatch", "mpirun-script"])
def test_one_generated_mpirun_script_runs_as_root_and_as_a_user(open_folder: Path, how: str) -> None:
    folder = open_folder
    program = folder / "says.py"
    program.write_text(RANK_SAYS + "\n")
    script = folder / "job.sh"
    mpirun = ["--mpirun", str(BIN / "mpirun")]
    if how == "sbatch":
        options = ["sbatch", "--launch", "mpirun", "--ntasks-per-node", "2", "--python", SYSTEM_PYTHON, *mpirun]
    else:  # no shim: it would run in this Python; the rank is Open MPI's
        options = ["mpirun", "--script", "-", "-np", "2", "--bare", *mpirun]
    text = _printed(*options, "--", SYSTEM_PYTHON, str(program))
    assert "--allow-run-as-root" not in text
    if how == "sbatch":  # its step, hpcdist mpirun, tells Open MPI when it runs as root
        assert "OMPI_ALLOW_RUN_AS_ROOT" not in text
    else:  # the script checks who runs it
        assert ALLOWANCE in text
    script.write_text(text)
    runs = {os.geteuid(): _run_script(script, None)}
    if os.geteuid() == 0:
        runs[NOBODY] = _run_script(script, NOBODY)
    for uid, done in runs.items():
        assert done.returncode == 0, f"as uid {uid}:\n{done.stdout}{done.stderr}"
        allowed = "1" if uid == 0 and how == "mpirun-script" else "-"  # hpcdist mpirun: --allow-run-as-root
        assert sorted(done.stdout.splitlines()) == [f"rank {r} {uid} {allowed}" for r in range(2)], done.stderr
    if os.geteuid() == 0 and how == "mpirun-script":  # without the allowance Open MPI refuses root: the check works
        script.write_text(text.replace(ALLOWANCE, ""))
        done = _run_script(script, None)
        assert done.returncode != 0 and "attempt to run as root" in done.stdout + done.stderr
        assert "rank 0" not in done.stdout


# Each worker, its job's port held, says so in $HELD and waits until the 4 workers of both jobs have: the two jobs
# hold their ports at the same time.
TWO_WORKERS = textwrap.dedent("""\
    import os, sys, time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    total = torch.tensor([dist.get_rank() + 1.0])
    held = os.environ["HELD"]
    open(os.path.join(held, f"{os.environ['MASTER_PORT']}-{dist.get_rank()}"), "w").close()
    deadline = time.monotonic() + 120
    while len(os.listdir(held)) < 4:
        if time.monotonic() > deadline:
            sys.exit(f"waited 120 s for both jobs' workers to hold their ports; held: {os.listdir(held)}")
        time.sleep(0.01)
    dist.all_reduce(total)
    line = f"port {os.environ['MASTER_PORT']} sum {int(total.item())}\\n"
    os.write(1, line.encode())  # one write: the two workers share the pipe, and print's pieces could interleave
    dist.destroy_process_group()
""")


def test_the_printed_torchrun_line_runs_twice_at_once_without_a_port_clash(tmp_path: Path) -> None:
    program = tmp_path / "two_workers.py"
    program.write_text(TWO_WORKERS)
    line = _printed("torchrun", "--nproc-per-node", "2", "--torchrun", str(BIN / "torchrun"), "--", str(program))
    assert "--standalone" in line.split() and "master_port" not in line
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8", "TMPDIR": str(tmp_path)}
    (tmp_path / "held").mkdir()
    env["HELD"] = str(tmp_path / "held")
    jobs = [
        subprocess.Popen(["bash", "-c", line], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    try:
        outputs = [job.communicate(timeout=300) for job in jobs]
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
                job.wait()
    ports: set[str] = set()
    for job, (out, err) in zip(jobs, outputs, strict=True):
        assert job.returncode == 0, err
        lines = out.splitlines()
        assert len(lines) == 2 and {line.split()[3] for line in lines} == {"3"}, out  # 1 + 2 from both workers
        assert len({line.split()[1] for line in lines}) == 1  # one store per job
        ports.add(lines[0].split()[1])
    assert len(ports) == 2 and "29500" not in ports, ports
    assert sorted(path.name for path in (tmp_path / "held").iterdir()) == sorted(
        f"{p}-{r}" for p in ports for r in (0, 1)
    )
