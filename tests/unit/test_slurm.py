"""Tests for hpcdist.jobs.sbatch and sbatchspec: time/mem/nodelist checks, and the scripts, split as bash splits."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from test_render import WEIRD, bash_words, check_script, slurm_argument

from hpcdist import __version__, records
from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.hosts import HostSlots
from hpcdist.jobs.render import make_environment
from hpcdist.jobs.sbatch import render_sbatch
from hpcdist.jobs.sbatchspec import SbatchSpec, check_mem, gpu_count, parse_signal, parse_time
from hpcdist.schedulers.slurm import Slurm, expand_nodelist
from hpcdist.settings import output_rate

JINJA = make_environment(None, {})
BASE = SbatchSpec(program=("python", "train.py"), python="/venv/bin/python")
GPU = records.replace(
    BASE,
    nodes=2,
    gpus_per_node="8",
    cpus_per_task=4,
    mem="0",
    time="4:00:00",
    partition="gpu",
    exclusive=True,
    env=(("NCCL_DEBUG", "INFO"),),
    setup=("module load cuda",),
)
SPECS = {
    "cpu-srun": BASE,
    "gpu-srun": GPU,
    "gpu-mpirun": records.replace(GPU, launch="mpirun", mpirun="/venv/bin/mpirun"),
    "gpu-torchrun": records.replace(GPU, launch="torchrun", torchrun="/venv/bin/torchrun"),
    "torchrun-fixed-master": records.replace(GPU, launch="torchrun", master_addr="10.0.0.1", master_port=1234),
    "requeue-srun": records.replace(GPU, requeue=True, requeue_signal="SIGUSR2@300", opal_prefix=True),
    "requeue-torchrun": records.replace(GPU, launch="torchrun", requeue=True),
    "restarts-srun": records.replace(GPU, max_restarts=3),
    "restarts-mpirun-requeue": records.replace(GPU, launch="mpirun", max_restarts=1, requeue=True),
    "restarts-torchrun-requeue": records.replace(GPU, launch="torchrun", max_restarts=2, requeue=True),
    "weird": records.replace(
        GPU,
        job_name=WEIRD[2],
        output=WEIRD[0],
        program=("python", *WEIRD),
        env=tuple((f"W{i}", v) for i, v in enumerate(WEIRD)),
    ),
}


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30", 1800),
        ("90", 5400),
        ("5:30", 330),
        ("4:00:00", 14400),
        ("48:00:00", 172800),
        ("1-12", 129600),
        ("1-12:30", 131400),
        ("2-00:00:01", 172801),
    ],
)
def test_slurm_time_forms(value: str, seconds: int) -> None:
    assert parse_time(value) == seconds


# "1:60", "1:00:60", "2-24", "1-1:60", "1-", "0", "0:00" and "infinite" were refused here until Slurm's own rules
# (time_str2secs) were followed: Slurm takes them all, see test_slurm_accepts_these_times.
@pytest.mark.parametrize(
    "value",
    [
        "25:00:00:00",
        "-5",
        "1h",
        "",
        "1:2:3:4",
        "1-:30",
        ":30",
        "5:",
        "1-2-3",
        "٣٠",
        "1-1:2:3:4",
        "99999999999999999999999",
        "24856-00:00:00",
    ],
)
def test_malformed_times(value: str) -> None:
    with pytest.raises(UsageError, match="--time"):
        parse_time(value)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("UNLIMITED", None),
        ("infinite", None),
        ("-1", None),
        ("0", None),
        ("0:00", None),
        ("1:60", 120),
        ("1:00:60", 3660),
        ("2-24", 259200),
        ("1-1:60", 93600),
        ("1-", 86400),
        ("90:00", 5400),
    ],
)
def test_slurm_accepts_these_times(value: str, seconds: int | None) -> None:
    assert parse_time(value) == seconds


@pytest.mark.parametrize("value", ["16G", "4000", "0", "512m", "2T"])
def test_memory_sizes(value: str) -> None:
    assert check_mem(value) == value


@pytest.mark.parametrize("value", ["16GB", "-1", "G", "1.5G", "16 G"])
def test_bad_memory_sizes(value: str) -> None:
    with pytest.raises(UsageError, match="--mem"):
        check_mem(value)


def test_gpus_and_signals() -> None:
    assert gpu_count("8") == 8 and gpu_count("a100:4") == 4
    assert parse_signal("USR1@90") == ("USR1", 90) and parse_signal("sigterm@600") == ("TERM", 600)
    for bad in ("0", "a100:0", "x", "-1"):
        with pytest.raises(UsageError, match="--gpus-per-node"):
            gpu_count(bad)
    for bad in ("USR1", "KILL@90", "USR1@0", "USR1@x", "USR1@70000"):
        with pytest.raises(UsageError, match="--requeue-signal"):
            parse_signal(bad)


def test_nodelists() -> None:
    assert expand_nodelist("node[01-04],gpu7") == ["node01", "node02", "node03", "node04", "gpu7"]
    for bad in ("node[01-04", "node[04-01]", "", "a b", "node[1-2]]"):
        with pytest.raises(UsageError, match="--nodelist"):
            expand_nodelist(bad)


def test_allocation_hosts() -> None:
    env = {"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "2(x2),1"}
    assert Slurm().hosts(env) == (HostSlots("n1", 2), HostSlots("n2", 2), HostSlots("n3", 1))
    assert Slurm().hosts(env, slots=8)[2] == HostSlots("n3", 8)
    for bad in (
        {},
        {"SLURM_JOB_NODELIST": "n[1-3]"},
        {**env, "SLURM_TASKS_PER_NODE": "2(x2)"},
        {**env, "SLURM_TASKS_PER_NODE": "two"},
    ):
        with pytest.raises(UsageError):
            Slurm().hosts(bad)


@pytest.mark.parametrize(
    "changes",
    [
        {"nodes": 0},
        {"ntasks_per_node": 0},
        {"cpus_per_task": -1},
        {"time": "25:00:00:00"},
        {"mem": "lots"},
        {"nodelist": "n[1-"},
        {"launch": "ssh"},
        {"program": ()},
        {"env": (("1BAD", "x"),)},
        {"job_name": "a\nb"},
        {"requeue": True, "time": "1"},
        {"master_port": 70000},
        {"master_addr": "a b"},
        {"gpus_per_node": "0"},
    ],
)
def test_bad_specs(changes: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        render_sbatch(records.replace(BASE, **changes), JINJA)


@pytest.mark.parametrize("name", SPECS)
def test_every_script_passes_bash_n_and_shellcheck(name: str, tmp_path: Path) -> None:
    text = render_sbatch(SPECS[name], JINJA)
    assert text.startswith("#!/bin/bash\n# Generated by hpcdist ") and text.endswith("\n") and "\n\n\n" not in text
    check_script(text, tmp_path)


def test_sbatch_lines_and_defaults() -> None:
    lines = [line for line in render_sbatch(GPU, JINJA).splitlines() if line.startswith("#SBATCH")]
    assert lines == [
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=8",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=0",
        "#SBATCH --time=4:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --exclusive",
    ]
    torchrun = render_sbatch(SPECS["gpu-torchrun"], JINJA)
    assert "#SBATCH --ntasks-per-node=1\n" in torchrun and "#SBATCH --cpus-per-task=32\n" in torchrun


def test_weird_sbatch_values_parse_back() -> None:
    text = render_sbatch(SPECS["weird"], JINJA)
    options = [slurm_argument(line[len("#SBATCH") :]) for line in text.splitlines() if line.startswith("#SBATCH")]
    assert f"--job-name={WEIRD[2]}" in options and f"--output={WEIRD[0]}" in options


def _launch_start(text: str, first: str) -> int:
    """The index of the line of a rendered script whose launch command starts with the word `first` (quoted)."""
    return next(i for i, line in enumerate(text.splitlines()) if line.strip().split(" ")[0] == shlex.quote(first))


def launch_text(text: str, first: str) -> str:
    """A rendered script's launch command as written: the line that starts with `first` and its continuations,
    without a trailing `&` or `|| hpcdist_status=$?`."""
    lines = text.splitlines()
    start = _launch_start(text, first)
    for end in range(start + 1, len(lines) + 1):
        command = "\n".join(lines[start:end]).replace("\\\n", "")
        if command.endswith("\\"):
            continue
        try:
            shlex.split(command)
        except ValueError:  # a quoted value goes on over the next line
            continue
        return command.removesuffix(" &").removesuffix(" || hpcdist_status=$?")
    raise AssertionError(f"no complete command starting with {first} in:\n{text}")


def launch_words(text: str, first: str) -> list[str]:
    """The words of a rendered script's launch command (launch_text), split as bash would."""
    return shlex.split(launch_text(text, first))


