"""`hpcdist.launch` inside a two-node Slurm allocation: mpirun takes the allocation, values come back by rank."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from test_slurm_cluster import assert_ok, batch_script

pytestmark = pytest.mark.timeout(600)

DRIVER = """
    import json, socket, hpcdist, torch, torch.distributed as dist
    def where(x):
        total = torch.ones(1)
        dist.all_reduce(total)
        return [dist.get_rank(), socket.gethostname(), total.item(), x]
    print(json.dumps(hpcdist.launch(where, 5, np=4, backend="gloo", timeout=240)))
"""


def test_launch_in_an_allocation_runs_on_both_nodes(submit, venv: Path, tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(DRIVER))
    checkout = Path(__file__).resolve().parents[2]  # this checkout's hpcdist, also when the venv's is another
    script = batch_script(
        venv, nodes=2, ntasks_per_node=2, commands=[["env", f"PYTHONPATH={checkout}", venv / "bin" / "python", driver]]
    )
    result = submit(script, 300)
    assert_ok(result)
    values = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("[")]
    assert values == [[[0, "node1", 4.0, 5], [1, "node1", 4.0, 5], [2, "node2", 4.0, 5], [3, "node2", 4.0, 5]]], (
        result.describe()
    )
    assert not list(tmp_path.glob("hpcdist-launch-*")), "the launch directory (in the job's directory) is removed"
