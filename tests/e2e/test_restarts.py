"""`hpcdist mpirun --max-restarts`: real mpirun, real ranks that fail, restarts that succeed or are refused."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from launching import PROGRAMS, ROOT, launch, wait_for

NP = 2
DIGEST = re.compile(r"^rank (\d+): parameters sha256 ([0-9a-f]{64}) identical on all (\d+) ranks$", re.M)


def _mpirun(hpcdist: str, *options: str, program: list[str], **env: str):
    """Launch NP ranks; PRRTE ends its banners with a NUL byte, which is left out of stderr here."""
    result = launch([hpcdist, "mpirun", "-np", str(NP), *options, "--", *program], timeout=180, **env)
    return dataclasses.replace(result, stderr=result.stderr.replace("\0", ""))


# killed: PRRTE names the signal; when a peer's failure (gloo saw the sockets close) reaches it first, it names
# only that peer, and rank 1 is named by its tagger, which saw it vanish first (measured once in CI, under load)
@pytest.mark.parametrize(
    "how, ending",
    [
        ("exit", "rank 1 on [^ ]+ failed with exit code 3"),
        ("kill", "rank 1 on [^ ]+ killed (?:by SIGKILL|or exited abruptly)"),
    ],
)
def test_a_job_that_fails_on_its_first_attempt_succeeds_on_the_restart(
    hpcdist: str, tmp_path: Path, how: str, ending: str
) -> None:
    result = _mpirun(
        hpcdist,
        "--max-restarts",
        "2",
        program=["python", str(PROGRAMS / "flaky.py")],
        MARKERS=str(tmp_path),
        FAIL_RANK="1",
        FAIL_HOW=how,
    )
    assert result.returncode == 0, result.stderr
    markers = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert markers == {f"attempt-{n}-rank-{r}": f"{n} {n}" for n in (0, 1) for r in range(NP)}  # both counters
    # the rank that failed, and maybe rank 0 too if it saw its peer go before mpirun ended it
    assert re.search(
        rf"^hpcdist: attempt 1/3 ended with exit code \d+ \([^)]*{ending}\); restarting in 1\.0 s$", result.stderr, re.M
    ), result.stderr
    assert "hpcdist: attempt 2/3 ended with exit code 0" in result.stderr
    summary = result.stderr[result.stderr.index("hpcdist: 2 attempts (of up to 3):") :].splitlines()
    assert re.fullmatch(rf"hpcdist:   attempt 1/3: exit code \d+ \([^)]*{ending}\); 2 ranks on localhost:2", summary[1])
    assert summary[2] == "hpcdist:   attempt 2/3: exit code 0; 2 ranks on localhost:2"
    assert "@@hpcdist" not in result.stdout + result.stderr  # the ranks' control lines are never shown


def test_a_job_that_fails_before_every_rank_initialised_is_not_restarted(hpcdist: str) -> None:
    result = _mpirun(hpcdist, "--max-restarts", "3", program=["python", str(PROGRAMS / "early_fail.py")], FAIL_RANK="1")
    assert result.returncode == 3
    assert re.search(
        r"^hpcdist: attempt 1/4 ended with exit code 3 \(rank 1 on \S+ failed with exit code 3\); "
        r"not restarting: rank 1 never initialised \(rank 1 on \S+ failed with exit code 3 first; 1 other "
        r"rank did not initialise either\); a restart cannot fix that$",
        result.stderr,
        re.M,
    ), result.stderr
    assert "attempt 2/4" not in result.stderr
    assert "@@hpcdist" not in result.stdout + result.stderr


def test_a_usage_error_is_not_restarted(hpcdist: str, tmp_path: Path) -> None:
    result = _mpirun(hpcdist, "--max-restarts", "3", program=[str(tmp_path / "no-such-program")])
    assert result.returncode == 2
    assert "not restarting: exit status 2 is a usage error; a restart cannot fix that" in result.stderr
    assert "attempt 2/4" not in result.stderr


def test_without_max_restarts_a_failure_is_final_and_says_nothing_more(hpcdist: str, tmp_path: Path) -> None:
    result = _mpirun(
        hpcdist, program=["python", str(PROGRAMS / "flaky.py")], MARKERS=str(tmp_path), FAIL_RANK="1", FAIL_HOW="exit"
    )
    assert result.returncode == 3
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {  # hpcdist's counter unset; torchrun's is 0
        f"attempt-unset-rank-{r}": "unset 0" for r in range(NP)
    }
    assert "attempt" not in result.stderr and "@@hpcdist" not in result.stderr


def _digest(result) -> tuple[str, str]:
    """The parameters' digest every rank reported (checked equal), and the output for messages."""
    found = DIGEST.findall(result.stdout)
    assert sorted(int(rank) for rank, _, _ in found) == list(range(NP)), result.stdout + result.stderr
    assert {(digest, int(size)) for _, digest, size in found} == {(found[0][1], NP)}
    return found[0][1], result.stdout


