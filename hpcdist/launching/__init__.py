"""The mpirun supervisor: one pipeline from options to outcome, and the pieces it is made of.

The pipeline, used by `hpcdist mpirun`, `hpcdist.launch`, the doctor's probe jobs and a batch script's mpirun step:

- `world`: what the launch takes from the world around it (environment, streams, user, PATH, Python, host, CPUs),
  read once at the entry (`World.current()`) and handed down;
- `options`: every option of a launch as one frozen value (`MpirunOptions`), the run mode and restarts included;
- `plan`: options + world -> `LaunchPlan`, the one builder of the launch's `MpirunSpec`, the ranks' contract, the
  output options, the restart policy and the heartbeat limit;
- `execute`: the one attempts loop (run, watch, outcome, decision), the dry run and the script;
- `restarts`: the one restart policy and its messages (generated batch scripts ask it too).

Its pieces: `names`, `hostfile`, `nodelist`, `selection`, `program`, `families`, `mpirun` (pure builders and parsers;
`mpirun` holds one registered launcher class per MPI); `spawn` (the supervisor's one module that starts processes);
`monitor`, `exitcodes`, `heartbeat`, `shrink`, `outcome` (reading mpirun's output and the ranks' events, pure);
`output` (per-rank output options and the router of tagged lines); `sessions` (Open MPI's stale session
directories); `hostnames` (the hosts' names resolve before a launch).

What runs inside a rank is the `rank` wing; where a rank runs on its node, `placement`; `hpcdist.launch`, `calling`.

May import: errors, values, waits, contract, control, placement, rank.streams (the tagged lines it reads). Never
torch, mpi4py, the runtime, calling or the CLI.
"""
