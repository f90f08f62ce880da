"""Tests for hpcdist.launching.selection: --include/--exclude in DeepSpeed's syntax, and where they end up."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from test_render import check_script

from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.families.base import AppContext, MpirunSpec
from hpcdist.hosts import HostSlots as H
from hpcdist.jobs.render import make_environment
from hpcdist.jobs.sbatch import render_sbatch
from hpcdist.jobs.sbatchspec import SbatchSpec
from hpcdist.launching.mpirun import build_mpirun_argv
from hpcdist.launching.selection import Selected, parse_selection, select_hosts, select_nodes

WORKERS = (H("worker-0", 4), H("worker-1", 4))
SOURCE = "-H worker-0:4,worker-1:4"


def kept(include: str | None = None, exclude: str | None = None, hosts=WORKERS) -> list[tuple[str, object]]:
    """(host, slot indices or 'all') of each host the selection keeps."""
    return [(s.host.host, s.indices or "all") for s in select_hosts(hosts, include, exclude, SOURCE)]


# DeepSpeed's own examples (parse_resource_filter's docstring and its README), and its rules.
@pytest.mark.parametrize(
    ("include", "exclude", "expected"),
    [
        ("worker-0@worker-1:0,2", None, [("worker-0", "all"), ("worker-1", (0, 2))]),
        (None, "worker-1:0", [("worker-0", "all"), ("worker-1", (1, 2, 3))]),
        ("worker-0", None, [("worker-0", "all")]),
        (None, "worker-0", [("worker-1", "all")]),
        (None, "worker-0:0,1,2,3", [("worker-1", "all")]),  # a host left with no slot is dropped
        ("worker-1:2@worker-0:1", None, [("worker-0", (1,)), ("worker-1", (2,))]),  # the host list's order
        ("worker-0:3,1,1@worker-0:0", None, [("worker-0", (0, 1, 3))]),  # repeats count once, slots sorted
        ("worker-0:0,1,2,3", None, [("worker-0", "all")]),  # every slot named is the whole host
        (None, None, [("worker-0", "all"), ("worker-1", "all")]),
    ],
)
def test_deepspeed_semantics(include: str | None, exclude: str | None, expected: list) -> None:
    assert kept(include, exclude) == expected


def test_a_partial_host_keeps_only_its_selected_slots() -> None:
    assert select_hosts(WORKERS, None, "worker-1:1,3", SOURCE) == (
        Selected(H("worker-0", 4)),
        Selected(H("worker-1", 2), (0, 2)),
    )
    capped = (H("n1", 2, 4),)  # a whole host keeps its max_slots
    assert select_hosts(capped, "n1", None, "x") == (Selected(H("n1", 2, 4)),)


def test_slurm_ranges_name_several_hosts() -> None:
    hosts = tuple(H(f"n{i}", 2) for i in range(1, 5))
    assert kept(None, "n[2-3]", hosts) == [("n1", "all"), ("n4", "all")]
    assert kept("n[1-2]:1", None, hosts) == [("n1", (1,)), ("n2", (1,))]
    assert parse_selection("n[01-02]@gpu7:0", "--include") == {"n01": None, "n02": None, "gpu7": (0,)}


@pytest.mark.parametrize(
    ("include", "exclude", "needle"),
    [
        ("worker-0", "worker-1", "give either --include or --exclude, not both"),
        ("nope", None, "host 'nope' is not in -H worker-0:4,worker-1:4 (hosts: worker-0, worker-1)"),
        (None, "worker-1:4", "worker-1 has no slot 4; its 4 slot(s) are numbered 0 to 3"),
        (None, "worker-0@worker-1", "leaves no host of -H worker-0:4,worker-1:4; keep at least one"),
        ("worker-0@@worker-1", None, "an empty host between two '@'"),
        ("@worker-0", None, "an empty host"),
        ("worker-0@", None, "an empty host"),
        ("worker-0:", None, "'worker-0:' has no slot after ':'; give slot indices (e.g. worker-0:0,1)"),
        ("worker-0:0,,1", None, "slot '' of worker-0 is not a slot index"),
        ("worker-0:-1", None, "slot '-1' of worker-0 is not a slot index"),
        ("worker-0: 1", None, "slot ' 1' of worker-0"),
        ("worker-0:1:2", None, "slot '1:2' of worker-0"),
        ("worker-0:²", None, "slot '²' of worker-0"),
        ("worker-0@worker-0:1", None, "'worker-0' is named both whole and by slots"),
        ("worker-0,worker-1", None, "lists several hosts with ','; join hosts with '@'"),
        ("", None, "no host named"),
        ("a b", None, "'a b' is not a host name"),
        ("n[1-", None, "not a valid Slurm nodelist"),
    ],
)
def test_bad_selections_say_what_and_how_to_fix(include: str | None, exclude: str | None, needle: str) -> None:
    with pytest.raises(UsageError, match=None) as info:
        select_hosts(WORKERS, include, exclude, SOURCE)
    assert needle in str(info.value)


def test_app_contexts_in_the_argv() -> None:
    spec = MpirunSpec(
        program=("python", "x.py"),
        np=3,
        contexts=(AppContext(H("a", 2), 2, (("CUDA_VISIBLE_DEVICES", "0,2"),)), AppContext(H("b", 4), 1)),
    )
    argv = build_mpirun_argv(spec)
    assert argv[0] == "mpirun" and "-np" not in argv[:2] and "-H" not in argv[: argv.index("--map-by")]
    assert argv[argv.index("^ofi") + 1 :] == [
        "-np",
        "2",
        "-H",
        "a:2",
        "-x",
        "CUDA_VISIBLE_DEVICES=0,2",
        "python",
        "x.py",
        ":",
        "-np",
        "1",
        "-H",
        "b:4",
        "python",
        "x.py",
    ]


def dry(capsys: pytest.CaptureFixture[str], *argv: str, env: dict[str, str] | None = None) -> list[str]:
    """`hpcdist mpirun --dry-run ARGV -- prog` -> the argv it prints."""
    with pytest.MonkeyPatch.context() as mp:
        for name in [n for n in os.environ if n.startswith("SLURM_") or n == "CUDA_VISIBLE_DEVICES"]:
            mp.delenv(name)
        for name, value in (env or {}).items():
            mp.setenv(name, value)
        status = main(["mpirun", "--dry-run", "--mpirun", "mpirun", *argv, "--", "prog"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return shlex.split(out)


def test_mpirun_with_whole_hosts_passes_fewer_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    words = dry(capsys, "-H", "a:2,b:2,c:2", "--exclude", "b")
    assert shlex.join(words[:5]) == "mpirun -np 4 -H a:2,c:2"


def test_mpirun_with_slots_runs_an_app_context_per_host(capsys: pytest.CaptureFixture[str]) -> None:
    words = dry(capsys, "-H", "localhost:4", "--exclude", "localhost:1,3", "--bare")
    assert words[-7:] == ["-np", "2", "-H", "localhost:2", "-x", "CUDA_VISIBLE_DEVICES=0,2", "prog"]
    words = dry(capsys, "-H", "a:4,b:4", "--include", "a:0,3@b", "-np", "3", "--bare")
    assert shlex.join(words[-13:]) == "-np 2 -H a:2 -x CUDA_VISIBLE_DEVICES=0,3 prog : -np 1 -H b:4 prog"


def test_mpirun_selects_from_a_hostfile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n1 slots=2\nn2 slots=2\n")
    words = dry(capsys, "--hostfile", str(hostfile), "--include", "n2")
    assert "--hostfile" not in words and shlex.join(words[:5]) == "mpirun -np 2 -H n2:2"


def test_mpirun_selects_from_the_slurm_allocation(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "2(x3)", "SLURM_JOB_NUM_NODES": "3"}
    words = dry(capsys, "--exclude", "n2", env=env)
    # inside the allocation Slurm signals every process of the job: the launcher runs with SIGTERM held
    assert words[1:3] == ["-m", "hpcdist.launching.heldterm"]
    assert shlex.join(words[3:8]) == "mpirun -np 4 -H n1:2,n3:2"


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (("-H", "a:2", "--include", "b"), {}, "host 'b' is not in -H a:2"),
        (("-H", "a:4", "--exclude", "a:1", "-np", "4"), {}, "-np 4 is more than the 3 slots the selection keeps"),
        (("-H", "a:4", "--exclude", "a:1", "-np", "4", "--oversubscribe"), {}, "--oversubscribe cannot add more"),
        (("-H", "a:4", "--exclude", "a", "-np", "1"), {}, "leaves no host of -H a:4"),
        (("-np", "2", "--exclude", "localhost:1"), {}, "--include/--exclude choose from a host list: give --hostfile"),
        (("-H", "a:4", "--exclude", "a:1"), {"CUDA_VISIBLE_DEVICES": "1"}, "but CUDA_VISIBLE_DEVICES is set here too"),
        (("-H", "a:2,b:2", "--exclude", "b", "-np", "3"), {}, "-np 3 is more than the 2 slots"),
    ],
)
def test_mpirun_selection_errors(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], env: dict[str, str], needle: str
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        status = main(["mpirun", "--dry-run", "--mpirun", "mpirun", *argv, "--", "prog"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("hpcdist: error: ") and needle in err, err


def test_hostfile_keeps_the_selected_hosts_and_slots(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hostfile", "--hosts", "n1,n2,n3", "--slots", "4", "--exclude", "n2@n3:1,3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == ["# selected: n3 slots 0,2", "n1 slots=4", "n3 slots=2"]
    assert main(["hostfile", "--nodelist", "n[1-4]", "--include", "n[2-3]", "--format", "mpich"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["n2:1", "n3:1"]
    assert main(["hostfile", "--hosts", "n1", "--exclude", "n1"]) == 2
    assert "leaves no host of --hosts n1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("nodelist", "include", "exclude", "nodes", "expected"),
    [
        (None, None, "n1", None, (None, "n1", 1)),
        (None, None, "n[1-2]@gpu7", 4, (None, "gpu7,n[1-2]", 4)),
        (None, "n1@n2", None, None, ("n[1-2]", None, 2)),
        ("n[1-4]", None, "n2", None, ("n[1,3-4]", None, 3)),
        ("n[1-4]", "n[2-3]", None, 2, ("n[2-3]", None, 2)),
        (None, None, None, None, (None, None, 1)),
        ("n[1-2]", None, None, 5, ("n[1-2]", None, 5)),
    ],
)
def test_sbatch_selection_is_whole_nodes(nodelist, include, exclude, nodes, expected) -> None:
    assert select_nodes(nodelist, include, exclude, nodes) == expected


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--exclude", "n1:0"), "selects slots of 'n1'; Slurm allocates whole nodes"),
        (("--include", "n1@n2:1"), "selects slots of 'n2'"),
        (("--include", "n1", "--exclude", "n2"), "not both"),
        (("-N", "2", "--include", "n1"), "--nodes 2 does not match the 1 node(s) --include 'n1' leaves"),
        (("-w", "n[1-2]", "--exclude", "n3"), "host 'n3' is not in --nodelist 'n[1-2]'"),
        (("-w", "n[1-2]", "--exclude", "n[1-2]"), "leaves no host of --nodelist 'n[1-2]'"),
        (("--exclude", "n1,n2"), "join hosts with '@'"),
        (("-x", "a@@b"), "an empty host"),
    ],
)
def test_sbatch_selection_errors(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], needle: str) -> None:
    assert main(["sbatch", *argv, "--", "prog"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hpcdist: error: ") and needle in err, err


def test_sbatch_renders_slurms_own_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["sbatch", "--exclude", "n[1-2]@gpu7", "--", "prog"]) == 0
    assert '#SBATCH --exclude="gpu7,n[1-2]"\n' in capsys.readouterr().out
    assert main(["sbatch", "--include", "n1@n2", "--launch", "mpirun", "--", "prog"]) == 0
    text = capsys.readouterr().out
    assert "#SBATCH --nodes=2\n" in text and '#SBATCH --nodelist="n[1-2]"\n' in text and "-np 2 " in text
    check_script(text, tmp_path)
    spec = SbatchSpec(program=("prog",), exclude="n[3-4]", nodelist="n[1-2]", nodes=2)
    check_script(render_sbatch(spec, make_environment()), tmp_path)


def test_a_script_of_app_contexts_takes_no_arguments(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["mpirun", "--script", "-", "--mpirun", "true", "-H", "a:2", "--exclude", "a:0", "--", "prog"]) == 0
    script = check_script(capsys.readouterr().out, tmp_path)
    refused = subprocess.run(["bash", str(script), "--lr", "1"], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "takes no arguments" in refused.stderr
    assert subprocess.run(["bash", str(script)], timeout=30).returncode == 0  # `true` stands in for mpirun
