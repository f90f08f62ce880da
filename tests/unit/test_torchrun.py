"""Tests for hpcdist.jobs.torchrun: the seed notes' torchrun command line and the per-node script, run through bash."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_render import WEIRD, check_script

from hpcdist.errors import UsageError
from hpcdist.jobs.render import make_environment
from hpcdist.jobs.torchrun import TorchrunSpec, build_torchrun_argv, program_words, render_torchrun_script

JINJA = make_environment(None, {})
SEED = TorchrunSpec(("python", "main.py", "--backend=nccl"), "2", 2, 0, "104.171.200.62", 1234)


def test_the_seed_command_line() -> None:
    assert build_torchrun_argv(SEED) == [
        "torchrun",
        "--nproc_per_node=2",
        "--nnodes=2",
        "--node_rank=0",
        "--master_addr=104.171.200.62",
        "--master_port=1234",
        "main.py",
        "--backend=nccl",
    ]


def test_single_node_needs_no_master_and_takes_a_free_port_when_it_starts() -> None:
    assert build_torchrun_argv(TorchrunSpec(("train.py",), "gpu")) == [
        "torchrun",
        "--nproc_per_node=gpu",
        "--nnodes=1",
        "--standalone",
        "train.py",
    ]


@pytest.mark.parametrize(
    ("program", "words"),
    [
        (("python", "train.py", "-x"), ["train.py", "-x"]),
        (("python3.11", "-m", "pkg.train", "--lr", "1"), ["-m", "pkg.train", "--lr", "1"]),
        (("train.py",), ["train.py"]),
        (("-m", "pkg"), ["-m", "pkg"]),
        (("./a.out", "x"), ["--no_python", "./a.out", "x"]),
    ],
)
def test_program_words(program: tuple[str, ...], words: list[str]) -> None:
    assert program_words(program) == words


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"nnodes": 2, "master_addr": None}, "needs --master_addr"),
        ({"node_rank": 2}, "out of range"),
        ({"nnodes": 0}, "--nnodes must be at least 1"),
        ({"nproc_per_node": "0"}, r"^--nproc_per_node '0': give a count of at least 1 or one of auto, cpu, gpu, xpu$"),
        ({"nproc_per_node": "many"}, r"^--nproc_per_node 'many': give a count of at least 1 or one of auto, cpu, gpu"),
        ({"master_port": 0}, r"^--master_port must be between 1 and 65535, got 0$"),
        ({"master_port": None}, "--nnodes 2 --master_addr 104.171.200.62 needs --master_port: every node must know"),
        ({"nnodes": 1, "master_port": None}, "--nnodes 1 --master_addr 104.171.200.62 needs --master_port"),
        ({"master_addr": "a;b"}, r"^--master_addr 'a;b' is not a host name or IP address$"),
        ({"program": ()}, "no program"),
        ({"program": ("python",)}, "names no script"),
        ({"program": ("python", "-u", "x.py")}, "python option -u"),
    ],
)
def test_bad_specs(changes: dict[str, object], message: str) -> None:
    spec = TorchrunSpec(**{**SEED.__dict__, **changes})
    with pytest.raises(UsageError, match=message):
        build_torchrun_argv(spec)


def test_per_node_script_takes_the_node_rank_and_round_trips(tmp_path: Path) -> None:
    fake = tmp_path / "torchrun"
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "print(json.dumps([sys.argv[1:], {k: v for k, v in os.environ.items() if k[0] == 'W'}]))\n"
    )
    fake.chmod(0o755)
    spec = TorchrunSpec(("python", "train.py", *WEIRD), "8", 2, 0, "node01", 29500, str(fake))
    env = {f"W{i}": v for i, v in enumerate(WEIRD)}
    script = check_script(render_torchrun_script(spec, env, JINJA), tmp_path)
    done = subprocess.run(["bash", str(script), "1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    argv, seen = json.loads(done.stdout)
    assert argv == [
        "--nproc_per_node=8",
        "--nnodes=2",
        "--master_addr=node01",
        "--master_port=29500",
        "--node_rank=1",
        "train.py",
        *WEIRD,
    ]
    assert seen == env
    usage = f"usage: {script} NODE_RANK (0 on the master node, then 1, 2, ...)\n"
    for bad, said in (
        ([], usage),
        (["x"], usage),
        (["-1"], usage),
        (["2"], f"{script}: NODE_RANK must be below the number of nodes, 2\n"),
    ):
        done = subprocess.run(["bash", str(script), *bad], capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stderr, done.stdout) == (2, said, ""), bad


def test_single_node_script_defaults_to_rank_0(tmp_path: Path) -> None:
    text = render_torchrun_script(TorchrunSpec(("train.py",), "2", torchrun="echo"), {}, JINJA)
    script = check_script(text, tmp_path)
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert done.stdout == "--nproc_per_node=2 --nnodes=1 --standalone --node_rank=0 train.py\n"
