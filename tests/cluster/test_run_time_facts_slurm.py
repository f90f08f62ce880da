"""Generated scripts under the real Slurm cluster: one `--launch mpirun` script runs as root and as nobody; a GPU
job (fake GPUs) gets CPUs per rank and as many threads.

The script's step, hpcdist mpirun, lets Open MPI run as root only where it runs as root; nothing of the submitter's
environment is passed (no OMPI_ALLOW_RUN_AS_ROOT from outside), so each job shows what was decided when it ran.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from hpcdist.jobs.sbatchspec import GPU_TASK_CPUS, SbatchSpec
from hpcdist.records import fields

NOBODY = "65534"
SYSTEM_PYTHON = "/usr/bin/python3"  # the venv's Python may lie where nobody cannot read (e.g. under /root)
RANK_SAYS = 'import os; print("rank", os.environ["RANK"], os.getuid())'
ROOT = Path(__file__).resolve().parents[2]


def test_one_generated_mpirun_script_runs_as_root_and_as_nobody(cluster, venv: Path) -> None:
    assert "as_root" not in {
        spec.name for spec in fields(SbatchSpec)
    }  # nothing of the writer's uid goes into the script
    site = next(venv.glob("lib/python3.*/site-packages"))
    folder = Path(tempfile.mkdtemp(prefix="hpcdist-anyone-", dir="/tmp"))  # pytest's tmp_path is closed to nobody
    try:
        folder.chmod(0o777)  # nobody writes its job's output files here
        (folder / "says.py").write_text(RANK_SAYS + "\n")
        argv = [str(venv / "bin" / "hpcdist"), "sbatch", "--nodes", "1", "--ntasks-per-node", "2", "--time", "5",
                "--output", "job-%j.out", "--error", "job-%j.err", "--launch", "mpirun", "--python", SYSTEM_PYTHON,
                "--mpirun", str(venv / "bin" / "mpirun"), "--", SYSTEM_PYTHON, str(folder / "says.py")]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        script = done.stdout
        # decided by hpcdist mpirun as the job runs
        assert "--allow-run-as-root" not in script and "OMPI_ALLOW_RUN_AS_ROOT" not in script, script
        # nothing else of ours; Open MPI needs a HOME, and nobody's does not exist
        export = f"--export=PATH=/usr/bin:/bin,LANG=C.UTF-8,HOME={folder},PYTHONPATH={ROOT}:{site}"
        for uid, options in (("0", [export]), (NOBODY, [export, f"--uid={NOBODY}", f"--gid={NOBODY}"])):
            result = cluster.wait(cluster.sbatch(script, folder, *options), 180)
            assert result.ok, result.describe()
            lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank "))
            assert lines == [f"rank {rank} {uid}" for rank in range(2)], result.describe()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# Each rank writes a file of its own: SLURM_CPUS_PER_TASK (what srun gave the step), OMP_NUM_THREADS, and the GPUs
# it sees (Slurm's CUDA_VISIBLE_DEVICES of the node's fake GPUs, /dev/null symlinks).
GPU_RANK = """\
import os
from pathlib import Path
names = ("SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
Path("gpu-rank" + os.environ["RANK"]).write_text(" ".join(os.environ.get(n, "-") for n in names))
"""


@pytest.mark.parametrize("launch", ["srun", "torchrun"])
def test_a_gpu_job_without_cpus_gets_cpus_per_rank_and_as_many_threads(
    cluster, venv: Path, tmp_path: Path, launch: str
) -> None:
    """2 nodes of 4 CPUs and 2 fake GPUs, 1 GPU per node asked: each rank gets GPU_TASK_CPUS CPUs and threads."""
    (tmp_path / "gpu_rank.py").write_text(GPU_RANK)
    python = str(venv / "bin" / "python")
    argv = [str(venv / "bin" / "hpcdist"), "sbatch", "--nodes", "2", "--gpus-per-node", "1", "--time", "5",
            "--output", "job-%j.out", "--error", "job-%j.err", "--launch", launch, "--python", python,
            "--", python, str(tmp_path / "gpu_rank.py")]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = cluster.wait(cluster.sbatch(done.stdout, tmp_path), 180)
    assert result.ok, result.describe()
    assert result.fields.get("NumCPUs") == str(2 * GPU_TASK_CPUS), result.fields  # 1 task x 4 CPUs on each node
    seen = {path.name: path.read_text().split() for path in tmp_path.glob("gpu-rank*")}
    assert sorted(seen) == ["gpu-rank0", "gpu-rank1"], result.describe()
    for cpus, threads, gpus in seen.values():
        assert (cpus, threads) == (str(GPU_TASK_CPUS), str(GPU_TASK_CPUS)) and gpus != "-", seen
