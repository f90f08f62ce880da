"""`hpcdist sbatch --launch mpirun` on MPICH and Intel MPI: Hydra inside a real Slurm allocation of up to four nodes.

The step, hpcdist mpirun, runs Hydra, which reads its hosts from Slurm and starts its proxies with srun
(`-launcher slurm`); the MPI venvs are
tests/conftest.py's overlays (the mpich or impi-rt wheel over this venv's packages), which every node can run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_slurm_cluster import (
    _COUNT_TERM,
    ALL_NODES,
    KILL_WAIT,
    NODES,
    _cancelled,
    assert_ok,
    batch_script,
    generated,
    rankrun,
    records,
)

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
FAIL = ROOT / "tests" / "e2e" / "programs" / "fail.py"


# Intel MPI on one node only: across nodes its ranks need libfabric, which the impi-rt wheel does not ship
# (measured: "MPI startup(): failed to load libfabric.so.1", then MPI_Init aborts in MPIDI_OFI_mpi_init_hook).
@pytest.fixture(params=[("mpich", 2), ("intel", 1)], ids=["mpich-2-nodes", "intel-1-node"])
def hydra(request: pytest.FixtureRequest) -> tuple[str, Path, int]:
    """(family, the python of its venv, nodes)."""
    family, nodes = request.param
    return family, request.getfixturevalue("mpich_python" if family == "mpich" else "impi_python"), nodes


def script(venv: Path, python: Path, family: str, *options: str, program: list[str | Path], nodes: int = 2) -> str:
    """The script this checkout's `hpcdist sbatch --launch mpirun --mpi FAMILY --python PYTHON` writes for 2 x 2
    ranks: the mpiexec beside `python`, which also runs the shim."""
    text = generated(
        venv,
        "--launch",
        "mpirun",
        "--mpi",
        family,
        "--python",
        str(python),
        "--env",
        f"PYTHONPATH={ROOT}",
        *options,
        program=program,
        nodes=nodes,
    )
    assert f" --mpi {family} -- " in text
    return text


def test_hydra_ranks_take_the_allocation_and_exchange_values(submit, venv: Path, hydra, tmp_path: Path) -> None:
    """Ranks 0..3 on node1, node1, node2, node2 (0..1 on node1 with one node) with their LOCAL_RANK, and an
    all_reduce over all ranks and over a subgroup."""
    family, python, nodes = hydra
    program = rankrun(python.parent.parent, tmp_path, "run", "p2p", "allreduce", "--backend", "gloo")
    result = submit(script(venv, python, family, program=program, nodes=nodes), 300)
    assert_ok(result)
    world = 2 * nodes
    markers = {path.name: path.read_text() for path in tmp_path.glob("rank[0-9]")}
    assert markers == {f"rank{r}": f"{r} {r % 2} {world} 2 {NODES[r]}" for r in range(world)}, result.describe()
    lines = set(records(result.stdout))
    total = [float(sum(range(1, world + 1)) * k) for k in (1, 2, 3)]
    expected = {f"rank {r}: all_reduce SUM over all ranks -> {total}" for r in range(world)}
    expected |= {f"rank {r}: received {100 + r:g} from rank 0" for r in range(1, world)}
    expected.add("rank 1: all_reduce SUM over new_group([0, 1]) -> [3.0, 6.0, 9.0]")
    assert expected <= lines, result.describe()


def test_a_rank_failing_on_node2_ends_the_hydra_job_and_is_named(
    submit, venv: Path, mpich_python: Path, tmp_path: Path
) -> None:
    """Rank 3 (on node2) raises while the others wait in a barrier: the job fails within seconds, naming it."""
    text = script(
        venv, mpich_python, "mpich", "--env", "FAIL_RANK=3", "--env", "FAIL_HOW=raise", program=[mpich_python, FAIL]
    )
    result = submit(text, 240)
    assert result.state == "FAILED" and result.exit_code != 0, result.describe()
    assert "ValueError: deliberate failure on rank 3" in result.stderr, result.describe()
    assert result.stderr.count("ValueError: deliberate failure on rank 3") == 1, result.describe()
    assert "hpcdist: first failure: rank 3 on node2 failed with exit code 1" in result.stderr, result.describe()
    assert result.seconds < 120, result.describe()


def test_hpcdist_mpirun_inside_an_allocation_runs_mpich_ranks_on_all_four_nodes(
    submit, venv: Path, mpich_python: Path, tmp_path: Path
) -> None:
    """`hpcdist mpirun -np 4` in a batch script of one task on each of the four nodes: Hydra takes every node through
    srun (no PMIx for its proxies), and names every rank's exit status from its -print-all-exitcodes lines."""
    program = rankrun(mpich_python.parent.parent, tmp_path, "run", "allreduce", "--backend", "gloo")
    script_text = batch_script(
        venv,
        nodes=4,
        ntasks_per_node=1,
        commands=[["env", f"PYTHONPATH={ROOT}", mpich_python, "-m", "hpcdist", "mpirun", "-np", "4", "--", *program]],
    )
    result = submit(script_text, 300)
    assert_ok(result)
    markers = {path.name: path.read_text() for path in tmp_path.glob("rank[0-9]")}
    assert markers == {f"rank{r}": f"{r} 0 4 1 {ALL_NODES[r]}" for r in range(4)}, result.describe()
    expected = {f"rank {r}: all_reduce SUM over all ranks -> [10.0, 20.0, 30.0]" for r in range(4)}
    assert expected <= set(records(result.stdout)), result.describe()


def test_a_cancelled_hydra_job_s_ranks_get_sigterm_once_and_slurm_s_kill_wait(
    cluster, venv: Path, mpich_python: Path, tmp_path: Path
) -> None:
    """scancel: Slurm signals mpiexec, its proxies and the ranks; Hydra would pass its SIGTERM on, a second one
    (measured), so hpcdist mpirun starts it with SIGTERM held: each rank gets Slurm's once and runs until KillWait."""
    (tmp_path / "count_term.py").write_text(_COUNT_TERM)
    hpcdist: list[str | Path] = ["env", f"PYTHONPATH={ROOT}", mpich_python, "-m", "hpcdist", "mpirun", "--"]
    script = batch_script(
        venv, nodes=2, ntasks_per_node=2, commands=[[*hpcdist, mpich_python, tmp_path / "count_term.py"]]
    )
    ranks = _cancelled(cluster, script, tmp_path)
    for terms, alive in ranks.values():
        assert len(terms) == 1, ranks
        assert alive - terms[0] > KILL_WAIT - 1.5, ranks  # alive on until KillWait, give or take Slurm's polling