def exported(text: str, first: str) -> dict[str, str]:
    """What a rendered script (of no setup lines) exports before its launch command, as bash sets it (but PATH)."""
    head = "\n".join(text.splitlines()[: _launch_start(text, first)])
    env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8"}
    done = subprocess.run(["bash", "-c", f"{head}\nenv -0"], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    found = dict(item.split("=", 1) for item in done.stdout.decode().split("\0")[:-1])
    return {name: value for name, value in found.items() if name not in {*env, "PWD", "OLDPWD", "SHLVL", "_"}}


def allocation(nodes: int, tasks_per_node: int) -> dict[str, str]:
    """What Slurm sets in the batch step of job 7, `nodes` nodes of `tasks_per_node` tasks (4 CPUs each)."""
    return {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": f"n[1-{nodes}]" if nodes > 1 else "n1",
            "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NTASKS": str(nodes * tasks_per_node),
            "SLURM_TASKS_PER_NODE": f"{tasks_per_node}(x{nodes})" if nodes > 1 else str(tasks_per_node),
            "SLURM_CPUS_ON_NODE": str(4 * tasks_per_node), "SLURMD_NODENAME": "n1"}  # fmt: skip


def step_dry_run(
    text: str,
    python: str,
    environ: Mapping[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    uid: int = 1000,
) -> list[str]:
    """The launcher line a rendered script's step runs, split as bash would: the step's words as bash makes them in
    `environ` (an allocation's variables and the script's; no other of Slurm's or hpcdist's is left set), given to
    `hpcdist mpirun --dry-run` as `uid` (the step as the job would run it, but for its Python: this one)."""
    for name in [name for name in os.environ if name.startswith(("SLURM_", "HPCDIST_", "TORCHELASTIC_", "OMPI_"))]:
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    words = bash_words(launch_text(text, python))
    assert words[:4] == [python, "-m", "hpcdist", "mpirun"] and "--dry-run" not in words, words
    at = words.index("--")
    capsys.readouterr()  # what was printed before: not the dry run's
    with monkeypatch.context() as patch:
        patch.setattr(os, "geteuid", lambda: uid)
        status = main([*words[3:at], "--dry-run", *words[at:]])
    out, err = capsys.readouterr()
    assert status == 0, err
    return shlex.split(out)


def from_launcher(line: list[str], launcher: str) -> list[str]:
    """A launcher line from its launcher on: in an allocation, hpcdist mpirun may start it through a command of its
    own (Open MPI's, through one that holds SIGTERM)."""
    assert launcher in line, line
    return line[line.index(launcher) :]


def _bare(spec: SbatchSpec, **changes: Any) -> SbatchSpec:
    """`spec` with tools named bare (as found on PATH) and no setup lines."""
    return records.replace(spec, python="python", mpirun="mpirun", torchrun="torchrun", setup=(), **changes)


# hpcdist mpirun with Slurm's srun as its launcher: the srun mode's step, up to the program's `--`
SRUN_STEP = ["python", "-m", "hpcdist", "mpirun", "-np", "16", "--mpi", "srun"]


def test_srun_mode_passes_the_program_and_exports_the_asked_values(tmp_path: Path) -> None:
    """hpcdist mpirun gets the program's words exactly; srun passes the script's whole environment on."""
    text = render_sbatch(_bare(SPECS["weird"]), JINJA)
    check_script(text, tmp_path)
    assert launch_words(text, "python") == [*SRUN_STEP, "--", "python", *WEIRD]
    assert "\npython -m hpcdist mpirun -np 16 --mpi srun -- \\\n    python 'a 0' " in text  # the program: next line
    # the values as given, CPUs per task for srun to read (it no longer inherits sbatch's); the contract's variables
    # (HPCDIST_VERSION, ...) are hpcdist mpirun's to set
    assert exported(text, "python") == {
        "OMP_NUM_THREADS": "4", "SRUN_CPUS_PER_TASK": "4", **{f"W{i}": value for i, value in enumerate(WEIRD)}
    }  # fmt: skip
    assert "hpcdist.worker" not in text and "mkdir" not in text
    assert not [line for line in text.splitlines() if line.lstrip().startswith("srun ")]  # srun is hpcdist mpirun's


def test_opal_prefix_is_exported_to_the_ranks_srun_starts() -> None:
    """The venv's prefix, read when the script runs, is in the environment hpcdist mpirun hands srun (--export=ALL)."""
    text = render_sbatch(records.replace(BASE, python=sys.executable, opal_prefix=True), JINJA)
    assert exported(text, sys.executable) == {"OPAL_PREFIX": sys.prefix}
    step = [sys.executable, "-m", "hpcdist", "mpirun", "-np", "1", "--mpi", "srun", "--", "python", "train.py"]
    assert launch_words(text, sys.executable) == step


# the venv's Open MPI (the wheel's mpirun) first on PATH, as a module would put an MPI's
OPEN_MPI_PATH = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}"}
KEEPALIVE = [*["--prtemca", "oob_tcp_keepalive_time", "2", "--prtemca", "oob_tcp_keepalive_intvl", "1"],
             *["--prtemca", "oob_tcp_keepalive_probes", "3"]]  # fmt: skip


def test_mpirun_mode_s_step_forwards_with_x(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The step, hpcdist mpirun, is given the script's variables by name and passes them on with mpirun's -x."""
    text = render_sbatch(_bare(SPECS["gpu-mpirun"]), JINJA)
    assert launch_words(text, "python") == [
        *["python", "-m", "hpcdist", "mpirun", "-np", "16", "-x", "NCCL_DEBUG", "-x", "OMP_NUM_THREADS"],
        *["--mpirun", "mpirun", "--mpi", "openmpi", "--", "python", "train.py"],
    ]
    assert exported(text, "python") == {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4"}
    assert "HPCDIST_" not in text and not [line for line in text.splitlines() if line.startswith("mpirun ")]
    environ = {**allocation(2, 8), **exported(text, "python"), **OPEN_MPI_PATH}
    # what the job's hpcdist mpirun runs: mpirun, forwarding the contract's variables with their values and the
    # script's by name
    line = from_launcher(step_dry_run(text, "python", environ, monkeypatch, capsys), "mpirun")
    # 2 nodes: a lost one is noticed in seconds (the keepalive)
    assert line[:19] == ["mpirun", "-np", "16", "--bind-to", "none", "--map-by", "slot", "--mca", "btl", "^ofi",
                         *KEEPALIVE]  # fmt: skip
    assert [line[i + 1] for i, word in enumerate(line) if word == "-x"] == [
        *[f"HPCDIST_VERSION={__version__}", "HPCDIST_HEARTBEAT=5", "HPCDIST_TAG=numbered"],
        *[f"HPCDIST_OUTPUT_RATE={output_rate({}, 16):g}", "HPCDIST_MPI=openmpi", "HPCDIST_SCHEDULER=slurm"],
        *["NCCL_DEBUG", "OMP_NUM_THREADS"],
        *["HPCDIST_CONTROL=<per-launch token>", "HPCDIST_RUN_ID=<per-launch run id>"],
    ]
    assert line[-6:] == [sys.executable, "-m", "hpcdist.worker", "--", "python", "train.py"]


def test_mpirun_mode_on_one_node_has_no_keepalive(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = render_sbatch(records.replace(_bare(SPECS["gpu-mpirun"]), nodes=1), JINJA)
    environ = {**allocation(1, 8), **exported(text, "python"), **OPEN_MPI_PATH}
    line = from_launcher(step_dry_run(text, "python", environ, monkeypatch, capsys), "mpirun")
    assert line[:8] == ["mpirun", "-np", "8", "--bind-to", "none", "--map-by", "slot", "--mca"]
    assert "oob_tcp_keepalive" not in " ".join(line)


def test_torchrun_mode_runs_one_torchrun_per_node_with_its_node_rank() -> None:
    words = launch_words(render_sbatch(_bare(SPECS["gpu-torchrun"]), JINJA), "srun")
    assert words == [
        *[
            "srun",
            "--kill-on-bad-exit=1",
            "--cpus-per-task=32",
            "--export=ALL,HPCDIST_VERSION,NCCL_DEBUG,OMP_NUM_THREADS",
        ],
        *["bash", "-c", 'exec "$0" --node_rank="$SLURM_NODEID" "$@"', "torchrun"],
        *["--nproc_per_node=8", "--nnodes=2", "--master_addr=$MASTER_ADDR", "--master_port=$MASTER_PORT", "train.py"],
    ]


def test_requeue_passes_usr1_to_the_step_and_requeues_the_job_by_its_own_id() -> None:
    text = render_sbatch(_bare(SPECS["requeue-srun"], requeue_signal="USR1@90", opal_prefix=False), JINJA)
    assert "#SBATCH --requeue\n#SBATCH --open-mode=append\n#SBATCH --signal=B:USR1@90\n" in text
    assert 'kill -s USR1 "$hpcdist_step"' in text and "trap hpcdist_preempted USR1\n" in text
    assert 'scontrol requeue "$hpcdist_job"' in text
    assert launch_words(text, "python") == [*SRUN_STEP, "--", "python", "train.py"]
    # the step runs in the background, so that the trap can pass USR1 on to it (hpcdist mpirun passes it to srun)
    assert "python -m hpcdist mpirun -np 16 --mpi srun -- \\\n    python train.py &\nhpcdist_step=$!\n" in text


def test_requeue_in_torchrun_mode_sends_sigterm_to_torchrun_and_its_workers_through_scancel() -> None:
    spec = records.replace(_bare(SPECS["gpu-torchrun"]), requeue=True, time="1:00:00")
    text = render_sbatch(spec, JINJA)
    assert 'scancel --signal=TERM "$hpcdist_job"' in text and "trap hpcdist_preempted USR1\n" in text
    assert "kill -s" not in text  # srun would answer SIGTERM by killing the step (SIGKILL) before any checkpoint


def test_restarts_in_mpirun_mode_forward_the_counters(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The script's loop restarts its step and exports each attempt's counters, which the step forwards by name."""
    text = render_sbatch(_bare(SPECS["gpu-mpirun"], max_restarts=3), JINJA)
    counters = ["-x", "HPCDIST_RESTART_COUNT", "-x", "TORCHELASTIC_RESTART_COUNT"]
    assert launch_words(text, "python") == [
        *["python", "-m", "hpcdist", "mpirun", "-np", "16", "-x", "NCCL_DEBUG", "-x", "OMP_NUM_THREADS", *counters],
        *["--mpirun", "mpirun", "--mpi", "openmpi", "--", "python", "train.py"],
    ]  # no --max-restarts: the loop restarts the step, not the step itself
    loop = '    export HPCDIST_RESTART_COUNT="$hpcdist_attempt" TORCHELASTIC_RESTART_COUNT="$hpcdist_attempt"\n'
    assert f"while :; do\n{loop}" in text and "HPCDIST_VERSION" not in text
    exports = exported(text, "hpcdist_attempt=0")  # before the loop
    assert exports == {"HPCDIST_MAX_RESTARTS": "3", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4"}
    # the second attempt's step: mpirun passes the limit and this attempt's counters on to every rank
    counted = {"HPCDIST_RESTART_COUNT": "1", "TORCHELASTIC_RESTART_COUNT": "1"}
    environ = {**allocation(2, 8), **exports, **counted, **OPEN_MPI_PATH}
    line = step_dry_run(text, "python", environ, monkeypatch, capsys)
    assert [line[i + 1] for i, word in enumerate(line) if word == "-x"] == [
        "HPCDIST_MAX_RESTARTS",  # set in the step's environment: forwarded as every HPCDIST_ variable is
        *[f"HPCDIST_VERSION={__version__}", "HPCDIST_HEARTBEAT=5", "HPCDIST_TAG=numbered"],
        *[f"HPCDIST_OUTPUT_RATE={output_rate({}, 16):g}", "HPCDIST_MPI=openmpi", "HPCDIST_SCHEDULER=slurm"],
        *["NCCL_DEBUG", "OMP_NUM_THREADS"],
        *["HPCDIST_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"],  # by name: this attempt's, as the loop exported them
        *["HPCDIST_CONTROL=<per-launch token>", "HPCDIST_RUN_ID=<per-launch run id>"],
    ]
    assert line[-5:] == ["-m", "hpcdist.worker", "--", "python", "train.py"]
