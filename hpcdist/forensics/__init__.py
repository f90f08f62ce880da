"""Hang forensics: each rank's ledger of communication calls, and the watchdog that reports the first divergence.

- `ledger`: the ledger and the divergence analysis (pure);
- `recording`: this rank's ledger (`LEDGER`) and the wrappers that record torch.distributed's calls in it;
- `watchdog`: each rank's watchdog thread on its own communicator: it answers, and alarms the reporter at a timeout;
- `hangreport`: what a rank answers, and the hang report: every answer gathered, the hang described, printed and
  saved, the job ended (the watchdog's state, which the report reads);
- `gather`: the report's gathering over MPI: each rank's digest through its host's leader, then a few full answers;
- `digest`: a rank's digest, a host's summary of them, the reporter's tally and the fan-in emulator (pure);
- `sources`: calls recorded below dist.* (a backend's own records, torch's Flight Recorder), merged into the ledger;
- `frdump`: every rank's calls as Flight Recorder dumps for torch's `torchfrtrace`, and where they go;
- `stacks`: a rank's Python stacks through faulthandler, and every rank's grouped into one report (pure but the dump);
- `collect`: every rank's stacks printed on a hang (a part of the watchdog's answer), on SIGUSR2 and on a failure;
- `cause`: what an ending rank tells hpcdist mpirun (in which call it failed, that it finished, whom a hang blames);
- `hung`: under --on-failure shrink, the ranks that never arrived end themselves, so that the survivors shrink;
- `pyspy`: with py-spy installed, the stacks of a rank on this host that could not answer (it holds the GIL).
- `chrome`: the merged timeline as a Chrome-trace document and back (pure);
- `stragglers`: per rank, time in collectives and how often it arrived last; the straggler rule (pure);
- `timeline`: aligns the ranks' clocks over MPI, keeps every call and `hpcdist.region`, writes the trace file;
- `timeplot`: draws a trace file with matplotlib (`hpcdist trace FILE --plot`).

May import: the leaves (errors, values, waits, abort, contract, events, lines, settings, settingtable, ranklist,
proctree, and commcall: the record of one call, which the mpi backend shares) and rank.child (to run py-spy). Never the
runtime, the supervisor (launching), the CLI, or torch at import time.
"""
