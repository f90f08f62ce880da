"""Tests for hpcdist.jobs.sbatch: time/mem/nodelist checks, and sbatch scripts run through bash with fake Slurm tools."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_render import WEIRD, check_script, slurm_argument

from hpcdist.control import RESTART_VARS
from hpcdist.errors import UsageError
from hpcdist.jobs.render import make_environment
from hpcdist.jobs.sbatch import (
    SbatchSpec,
    check_mem,
    gpu_count,
    parse_signal,
    parse_time,
    render_sbatch,
)
from hpcdist.launching.hostfile import HostSlots
from hpcdist.launching.nodelist import allocation_hosts, expand_nodelist

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
    "gpu-mpirun": dataclasses.replace(GPU, launch="mpirun", mpirun="/venv/bin/mpirun", as_root=True),
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
    assert allocation_hosts(env) == (HostSlots("n1", 2), HostSlots("n2", 2), HostSlots("n3", 1))
    assert allocation_hosts(env, slots=8)[2] == HostSlots("n3", 8)
    for bad in (
        {},
        {"SLURM_JOB_NODELIST": "n[1-3]"},
        {**env, "SLURM_TASKS_PER_NODE": "2(x2)"},
        {**env, "SLURM_TASKS_PER_NODE": "two"},
    ):
        with pytest.raises(UsageError):
            allocation_hosts(bad)


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
def test_bad_specs(changes: dict[str, object]) -> None:
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


def run_script(
    text: str, tmp_path: Path, nodes: int = 2, usr1_after: float | None = None, extra: dict[str, str] | None = None
) -> tuple[int, list]:
    """Run a rendered script with fake srun/scontrol/tools on PATH; return its status and the tools' records."""
    bin_dir, log = tmp_path / "bin", tmp_path / "log.jsonl"
    bin_dir.mkdir()
    record = (
        "import json, os, sys\nwith open(os.environ['FAKE_LOG'], 'a') as f:\n"
        "    f.write(json.dumps([os.path.basename(sys.argv[0]), sys.argv[1:],"
        " {k: v for k, v in os.environ.items() if k[:1] in 'WMO' or k in ('NCCL_DEBUG', 'HPCDIST_RESTART_COUNT', 'TORCHELASTIC_RESTART_COUNT')}]) + '\\n')\n"
    )
    tools = {
        # srun runs its command once per node, as each node's task would, with SLURM_NODEID set
        # like the real srun, it passes SIGUSR1 on to its tasks instead of dying of it (here: records it)
        "srun": record + "import signal, subprocess, time\n"
        "def passed_on(number, frame):\n    with open(os.environ['FAKE_LOG'], 'a') as f:\n"
        "        f.write(json.dumps(['srun', ['got', signal.Signals(number).name], {}]) + '\\n')\n"
        "signal.signal(signal.SIGUSR1, passed_on)\n"
        "time.sleep(float(os.environ.get('FAKE_SLEEP', '0')))\n"
        "cmd = [a for a in sys.argv[1:] if not a.startswith('--')]\ni = sys.argv.index(cmd[0])\n"
        "codes = [subprocess.call(sys.argv[i:], env={**os.environ, 'SLURM_NODEID': str(n)})"
        f" for n in range({nodes})]\nsys.exit(max(codes) or int(os.environ.get('FAKE_STATUS', '0')))\n",
        "scontrol": record + "if sys.argv[1:3] == ['show', 'hostnames']: print('node01\\nnode02')\n",
        # `python -c CODE` (torchrun mode's port reservation) runs in the real Python, unrecorded
        "python": f"import os, sys\nif sys.argv[1:2] == ['-c']:\n"
        f"    os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])\n" + record,
        "torchrun": record,
        "mpirun": record,
    }
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!{sys.executable}\n{body}")
        (bin_dir / name).chmod(0o755)
    script = check_script(text, tmp_path)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_LOG": str(log),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "node[01-02]",
        "FAKE_SLEEP": "3" if usr1_after else "0",
        "FAKE_STATUS": "3",
        **(extra or {}),
    }
    proc = subprocess.Popen(["bash", str(script)], env=env, cwd=tmp_path)
    if usr1_after:
        time.sleep(usr1_after)
        proc.send_signal(signal.SIGUSR1)
    status = proc.wait(timeout=60)
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return status, records


