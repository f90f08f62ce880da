"""Hang forensics: each rank's ledger of communication calls, and the watchdog that reports the first divergence.

- `ledger`: the ledger and the divergence analysis (pure);
- `watchdog`: records torch.distributed calls, gathers every ledger over MPI at a timeout, ends the job;
- `cause`: what an ending rank tells hpcdist mpirun (in which call it failed, that it finished, whom a hang blames).

May import: errors, waits, abort, control. Never the runtime, the CLI or torch at import time.
"""
