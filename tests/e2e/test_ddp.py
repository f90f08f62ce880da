"""`hpcdist run ddp` end to end: real mpirun, four ranks, checkpoints on disk, an exact resume."""

from __future__ import annotations

import os
import re
import signal
import subprocess

from launching import ROOT, launch, wait_for

NP = 4
DIGEST = re.compile(r"^rank (\d+): parameters sha256 ([0-9a-f]{64}) identical on all (\d+) ranks$", re.M)


def _ddp(hpcdist: str, *options: str, **env: str):
    return launch(
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
            "ddp",
            "--backend",
            "gloo",
            "--samples",
            "512",
            "--epochs",
            "3",
            *options,
        ],
        timeout=180,
        **env,
    )


def _digest(result) -> str:
    """The parameters' digest, after checking every rank reported the same one."""
    assert result.returncode == 0, result.stderr
    found = DIGEST.findall(result.stdout)
    assert sorted(int(rank) for rank, _, _ in found) == list(range(NP))
    assert {(digest, int(size)) for _, digest, size in found} == {(found[0][1], NP)}
    return found[0][1]


def test_a_resumed_job_ends_with_exactly_the_parameters_of_an_uninterrupted_one(hpcdist: str, tmp_path) -> None:
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    uninterrupted = _ddp(hpcdist, "--checkpoint-dir", str(whole), HPCDIST_PROGRESS="1")
    stopped = _ddp(hpcdist, "--checkpoint-dir", str(cut), "--stop-after-epoch", "2")
    resumed = _ddp(hpcdist, "--checkpoint-dir", str(cut), "--resume")

    assert _digest(resumed) == _digest(uninterrupted) != _digest(stopped)
    assert sorted(p.name for p in whole.iterdir()) == ["ddp.pt"] == sorted(p.name for p in cut.iterdir())
    lines = uninterrupted.stdout.splitlines()
    epochs = [line for line in lines if re.match(r"rank 0: epoch \d/3 loss \d+\.\d{6} samples/s \d+, saved ", line)]
    assert len(epochs) == 3
    assert "batch/s" in uninterrupted.stdout  # HPCDIST_PROGRESS=1: rank 0 draws a tqdm bar
    assert "batch/s" not in stopped.stdout + stopped.stderr  # piped output: plain lines only
    assert "rank 0: stopping after epoch 2 as asked (--stop-after-epoch)" in stopped.stdout
    assert f"resumed from {cut / 'ddp.pt'} after epoch 2" in resumed.stdout
    assert next(line for line in resumed.stdout.splitlines() if " loss " in line).startswith("rank 0: epoch 3/3 loss ")


def test_resuming_with_another_world_size_is_a_clear_error(hpcdist: str, tmp_path) -> None:
    _digest(_ddp(hpcdist, "--checkpoint-dir", str(tmp_path), "--epochs", "1"))
    result = launch(
        [
            hpcdist,
            "mpirun",
            "-np",
            "2",
            "--",
            hpcdist,
            "run",
            "ddp",
            "--backend",
            "gloo",
            "--samples",
            "512",
            "--checkpoint-dir",
            str(tmp_path),
            "--resume",
        ]
    )
    assert result.returncode != 0
    assert f"was written with world_size={NP}, this run has world_size=2" in result.stdout + result.stderr


def test_sigusr1_to_mpirun_stops_every_rank_at_one_step_and_the_resume_is_exact(hpcdist: str, tmp_path) -> None:
    """mpirun passes SIGUSR1 to every rank (as the sbatch script's preemption trap does): rank 0 checkpoints
    mid-epoch, the job exits 0, and `--resume` ends bit for bit where an uninterrupted run ends."""
    options = ("--samples", "8192", "--epochs", "2")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    argv = [
        hpcdist,
        "mpirun",
        "-np",
        str(NP),
        "--hostfile",
        "hostfiles/localhost",
        "--",
        hpcdist,
        "run",
        "ddp",
        "--backend",
        "gloo",
        *options,
        "--checkpoint-dir",
        str(cut),
    ]
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    with subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as job:
        try:
            wait_for("epoch 1's checkpoint", (cut / "ddp.pt").exists, job=job)
            job.send_signal(signal.SIGUSR1)
            out, err = job.communicate(timeout=120)
        finally:
            job.kill()
    assert job.returncode == 0, err
    stopped = re.search(r"^rank 0: preempted \(SIGUSR1\): stopped at epoch 2 step (\d+), saved ", out, re.M)
    assert stopped, out + err
    assert err.count("hpcdist: ddp: got SIGUSR1; stopping at the next step boundary") == NP
    assert "parameters sha256" not in out  # the stopped run does not claim to be done

    resumed = _ddp(hpcdist, *options, "--checkpoint-dir", str(cut), "--resume")
    uninterrupted = _ddp(hpcdist, *options, "--checkpoint-dir", str(whole))
    assert f"resumed from {cut / 'ddp.pt'} after step {stopped[1]} of epoch 2" in resumed.stdout
    assert _digest(resumed) == _digest(uninterrupted)
    epoch2 = [
        line.split(" samples/s")[0]
        for r in (resumed, uninterrupted)
        for line in r.stdout.splitlines()
        if line.startswith("rank 0: epoch 2/2 loss ")
    ]
    assert len(epoch2) == 2 and epoch2[0] == epoch2[1]  # the mid-epoch loss totals were carried over too
