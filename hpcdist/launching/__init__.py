"""The mpirun supervisor: hostfiles, the argv builder, options -> spec, the one module that spawns, and the watch.

- `names`, `hostfile`, `selection`, `program`, `mpirun`: pure builders and parsers (no torch, no mpi4py, no
  runtime); `mpirun` checks a spec and asks its MPI family (`hpcdist.families`) for the command line;
- `families`: which family a launcher on this machine is (reads the files beside it);
- `spec`: `hpcdist mpirun`'s options -> MpirunSpec (reads the environment, finds mpirun);
- `spawn`: the only module that starts processes (mpirun, a rank's child, sbatch, the doctor's probes);
- `watch`: reads the launcher's output, each line a rank's event (`contract.parse_event`) or the launcher's words
  (the family's scanner), and says when the job must end (a rank silent, or the launcher still running after a rank
  failed) (pure); over `book` (each rank's record), `blame` (who is named, causes first), `lost` (lost hosts),
  `heartbeat` (hpcdist's own heartbeat: its limit, and the ranks that fell silent) and `shrink` (the losses the
  survivors carry on after);
- `sessions`: Open MPI's session directories that killed launchers left, removed before a launch;
- `exitcodes`: the family's report of each rank's exit (Hydra's `-print-all-exitcodes`), taken out and read (pure);
- `attempts`: `hpcdist mpirun --max-restarts`: when to restart, on which hosts, and the attempts' summary;
- `output`: per-rank output options, rank lists and the router of tagged lines (pure).

What runs inside a rank is the `rank` wing; where a rank runs on its node, `placement`; `hpcdist.launch`, `calling`.

May import: the leaves (errors, values, waits, contract, control, hosts, ranklist, ranksource), the plug-in wings
(families, schedulers), placement, rank.streams (the tagged lines it reads). Never torch, mpi4py, the runtime,
calling or the CLI.
"""
