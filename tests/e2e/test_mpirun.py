"""`hpcdist mpirun` end to end: real Open MPI, four ranks, results checked per rank."""

from __future__ import annotations

import json
import sys

import pytest
from launching import BIN, PROGRAMS, launch

NP = 4


def _markers(directory) -> dict[str, str]:
    return {path.name: path.read_text().strip() for path in sorted(directory.iterdir())}


def test_an_unmodified_torchrun_style_script_runs_under_mpirun(hpcdist: str, tmp_path) -> None:
    result = launch(
        [
            hpcdist,
            "mpirun",
            "-np",
            str(NP),
            "--hostfile",
            "hostfiles/localhost",
            "--",
            "python",
            str(PROGRAMS / "one_to_many.py"),
            "--backend",
            "gloo",
        ],
        MARKER_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    # rank, local rank, world size, value received from rank 0
    assert _markers(tmp_path) == {f"rank{r}": f"{r} {r} {NP} 1" for r in range(NP)}
    assert result.stdout.count("has received data from rank 0") == NP - 1


def test_a_non_python_program_runs_as_a_child_with_the_torch_variables(hpcdist: str, tmp_path) -> None:
    script = 'echo "$RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR" > "$MARKER_DIR/sh$RANK"; exec "$@"'
    result = launch(
        [
            hpcdist,
            "mpirun",
            "-np",
            str(NP),
            "--",
            "sh",
            "-c",
            script,
            "sh",
            sys.executable,
            str(PROGRAMS / "one_to_many.py"),
            "--backend",
            "gloo",
        ],
        MARKER_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    markers = _markers(tmp_path)
    assert {markers[f"sh{r}"] for r in range(NP)} == {f"{r} {r} {NP} 127.0.0.1" for r in range(NP)}
    assert {markers[f"rank{r}"] for r in range(NP)} == {f"{r} {r} {NP} 1" for r in range(NP)}


def test_the_workloads_verify_their_results_on_every_rank(hpcdist: str) -> None:
    names = ["p2p", "broadcast", "allreduce", "reduce", "gather"]
    result = launch(
        [
            hpcdist,
            "mpirun",
            "-np",
            str(NP),
            "--hostfile",
            "hostfiles/localhost",
            "--",
            hpcdist,
            "run",
            *names,
            "--backend",
            "gloo",
        ]
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert {f"rank {r}: received {100 + r:g} from rank 0" for r in range(1, NP)} <= set(lines)
    assert {f"rank {r}: all_reduce SUM over all ranks -> [10.0, 20.0, 30.0]" for r in range(NP)} <= set(lines)
    assert {f"rank {r}: all_reduce SUM over new_group([0, 1]) -> [3.0, 6.0, 9.0]" for r in range(2)} <= set(lines)
    assert "rank 0: reduce SUM onto rank 0 -> [10.0, 20.0, 30.0]" in lines


def test_an_mpich_style_hostfile_works(hpcdist: str, tmp_path) -> None:
    hostfile = tmp_path / "mpich"
    hostfile.write_text("localhost:2\n")
    result = launch([hpcdist, "mpirun", "--hostfile", str(hostfile), "--", hpcdist, "run", "allreduce"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("all_reduce SUM over all ranks -> [3.0, 6.0, 9.0]") == 2


def test_hpcdist_env_under_plain_mpiexec_shows_consistent_ranks(hpcdist: str) -> None:
    result = launch([str(BIN / "mpiexec"), "-n", str(NP), "--oversubscribe", hpcdist, "env", "--json"])
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(row["rank"] for row in rows) == list(range(NP))
    assert {(row["launcher"], row["world_size"], row["local_world_size"]) for row in rows} == {("openmpi", NP, NP)}
    assert sorted(row["local_rank"] for row in rows) == list(range(NP))


@pytest.mark.parametrize(
    ("how", "evidence"),
    [
        (
            "raise",
            [
                "[rank 2] Traceback (most recent call last):",
                "[rank 2] ValueError: deliberate failure on rank 2",
                "hpcdist: first failure: rank 2 on",
            ],
        ),
        ("exit", ["hpcdist: first failure: rank 2 on", "failed with exit code 3"]),
        ("kill", ["hpcdist: first failure: rank 2 on", "killed by SIGKILL"]),  # named by hpcdist: no Open MPI banner
    ],
)
def test_one_failing_rank_ends_the_whole_job_quickly(hpcdist: str, how: str, evidence: list[str]) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", str(NP), "--", "python", str(PROGRAMS / "fail.py")],
        timeout=120,
        FAIL_RANK="2",
        FAIL_HOW=how,
    )
    assert result.returncode != 0
    for text in evidence:
        assert text in result.stderr, result.stderr
    assert "hpcdist/worker.py" not in result.stderr  # the traceback starts in the user's program
    # and the job ended within the launch's timeout: the others would wait in their barrier for ever


def test_nccl_without_cuda_is_a_clear_error_on_every_rank(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "--", hpcdist, "run", "p2p", "--backend", "nccl"], timeout=120)
    assert result.returncode != 0
    assert "hpcdist: error: backend nccl needs CUDA GPUs, but torch sees none" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_half_set_launcher_environment_is_a_clear_error(hpcdist: str) -> None:
    result = launch([hpcdist, "run", "p2p"], OMPI_COMM_WORLD_RANK="1")
    assert result.returncode == 2
    assert result.stderr.startswith("hpcdist: error: OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not")
    assert "Traceback" not in result.stderr


def test_a_program_that_never_imports_torch_loads_it_on_no_rank(hpcdist: str) -> None:
    """Rank 0 serves the store only when its program needs torch; the store is promised all the same."""
    code = "import os, sys; print('torch', os.environ['RANK'], 'torch' in sys.modules, "
    code += "os.environ['TORCHELASTIC_USE_AGENT_STORE'])"
    result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", "-c", code])
    assert result.returncode == 0, result.stderr
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("torch ")) == [
        "torch 0 False True",
        "torch 1 False True",
    ]


def test_a_rank_loads_only_what_its_part_needs(hpcdist: str, tmp_path) -> None:
    """Rank 0 binds the rendezvous and so imports socket; rank 1, on rank 0's host, opens no socket of hpcdist's and
    never imports it (3-5 ms of its start), nor runpy's pkgutil for a script (2 ms)."""
    script = tmp_path / "loaded.py"
    script.write_text(
        "import os, sys; print('loaded', os.environ['RANK'], 'socket' in sys.modules, 'pkgutil' in sys.modules)"
    )
    result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", str(script)])
    assert result.returncode == 0, result.stderr
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("loaded ")) == [
        "loaded 0 True False",
        "loaded 1 False False",
    ]


def test_the_program_runs_with_the_garbage_collector_on_and_the_shims_objects_frozen(hpcdist: str) -> None:
    """The shim starts with the collector off (a rank's start-up cost); the program gets it on, as under python."""
    code = "import gc, os; print('gc', os.environ['RANK'], gc.isenabled(), gc.get_freeze_count() > 0)"
    result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", "-c", code])
    assert result.returncode == 0, result.stderr
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("gc ")) == [
        "gc 0 True True",
        "gc 1 True True",
    ]


