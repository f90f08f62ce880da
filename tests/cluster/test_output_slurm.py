"""Per-rank output of generated srun-mode scripts under real Slurm: `srun --label`, per-task log files, --ranks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_slurm_cluster import assert_ok, by_task, generated

pytestmark = pytest.mark.timeout(600)  # the first test also waits for apt-get install on a fresh machine

ROOT = Path(__file__).resolve().parents[2]
# each task prints two lines on stdout and one on stderr; no torch
PRINTS = "import os, sys; r = os.environ['RANK']; print('out', r); print('more', r); print('err', r, file=sys.stderr)"


def _script(venv: Path, *options: str) -> str:
    """An srun-mode script whose ranks import this checkout's hpcdist (the shim reads HPCDIST_RANKS)."""
    return generated(venv, "--launch", "srun", "--opal-prefix", "--env", f"PYTHONPATH={ROOT}", *options,
                     program=[venv / "bin" / "python", "-c", PRINTS])  # fmt: skip


def test_srun_mode_log_dir_writes_one_labelled_file_per_task(submit, venv: Path, tmp_path: Path) -> None:
    script = _script(venv, "--tag", "--log-dir", "logs")
    assert "--label --output=logs/rank-%3t.log" in script
    result = submit(script, 180)
    assert_ok(result)
    files = sorted(path.name for path in (tmp_path / "logs").iterdir())
    assert files == [f"rank-00{r}.log" for r in range(4)], result.describe()
    for rank in range(4):
        text = (tmp_path / "logs" / f"rank-00{rank}.log").read_text()
        tasks = by_task(text)  # stdout and stderr in one file, labelled; their relative order is srun's
        assert list(tasks) == [rank] and sorted(tasks[rank]) == [f"err {rank}", f"more {rank}", f"out {rank}"], text
    # srun sends the tasks' output to the files only: the job's own output holds none of it
    assert "out " not in result.stdout and "err " not in result.stderr, result.describe()


def test_srun_mode_ranks_shows_only_the_chosen_tasks_labelled(submit, venv: Path) -> None:
    result = submit(_script(venv, "--tag", "--ranks", "0,3"), 180)
    assert_ok(result)
    assert by_task(result.stdout) == {0: ["out 0", "more 0"], 3: ["out 3", "more 3"]}, result.describe()
    assert by_task(result.stderr) == {0: ["err 0"], 3: ["err 3"]}, result.describe()


# rank 2 raises once every rank is in the job's all_reduces; the others' all_reduce then fails as its peer goes
RAISES = """
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
if dist.get_rank() == 2:
    raise ValueError("NaN in the gradients on rank 2")
while True:
    dist.all_reduce(t)
"""


def test_srun_mode_a_raising_rank_s_traceback_is_told_once_and_the_others_in_one_line_each(
    submit, venv: Path, tmp_path: Path
) -> None:
    (tmp_path / "raises.py").write_text(RAISES)
    script = generated(venv, "--launch", "srun", "--opal-prefix", "--env", f"PYTHONPATH={ROOT}",
                       program=[venv / "bin" / "python", tmp_path / "raises.py"])  # fmt: skip
    result = submit(script, 180)
    assert result.state == "FAILED", result.describe()
    err = result.stderr
    assert err.count("Traceback (most recent call last)") == 1 and "[rank 2] Traceback" in err, result.describe()
    assert err.count("[rank 2] ValueError: NaN in the gradients on rank 2") == 1, result.describe()
    assert err.count("hpcdist: rank 2 on node2 failed (exit code 1); ending the job") == 1, result.describe()
    others = re.findall(r"^hpcdist: rank (\d) on node\d failed \(exit code 1\), after a peer had gone;", err, re.M)
    assert sorted(others) == ["0", "1", "3"], result.describe()  # one line each, no traceback
