"""torchrun's variables in the steps of `hpcdist sbatch` scripts on two test cluster nodes, against torchrun's own.

One script per launch mode runs the same program on 2 nodes x 2 tasks; each worker writes its environment as
the program starts. The srun and mpirun steps must give each name torchrun's workers get, with the same value.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_slurm_cluster import _OPTIONS, assert_ok, generated
from torchrun_names import assert_same_names

pytestmark = pytest.mark.timeout(900)
DUMP = Path(__file__).resolve().parents[1] / "e2e" / "programs" / "environ_dump.py"


def dumped(submit, venv: Path, directory: Path, launch: str) -> dict[int, dict[str, str]]:
    """Each rank's environment in the step of a generated `--launch LAUNCH` script, by rank."""
    directory.mkdir()
    script = generated(venv, "--launch", launch, *_OPTIONS[launch], program=[venv / "bin" / "python", DUMP, directory])
    result = submit(script, 300)
    assert_ok(result)
    found = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in directory.glob("rank-*.json")}
    assert sorted(found) == [0, 1, 2, 3], result.describe()
    return found


def test_srun_and_mpirun_steps_give_torchruns_variables(submit, venv: Path, tmp_path: Path) -> None:
    theirs = dumped(submit, venv, tmp_path / "torchrun", "torchrun")
    for launch in ("srun", "mpirun"):
        ours = dumped(submit, venv, tmp_path / launch, launch)
        # srun starts no agent: rank 0's torch serves the store itself, as TORCHELASTIC_USE_AGENT_STORE=False says
        expect = {"TORCHELASTIC_USE_AGENT_STORE": "False"} if launch == "srun" else {}
        for rank in range(4):
            assert_same_names(ours[rank], theirs[rank], f"{launch} rank {rank}", **expect)
            assert ours[rank]["GROUP_RANK"] == str(rank // 2) and ours[rank]["GROUP_WORLD_SIZE"] == "2"
            assert ours[rank]["TORCHELASTIC_RUN_ID"] == f"hpcdist-{ours[rank]['SLURM_JOB_ID']}", (launch, rank)
        assert len({ours[rank]["MASTER_ADDR"] + ":" + ours[rank]["MASTER_PORT"] for rank in range(4)}) == 1