def _bare(spec: SbatchSpec, **changes: object) -> SbatchSpec:
    """`spec` with tools found on PATH (the fakes) and no setup lines."""
    return dataclasses.replace(spec, python="python", mpirun="mpirun", torchrun="torchrun", setup=(), **changes)


def test_srun_mode_round_trips_program_and_environment(tmp_path: Path) -> None:
    spec = _bare(SPECS["weird"])
    status, records = run_script(render_sbatch(spec, JINJA), tmp_path, nodes=1)
    assert status == 3  # the step's status is the script's
    (tool, argv, env), (tool2, shim_argv, shim_env) = records
    names = ",".join(sorted(f"W{i}" for i in range(len(WEIRD))))
    assert tool == "srun" and argv[:3] == ["--mpi=pmix", "--kill-on-bad-exit=1", "--cpus-per-task=4"]
    assert argv[3] == f"--export=ALL,{names}" and argv[4:] == ["python", "-m", "hpcdist.shim", "--", "python", *WEIRD]
    assert tool2 == "python" and shim_argv == ["-m", "hpcdist.shim", "--", "python", *WEIRD]
    assert (
        {k: v for k, v in env.items() if k.startswith("W")}
        == dict(spec.env)
        == {k: v for k, v in shim_env.items() if k.startswith("W")}
    )


def test_opal_prefix_is_the_pythons_prefix(tmp_path: Path) -> None:
    spec = dataclasses.replace(BASE, python=sys.executable, opal_prefix=True, program=("true",))
    _, records = run_script(render_sbatch(spec, JINJA), tmp_path, nodes=1)
    assert records[0][2]["OPAL_PREFIX"] == sys.prefix and "--export=ALL,OPAL_PREFIX" in records[0][1]


def test_mpirun_mode_forwards_with_x(tmp_path: Path) -> None:
    _, records = run_script(render_sbatch(_bare(SPECS["gpu-mpirun"]), JINJA), tmp_path)
    tool, argv, env = records[0]
    assert tool == "mpirun" and env["NCCL_DEBUG"] == "INFO"
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
    assert argv == [
        "-np",
        "16",
        "--bind-to",
        "none",
        "--map-by",
        "slot",
        "--allow-run-as-root",
        "--mca",
        "btl",
        "^ofi",
        *keepalive,
        "-x",
        "NCCL_DEBUG",
        "python",
        "-m",
        "hpcdist.shim",
        "--",
        "python",
        "train.py",
    ]


def test_mpirun_mode_on_one_node_has_no_keepalive() -> None:
    spec = dataclasses.replace(_bare(SPECS["gpu-mpirun"]), nodes=1)
    assert "oob_tcp_keepalive" not in render_sbatch(spec, JINJA)


def test_torchrun_mode_runs_one_torchrun_per_node_with_its_rank(tmp_path: Path) -> None:
    status, records = run_script(render_sbatch(_bare(SPECS["gpu-torchrun"]), JINJA), tmp_path)
    runs = [r for r in records if r[0] == "torchrun"]
    assert [r[0] for r in records[:2]] == ["scontrol", "srun"] and status == 3
    assert records[1][1][:3] == ["--kill-on-bad-exit=1", "--cpus-per-task=32", "--export=ALL,NCCL_DEBUG"]
    port = runs[0][2]["MASTER_PORT"]  # the port the first node reserved (bind 0), the same for every node
    assert 1024 <= int(port) <= 65535
    for node, (_, argv, env) in enumerate(runs):
        assert argv == [
            f"--node_rank={node}",
            "--nproc_per_node=8",
            "--nnodes=2",
            "--master_addr=node01",
            f"--master_port={port}",
            "train.py",
        ]
        assert env["MASTER_ADDR"] == "node01" and env["MASTER_PORT"] == port and env["NCCL_DEBUG"] == "INFO"
    assert len(runs) == 2


