"""Every command line and script hpcdist prints or writes runs as printed: through real bash, with stub tools.

Stub `torchrun`, `mpirun`, `srun`, `scontrol`, `python` and `module` come first on PATH, from a directory
whose name has a space; each records its argv and environment as JSON. The tests assert that what the
tools receive is exactly what was asked for, for every mode, every --profile and hostile values. The stub
`python` runs `python -m hpcdist mpirun` for real (a batch script's step), with itself as
the Python of the ranks' shim, so that what hpcdist mpirun runs is recorded too.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from test_render import WEIRD, check_script
from test_slurm import launch_words

from hpcdist import __version__
from hpcdist.cli import main
from hpcdist.hosts import HostSlots
from hpcdist.jobs.examples import EXAMPLES
from hpcdist.jobs.profiles import PROFILES
from hpcdist.launching.hostfile import parse_hostfile

ROOT = Path(__file__).resolve().parents[2]
# the values of the bug report, then submitit's and more (spaces, quotes, $, `, ;, newlines, empty, -n)
HOSTILE = ["a b", "it's $HOME; ok", 'x"y', *WEIRD]
ASKED = {f"H{i}": value for i, value in enumerate(HOSTILE)}
ENV_OPTIONS = [f"--env={name}={value}" for name, value in ASKED.items()]
PROGRAM = ["train.py", *HOSTILE]
BASH_OWN = {"PWD", "OLDPWD", "SHLVL", "_"}  # what bash itself puts into a command's environment
ROOT_FLAG = ["--allow-run-as-root"] if os.geteuid() == 0 else []
KEEPALIVE = ["--prtemca", "oob_tcp_keepalive_time", "2", "--prtemca", "oob_tcp_keepalive_intvl", "1",
             "--prtemca", "oob_tcp_keepalive_probes", "3"]  # fmt: skip
STUB = f"""#!{sys.executable}
import json, os, subprocess, sys
tool = os.path.basename(sys.argv[0])
with open(os.environ["STUB_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps({{"tool": tool, "argv": sys.argv[1:], "env": dict(os.environ)}}) + "\\n")
if tool == "python" and sys.argv[1:2] == ["-c"]:  # `python -c CODE` (OPAL_PREFIX) runs for real
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
if tool == "python" and sys.argv[1:3] == ["-m", "hpcdist.launching.heldterm"]:  # holds SIGTERM for real
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
if tool == "python" and sys.argv[1:4] == ["-m", "hpcdist", "mpirun"]:  # a batch script's step runs for real
    import runpy
    sys.executable = os.path.abspath(sys.argv[0])  # the Python of its ranks' shim: this stub
    sys.argv = ["hpcdist", *sys.argv[3:]]
    runpy.run_module("hpcdist", run_name="__main__", alter_sys=True)  # exits with hpcdist mpirun's status
if tool == "scontrol" and sys.argv[1:3] == ["show", "hostnames"]:
    print("node01\\nnode02")
if tool == "srun":  # like srun: the command once per node (every task of a node gets the same argv)
    command = next(i for i, word in enumerate(sys.argv) if i and not word.startswith("-"))
    nodes = int(os.environ["SLURM_JOB_NUM_NODES"])
    sys.exit(max(subprocess.call(sys.argv[command:], env={{**os.environ, "SLURM_NODEID": str(n)}})
                 for n in range(nodes)))
"""
TOOLS = ("torchrun", "mpirun", "srun", "scontrol", "python", "module")


class Stubs:
    """A directory of recording stub tools, the environment to run bash in, and what the tools recorded."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.bin = tmp_path / "stub bin"
        self.bin.mkdir()
        self.log = tmp_path / "log.jsonl"
        for tool in TOOLS:
            (self.bin / tool).write_text(STUB)
            (self.bin / tool).chmod(0o755)
        self.base = {"PATH": f"{self.bin}:/usr/bin:/bin", "STUB_LOG": str(self.log), "HOME": str(tmp_path),
                     "LC_ALL": "C.UTF-8"}  # fmt: skip

    def path(self, tool: str) -> str:
        """The full path of a stub (it has a space in it)."""
        return str(self.bin / tool)

    def run(self, argv: Sequence[str], extra: Mapping[str, str] | None = None, cwd: Path | None = None) -> list[dict]:
        """Run argv (bash with a printed line or script) in the base environment; the tools' records."""
        self.log.unlink(missing_ok=True)
        env = {**self.base, **(extra or {})}
        done = subprocess.run(list(argv), env=env, cwd=cwd or self.tmp, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{argv} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        records = [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []
        for record in records:
            record["added"] = {
                k: v for k, v in record["env"].items() if env.get(k) != v and k not in BASH_OWN and k[:6] != "SLURM_"
            }
        return records


@pytest.fixture
def stubs(tmp_path: Path) -> Stubs:
    return Stubs(tmp_path)


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Slurm, NCCL, ... variables of the machine running the tests, so what is printed is known."""
    for name in list(os.environ):
        if name.startswith(("SLURM_", "HPCDIST_", "NCCL_", "GLOO_", "TORCH_", "OMPI_MCA_")) or name in (
            "OMP_NUM_THREADS", "PYTHONPATH", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"):  # fmt: skip
            monkeypatch.delenv(name)


def printed(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What `hpcdist ARGV` prints (it must succeed)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


def tools(records: list[dict], name: str) -> list[dict]:
    """The records of one tool."""
    return [r for r in records if r["tool"] == name]


# -- hpcdist torchrun ------------------------------------------------------------------------------------------


def test_the_reported_line_runs(capsys: pytest.CaptureFixture[str], stubs: Stubs) -> None:
    line = printed(capsys, "torchrun", "--profile", "nccl", "--nnodes", "2", "--master-addr", "10.0.0.1",
                   "--master-port", "29517", "--env", "NOTE=a b", "--", "train.py")  # fmt: skip
    assert line.startswith("NCCL_DEBUG=WARN NCCL_SOCKET_IFNAME='^lo,docker0' NOTE='a b' torchrun ")
    (record,) = stubs.run(["bash", "-c", line])
    assert record["argv"] == ["--nproc_per_node=1", "--nnodes=2", "--node_rank=0", "--master_addr=10.0.0.1",
                              "--master_port=29517", "train.py"]  # fmt: skip
    assert record["added"] == {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "^lo,docker0", "NOTE": "a b"}


@pytest.mark.parametrize("profile", [None, *PROFILES])
@pytest.mark.parametrize("how", ["line", "script", "script-file"])
def test_torchrun_runs_as_printed(capsys: pytest.CaptureFixture[str], stubs: Stubs, tmp_path: Path,
                                  profile: str | None, how: str) -> None:  # fmt: skip
    env_file = tmp_path / "site.env"
    env_file.write_text("export FROM_FILE='it'\"'\"'s $HOME; ok'  # a comment\n")
    argv = ["torchrun", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
            "--master-port", "29500", "--torchrun", stubs.path("torchrun"), "--env-file", str(env_file),
            *ENV_OPTIONS, *(["--profile", profile] if profile else [])]  # fmt: skip
    if how == "line":
        records = stubs.run(["bash", "-c", printed(capsys, *argv, "--", *PROGRAM)])
        rank_options = ["--node_rank=1", "--master_addr=10.0.0.1", "--master_port=29500"]
    else:
        script = tmp_path / "node.sh"
        if how == "script":
            check_script(printed(capsys, *argv, "--script", "--", *PROGRAM), tmp_path, "node.sh")
        else:
            assert printed(capsys, *argv, "--script", "--write", str(script), "--", *PROGRAM) == ""
            check_script(script.read_text(), tmp_path, "checked.sh")
        script.chmod(0o755)
        records = stubs.run([str(script), "1"])  # the node rank is the script's argument
        rank_options = ["--master_addr=10.0.0.1", "--master_port=29500", "--node_rank=1"]
    (record,) = records
    assert record["tool"] == "torchrun"
    assert record["argv"] == ["--nproc_per_node=2", "--nnodes=2", *rank_options, *PROGRAM]
    assert record["added"] == {**PROFILES.get(profile or "", {}), "FROM_FILE": "it's $HOME; ok", **ASKED}


@pytest.mark.parametrize(("program", "words"), [
    (["python", "-m", "pkg.train", *HOSTILE], ["-m", "pkg.train", *HOSTILE]),
    (["./a.out", *HOSTILE], ["--no_python", "./a.out", *HOSTILE]),
])  # fmt: skip
def test_torchrun_program_forms_run_as_printed(capsys: pytest.CaptureFixture[str], stubs: Stubs,
                                               program: list[str], words: list[str]) -> None:  # fmt: skip
    line = printed(capsys, "torchrun", "--torchrun", stubs.path("torchrun"), "--", *program)
    (record,) = stubs.run(["bash", "-c", line])
    assert record["argv"] == ["--nproc_per_node=1", "--nnodes=1", "--standalone", *words]


# -- hpcdist mpirun --dry-run / --script ----------------------------------------------------------------------


def _ours(np: int) -> list[str]:
    """What the command hpcdist mpirun runs (and its dry run prints) hands every one of `np` ranks, but the values
    made per run (PER_RUN)."""
    return ["-x", f"HPCDIST_VERSION={__version__}", "-x", "HPCDIST_HEARTBEAT=5", "-x", "HPCDIST_TAG=numbered",
            "-x", f"HPCDIST_OUTPUT_RATE={(8 << 20) // np}", "-x", "HPCDIST_MPI=openmpi",
            "-x", "HPCDIST_SCHEDULER=none"]  # fmt: skip


PER_RUN = ["-x", "HPCDIST_CONTROL=<per-launch token>", "-x", "HPCDIST_RUN_ID=<per-launch run id>"]


def _mpirun_argv(stubs: Stubs, *options: str, script: bool = False) -> tuple[list[str], list[str]]:
    """`hpcdist mpirun` options with hostile -x values, and the mpirun argv they ask for (in a --script: no
    --allow-run-as-root, the contract's variables by name, which the script sets, as HPCDIST_PROGRESS when it
    runs; the dry run: the values, and placeholders for those made per run)."""
    exports = [f"H{i}={value}" for i, value in enumerate(HOSTILE)]
    argv = ["mpirun", "-np", "2", "--mpirun", stubs.path("mpirun"), *options]
    argv += [word for item in exports for word in ("-x", item)]
    ours = ["-x", "HPCDIST_VERSION", "-x", "HPCDIST_MPI", "-x", "HPCDIST_PROGRESS"] if script else _ours(2)
    expected = ["-np", "2", "-H", "localhost:2", "--bind-to", "none", "--map-by", "slot",
                *([] if script else ROOT_FLAG), "--mca", "btl", "^ofi", "-x", "NCCL_DEBUG", *ours,
                *[w for item in exports for w in ("-x", item)], *([] if script else PER_RUN),
                sys.executable, "-m", "hpcdist.worker", "--", "python", *PROGRAM]  # fmt: skip
    return [*argv, "--", "python", *PROGRAM], expected


@pytest.mark.parametrize("how", ["dry-run", "script-stdout", "script-file"])
def test_mpirun_runs_as_printed(capsys: pytest.CaptureFixture[str], stubs: Stubs, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch, how: str) -> None:  # fmt: skip
    monkeypatch.setenv("NCCL_DEBUG", "INFO")  # set when the line is printed: forwarded by name (-x NCCL_DEBUG)
    script = tmp_path / "launch.sh"
    extra: list[str] = []
    added: dict[str, str] = {}
    if how == "dry-run":  # the line to run here and now: --allow-run-as-root when printed as root
        argv, expected = _mpirun_argv(stubs, "--dry-run")
        records = stubs.run(["bash", "-c", printed(capsys, *argv)], {"NCCL_DEBUG": "INFO"})
    else:  # a script allows root when it runs as root, wherever it was written
        argv, expected = _mpirun_argv(stubs, "--script", "-" if how == "script-stdout" else str(script), script=True)
        added = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}
        added["HPCDIST_PROGRESS"] = "0"  # the script's output is no terminal here
        added["HPCDIST_VERSION"] = __version__  # the contract: the script exports it
        added["HPCDIST_MPI"] = "openmpi"
        text = printed(capsys, *argv)
        if how == "script-file":
            assert text == ""
            text = script.read_text()
        else:
            script.write_text(text)
            script.chmod(0o755)
        check_script(text, tmp_path, "checked.sh")
        extra = HOSTILE  # the script's arguments are appended to the program's
        records = stubs.run([str(script), *extra], {"NCCL_DEBUG": "INFO"})
    (record,) = records
    assert record["tool"] == "mpirun" and record["argv"] == [*expected, *extra]
    assert record["added"] == added  # -x NAME=VALUE is mpirun's to set; -x NCCL_DEBUG finds it in the environment
    assert record["env"]["NCCL_DEBUG"] == "INFO"


# -- hpcdist sbatch ------------------------------------------------------------------------------------------

# What the scripts of `hpcdist sbatch` hand every rank (hostile arguments and variables, OPAL_PREFIX, each
# launch mode, --requeue, -o) is asserted on the real Slurm cluster: tests/cluster/test_slurm_cluster.py.


def _allocation(tasks_per_node: int) -> dict[str, str]:
    """The variables Slurm sets in a batch script of a 2-node allocation."""
    return {"SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_JOB_NAME": "job", "SLURM_JOB_NODELIST": "node[01-02]",
            "SLURM_NODELIST": "node[01-02]", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2", "SLURM_NODEID": "0",
            "SLURM_NTASKS": str(2 * tasks_per_node), "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
            "SLURM_TASKS_PER_NODE": f"{tasks_per_node}(x2)", "SLURM_SUBMIT_DIR": "/home/user",
            "SLURM_CPUS_ON_NODE": "8", "SLURMD_NODENAME": "node01"}  # fmt: skip


@pytest.mark.parametrize("name", sorted(n for n in EXAMPLES if n.startswith("slurm/")))
def test_the_example_scripts_run_as_written(stubs: Stubs, tmp_path: Path, name: str) -> None:
    """slurm/*.sbatch, submitted from the project directory: .venv/bin's tools are stubs here."""
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    for tool in ("python", "mpirun", "torchrun"):
        (venv / tool).symlink_to(stubs.bin / tool)
    text = (ROOT / name).read_text()
    nodes = int(next(line for line in text.splitlines() if line.startswith("#SBATCH --nodes=")).split("=")[1])
    tasks = int(next(line for line in text.splitlines() if line.startswith("#SBATCH --ntasks-per-node=")).split("=")[1])
    assert nodes == 2
    records = stubs.run(["bash", str(ROOT / name)], {**_allocation(tasks), "TMPDIR": str(tmp_path)})
    exports = [line.removeprefix("export ") for line in text.splitlines() if line.startswith("export ") and "=" in line]
    asked = dict(shlex.split(item)[0].split("=", 1) for item in exports)
    launched = [r for r in records if r["tool"] in ("srun", "mpirun")]
    assert launched and all({k: r["added"].get(k) for k in asked} == asked for r in launched)
    lines = text.splitlines()  # the program's words: the last line of the launch, continued with backslashes
    end = next(i for i in range(1, len(lines)) if lines[i - 1].endswith(" \\") and not lines[i].endswith(" \\"))
    tail = shlex.split(lines[end].removesuffix(" &"))
    ran = sorted(r["tool"] for r in records if r["argv"][-len(tail) :] == tail or r["argv"] == tail[1:])
    # mpirun mode: the step, then Open MPI's launcher started with SIGTERM held (inside the allocation)
    modes = (["mpirun", "python", "python"], ["python", "python", "python", "srun"], ["srun", "torchrun", "torchrun"])
    assert ran in modes, records
    if "torchrun" in ran:
        return
    # the srun and mpirun modes: their step, hpcdist mpirun, gets its words as written and has the launcher start
    # each rank's shim
    (step,) = [r for r in records if r["argv"][:3] == ["-m", "hpcdist", "mpirun"]]
    assert step["tool"] == "python" and step["argv"] == launch_words(text, ".venv/bin/python")[1:]
    assert step["argv"][3:5] == ["-np", str(nodes * tasks)]
    shim = [str(venv / "python"), "-m", "hpcdist.worker", "--", *tail]
    (launcher,) = launched
    assert launcher["argv"][-len(shim) :] == shim
    if launcher["tool"] == "mpirun":
        (held,) = [r for r in records if r["argv"][:2] == ["-m", "hpcdist.launching.heldterm"]]
        assert held["tool"] == "python" and held["argv"][2:] == [".venv/bin/mpirun", *launcher["argv"]]
        return
    assert "--mpi srun " in " ".join(step["argv"])
    srun = ["--mpi=pmix", "--kill-on-bad-exit=1", f"--ntasks={nodes * tasks}", "--export=ALL"]
    assert launcher["argv"] == [*srun, *shim]
    assert launcher["added"]["HPCDIST_VERSION"] == __version__ and launcher["added"]["OPAL_PREFIX"] == sys.prefix
    cpus = next(line for line in lines if line.startswith("#SBATCH --cpus-per-task=")).split("=")[1]
    assert launcher["added"]["SRUN_CPUS_PER_TASK"] == cpus  # srun reads it: it no longer inherits sbatch's
    ranks = [r for r in records if r["argv"] == shim[1:]]  # the stub srun: one per node
    assert sorted(r["env"]["SLURM_NODEID"] for r in ranks) == ["0", "1"]
    assert all(r["env"]["HPCDIST_CONTROL"] == launcher["env"]["HPCDIST_CONTROL"] for r in ranks)


# -- hpcdist hostfile -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["openmpi", "mpich"])
@pytest.mark.parametrize("source", ["hosts", "nodelist", "allocation"])
def test_hostfiles_are_read_back_as_written(
    capsys: pytest.CaptureFixture[str],
    stubs: Stubs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    style: str,
    source: str,
) -> None:
    """The hostfile parses back to its hosts, and `hpcdist mpirun --hostfile` hands mpirun those hosts."""
    hostfile = tmp_path / "my hosts"
    where = {"hosts": ["--hosts", "node01,node02"], "nodelist": ["--nodelist", "node[01-02]"], "allocation": []}
    if source == "allocation":
        for name, value in _allocation(4).items():
            monkeypatch.setenv(name, value)
    argv = ["hostfile", *where[source], *(["--slots", "4"] if source != "allocation" else []), "--format", style]
    text = printed(capsys, *argv)
    assert printed(capsys, *argv, "--write", str(hostfile)) == "" and hostfile.read_text() == text
    hosts = (HostSlots("node01", 4), HostSlots("node02", 4))
    assert parse_hostfile(text, str(hostfile)) == hosts
    for name in list(os.environ):
        if name.startswith("SLURM_"):
            monkeypatch.delenv(name)  # outside the allocation, mpirun is given the hosts
    line = printed(capsys, "mpirun", "--dry-run", "--mpirun", stubs.path("mpirun"), "--hostfile", str(hostfile),
                   "--", "python", "x.py")  # fmt: skip
    (record,) = stubs.run(["bash", "-c", line])
    # Open MPI reads its own form from the file; the MPICH form `host:N` would be a host name to it: passed as -H
    place = ["--hostfile", str(hostfile)] if style == "openmpi" else ["-H", "node01:4,node02:4"]
    assert record["argv"] == ["-np", "8", *place, "--bind-to", "none", "--map-by", "slot", *ROOT_FLAG, "--mca",
                              "btl", "^ofi", *KEEPALIVE, *_ours(8), *PER_RUN, sys.executable, "-m", "hpcdist.worker",
                              "--", "python", "x.py"]  # fmt: skip