def test_a_rank_killed_mid_training_restarts_from_the_checkpoint_and_ends_as_an_uninterrupted_run(
    hpcdist: str, tmp_path: Path
) -> None:
    """The issue's test: on attempt 0 the last rank SIGKILLs itself after the first epoch's checkpoint; the
    restarted job resumes from that checkpoint and ends with the parameters of a run that was never cut."""
    options = ["--backend", "gloo", "--samples", "8192", "--epochs", "3", "--resume"]
    killed = _mpirun(
        hpcdist,
        "--max-restarts",
        "1",
        program=["python", str(PROGRAMS / "ddp_killed.py"), *options, "--checkpoint-dir", str(tmp_path / "cut")],
    )
    whole = _mpirun(hpcdist, program=[hpcdist, "run", "ddp", *options, "--checkpoint-dir", str(tmp_path / "whole")])
    assert killed.returncode == 0, killed.stderr
    assert re.search(
        r"^hpcdist: attempt 1/2 ended with exit code \d+ \([^)]*rank 1 on \S+ killed by SIGKILL\); "
        r"restarting in 1\.0 s$",
        killed.stderr,
        re.M,
    ), killed.stderr
    resumed = re.search(
        rf"resumed from {re.escape(str(tmp_path / 'cut' / 'ddp.pt'))} after epoch ([12])\b", killed.stdout
    )
    assert resumed, killed.stdout  # the restart did not start over: it began where the checkpoint left off
    assert killed.stdout.count("rank 0: epoch 1/3 loss") == 1  # epoch 1 was trained once, on attempt 0
    assert _digest(killed)[0] == _digest(whole)[0]


def test_the_public_helper_stops_every_rank_at_one_step_and_the_next_run_resumes(hpcdist: str, tmp_path: Path) -> None:
    """hpcdist.StopAtStepBoundary in the README's loop: SIGTERM to rank 1 alone after step 10; every rank stops
    after step 12 (the next agreement), rank 0 checkpoints, the job exits 0; run again, it ends with the full sum."""
    checkpoint = str(tmp_path / "state.pt")
    program = ["python", str(PROGRAMS / "stop_loop.py"), checkpoint]
    stopped = _mpirun(hpcdist, program=program, PREEMPT_RANK="1")
    assert stopped.returncode == 0, stopped.stderr
    assert sorted(re.findall(r"^rank \d: stopped after step \d+ \(.*\)$", stopped.stdout, re.M)) == [
        "rank 0: stopped after step 12 (another rank's signal)",
        "rank 1: stopped after step 12 (SIGTERM)",
    ]
    assert "hpcdist: got SIGTERM; stopping at the next step boundary" in stopped.stderr
    resumed = _mpirun(hpcdist, program=program)
    assert resumed.returncode == 0, resumed.stderr
    assert "rank 0: starting at step 13" in resumed.stdout.replace("attempt 0, ", "")
    assert sorted(re.findall(r"^rank \d: total \d+$", resumed.stdout, re.M)) == [
        f"rank {r}: total {3 * sum(range(40))}" for r in range(NP)
    ]


def test_sigterm_to_hpcdist_mpirun_ends_the_job_without_a_restart(hpcdist: str, tmp_path: Path) -> None:
    argv = [
        hpcdist,
        "mpirun",
        "-np",
        str(NP),
        "--max-restarts",
        "3",
        "--",
        "python",
        "-c",
        "import os, time, torch.distributed as dist; dist.init_process_group('gloo'); "
        "open(os.path.join(os.environ['MARKERS'], str(dist.get_rank())), 'w').close(); time.sleep(600)",  # till ended
    ]
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "MARKERS": str(tmp_path)}
    with subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as job:
        try:
            wait_for(f"the {NP} ranks to start", lambda: len(list(tmp_path.iterdir())) >= NP, job=job)
            job.send_signal(signal.SIGTERM)
            _, err = job.communicate(timeout=60)
        finally:
            job.kill()
    assert job.returncode == 143
    assert err == f"hpcdist: got SIGTERM and passed it on; ended all {NP} ranks of the job (attempt 1 of 4)\n"
