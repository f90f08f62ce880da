"""Generated scripts decide where they run what depends on that machine: root, the rendezvous port, CPUs per rank.

A script written as root and one written as a user are the same bytes; the allowance Open MPI needs as root is
taken when the script runs: by `hpcdist mpirun --script`'s when `id -u` says 0, and by a batch script's step, hpcdist
mpirun, when it runs as root. `hpcdist torchrun` without a port leaves it to torchrun's --standalone.
A GPU job gets CPUs per rank and OMP_NUM_THREADS unless the user gave them.
"""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_render import check_script
from test_slurm import allocation, from_launcher, step_dry_run

import hpcdist.jobs
from hpcdist import records
from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.jobs.render import make_environment
from hpcdist.jobs.sbatch import render_sbatch
from hpcdist.jobs.sbatchspec import GPU_TASK_CPUS, SbatchSpec
from hpcdist.jobs.torchrun import TorchrunSpec, build_torchrun_argv, render_torchrun_script

JINJA = make_environment(None, {})
MPIRUN = str(Path(sys.executable).parent / "mpirun")  # the Open MPI wheel's, beside this Python
NOBODY = 65534
SBATCH_MPIRUN = ["sbatch", "--launch", "mpirun", "--mpirun", MPIRUN, "--python", sys.executable, "--", "x.py"]
MPIRUN_SCRIPT = ["mpirun", "--script", "-", "-np", "2", "--mpirun", MPIRUN, "--", "python", "x.py"]
ALLOW = 'if [ "$(id -u)" -eq 0 ]; then\n    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\nfi\n'


def _printed_as(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], uid: int, argv: list[str]) -> str:
    """What `hpcdist ARGV` prints while every uid this process could read says `uid`."""
    with monkeypatch.context() as patch:
        for name in ("getuid", "geteuid"):
            patch.setattr(os, name, lambda: uid)
        assert main(argv) == 0
    return capsys.readouterr().out


