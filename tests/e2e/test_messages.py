"""What a newcomer's mistakes print: one hpcdist line saying what, where and how to fix it, once per job."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launching import PROGRAMS, launch, running

from hpcdist import __version__ as hpcdist_version

pytestmark = pytest.mark.e2e


def test_a_host_that_does_not_resolve_is_named_before_anything_starts(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "-H", "nosuchhost:1,localhost:1", "--", "true"], timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "hpcdist: error: host 'nosuchhost' (from -H nosuchhost:1,localhost:1) does not resolve on this machine, so "
        "mpirun could not start its daemon there; fix the name or remove it\n"
    )


def test_a_hostfile_s_unknown_host_is_named_with_its_line(hpcdist: str, tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two hosts\nlocalhost slots=1\nnosuchhost slots=1\n")
    result = launch([hpcdist, "mpirun", "-np", "2", "--hostfile", str(hostfile), "--", "true"], timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"hpcdist: error: host 'nosuchhost' (from hostfile {hostfile} line 3) does not resolve on this machine, so "
        "mpirun could not start its daemon there; fix the name or remove it\n"
    )


def test_a_daemon_that_cannot_be_started_names_its_host(hpcdist: str, tmp_path: Path) -> None:
    agent = tmp_path / "agent"  # a launch agent that cannot reach the host, as ssh does (status 255)
    agent.write_text('#!/bin/sh\necho "agent: cannot reach $1" >&2\nexit 255\n')
    agent.chmod(0o755)
    argv = [hpcdist, "mpirun", "-np", "2", "-H", "otherhost:1,localhost:1", "--launch-agent", str(agent), "--", "true"]
    result = launch(argv, timeout=60)
    assert result.returncode == 255, result.stderr
    assert "agent: cannot reach otherhost\n" in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "hpcdist: error: mpirun could not start its daemon on host otherhost (its launch agent, ssh unless "
        "--launch-agent names another, ended with status 255), so the job did not run (mpirun returned 255); check "
        "that `ssh otherhost true` works from here without a password, and that this Python environment exists "
        "there at the same path"
    )


def _interrupt_after_start(argv: list[str], tmp_path: Path, ranks: int = 2) -> tuple[int, str, list[int]]:
    """Start argv in a session of its own, wait until `ranks` ranks say `started PID`, then send SIGINT to the
    whole process group as a terminal's Ctrl-C does; its status, its stderr and the ranks' pids."""
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        pids: list[int] = []
        deadline = time.monotonic() + 120
        while len(pids) < ranks and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"the ranks ended before they started: {proc.communicate(timeout=60)[1]}"
            if line.startswith("started "):
                pids.append(int(line.split()[1]))
        assert len(pids) == ranks, "the ranks did not start within 120 s"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err, pids


def _gone(pids: list[int], seconds: float = 10) -> list[int]:
    """The pids still running after `seconds` (none once the job is over)."""
    deadline = time.monotonic() + seconds
    while True:
        alive = [pid for pid in pids if running(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)  # between two looks


SLEEPER = "import os, time\nprint('started', os.getpid(), flush=True)\ntime.sleep(300)\n"


def test_ctrl_c_ends_every_rank_and_exits_130_with_one_line(hpcdist: str, tmp_path: Path) -> None:
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    code, err, pids = _interrupt_after_start([hpcdist, "mpirun", "-np", "2", "--", "python", "sleeper.py"], tmp_path)
    assert code == 130, err
    assert err == "hpcdist: interrupted (Ctrl-C); ended all 2 ranks of the job\n"
    assert _gone(pids) == []


def test_ctrl_c_during_hpcdist_launch_raises_keyboardinterrupt_quietly(tmp_path: Path) -> None:
    (tmp_path / "caller.py").write_text(
        "import os, sys, time, hpcdist\n"
        "def sleeper():\n"
        "    print('started', os.getpid(), flush=True)\n"
        "    time.sleep(300)\n"
        "if __name__ == '__main__':\n"
        "    try:\n"
        "        hpcdist.launch(sleeper, np=2, backend='gloo')\n"
        "    except KeyboardInterrupt:\n"
        "        print('caller: KeyboardInterrupt', file=sys.stderr)\n"
        "        sys.exit(130)\n"
    )
    code, err, pids = _interrupt_after_start([sys.executable, "caller.py"], tmp_path)
    assert code == 130, err
    assert err == "caller: KeyboardInterrupt\n"
    assert _gone(pids) == []


def test_a_caught_rankfailed_leaves_only_hpcdist_s_lines_on_the_console(tmp_path: Path) -> None:
    (tmp_path / "caller.py").write_text(
        "import sys, hpcdist\n"
        "def work(rank):\n"
        "    print(f'rank {rank} working', flush=True)\n"
        "    if rank == 1:\n"
        "        raise ValueError('rank one is broken')\n"
        "    return rank\n"
        "if __name__ == '__main__':\n"
        "    try:\n"
        "        hpcdist.launch(work, hpcdist.RANK, np=2, backend='gloo')\n"
        "    except hpcdist.RankFailed as exc:\n"
        "        print(f'caught rank {exc.rank}', file=sys.stderr)\n"
        "        print(exc.remote_traceback, file=sys.stderr, end='')\n"
    )
    result = launch([sys.executable, str(tmp_path / "caller.py")], timeout=180)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["rank 0 working", "rank 1 working"]
    host = socket.gethostname().split(".")[0]
    lines = result.stderr.splitlines()
    assert lines[0] == f"hpcdist: rank 1 on {host} raised ValueError; the caller raises it", result.stderr
    assert "ending the job" not in result.stderr  # the rank's shim said nothing of its end: hpcdist.launch heard it
    caught = lines.index("caught rank 1")
    if caught > 1:  # rank 1 printed the others' stacks, when rank 0 was still there to give its own
        assert lines[1].startswith("hpcdist: rank 1 failed; the other ranks' Python stacks"), result.stderr
    assert lines[caught + 1] == "Traceback (most recent call last):"
    assert lines[-2:] == ["    raise ValueError('rank one is broken')", "ValueError: rank one is broken"]
    assert "MPI_ABORT" not in result.stderr and "-----" not in result.stderr


def test_doctor_under_hpcdist_mpirun_reports_once_from_rank_0(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "--", hpcdist, "doctor", "--json"], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(reports) == 1, result.stdout
    checks = {(c["area"], c["status"]): c["detail"] for c in reports[0]["checks"]}
    assert reports[0]["ok"] is True
    assert checks[("launch", "info")].startswith("run as rank 0 of 2 (openmpi launch): rank 0 checked ")
    assert checks[("rendezvous", "pass")].startswith("all 1 other rank(s) connected to rank 0's rendezvous at ")


def test_nccl_without_gpus_in_the_program_s_own_init_is_one_line_for_the_job(hpcdist: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        'import torch.distributed as dist\ndist.init_process_group("nccl")\nprint("initialised", flush=True)\n'
    )
    result = launch([hpcdist, "mpirun", "-np", "2", "--", "python", str(script)], timeout=180)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"hpcdist: error: backend nccl needs CUDA GPUs, but torch sees none on host {socket.gethostname()} "
        '(CUDA_VISIBLE_DEVICES=<unset>); call init_process_group("gloo") on CPU, or run on hosts with GPUs\n'
    )


def test_a_rank_whose_hpcdist_differs_from_its_launcher_s_refuses_to_start(hpcdist: str, tmp_path: Path) -> None:
    """A launcher that exports another version (as from a container image or a stale venv on one host): every rank
    refuses before the program starts, and the job says so once, naming both versions, with status 2."""
    marker = tmp_path / "ran"
    program = ["python", "-c", f"open({str(marker)!r}, 'a').write('x')"]
    result = launch([hpcdist, "mpirun", "-np", "2", "-x", "HPCDIST_VERSION=9.9.9", "--", *program], timeout=120)
    assert result.returncode == 2, result.stderr
    assert not marker.exists() and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert re.fullmatch(
        rf"hpcdist: error: rank [01] on {re.escape(socket.gethostname())}: the launcher runs hpcdist 9\.9\.9 but this "
        rf"rank has hpcdist {re.escape(hpcdist_version)}; install hpcdist 9\.9\.9 in the Python environment every "
        r"host runs \(a container image or a venv on one host may hold another\)",
        line,
    ), line


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_a_missing_matplotlib_for_plot_is_said_once_for_the_job(
    request: pytest.FixtureRequest, tmp_path: Path, mpi: str
) -> None:
    python = str(request.getfixturevalue("mpich_python")) if mpi == "mpich" else sys.executable
    hidden = tmp_path / "hidden" / "matplotlib"  # an import of matplotlib fails for real: this package comes first
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'matplotlib'\")\n")
    plot = tmp_path / "plot.png"
    hpcdist = [python, "-m", "hpcdist"]
    argv = [*hpcdist, "mpirun", "-np", "2", "--", *hpcdist, "bench", "all_reduce", "--plot", str(plot)]
    result = launch(argv, timeout=180, PYTHONPATH=str(hidden.parent))
    assert result.returncode == 2, result.stderr
    assert result.stderr == (  # no Open MPI MPI_ABORT banner, no MPICH `Abort(2) on node 1 ...` line
        f"hpcdist: error: --plot {plot} needs matplotlib, which {python} cannot import (No module named "
        "'matplotlib'); install it with `pip install 'hpcdist[plot]'` (or `pip install matplotlib`), or drop --plot\n"
    )
    assert not plot.exists()


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_a_failing_rank_is_named_by_hpcdist_with_its_traceback_and_no_launcher_banner(
    request: pytest.FixtureRequest, mpi: str
) -> None:
    python = str(request.getfixturevalue("mpich_python")) if mpi == "mpich" else sys.executable
    argv = [python, "-m", "hpcdist", "mpirun", "-np", "2", "--", python, str(PROGRAMS / "fail.py")]
    result = launch(argv, timeout=180, FAIL_RANK="1", FAIL_HOW="raise")
    assert result.returncode == 1, result.stderr
    host = socket.gethostname().split(".")[0]
    lines = result.stderr.splitlines()
    # rank 0 may fail on its own once rank 1's connection closes, before hpcdist ends it: then it is named after
    first = re.compile(
        rf"hpcdist: first failure: rank 1 on {re.escape(host)} failed with exit code 1(; then rank 0 .+)?"
    )
    assert [line for line in lines if first.fullmatch(line)], result.stderr
    assert not any("its last" in line for line in lines), result.stderr  # the traceback below: shown once
    assert "ending the job" not in result.stderr  # the shim of a rank hpcdist mpirun hears says nothing of its end
    traceback = [
        "[rank 1] Traceback (most recent call last):",
        f'[rank 1]   File "{PROGRAMS / "fail.py"}", line 15, in <module>',
        '[rank 1]     raise ValueError(f"deliberate failure on rank {rank}")',
        "[rank 1] ValueError: deliberate failure on rank 1",
    ]
    start = lines.index(traceback[0])
    assert lines[start : start + 4] == traceback and lines.count(traceback[-1]) == 1, result.stderr
    banners = [
        line
        for line in lines
        if "MPI_ABORT was invoked" in line
        or "prterun has exited" in line
        or "Abort(" in line
        or (line.strip() and not line.strip("-"))
    ]
    assert banners == [], result.stderr
    shown = launch(argv, timeout=180, FAIL_RANK="1", FAIL_HOW="raise", HPCDIST_DEBUG="1")  # the raw banners
    assert shown.returncode == 1, shown.stderr
    banner = "MPI_ABORT was invoked on rank 1" if mpi == "openmpi" else "Abort(1) on node 1 (rank 1 in comm 0)"
    assert banner in shown.stderr, shown.stderr


def test_the_dry_run_s_line_runs_as_printed(hpcdist: str, tmp_path: Path) -> None:
    """`hpcdist mpirun --dry-run` prints the exact command, its per-launch token a named placeholder; pasted into a
    shell it runs, each rank as under a plain mpirun (no launcher reads its events: its lines tagged [host:rank])."""
    (tmp_path / "hi.py").write_text("import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n")
    printed = launch([hpcdist, "mpirun", "-np", "2", "--dry-run", "--", "python", "hi.py"], timeout=60)
    assert printed.returncode == 0 and "'HPCDIST_CONTROL=<per-launch token>'" in printed.stdout, printed.stdout
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    ran = subprocess.run(["bash", "-c", printed.stdout], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    host = socket.gethostname().split(".")[0]
    assert sorted(ran.stdout.splitlines()) == [f"[{host}:{r}] rank {r} of 2" for r in range(2)], ran.stdout
