"""`hpcdist sbatch --bind auto` under real Slurm: in each launch mode the two ranks of a node get disjoint cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_slurm_cluster import NODES, assert_ok, generated

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]
# Each rank writes its CPU set, OMP_NUM_THREADS and host to `bind<RANK>` in the job's directory.
_REPORT = """\
import json, os, socket
from pathlib import Path

Path("bind" + os.environ["RANK"]).write_text(json.dumps(
    [sorted(os.sched_getaffinity(0)), os.environ.get("OMP_NUM_THREADS"), socket.gethostname()]))
"""


@pytest.mark.parametrize("launch", ["srun", "mpirun", "torchrun"])
def test_bind_auto_gives_each_rank_of_a_node_its_own_cores(submit, venv: Path, tmp_path: Path, launch: str) -> None:
    (tmp_path / "report.py").write_text(_REPORT)
    options = ["--launch", launch, "--bind", "auto", "--env", f"PYTHONPATH={ROOT}"]  # the hpcdist under test
    script = generated(
        venv,
        *options,
        *(["--opal-prefix"] if launch == "srun" else []),
        program=[venv / "bin" / "python", tmp_path / "report.py"],
    )
    # the srun and mpirun modes' step, hpcdist mpirun, hands it to each rank; torchrun's workers read it from the script
    assert (" --bind auto " if launch != "torchrun" else "HPCDIST_BIND=auto") in script
    result = submit(script, 300)
    assert_ok(result)
    reports = {int(p.name[4:]): json.loads(p.read_text()) for p in tmp_path.glob("bind[0-9]")}
    assert sorted(reports) == [0, 1, 2, 3], result.describe()
    assert {r: reports[r][2] for r in reports} == NODES
    for first, second in ((0, 1), (2, 3)):  # the two ranks of one node
        a, b = set(reports[first][0]), set(reports[second][0])
        assert a and b and not a & b, result.describe()
    if launch != "torchrun":  # torchrun sets OMP_NUM_THREADS=1 itself before the shim runs
        assert all(r[1] == str(len(r[0])) for r in reports.values()), reports
