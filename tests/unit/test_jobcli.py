"""The job-generation CLI in-process: exact output, files, submit, env handling, and every bad input as exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.jobs.examples import main as examples_main
from hpcdist.jobs.profiles import env_warnings, job_environment, parse_env_file

ROOT = Path(__file__).resolve().parents[2]
SEED_NCCL = """
export NCCL_SOCKET_IFNAME=eth0  # 替换为你的网络接口名称，例如 eth0, enp0s3
export NCCL_DEBUG=INFO          # 启用 NCCL 调试信息（可选）
export NCCL_IB_DISABLE=0        # 如果使用 InfiniBand，启用此项（可选）
export OMP_NUM_THREADS=4        # 限制线程数以避免资源争抢（可选）

export MASTER_ADDR="主节点IP地址"
"""


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Slurm or template variables from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith(("SLURM_", "HPCDIST_")):
            monkeypatch.delenv(name)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """main(argv) -> (status, stdout, stderr)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_hostfile_from_a_nodelist(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "hostfile", "--nodelist", "node[01-04],gpu7", "--slots", "8")
    assert status == 0
    assert out.splitlines()[1:] == [f"{h} slots=8" for h in ("node01", "node02", "node03", "node04", "gpu7")]


def test_hostfile_from_hosts_in_mpich_form_to_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "hosts"
    assert run(capsys, "hostfile", "--hosts", "a,b", "--slots", "8", "--format", "mpich", "--write", str(target)) == (
        0,
        "",
        "",
    )
    assert target.read_text().splitlines()[1:] == ["a:8", "b:8"]


