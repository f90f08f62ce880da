"""Survivors that carry on when ranks die (ULFM): the revocable communicator, failure detection, the shrink and the
rebuild of torch's groups, and the training loop that resumes.

    ulfm.py        shrink mode, the revocable world, ranks as at the job's start, why ULFM is unavailable
    membership.py  commit (every survivor steps or none does) and recover (revoke, shrink, rebuild): Recovery
    detector.py    for gloo and nccl, a thread that hears of a failure through MPI

May import: errors, values, waits, control, ranklist, abort, mpi_backend, runtime, torch and mpi4py. Never
launching, jobs, the CLI or the workloads.
"""
