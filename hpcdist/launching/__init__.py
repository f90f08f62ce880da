"""The mpirun supervisor: hostfiles, the argv builder, options -> spec, the one module that spawns, and the watch.

- `names`, `hostfile`, `nodelist`, `selection`, `program`, `families`, `mpirun`: pure builders and parsers (no torch,
  no mpi4py, no runtime); `mpirun` holds one registered launcher class per MPI (Open MPI, MPICH, Intel MPI);
- `spec`: `hpcdist mpirun`'s options -> MpirunSpec (reads the environment, finds mpirun);
- `spawn`: the only module that starts processes (mpirun, a rank's child, sbatch, the doctor's probes);
- `monitor`: reads mpirun's output for lost hosts, ranks' control lines and failures, and says when the job must end
  (a rank silent, or the launcher still running after a rank failed) (pure);
- `sessions`: Open MPI's session directories that killed launchers left, removed before a launch;
- `exitcodes`: Hydra's `-print-all-exitcodes` block, read beside the monitor (pure);
- `heartbeat`: hpcdist's own heartbeat: its limit, and the watch of ranks that fell silent (pure);
- `attempts`: `hpcdist mpirun --max-restarts`: when to restart, on which hosts, and the attempts' summary;
- `output`: per-rank output options, rank lists and the router of tagged lines (pure).

What runs inside a rank is the `rank` wing; where a rank runs on its node, `placement`; `hpcdist.launch`, `calling`.

May import: errors, values, waits, control, placement, rank.streams (the tagged lines it reads). Never torch,
mpi4py, the runtime, calling or the CLI.
"""