def test_requeue_signal_requeues_and_keeps_the_steps_status(tmp_path: Path) -> None:
    spec = _bare(SPECS["requeue-srun"], requeue_signal="USR1@90", opal_prefix=False)
    text = render_sbatch(spec, JINJA)
    assert "#SBATCH --requeue\n#SBATCH --open-mode=append\n#SBATCH --signal=B:USR1@90\n" in text
    status, records = run_script(text, tmp_path, nodes=1, usr1_after=1.0)
    assert status == 3, records  # the step's own status, not the interrupted wait's
    # the trap passes USR1 to srun (the ranks checkpoint), and the job is requeued once the step has ended
    assert [r[:2] for r in records if r[0] in ("srun", "scontrol")][-2:] == [
        ["srun", ["got", "SIGUSR1"]],
        ["scontrol", ["requeue", "4242"]],
    ], records


def test_requeue_in_torchrun_mode_passes_sigterm_which_torchrun_hands_to_its_workers() -> None:
    spec = dataclasses.replace(_bare(SPECS["gpu-torchrun"]), requeue=True, time="1:00:00")
    text = render_sbatch(spec, JINJA)
    assert 'kill -s TERM "$hpcdist_step"' in text and "trap hpcdist_preempted USR1\n" in text


def test_a_step_that_ends_without_a_preemption_signal_is_not_requeued(tmp_path: Path) -> None:
    spec = _bare(SPECS["requeue-srun"], requeue_signal="USR1@90", opal_prefix=False)
    status, records = run_script(render_sbatch(spec, JINJA), tmp_path, nodes=1)
    assert status == 3 and "scontrol" not in [r[0] for r in records], records


def test_restarts_rerun_the_step_with_both_counters_until_max_restarts(tmp_path: Path) -> None:
    spec = _bare(BASE, max_restarts=2, opal_prefix=False)
    text = render_sbatch(spec, JINJA)
    status, records = run_script(text, tmp_path, nodes=1)
    assert status == 3  # every attempt failed: the last one's status
    counters = [[env.get(name) for name in RESTART_VARS] for tool, _, env in records if tool == "srun"]
    assert counters == [["0", "0"], ["1", "1"], ["2", "2"]]


def test_restarts_in_mpirun_mode_forward_the_counters_and_stop_on_success(tmp_path: Path) -> None:
    spec = _bare(SPECS["gpu-mpirun"], max_restarts=3)
    text = render_sbatch(spec, JINJA)
    assert "-x HPCDIST_RESTART_COUNT -x TORCHELASTIC_RESTART_COUNT -x HPCDIST_MAX_RESTARTS \\\n" in text
    status, records = run_script(text, tmp_path)
    assert status == 0 and [tool for tool, _, _ in records] == ["mpirun"]  # the fake mpirun succeeds: no restart


def test_a_preempted_array_task_requeues_itself_by_arrayid_task(tmp_path: Path) -> None:
    # an array task's own SLURM_JOB_ID can be the array's id (the last task gets it): requeueing that id would
    # requeue every task, so the script names the task as ARRAYID_TASK
    spec = _bare(SPECS["requeue-srun"], requeue_signal="USR1@90", opal_prefix=False, array="0-1")
    text = render_sbatch(spec, JINJA)
    assert "#SBATCH --array=0-1\n" in text
    array = {"SLURM_JOB_ID": "4242", "SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "1"}
    status, records = run_script(text, tmp_path, nodes=1, usr1_after=1.0, extra=array)
    assert status == 3, records
    assert [r[:2] for r in records if r[0] == "scontrol"][-1] == ["scontrol", ["requeue", "4242_1"]], records
