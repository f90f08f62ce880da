# Seed 000's DDP example ("分布式模型训练"), verbatim but for the launch call:
#     mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)
# became
#     hpcdist.launch(train, hpcdist.RANK, world_size, np=world_size)
# (hpcdist.RANK is mp.spawn's first argument: each rank receives its own rank there).
import torch
import torch.distributed as dist
import torch.nn as nn

import hpcdist


def train(rank, world_size):
    dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)
    model = nn.Linear(10, 1)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])

    # 模拟数据
    data = torch.randn(10, 10)
    labels = torch.randn(10, 1)
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    for _ in range(10):  # 模拟训练
        optimizer.zero_grad()
        outputs = model(data)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()

    print(f"Rank {rank} finished training.")


def main():
    world_size = 2
    hpcdist.launch(train, hpcdist.RANK, world_size, np=world_size)


if __name__ == "__main__":
    main()
