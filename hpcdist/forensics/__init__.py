"""Hang forensics: each rank's ledger of communication calls, and the watchdog that reports the first divergence.

- `ledger`: the ledger and the divergence analysis (pure);
- `watchdog`: records torch.distributed calls, gathers every ledger over MPI at a timeout, ends the job;
- `chrome`: the merged timeline as a Chrome-trace document and back (pure);
- `stragglers`: per rank, time in collectives and how often it arrived last; the straggler rule (pure);
- `timeline`: aligns the ranks' clocks over MPI, keeps every call and `hpcdist.region`, writes the trace file;
- `timeplot`: draws a trace file with matplotlib (`hpcdist trace FILE --plot`).

May import: errors, waits, abort. Never the runtime, the CLI or torch at import time.
"""