@pytest.fixture
def readable_templates(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """hpcdist's templates read, as site templates, from a copy anyone may read: the checkout's own may be closed
    to nobody (a clone in `mktemp -d`)."""
    copy = Path(tempfile.mkdtemp(prefix="hpcdist-templates-"))
    shutil.copytree(Path(hpcdist.jobs.__file__).parent / "templates", copy / "templates")
    for path in [copy, *copy.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    monkeypatch.setenv("HPCDIST_TEMPLATE_DIR", str(copy / "templates"))
    yield
    shutil.rmtree(copy)


@pytest.mark.parametrize("argv", [SBATCH_MPIRUN, MPIRUN_SCRIPT], ids=["sbatch-mpirun", "mpirun-script"])
@pytest.mark.usefixtures("readable_templates")
def test_a_script_written_as_root_is_the_one_written_as_a_user(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    as_root = _printed_as(monkeypatch, capsys, 0, argv)
    assert as_root == _printed_as(monkeypatch, capsys, 1000, argv)
    assert "--allow-run-as-root" not in as_root
    check_script(as_root, tmp_path)
    if os.geteuid() == 0:  # and really written by another user: a forked child that became nobody
        assert _printed_by_nobody(argv) == as_root
    if argv[0] == "mpirun":  # the script lets Open MPI run as root when `id -u` says 0
        assert ALLOW in as_root
    else:  # the script's step, hpcdist mpirun, does when it runs as root: its own options, run by root and by a user
        assert "OMPI_ALLOW_RUN_AS_ROOT" not in as_root
        for uid in (0, 1000):
            line = step_dry_run(as_root, sys.executable, allocation(1, 1), monkeypatch, capsys, uid=uid)
            assert from_launcher(line, MPIRUN)[:7] == [MPIRUN, "-np", "1", "--bind-to", "none", "--map-by", "slot"]
            assert ("--allow-run-as-root" in line) == (uid == 0), line


def _printed_by_nobody(argv: list[str]) -> str:
    """What `hpcdist ARGV` prints in a forked child whose uid and gid are nobody's (every module is imported
    already: this Python's own files may be closed to nobody, as a checkout in `mktemp -d` is)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 3
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            sys.stdout = open(write, "w", encoding="utf-8")  # noqa: SIM115 - flushed, then the child ends
            status = main(argv)
            sys.stdout.flush()
        finally:
            os._exit(status)
    os.close(write)
    with open(read, encoding="utf-8") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return out


def test_the_root_allowance_is_open_mpis_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mpiexec = tmp_path / "mpiexec"
    mpiexec.write_text("#!/bin/sh\nexit 0\n")
    mpiexec.chmod(0o755)
    spec = SbatchSpec(program=("x.py",), launch="mpirun", mpi="mpich", python="python", mpirun=str(mpiexec))
    text = render_sbatch(spec, JINJA)
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in text
    line = step_dry_run(text, "python", allocation(1, 1), monkeypatch, capsys, uid=0)  # the step, run by root
    assert line[:6] == ["env", "SLURM_MPI_TYPE=none", sys.executable, "-m", "hpcdist.launching.heldterm", str(mpiexec)]
    assert "--allow-run-as-root" not in line and "OMPI_ALLOW" not in " ".join(line)  # Hydra runs as root unasked
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in render_sbatch(SbatchSpec(program=("x.py",)), JINJA)  # srun: no mpirun


@pytest.mark.parametrize("uid", ["0", "1000"])
def test_the_root_allowance_follows_the_uid_the_script_runs_as(tmp_path: Path, uid: str) -> None:
    """The generated lines, run by bash with an `id` that says `uid`: the variables are set for root alone."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "id").write_text(f'#!/bin/sh\n[ "$1" = -u ] && echo {uid}\n')
    (fake / "id").chmod(0o755)
    probe = f'set -eu\n{ALLOW}echo "${{OMPI_ALLOW_RUN_AS_ROOT:-unset}} ${{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-unset}}"\n'
    env = {"PATH": f"{fake}:/usr/bin:/bin"}
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("1 1\n" if uid == "0" else "unset unset\n")


def test_a_script_written_at_a_terminal_is_the_one_written_to_a_pipe(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    piped = _printed_as(monkeypatch, capsys, 1000, MPIRUN_SCRIPT)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(MPIRUN_SCRIPT) == 0
    assert capsys.readouterr().out == piped and "-x HPCDIST_PROGRESS " in piped


@pytest.mark.parametrize("terminal", [True, False])
def test_the_script_tells_its_ranks_whether_its_output_is_a_terminal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, terminal: bool
) -> None:
    stub = tmp_path / "mpirun"
    stub.write_text('#!/bin/sh\necho "progress=$HPCDIST_PROGRESS" >"$STUB_OUT"\n')
    stub.chmod(0o755)
    assert main(["mpirun", "--script", "-", "-np", "2", "--mpirun", str(stub), "--", "python", "x.py"]) == 0
    script = check_script(capsys.readouterr().out, tmp_path)
    env = {"PATH": "/usr/bin:/bin", "STUB_OUT": str(tmp_path / "seen")}
    leader, follower = pty.openpty() if terminal else os.pipe()
    try:
        done = subprocess.run(["bash", str(script)], stdout=follower, stderr=subprocess.PIPE, env=env, timeout=60)
    finally:
        os.close(leader)
        os.close(follower)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "seen").read_text() == f"progress={int(terminal)}\n"
    env["HPCDIST_PROGRESS"] = "0"  # the user's word wins
    subprocess.run(["bash", str(script)], capture_output=True, env=env, timeout=60, check=True)
    assert (tmp_path / "seen").read_text() == "progress=0\n"


# -- the rendezvous port -----------------------------------------------------------------------------------------


def test_one_node_without_a_port_leaves_it_to_torchrun_standalone(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["torchrun", "--nproc-per-node", "2", "--", "train.py"]) == 0
    assert capsys.readouterr().out == "torchrun --nproc_per_node=2 --nnodes=1 --standalone train.py\n"
    given = build_torchrun_argv(TorchrunSpec(("train.py",), "2", master_port=29517))
    assert given == ["torchrun", "--nproc_per_node=2", "--nnodes=1", "--node_rank=0", "--master_port=29517", "train.py"]


def test_the_per_node_script_of_one_node_is_standalone_too(tmp_path: Path) -> None:
    text = render_torchrun_script(TorchrunSpec(("train.py",), "2", torchrun="echo"), {}, JINJA)
    done = subprocess.run(["bash", str(check_script(text, tmp_path))], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--standalone" in done.stdout.split() and "29500" not in text


@pytest.mark.parametrize("script", [False, True])
def test_several_nodes_need_the_port_they_all_meet_on(capsys: pytest.CaptureFixture[str], script: bool) -> None:
    argv = ["torchrun", "--nnodes", "2", "--master-addr", "n1", *(["--script"] if script else []), "--", "t.py"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("hpcdist: error: --nnodes 2 --master_addr n1 needs --master_port")
    assert "hpcdist sbatch --launch torchrun" in err


def test_the_sbatch_torchrun_script_reserves_its_port_when_it_runs() -> None:
    text = render_sbatch(SbatchSpec(program=("train.py",), launch="torchrun", python="python"), JINJA)
    assert 's.bind(("", 0))' in text and 'read -r -t 60 MASTER_PORT <&"${hpcdist_port[0]}"' in text
    assert "29500" not in text and '--master_port="$MASTER_PORT"' in text


# -- what a GPU job needs ----------------------------------------------------------------------------------------

GPU = SbatchSpec(program=("train.py",), nodes=2, gpus_per_node="a100:4", python="python", torchrun="torchrun")


def _lines(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(start)]


@pytest.mark.parametrize("launch", ["srun", "mpirun", "torchrun"])
def test_a_gpu_job_gets_cpus_per_rank_and_as_many_threads(tmp_path: Path, launch: str) -> None:
    text = check_script(render_sbatch(records.replace(GPU, launch=launch), JINJA), tmp_path).read_text()
    per_task = GPU_TASK_CPUS * (4 if launch == "torchrun" else 1)  # torchrun: one task per node, 4 workers
    assert _lines(text, "#SBATCH --cpus-per-task") == [f"#SBATCH --cpus-per-task={per_task}"]
    assert _lines(text, "export OMP_NUM_THREADS") == [f"export OMP_NUM_THREADS={GPU_TASK_CPUS}"]
    # srun no longer inherits sbatch's --cpus-per-task: the srun mode's hpcdist mpirun runs srun, which reads it from
    # SRUN_CPUS_PER_TASK; torchrun's srun is given it; mpirun's ranks are started by its own daemons
    srun_cpus = [f"export SRUN_CPUS_PER_TASK={per_task}"] if launch == "srun" else []
    assert _lines(text, "export SRUN_CPUS_PER_TASK") == srun_cpus
    if launch == "torchrun":
        assert f"--cpus-per-task={per_task} --export=ALL,HPCDIST_VERSION,OMP_NUM_THREADS" in text
    assert text.count("--cpus-per-task=") == (2 if launch == "torchrun" else 1)  # else #SBATCH's only
    assert "torch.cuda.set_device(LOCAL_RANK)" in text


def test_the_users_cpus_and_threads_win(tmp_path: Path) -> None:
    text = render_sbatch(records.replace(GPU, cpus_per_task=12, env=(("OMP_NUM_THREADS", "6"),)), JINJA)
    assert _lines(text, "#SBATCH --cpus-per-task") == ["#SBATCH --cpus-per-task=12"]
    assert _lines(text, "export OMP_NUM_THREADS") == ["export OMP_NUM_THREADS=6"]
    text = render_sbatch(records.replace(GPU, cpus_per_task=12), JINJA)
    assert _lines(text, "export OMP_NUM_THREADS") == ["export OMP_NUM_THREADS=12"]


def test_a_cpu_job_and_auto_binding_keep_slurms_and_the_shims_own() -> None:
    cpu = render_sbatch(records.replace(GPU, gpus_per_node=None), JINJA)
    assert "cpus-per-task" not in cpu and "OMP_NUM_THREADS" not in cpu and "set_device" not in cpu
    bound = render_sbatch(records.replace(GPU, bind="auto"), JINJA)  # the shim sets each rank's share
    assert "OMP_NUM_THREADS" not in bound and f"#SBATCH --cpus-per-task={GPU_TASK_CPUS}" in bound


def test_a_bad_gpu_count_is_still_refused() -> None:
    with pytest.raises(UsageError, match="--gpus-per-node 'a100:0'"):
        render_sbatch(records.replace(GPU, gpus_per_node="a100:0"), JINJA)
