"""The compiled mpi backend's first use on two Slurm nodes sharing a cache directory: one build, all ranks load it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_slurm_cluster import assert_ok, batch_script

pytestmark = pytest.mark.timeout(1200)

SUM = """
import socket, torch, torch.distributed as dist
import hpcdist
from hpcdist import mpi_backend
hpcdist.init(backend="mpi")
t = torch.full((3,), float(dist.get_rank() + 1))
dist.all_reduce(t)
print(f"rank {dist.get_rank()} on {socket.gethostname()} native={mpi_backend.native_active()} sum={t.tolist()}")
"""


def test_two_nodes_on_an_empty_shared_cache_build_it_once_and_all_ranks_load_it(
    submit, venv: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "shared-cache"
    checkout = Path(__file__).resolve().parents[2]
    step: list[str | Path] = ["srun", "--mpi=pmix", venv / "bin" / "python", "-c", SUM]
    env: list[str | Path] = ["env", f"PYTHONPATH={checkout}", f"HPCDIST_CACHE_DIR={cache}", "HPCDIST_MPI_NATIVE=1"]
    script = batch_script(venv, nodes=2, ntasks_per_node=2, commands=[[*env, *step], [*env, *step]], minutes=15)
    result = submit(script, 1000)
    assert_ok(result)
    expected = [f"rank {r} on node{r // 2 + 1} native=True sum=[10.0, 10.0, 10.0]" for r in range(4)]
    lines = result.stdout.splitlines()
    assert [lines.count(line) for line in expected] == [2, 2, 2, 2], result.describe()  # both steps, every rank
    assert result.stderr.count("hpcdist: building the native mpi backend once") == 1, result.describe()
    assert len(re.findall(r"hpcdist: built the native mpi backend in \d+ s", result.stderr)) == 1, result.describe()
    built = [p.name for p in (cache / "native").iterdir() if p.is_dir()]
    assert len(built) == 1 and not built[0].count("."), built  # one build, renamed into place, none left half-done
