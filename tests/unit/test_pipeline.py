"""One pipeline for every launch: the golden command lines of `hpcdist mpirun --dry-run`, `hpcdist.launch`, the doctor's
probe job and a batch script's mpirun step, each from the same options as the other callers build them.

Each caller has its own inputs and the function that turns them into options (the CLI's `mpirun_options`,
`hpcdist.launch`'s `launch_options`, the doctor's `probe_options`, a batch script's `step_options`); from there one
function builds every command line: `plan(options, world)` and `execute.command`. For each caller the test checks
that its options are those `hpcdist mpirun` parses from the equivalent command, that the command line the caller
runs (or writes) is the one `hpcdist mpirun --dry-run` prints for those options (its placeholders for the control
token and run id aside, for the callers hpcdist does not watch), and that it is the golden one written here. A dry
run is also checked against the command hpcdist mpirun really runs.
"""

from __future__ import annotations

import io
import json
import shlex
import sys
from pathlib import Path

import pytest

from hpcdist import __version__, records
from hpcdist.calling.pyfunc import launch_options
from hpcdist.cli import build_parser
from hpcdist.cli.launch import mpirun, mpirun_options
from hpcdist.doctor.probe import probe_command, probe_options
from hpcdist.errors import UsageError
from hpcdist.jobs.sbatch import batch_world, render_sbatch, step_options
from hpcdist.jobs.sbatchspec import SbatchSpec
from hpcdist.launching.execute import PLACEHOLDERS, command
from hpcdist.launching.options import DRY_RUN, RUN, MpirunOptions
from hpcdist.launching.output import OutputOptions
from hpcdist.launching.plan import plan
from hpcdist.launching.world import World

PY = "/venv/bin/python"
TOKEN, RUN_ID = "0123456789abcdef", "fedcba9876543210"
KEEPALIVE = ["--prtemca", "oob_tcp_keepalive_time", "2", "--prtemca", "oob_tcp_keepalive_intvl", "1",
             "--prtemca", "oob_tcp_keepalive_probes", "3"]  # fmt: skip
SHIM = [PY, "-m", "hpcdist.worker", "--"]


@pytest.fixture
def place(tmp_path: Path) -> tuple[str, str]:
    """An Open MPI installation's mpirun (a stub, with Open MPI's ompi_info beside it) and a hostfile of two hosts."""
    mpi = tmp_path / "openmpi" / "bin"
    mpi.mkdir(parents=True)
    for name in ("mpirun", "ompi_info"):
        (mpi / name).write_text("#!/bin/sh\nexit 0\n")
        (mpi / name).chmod(0o755)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n1 slots=2\nn2 slots=2\n")
    return str(mpi / "mpirun"), str(hostfile)


def _world(mpirun_path: str) -> World:
    """A login node: its environment (the mpirun to use, an NCCL setting), a user who is not root, piped output."""
    environ = {"PATH": "/usr/bin:/bin", "HPCDIST_MPIRUN": mpirun_path, "NCCL_DEBUG": "INFO"}
    return World(environ=environ, stdout=io.StringIO(), stderr=io.StringIO(), euid=1000, python=PY, hostname="login1")


def _printed(options: MpirunOptions, world: World) -> list[str]:
    """What `hpcdist mpirun --dry-run` prints for `options` in `world`, with the run's own values in place."""
    assert mpirun(records.replace(options, mode=DRY_RUN), world) == 0
    assert isinstance(world.stdout, io.StringIO)
    line = world.stdout.getvalue()
    world.stdout.truncate(0)
    return shlex.split(line.replace(PLACEHOLDERS["token"], TOKEN).replace(PLACEHOLDERS["run_id"], RUN_ID))


def _parsed(*argv: str) -> MpirunOptions:
    """The options `hpcdist mpirun ARGV` parses into, as a run (the mode aside)."""
    return records.replace(mpirun_options(build_parser().parse_args(["mpirun", *argv])), mode=RUN, script=None)


def _unwatched(argv: list[str]) -> list[str]:
    """A command line without the control token and run id, which only a launch hpcdist watches gets."""
    ours = (f"HPCDIST_CONTROL={TOKEN}", f"HPCDIST_RUN_ID={RUN_ID}")
    return [w for i, w in enumerate(argv) if w not in ours and not (w == "-x" and argv[i + 1 : i + 2][0] in ours)]


