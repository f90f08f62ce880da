"""`hpcdist run ddp --step-log` and `hpcdist bench recovery` for real: the step log of a 2-rank run holds each step once
with its epoch and world size; the harness kills rank 1 at its step of epoch 2 and reads the restart in the log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from launching import launch

from hpcdist.bench.recovery import BATCH, EPOCHS, KILL_EPOCH, KILL_STEP, SAMPLES
from hpcdist.workloads import steplog

# A job that hangs ends at the harness's own --timeout, which then says so with the job's last lines, well before
# pytest's timeout would end the test without them.
JOB_TIMEOUT = 240
pytestmark = pytest.mark.timeout(JOB_TIMEOUT + 120)


def _harness(hpcdist: str, row: str) -> dict[str, Any]:
    """One job of `row` at 2 ranks through `hpcdist bench recovery --json`: its result."""
    argv = [hpcdist, "bench", "recovery", "--ranks", "2", "--rows", row, "--repeats", "1", "--json"]
    result = launch([*argv, "--timeout", str(JOB_TIMEOUT)], timeout=JOB_TIMEOUT + 60)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_the_step_log_of_a_2_rank_run_holds_every_step_once_in_order(hpcdist: str, tmp_path: Path) -> None:
    log = tmp_path / "steps.log"
    training = ["run", "ddp", "--backend", "gloo", "--samples", "256", "--epochs", "2", "--step-log", str(log)]
    result = launch([hpcdist, "mpirun", "-np", "2", "--", hpcdist, *training], timeout=180)
    assert result.returncode == 0, result.stderr
    steps = steplog.read(str(log))
    assert [(s.epoch, s.step, s.world_size) for s in steps] == [(e, s, 2) for e in (1, 2) for s in range(1, 5)]
    times = [s.time for s in steps]
    assert times == sorted(times)


def test_the_harness_kills_the_last_rank_in_epoch_2_and_times_the_restart(hpcdist: str, tmp_path: Path) -> None:
    doc = _harness(hpcdist, "mpirun")
    assert doc["config"]["kill"] == {"rank": 1, "epoch": KILL_EPOCH, "step": KILL_STEP, "signal": "SIGKILL"}
    [job] = doc["results"]
    epoch, step = job["killed_after"]
    per_epoch = SAMPLES // (BATCH * 2)
    assert epoch == KILL_EPOCH and KILL_STEP <= step < per_epoch, job  # killed in epoch 2, before its end
    # the relaunch resumed from epoch 1's checkpoint: it did epoch 2's steps up to the kill again, then the rest
    # (`step` is the last step the killed job completed, whether rank 0 logged it just before the kill or just after)
    assert (job["status"], job["problem"], job["redone"], job["ranks_after"]) == (0, "", step, 2), job
    assert job["steps"] == EPOCHS * per_epoch + step, job
    assert 0 < job["recovered"] < job["caught_up"] < job["total"] and 0 < job["first"] < job["total"]
    saved = tmp_path / "recovery.json"
    saved.write_text(json.dumps(doc))
    again = launch([hpcdist, "bench", "recovery", "--from", str(saved)], timeout=120)
    assert again.returncode == 0, again.stderr
    [row] = [line.split() for line in again.stdout.splitlines() if line.startswith("mpirun ")]
    assert row[1] == f"{job['recovered']:.2f}" and row[-1] == "2", again.stdout


def test_the_harness_times_a_shrink_to_the_first_step_on_the_survivor(hpcdist: str) -> None:
    [job] = _harness(hpcdist, "shrink")["results"]
    epoch, step = job["killed_after"]
    assert epoch == KILL_EPOCH and step >= KILL_STEP, job
    # rank 0 carried on alone from the last committed step: nothing done twice, the next step is already past the kill
    assert (job["status"], job["problem"], job["redone"], job["ranks_after"]) == (0, "", 0, 1), job
    assert 0 < job["recovered"] == job["caught_up"] < job["total"]
