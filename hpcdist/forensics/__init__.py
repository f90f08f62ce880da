"""Hang forensics: each rank's ledger of communication calls, and the watchdog that reports the first divergence.

- `ledger`: the ledger and the divergence analysis (pure);
- `sources`: calls recorded below dist.* (a backend's own records, torch's Flight Recorder), merged into the ledger;
- `watchdog`: records torch.distributed calls, gathers every ledger over MPI at a timeout, ends the job.

May import: errors, waits, abort. Never the runtime, the CLI or torch at import time.
"""
