"""Tests for hpcdist.jobs.sbatch: time/mem/nodelist checks, and the scripts it renders, split as bash splits them."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

import pytest
from test_render import WEIRD, check_script, slurm_argument

from hpcdist.errors import UsageError
from hpcdist.hosts import HostSlots
from hpcdist.jobs.render import make_environment
from hpcdist.jobs.sbatch import (
    SbatchSpec,
    check_mem,
    gpu_count,
    parse_signal,
    parse_time,
    render_sbatch,
)
from hpcdist.schedulers.slurm import Slurm, expand_nodelist

JINJA = make_environment(None, {})
BASE = SbatchSpec(program=("python", "train.py"), python="/venv/bin/python")
GPU = dataclasses.replace(
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
    "gpu-mpirun": dataclasses.replace(GPU, launch="mpirun", mpirun="/venv/bin/mpirun"),
    "gpu-torchrun": dataclasses.replace(GPU, launch="torchrun", torchrun="/venv/bin/torchrun"),
    "torchrun-fixed-master": dataclasses.replace(GPU, launch="torchrun", master_addr="10.0.0.1", master_port=1234),
    "requeue-srun": dataclasses.replace(GPU, requeue=True, requeue_signal="SIGUSR2@300", opal_prefix=True),
    "requeue-torchrun": dataclasses.replace(GPU, launch="torchrun", requeue=True),
    "restarts-srun": dataclasses.replace(GPU, max_restarts=3),
    "restarts-mpirun-requeue": dataclasses.replace(GPU, launch="mpirun", max_restarts=1, requeue=True),
    "restarts-torchrun-requeue": dataclasses.replace(GPU, launch="torchrun", max_restarts=2, requeue=True),
    "weird": dataclasses.replace(
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
        render_sbatch(dataclasses.replace(BASE, **changes), JINJA)


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


def launch_words(text: str, first: str) -> list[str]:
    """The words of a rendered script's launch command: the line that starts with `first` and its continuations,
    split as bash would, without a trailing `&` or `|| hpcdist_status=$?`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().split(" ")[0] == first)
    for end in range(start + 1, len(lines) + 1):
        command = "\n".join(lines[start:end]).replace("\\\n", "")
        if command.endswith("\\"):
            continue
        try:
            words = shlex.split(command)
        except ValueError:  # a quoted value goes on over the next line
            continue
        if words[-1:] == ["&"]:
            return words[:-1]
        return words[:-2] if words[-2:] == ["||", "hpcdist_status=$?"] else words
    raise AssertionError(f"no complete command starting with {first} in:\n{text}")


def _bare(spec: SbatchSpec, **changes: Any) -> SbatchSpec:
    """`spec` with tools named bare (as found on PATH) and no setup lines."""
    return dataclasses.replace(spec, python="python", mpirun="mpirun", torchrun="torchrun", setup=(), **changes)


def test_srun_mode_passes_the_program_and_exports_the_asked_names(tmp_path: Path) -> None:
    text = render_sbatch(_bare(SPECS["weird"]), JINJA)
    check_script(text, tmp_path)
    names = ",".join(["HPCDIST_VERSION", "OMP_NUM_THREADS", *sorted(f"W{i}" for i in range(len(WEIRD)))])
    assert launch_words(text, "srun") == [
        "srun",
        "--mpi=pmix",
        "--kill-on-bad-exit=1",
        "--cpus-per-task=4",
        f"--export=ALL,{names}",
        *["python", "-m", "hpcdist.worker", "--", "python", *WEIRD],
    ]


def test_opal_prefix_is_exported_to_the_ranks_srun_starts() -> None:
    words = launch_words(render_sbatch(dataclasses.replace(BASE, opal_prefix=True), JINJA), "srun")
    assert words[:4] == ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--export=ALL,HPCDIST_VERSION,OPAL_PREFIX"]


def test_mpirun_mode_forwards_with_x() -> None:
    keepalive = [
        "--prtemca",
        "oob_tcp_keepalive_time",
        "2",
        "--prtemca",
        "oob_tcp_keepalive_intvl",
        "1",
        "--prtemca",
        "oob_tcp_keepalive_probes",
        "3",
    ]  # 2 nodes: a lost one is noticed in seconds
    assert launch_words(render_sbatch(_bare(SPECS["gpu-mpirun"]), JINJA), "mpirun") == [
        "mpirun",
        "-np",
        "16",
        "--bind-to",
        "none",
        "--map-by",
        "slot",
        "--mca",
        "btl",
        "^ofi",
        *keepalive,
        "-x",
        "HPCDIST_VERSION",
        "-x",
        "NCCL_DEBUG",
        "-x",
        "OMP_NUM_THREADS",
        "python",
        "-m",
        "hpcdist.worker",
        "--",
        "python",
        "train.py",
    ]


def test_mpirun_mode_on_one_node_has_no_keepalive() -> None:
    spec = dataclasses.replace(_bare(SPECS["gpu-mpirun"]), nodes=1)
    assert "oob_tcp_keepalive" not in render_sbatch(spec, JINJA)


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
    assert 'scontrol requeue "$hpcdist_job"' in text and launch_words(text, "srun")[:2] == ["srun", "--mpi=pmix"]


def test_requeue_in_torchrun_mode_sends_sigterm_to_torchrun_and_its_workers_through_scancel() -> None:
    spec = dataclasses.replace(_bare(SPECS["gpu-torchrun"]), requeue=True, time="1:00:00")
    text = render_sbatch(spec, JINJA)
    assert 'scancel --signal=TERM "$hpcdist_job"' in text and "trap hpcdist_preempted USR1\n" in text
    assert "kill -s" not in text  # srun would answer SIGTERM by killing the step (SIGKILL) before any checkpoint


def test_restarts_in_mpirun_mode_forward_the_counters() -> None:
    text = render_sbatch(_bare(SPECS["gpu-mpirun"], max_restarts=3), JINJA)
    assert " -x HPCDIST_VERSION -x HPCDIST_MAX_RESTARTS -x HPCDIST_RESTART_COUNT -x TORCHELASTIC_RESTART_COUNT " in text
    assert "export HPCDIST_MAX_RESTARTS=3\n" in text
    assert launch_words(text, "mpirun")[-5:] == ["-m", "hpcdist.worker", "--", "python", "train.py"]
