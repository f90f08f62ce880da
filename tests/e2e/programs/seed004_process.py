# Seed 004's multi-process example ("多进程管理"), put together from its pieces, verbatim but for the launch:
#     mp.set_start_method("spawn")
#     for rank in range(size):
#         p = mp.Process(target=init_process, args=(rank, size, run))
#         p.start()
#         processes.append(p)
#     for p in processes:
#         p.join()
# became
#     hpcdist.launch(init_process, hpcdist.RANK, size, run, np=size)
# The notes pass `run` as init_process's third argument, as in PyTorch's tutorial, whose init_process is
# (rank, size, fn, backend): that form is used here. Its `run` (all_reduce on new_group([0, 1])) uses the CPU
# with gloo, as the notes' table says for "CPU 训练或调试", where the notes used .to(rank) on two GPUs.
import os

import torch
import torch.distributed as dist

import hpcdist


def init_process(rank, size, fn, backend="gloo"):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


def run(rank, size):
    group = dist.new_group([0, 1])
    tensor = torch.tensor([1.0, 2.0, 3.0]) if rank == 0 else torch.tensor([4.0, 5.0, 6.0])
    print(f"Rank: {rank}, random tensor: {tensor}")
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    print(f"Rank: {rank}, has data: {tensor}")


if __name__ == "__main__":
    size = 2
    hpcdist.launch(init_process, hpcdist.RANK, size, run, np=size)
