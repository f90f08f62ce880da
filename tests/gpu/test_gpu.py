"""The GPU path on a real GPU: nccl at one rank, CUDA tensors through gloo and mpi, DDP, and the benchmark."""

from __future__ import annotations

import json

import pytest
from conftest import PROGRAMS, launch

WORKLOADS = ["p2p", "broadcast", "allreduce", "reduce", "gather", "ddp"]


def test_nccl_workloads_at_one_rank(hpcdist: str, tmp_path) -> None:
    """`hpcdist run … --backend nccl` under hpcdist mpirun at one rank: every workload verifies its own result."""
    done = launch(
        [
            hpcdist,
            "mpirun",
            "-np",
            "1",
            "--",
            hpcdist,
            "run",
            *WORKLOADS,
            "--backend",
            "nccl",
            "--checkpoint-dir",
            str(tmp_path),
        ]
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ddp.pt").exists()


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_cuda_tensors_through_cpu_backends(hpcdist: str, backend: str) -> None:
    """Two ranks sharing the GPU put CUDA tensors through gloo's and the mpi backend's collectives (the mpi backend's
    send/recv too: gloo's abort the process on a CUDA tensor, writev: Bad address) and receive the right values."""
    done = launch([hpcdist, "mpirun", "-np", "2", "--", "python", str(PROGRAMS / "cuda_collectives.py"), backend])
    assert done.returncode == 0, done.stderr
    results = sorted(
        (json.loads(line.split("RESULT ", 1)[1]) for line in done.stdout.splitlines() if "RESULT " in line),
        key=lambda r: r["rank"],
    )
    assert [r["rank"] for r in results] == [0, 1]
    for result in results:
        assert result["all_reduce"] == 3.0
        assert result["broadcast"] == [float(i) for i in range(8)]
        assert result["all_gather"] == [0.0, 1.0]
        assert result["device"].startswith("cuda")
    if backend == "mpi":
        assert results[1]["recv"] == [7.0] * 4


def test_ddp_trains_on_the_gpu(hpcdist: str) -> None:
    """The DDP workload on nccl at one rank ends with the parameter digest it verifies itself."""
    done = launch([hpcdist, "mpirun", "-np", "1", "--", hpcdist, "run", "ddp", "--backend", "nccl", "--epochs", "2"])
    assert done.returncode == 0, done.stderr


def test_bench_compares_nccl_gloo_and_mpi(hpcdist: str) -> None:
    """`hpcdist bench` with --backend nccl,gloo,mpi times every backend (its numbers go into the README)."""
    done = launch(
        [
            hpcdist,
            "mpirun",
            "-np",
            "1",
            "--",
            hpcdist,
            "bench",
            "all_reduce",
            "-b",
            "1M",
            "-e",
            "64M",
            "-f",
            "4",
            "--backend",
            "nccl,gloo,mpi",
            "--json",
        ]
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    print(json.dumps(report["environment"]), json.dumps(report["devices"]))
    impls = {row["impl"] for row in report["results"]}
    assert impls == {"torch/nccl", "torch/gloo", "torch/mpi4py"}, impls
    assert all(row["out_of_place"]["nwrong"] == 0 and row["in_place"]["nwrong"] == 0 for row in report["results"])
    assert all(d["device"].startswith("cuda:0 ") for d in report["devices"]), report["devices"]
    for row in report["results"]:
        print(
            f"{row['impl']:14} {row['size']:>10} B  {row['out_of_place']['time']:9.1f} us  "
            f"{row['out_of_place']['alg_bw']:7.2f} GB/s"
        )


def test_nccl_takes_its_unique_id_over_the_mpi_store(hpcdist: str) -> None:
    """nccl on the store over MPI (`--store mpi`): rank 0's unique id reaches the group through MPI, not a TCP port."""
    done = launch(
        [hpcdist, "mpirun", "-np", "1", "--", hpcdist, "run", "allreduce", "--backend", "nccl", "--store", "mpi"]
    )
    assert done.returncode == 0, done.stderr


def test_nccl_starts_from_two_roots_whose_ids_go_over_the_mpi_store(hpcdist: str) -> None:
    """TORCH_NCCL_RANKS_PER_ROOT=1 puts two ranks above torch's threshold: each makes a unique id, both ids reach both
    ranks through the store over MPI, ncclCommInitRankScalable starts nccl, and the all-reduce checks its own sum.
    Two GPUs on the host at least: nccl refuses two ranks on one GPU."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip(f"nccl's scalable start-up needs two ranks on two GPUs; torch sees {torch.cuda.device_count()}")
    argv = [hpcdist, "mpirun", "-np", "2", "--", hpcdist, "run", "allreduce", "--backend", "nccl", "--store", "mpi"]
    done = launch(argv, TORCH_NCCL_RANKS_PER_ROOT="1", TORCH_CPP_LOG_LEVEL="INFO")
    assert done.returncode == 0, done.stderr
    # ProcessGroupNCCL::initNCCLComm logs this on the scalable path only (broadcast unique ID on the other)
    assert (done.stdout + done.stderr).count("all-gather unique IDs through store took") >= 2, done.stderr


def test_ddp_on_nccl_trains_through_the_survivors_loop(hpcdist: str) -> None:
    """`hpcdist run ddp` under `hpcdist mpirun --on-failure shrink` on nccl: the shrinkable loop (an agreement over MPI
    after every step, DDP on the GPU) trains and the parameter check passes; one GPU allows no second rank to lose."""
    training = [hpcdist, "run", "ddp", "--backend", "nccl", "--epochs", "2"]
    done = launch([hpcdist, "mpirun", "--on-failure", "shrink", "-np", "1", "--", *training])
    assert done.returncode == 0, done.stderr
    assert "epoch 2/2 loss" in done.stdout + done.stderr, done.stdout
