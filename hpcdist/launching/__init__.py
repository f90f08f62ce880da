"""The mpirun supervisor: one pipeline from options to outcome, and the pieces it is made of.

The pipeline, used by `hpcdist mpirun`, `hpcdist.launch`, the doctor's probe jobs and a batch script's mpirun step:

- `world`: what the launch takes from the world around it (environment, streams, user, PATH, Python, host, CPUs),
  read once at the entry (`World.current()`) and handed down;
- `options`: every option of a launch as one frozen value (`MpirunOptions`), the run mode and restarts included;
- `plan`: options + world -> `LaunchPlan`, the one builder of the launch's `MpirunSpec`, the ranks' contract, the
  output options, the restart policy and the heartbeat limit;
- `execute`: the one attempts loop (run, watch, outcome, decision), the dry run and the script;
- `restarts`: the one restart policy and its messages (generated batch scripts ask it too).

Its pieces:

- `names`, `hostfile`, `selection`, `mpirun`: pure builders and parsers (no torch, no mpi4py, no runtime); `mpirun`
  checks a spec and asks its MPI family (`hpcdist.families`) for the command line;
- `families`: which family a launcher on this machine is (reads the files beside it);
- `spawn`: the supervisor's one module that starts processes (mpirun, sbatch, the doctor's probes);
- `watch`: reads the launcher's output, each line a rank's event (`events.parse_event`) or the launcher's words
  (the family's scanner), and says when the job must end (a rank silent, or the launcher still running after a rank
  failed) (pure); over `book` (each rank's record), `blame` (who is named, causes first), `lost` (lost hosts),
  `heartbeat` (hpcdist's own heartbeat: its limit, and the ranks that fell silent) and `shrink` (the losses the
  survivors carry on after);
- `exitcodes`: the family's report of each rank's exit (Hydra's `-print-all-exitcodes`), taken out and read (pure);
- `outcome`: how a launch ended, and whom it names;
- `output`: per-rank output options and the router of tagged lines (pure);
- `sessions`: Open MPI's session directories that killed launchers left, removed before a launch;
- `heldterm`: runs a program with SIGTERM held (Open MPI's launcher and daemons inside a Slurm allocation);
- `hostnames`: the hosts' names resolve before a launch.

What runs inside a rank is the `rank` wing; where a rank runs on its node, `placement`; `hpcdist.launch`, `calling`.

May import: the leaves (errors, values, waits, contract, events, lines, settings, settingtable, program, status,
proctree, hosts, ranklist, ranksource), the plug-in wings (families, schedulers) and placement. Never the rank side (it
meets the ranks in the contract), torch, mpi4py, calling or the CLI.
"""