def test_hpcdist_launch(place: tuple[str, str], tmp_path: Path) -> None:
    mpirun_path, hostfile = place
    world = _world(mpirun_path)
    call, outcomes, trace = "/jobs/call.pkl", "/jobs/rank-{rank}.pkl", str(tmp_path / "t.json")
    options = launch_options(PY, call, outcomes, np=4, hostfile=hostfile, trace=trace)
    program = [PY, "-m", "hpcdist.runtime.pycall", call, outcomes]
    assert options == _parsed("-np", "4", "--hostfile", hostfile, "--no-tag", "--tail", "0", "--trace", trace, *program)
    launched = command(plan(options, world, "hpcdist.launch"), TOKEN, RUN_ID)
    assert launched == _printed(options, world) == [
        mpirun_path, "-np", "4", "--hostfile", hostfile, "--bind-to", "none", "--map-by", "slot",
        "--mca", "btl", "^ofi", *KEEPALIVE, "-x", "HPCDIST_MPIRUN", "-x", "NCCL_DEBUG",
        "-x", f"HPCDIST_VERSION={__version__}",
        "-x", "HPCDIST_HEARTBEAT=5", "-x", f"HPCDIST_TRACE={trace}", "-x", "HPCDIST_TAG=numbered",
        "-x", "HPCDIST_OUTPUT_RATE=2097152", "-x", "HPCDIST_MPI=openmpi", "-x", "HPCDIST_SCHEDULER=none",
        "-x", f"HPCDIST_CONTROL={TOKEN}", "-x", f"HPCDIST_RUN_ID={RUN_ID}",
        *SHIM, *program,
    ]  # fmt: skip


def test_the_doctors_probe_job(place: tuple[str, str]) -> None:
    mpirun_path, hostfile = place
    world = _world(mpirun_path)
    program = [PY, "-c", "print(1)"]
    options = probe_options(mpirun_path, "openmpi", 4, program, hostfile)
    argv = ["--bare", "-np", "4", "--hostfile", hostfile, "--map-by", "node", "--oversubscribe"]
    assert options == _parsed(*argv, "--mpirun", mpirun_path, "--mpi", "openmpi", "--", *program)
    assert probe_command(options, world) == _unwatched(_printed(options, world)) == [
        mpirun_path, "-np", "4", "--hostfile", hostfile, "--bind-to", "none", "--map-by", "node", "--oversubscribe",
        "--mca", "btl", "^ofi", *KEEPALIVE, "-x", "HPCDIST_MPIRUN", "-x", "NCCL_DEBUG",
        "-x", f"HPCDIST_VERSION={__version__}", *program,
    ]  # fmt: skip


@pytest.mark.parametrize("launch", ["mpirun", "srun"])
def test_a_batch_scripts_step_is_hpcdist_mpirun_with_the_options_the_pipeline_plans(
    place: tuple[str, str], launch: str
) -> None:
    mpirun_path, _ = place
    spec = SbatchSpec(
        program=("train.py", "a b"), nodes=2, ntasks_per_node=2, launch=launch, mpirun=mpirun_path, python=PY,
        env=(("NCCL_DEBUG", "INFO"),), max_restarts=1, rank_output=OutputOptions(tag=True, log_dir="my logs"),
    )  # fmt: skip
    own = dict(spec.env)
    options = step_options(spec, own)
    launcher = ["--mpi", "srun"] if launch == "srun" else [
        "-x", "NCCL_DEBUG", "-x", "HPCDIST_RESTART_COUNT", "-x", "TORCHELASTIC_RESTART_COUNT",
        "--mpirun", mpirun_path, "--mpi", "openmpi",
    ]  # fmt: skip
    argv = ["-np", "4", *launcher, "--tag", "--log-dir", "my logs", "--", "train.py", "a b"]
    assert options == _parsed(*argv)
    text = render_sbatch(spec)
    at = next(i for i, line in enumerate(text.splitlines()) if line.strip().startswith(f"{PY} -m hpcdist mpirun "))
    words = shlex.split(" ".join(text.splitlines()[at : at + 2]).replace("\\", "").replace("|| hpcdist_status=$?", ""))
    assert words[:4] == [PY, "-m", "hpcdist", "mpirun"] and _parsed(*words[4:]) == options  # runs as planned
    plan(options, batch_world(spec, own))  # what the job's hpcdist mpirun would refuse is refused when written
    assert "export HPCDIST_MAX_RESTARTS=1\n" in text and "HPCDIST_VERSION" not in text  # hpcdist mpirun's own


