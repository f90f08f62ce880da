"""Launching through mpirun: hostfiles, the argv builder, options -> spec, and the one module that spawns.

- `names`, `hostfile`, `nodelist`, `selection`, `program`, `families`, `mpirun`: pure builders and parsers (no torch,
  no mpi4py, no runtime); `mpirun` holds one registered launcher class per MPI (Open MPI, MPICH, Intel MPI);
- `spec`: `hpcdist mpirun`'s options -> MpirunSpec (reads the environment, finds mpirun);
- `spawn`: the only module that starts processes (mpirun, a rank's child, sbatch, the doctor's probes);
- `monitor`: reads mpirun's output for lost hosts, ranks' control lines and failures, and says when the job must end
  (a rank silent, or the launcher still running after a rank failed) (pure);
- `exitcodes`: Hydra's `-print-all-exitcodes` block, read beside the monitor (pure);
- `heartbeat`: hpcdist's own heartbeat: its limit, and the watch of ranks that fell silent (pure);
- `attempts`: `hpcdist mpirun --max-restarts`: when to restart, on which hosts, and the attempts' summary;
- `output`: per-rank output options, rank lists and the router of tagged lines (pure);
- `tagger`: run in a rank by the shim: its forked line tagger and log file;
- `byvalue`: cloudpickle with the code it ships by value named and with its source, for the ranks' tracebacks (pure);
- `calls`: a Python call sent to ranks and their outcomes read back (pure; `hpcdist.launch` and `hpcdist.submit`);
- `pyfunc`: `hpcdist.launch`, the caller's side (a function on N ranks; `runtime.pycall` is each rank's side);
- `topology`, `binding`: a node's topology read from sysfs or hwloc XML, and `--bind auto`'s per-rank plan (pure).

May import: errors, values, waits, control. Never torch, mpi4py, the runtime or the CLI.
"""
