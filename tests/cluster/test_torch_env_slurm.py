"""torchrun's variables in the steps of `hpcdist sbatch` scripts on the two-node cluster, against torchrun's own.

One script per launch mode runs the same program on 2 nodes x 2 tasks; each worker writes its environment as
the program starts. The srun and mpirun steps must give each name torchrun's workers get, with the same value.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_slurm_cluster import _OPTIONS, assert_ok, generated

pytestmark = pytest.mark.timeout(900)
DUMP = Path(__file__).resolve().parents[1] / "e2e" / "programs" / "environ_dump.py"
GIVES = {  # what torch 2.13's torchrun gives a worker (tests/e2e/test_torch_env.py reads them off the wheel's agent)
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "OMP_NUM_THREADS",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",
}
NOT_GIVEN = {"TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE"}  # left unset on purpose (README)
PER_RUN = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}


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
            assert set(theirs[rank]) >= GIVES, sorted(GIVES - set(theirs[rank]))
            named = {n for n in ours[rank] if n in GIVES or n.startswith(("TORCHELASTIC_", "ROLE_", "GROUP_"))}
            assert named == GIVES - NOT_GIVEN, (launch, rank, sorted(named ^ (GIVES - NOT_GIVEN)))
            for name in sorted(GIVES - NOT_GIVEN - PER_RUN):
                want = expect.get(name, theirs[rank][name])
                assert ours[rank][name] == want, (launch, rank, name, ours[rank][name], want)
            assert ours[rank]["GROUP_RANK"] == str(rank // 2) and ours[rank]["GROUP_WORLD_SIZE"] == "2"
            assert ours[rank]["TORCHELASTIC_RUN_ID"] == f"hpcdist-{ours[rank]['SLURM_JOB_ID']}", (launch, rank)
        assert len({ours[rank]["MASTER_ADDR"] + ":" + ours[rank]["MASTER_PORT"] for rank in range(4)}) == 1
