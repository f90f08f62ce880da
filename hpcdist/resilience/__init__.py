"""Survivors that carry on when ranks die (ULFM): the revocable communicator, failure detection, the shrink and the
rebuild of torch's groups, and the training loop that resumes.

    ulfm.py        the revocable world, ranks as at the job's start, why ULFM is unavailable
    membership.py  commit (every survivor steps or none does) and recover (revoke, shrink, rebuild): Recovery
    detector.py    for gloo and nccl, a thread that hears of a failure through MPI
    sharding.py    an epoch's sample order and each rank's share of a step for any world size (pure)
    loop.py        hpcdist.Survivors: the training loop that commits, recovers, re-wraps DDP and re-shares
    buckets.py     DDP's gradient buckets carried to the DDP a recovery makes, so a redone step sums alike
    spares.py      --spares: the idle ranks' wait outside torch's world, and their joining after a shrink
    checkpoint.py  atomic checkpoint files: what a restart resumes from when the survivors are too few
    sharded.py     state a lost rank takes with it (a ZeroRedundancyOptimizer's shard: StateLost), FSDP refused

Whether the job shrinks, how far, and with how many spares is the launcher's contract (`RankContract.shrinks`,
`min_np`, `spares`), read once per process (runtime.process). May import: the leaves (errors, values, waits, contract,
ranklist, abort), mpi_backend, runtime, torch and mpi4py. Never launching, jobs, the CLI or the workloads.
"""