def test_options_written_as_arguments_parse_back_to_the_same_options() -> None:
    options = MpirunOptions(
        program=("python", "t.py", "--lr", "0.1"), np=8, hostfile="hosts", include="n1:0,1@n2", export=("A", "B=1 2"),
        mca=(("btl", "tcp,self"),), bind_to="core", map_by="node", bind="none", oversubscribe=True,
        probe_fabrics=True, mpirun="/opt/mpi/bin/mpirun", mpi="mpich", launch_agent="ssh -p 22", tag=False,
        log_dir="l d", ranks="0,3", tail=5, heartbeat_timeout=2.5, trace="t.json", outcome="o.json",
        on_failure="end", min_np=2, max_restarts=3,
    )  # fmt: skip
    assert _parsed(*options.argv()) == options
    assert MpirunOptions(program=("x",)).argv() == ["--", "x"]
    dry = records.replace(options, outcome=None, mode=DRY_RUN)
    assert mpirun_options(build_parser().parse_args(["mpirun", *dry.argv()])) == dry


def test_the_dry_run_is_the_command_that_runs(tmp_path: Path) -> None:
    """`hpcdist mpirun --dry-run` and `hpcdist mpirun` with a stub mpirun that notes its argv: with the run's token
    and run id in place of the placeholders, the printed line is that argv, word for word."""
    log = tmp_path / "argv.json"
    stub = tmp_path / "mpirun"
    stub.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(log)!r}, 'w').write(json.dumps(sys.argv))\n")
    stub.chmod(0o755)
    out = io.StringIO()
    world = records.replace(_world(str(stub)), stdout=out)
    options = MpirunOptions(program=("python", "t.py"), np=2, mpi="openmpi", max_restarts=1, export=("A=1",))
    assert mpirun(records.replace(options, mode=DRY_RUN), world) == 0
    printed = out.getvalue()
    assert PLACEHOLDERS["token"] in printed and PLACEHOLDERS["run_id"] in printed
    assert mpirun(options, records.replace(world, stdout=None)) == 0
    ran = json.loads(log.read_text())
    ours = dict(word.partition("=")[::2] for word in ran if word.startswith("HPCDIST_"))
    line = printed.replace(PLACEHOLDERS["token"], ours["HPCDIST_CONTROL"])
    assert shlex.split(line.replace(PLACEHOLDERS["run_id"], ours["HPCDIST_RUN_ID"])) == ran


@pytest.mark.parametrize(
    ("np", "oversubscribe", "here", "refused"),
    [(8, False, True, False), (9, False, True, True), (64, True, True, False), (64, False, False, False)],
)
def test_far_more_ranks_than_this_machine_s_cpus_are_refused_unless_asked_for(
    place: tuple[str, str], np: int, oversubscribe: bool, here: bool, refused: bool
) -> None:
    world = records.replace(_world(place[0]), cpus=frozenset({0, 1}), here=here)  # 2 CPUs: at most 8 ranks
    options = MpirunOptions(program=("python", "train.py"), np=np, oversubscribe=oversubscribe)
    if refused:
        with pytest.raises(UsageError, match=r"^-np 9 is 4\.5 ranks for each of the 2 CPUs this process may run on; "):
            plan(options, world)
    else:
        assert plan(options, world).spec.np == np


@pytest.mark.parametrize(
    ("np", "oversubscribe", "here", "said"),
    [
        (2, False, True, False),
        (3, False, True, True),
        (8, False, True, True),
        (3, True, True, False),
        (3, False, False, False),
    ],
)
def test_more_ranks_than_this_machine_s_cpus_are_said_in_one_line_before_they_start(
    place: tuple[str, str], np: int, oversubscribe: bool, here: bool, said: bool
) -> None:
    world = records.replace(_world(place[0]), cpus=frozenset({0, 1}), here=here)
    note = plan(MpirunOptions(program=("python", "train.py"), np=np, oversubscribe=oversubscribe), world).note
    expected = f"hpcdist: -np {np} is more ranks than the 2 CPUs this process may run on, so they share them and each"
    assert note.startswith(expected) if said else note == ""
    assert "\n" not in note