def test_commands_that_only_render_text_do_not_import_torch() -> None:
    code = (
        "import sys; from hpcdist.cli import main; "
        "main(['mpirun', '--dry-run', '-np', '2', '--', 'python', 'x.py']); main(['env']); "
        "sys.exit('torch' in sys.modules)"
    )
    result = launch([sys.executable, "-c", code])
    assert result.returncode == 0, "torch was imported by a text-only command"


def test_a_written_hostfile_and_the_printed_line_run_under_real_mpirun(hpcdist: str, tmp_path) -> None:
    hostfile = tmp_path / "my hosts"
    made = launch([hpcdist, "hostfile", "--hosts", "localhost", "--slots", "2", "--write", str(hostfile)])
    assert made.returncode == 0 and hostfile.read_text().startswith("# Generated by hpcdist"), made.stderr
    report = 'echo "rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE: $0"'
    line = launch(
        [
            hpcdist,
            "mpirun",
            "--dry-run",
            "--hostfile",
            str(hostfile),
            "--bare",
            "--",
            "sh",
            "-c",
            report,
            "a b; it's $HOME",
        ]
    )
    assert line.returncode == 0, line.stderr
    result = launch(["bash", "-c", line.stdout], timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [f"rank {r} of 2: a b; it's $HOME" for r in range(2)]
