"""Per-rank output of generated srun-mode scripts under real Slurm (hpcdist mpirun runs srun): tags, per-rank log
files, --ranks, and a failure told once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_slurm_cluster import assert_ok, by_task, generated

pytestmark = pytest.mark.timeout(600)  # the first test also waits for apt-get install on a fresh machine

ROOT = Path(__file__).resolve().parents[2]
# each task prints two lines on stdout and one on stderr; no torch
PRINTS = "import os, sys; r = os.environ['RANK']; print('out', r); print('more', r); print('err', r, file=sys.stderr)"


_TAGGED = re.compile(r"^\[[^\]:\s]+:(\d+)\] (.*)$")  # hpcdist's tag of a rank's line: `[node2:3] text`


def _script(venv: Path, *options: str) -> str:
    """An srun-mode script whose ranks import this checkout's hpcdist."""
    return generated(venv, "--launch", "srun", "--opal-prefix", "--env", f"PYTHONPATH={ROOT}", *options,
                     program=[venv / "bin" / "python", "-c", PRINTS])  # fmt: skip


def test_srun_mode_log_dir_keeps_every_rank_s_file_while_ranks_choose_the_console_s(
    submit, venv: Path, tmp_path: Path
) -> None:
    script = _script(venv, "--tag", "--log-dir", "logs", "--ranks", "0,3")
    assert " -m hpcdist mpirun -np 4 --mpi srun --tag --ranks 0,3 --log-dir logs -- " in script
    result = submit(script, 180)
    assert_ok(result)
    files = sorted(path.name for path in (tmp_path / "logs").iterdir())
    assert files == [f"rank-00{r}.log" for r in range(4)], result.describe()
    for rank in range(4):
        lines = (tmp_path / "logs" / f"rank-00{rank}.log").read_text().splitlines()
        assert sorted(lines) == [f"err {rank}", f"more {rank}", f"out {rank}"], lines
    assert by_task(result.stdout, _TAGGED) == {0: ["out 0", "more 0"], 3: ["out 3", "more 3"]}, result.describe()
    assert by_task(result.stderr, _TAGGED) == {0: ["err 0"], 3: ["err 3"]}, result.describe()


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


def test_srun_mode_a_raising_rank_s_traceback_is_told_once_and_the_others_in_the_headline(
    submit, venv: Path, tmp_path: Path
) -> None:
    """The story hpcdist mpirun tells, under sbatch: the failed rank's traceback once, then one headline naming it
    first and the ranks that failed because of it; none of srun's or slurmstepd's own lines about the step's end."""
    (tmp_path / "raises.py").write_text(RAISES)
    script = generated(venv, "--launch", "srun", "--opal-prefix", "--env", f"PYTHONPATH={ROOT}",
                       program=[venv / "bin" / "python", tmp_path / "raises.py"])  # fmt: skip
    result = submit(script, 180)
    assert result.state == "FAILED" and result.fields["ExitCode"] == "1:0", result.describe()
    err = result.stderr
    assert err.count("Traceback (most recent call last)") == 1 and "[rank 2] Traceback" in err, result.describe()
    assert err.count("[rank 2] ValueError: NaN in the gradients on rank 2") == 1, result.describe()
    headline = "hpcdist: first failure: rank 2 on node2 failed with exit code 1; then ranks 0-1,3 failed after it\n"
    assert err.endswith(headline) and err.count("hpcdist:") == 1, result.describe()
    assert "srun:" not in err and "slurmstepd" not in err, result.describe()
