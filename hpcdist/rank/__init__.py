"""What runs inside a rank, beside the program the shim starts: its line tagger, log file, heartbeat and child.

- `tagger`: started by the shim before the program; its forked process writes the rank's whole lines tagged
  `[host:rank] `, to its log file, and the `Beat` events `hpcdist mpirun`'s heartbeat watch listens for;
- `hostbeat`: the host's beat: each rank's tagger notes its beat in a directory of its host's, and the lowest rank
  still beating sends the host's beats as one `Beat`;
- `budget`: how much of a rank's output its tagger forwards (pure);
- `child`: the rank's non-Python program, started with the rank's signals passed on, and SIGTERM relayed;
- `frozen`: whether the rank's process is frozen (stopped, a frozen cgroup, uninterruptible sleep), which each beat
  of its tagger says.

Each takes the launcher's contract (`RankContract`) from the shim. May import: the leaves (errors, values, waits,
contract, events, lines, ranklist). Never the supervisor (launching), torch, mpi4py, the runtime or the CLI.
"""