def test_hostfile_from_the_allocation(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[1-2]")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "8,4")
    assert run(capsys, "hostfile")[1].splitlines()[1:] == ["gpu1 slots=8", "gpu2 slots=4"]


def test_sbatch_prints_and_writes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = [
        "sbatch",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--time",
        "1-00:00",
        "--python",
        "/venv/bin/python",
        "--no-opal-prefix",
        "--profile",
        "nccl",
        "--",
        "python",
        "train.py",
    ]
    status, out, err = run(capsys, *argv)
    assert status == 0 and err == "" and out.startswith("#!/bin/bash\n")
    assert "export NCCL_SOCKET_IFNAME='^lo,docker0'\n" in out
    assert out.endswith("\n/venv/bin/python -m hpcdist mpirun -np 16 --mpi srun -- \\\n    python train.py\n")
    script = tmp_path / "job.sbatch"
    assert run(capsys, *argv[:1], "--write", str(script), *argv[1:]) == (0, "", "")
    assert script.read_text() == out and os.access(script, os.X_OK)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    status, _, err = run(capsys, *argv[:1], "--submit", *argv[1:])
    assert (status, err) == (
        2,
        "hpcdist: error: sbatch not found on PATH; submit from a Slurm login node, or drop --submit to write the "
        "script only\n",
    )


def test_environment_precedence_and_the_seed_env_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env_file = tmp_path / "nccl.env"
    env_file.write_text(SEED_NCCL)
    status, out, err = run(
        capsys,
        "sbatch",
        "--python",
        "py",
        "--no-opal-prefix",
        "--profile",
        "nccl-debug",
        "--env-file",
        str(env_file),
        "--nccl-debug",
        "WARN",
        "--env",
        "OMP_NUM_THREADS=2",
        "--env",
        "X=a b",
        "--",
        "prog",
    )
    assert status == 0, err
    exports = [line for line in out.splitlines() if line.startswith("export ")]
    assert exports == [  # hpcdist mpirun, the step, hands the ranks HPCDIST_VERSION and the rest of the contract
        "export MASTER_ADDR='主节点IP地址'",
        "export NCCL_DEBUG=WARN",
        "export NCCL_DEBUG_SUBSYS=INIT,NET",
        "export NCCL_IB_DISABLE=0",
        "export NCCL_SOCKET_IFNAME=eth0",
        "export OMP_NUM_THREADS=2",
        "export TORCH_DISTRIBUTED_DEBUG=DETAIL",
        "export X='a b'",
    ]


def test_env_file_lines() -> None:
    assert parse_env_file(SEED_NCCL, "f")[0] == ("NCCL_SOCKET_IFNAME", "eth0")
    assert parse_env_file("A='x y' # c\nB=\nexport C=\"$HOME\"\n", "f") == [("A", "x y"), ("B", ""), ("C", "$HOME")]
    for bad, where in (("A=x y", "f:1"), ("\nnoequals", "f:2"), ("1A=x", "f:1"), ("A='open", "f:1")):
        with pytest.raises(UsageError, match=where):
            parse_env_file(bad, "f")


@pytest.mark.parametrize(
    ("env", "nodes", "needle"),
    [
        ({"NCCL_SOCKET_IFNAME": "^docker0"}, 2, "excludes docker0 but not lo"),
        ({"NCCL_SOCKET_IFNAME": "lo"}, 2, "loopback"),
        ({"GLOO_SOCKET_IFNAME": "^lo"}, 1, "no '^' exclusion"),
        ({"NCCL_TOPO_FILE": "topo.xml"}, 1, "relative path"),
        ({"NCCL_P2P_DISABLE": "1"}, 1, "peer-to-peer"),
    ],
)
def test_known_traps_warn(env: dict[str, str], nodes: int, needle: str) -> None:
    assert any(needle in w for w in env_warnings(env, nodes))


def test_good_settings_do_not_warn(capsys: pytest.CaptureFixture[str]) -> None:
    assert env_warnings(job_environment("nccl"), 4) == [] and env_warnings({"NCCL_SOCKET_IFNAME": "eth0"}, 4) == []
    status, _, err = run(capsys, "sbatch", "--nccl-socket-ifname", "^docker0", "--nodes", "2", "--", "x")
    assert status == 0 and err.startswith("hpcdist: warning: NCCL_SOCKET_IFNAME=^docker0 excludes docker0 but not lo")


def test_torchrun_prints_the_seed_command(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys,
        "torchrun",
        "--nproc_per_node=2",
        "--nnodes=2",
        "--node_rank=0",
        "--master_addr=104.171.200.62",
        "--master_port=1234",
        "--",
        "main.py",
        "--backend=nccl",
    )
    assert (status, out) == (
        0,
        "torchrun --nproc_per_node=2 --nnodes=2 --node_rank=0 --master_addr=104.171.200.62 "
        "--master_port=1234 main.py --backend=nccl\n",
    )
    status, out, _ = run(capsys, "torchrun", "--nproc-per-node", "2", "--env", "NCCL_DEBUG=INFO", "--", "t.py")
    assert out == "NCCL_DEBUG=INFO torchrun --nproc_per_node=2 --nnodes=1 --standalone t.py\n"
    argv = ["torchrun", "--script", "--nnodes", "2", "--master_addr", "n1", "--master_port", "29517", "--", "t.py"]
    status, out, _ = run(capsys, *argv)
    assert status == 0 and out.startswith("#!/bin/bash\n") and '--node_rank="$node_rank"' in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["sbatch", "--bogus", "--", "x"],
            "unknown option --bogus for `hpcdist sbatch`; see `hpcdist sbatch --help` for its options",
        ),
        (["sbatch", "--nodes", "0", "--", "x"], "--nodes must be at least 1, got 0; e.g. --nodes 1"),
        (["sbatch", "--ntasks-per-node", "-2", "--", "x"], "--ntasks-per-node"),
        (["sbatch", "--cpus-per-task", "zero", "--", "x"], "--cpus-per-task"),
        (["sbatch", "--time", "25:00:00:00", "--", "x"], "--time '25:00:00:00' is not a Slurm time"),
        (["sbatch", "--mem", "8 GB", "--", "x"], "--mem"),
        (["sbatch", "--nodelist", "n[1-", "--", "x"], "not a valid Slurm nodelist"),
        (["sbatch", "--job-name", "a\nb", "--", "x"], "--job-name: #SBATCH value"),
        (["sbatch", "--env", "NOEQUALS", "--", "x"], "expected NAME=VALUE"),
        (["sbatch", "--env", "1X=y", "--", "x"], "not a valid environment variable name"),
        (["sbatch", "--env-file", "/no/such/file", "--", "x"], "cannot read env file"),
        (["sbatch", "--requeue-signal", "USR1@90", "--", "x"], "--requeue-signal needs --requeue"),
        (["sbatch", "--requeue", "--requeue-signal", "KILL@9", "--", "x"], "--requeue-signal 'KILL@9'"),
        (["sbatch", "--launch", "ssh", "--", "x"], "--launch"),
        (["sbatch", "--template-dir", "/no/such/dir", "--", "x"], "is not a directory"),
        (["sbatch", "--"], "no program given"),
        (["hostfile", "--nodelist", "node[01-04", "--slots", "8"], "unbalanced"),
        (["hostfile", "--hosts", "a,b", "--nodelist", "c"], "not both"),
        (["hostfile", "--hosts", "a,,b"], "expected host names"),
        (["hostfile", "--hosts", "a,a"], "listed twice"),
        (["hostfile", "--slots", "0", "--hosts", "a"], "--slots"),
        (["hostfile"], "not inside a Slurm allocation"),
        (["hostfile", "--hosts", "a", "--format", "lam"], "unknown value 'lam'; choose one of openmpi, mpich"),
        (["torchrun", "--nnodes", "2", "--", "t.py"], "needs --master_addr"),
        (["torchrun", "--node_rank", "-1", "--", "t.py"], "--node-rank '-1' is not a whole number"),
        (["torchrun", "--nnodes", "2", "--node_rank", "2", "--master_addr", "a", "--", "t.py"], "out of range"),
    ],
)
def test_bad_input_is_a_usage_error(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == "" and err.startswith("hpcdist: error: ") and message in err
    assert "Traceback" not in err


def test_template_mistakes_are_usage_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sbatch.sh.j2").write_text("#!/bin/bash\n{{ site_qos }}\n")
    monkeypatch.setenv("HPCDIST_TEMPLATE_DIR", str(tmp_path))
    status, _, err = run(capsys, "sbatch", "--", "x")
    assert status == 2 and f"template {tmp_path / 'sbatch.sh.j2'}:2: 'site_qos' is undefined" in err
    (tmp_path / "sbatch.sh.j2").write_text("{% include 'site_missing.j2' %}\n")
    status, _, err = run(capsys, "sbatch", "--", "x")
    assert status == 2 and "template 'site_missing.j2' not found in " + str(tmp_path) in err


def test_the_examples_module_checks_the_repository(capsys: pytest.CaptureFixture[str]) -> None:
    assert examples_main([str(ROOT)]) == 0
    assert capsys.readouterr() == ("", "")


def test_rendering_never_imports_torch(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom hpcdist.cli import main\n"
        "for argv in (['sbatch', '--launch', 'torchrun', '--nodes', '2', '--', 'python', 't.py'],\n"
        "             ['sbatch', '--launch', 'mpirun', '--', 'x'], ['hostfile', '--hosts', 'a'],\n"
        "             ['torchrun', '--script', '--', 't.py']):\n"
        "    assert main(argv) == 0, argv\n"
        "from hpcdist.jobs.examples import main as examples\nassert examples([sys.argv[1]]) == 0\n"
        "from hpcdist.jobs.render import render_mpirun_script\nrender_mpirun_script(['mpirun', 'x'], {})\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'mpi4py', 'numpy'))\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr


def test_help_and_dry_runs_load_only_what_they_print(tmp_path: Path) -> None:
    # Start-up time of text-only commands is mostly imports: --help loads no template engine, no runtime and no
    # launcher machinery; the dry runs load what they print and nothing that starts processes.
    code = (
        "import contextlib, io, sys\nfrom hpcdist.cli import main\n"
        "argv, banned = sys.argv[1:-1], sys.argv[-1].split(',')\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        status = main(argv)\n    except SystemExit as exc:\n        status = exc.code\n"
        "assert status == 0, (argv, status)\n"
        "print(sorted(m for m in sys.modules if m in banned or m.split('.')[0] in banned))\n"
    )
    heavy = (
        "torch,mpi4py,numpy,jinja2,hpcdist.runtime.bootstrap,hpcdist.runtime.prepare,hpcdist.runtime.rendezvous,"
        "hpcdist.doctor.probe"
    )
    for argv, banned in (
        (
            ["--help"],
            heavy + ",hpcdist.launching.spawn,hpcdist.launching.mpirun,hpcdist.jobs.sbatch,hpcdist.jobs.sbatchspec",
        ),
        (
            ["--version"],
            heavy + ",hpcdist.launching.spawn,hpcdist.launching.mpirun,hpcdist.jobs.sbatch,hpcdist.jobs.sbatchspec",
        ),
        (["sbatch", "--help"], heavy + ",hpcdist.launching.spawn"),
        (["env"], heavy + ",hpcdist.launching.spawn"),
        (["mpirun", "-np", "2", "--dry-run", "--", "python", "t.py"], heavy + ",hpcdist.launching.spawn"),
        (
            ["torchrun", "--nnodes", "2", "--master-addr", "a", "--master-port", "29517", "--", "t.py"],
            heavy + ",hpcdist.launching.spawn",
        ),
    ):
        done = subprocess.run(
            [sys.executable, "-c", code, *argv, banned], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        assert (done.returncode, done.stdout.strip()) == (0, "[]"), (argv, done.stdout, done.stderr)
