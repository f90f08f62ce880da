"""What runs inside a rank, beside the program the shim starts: its line tagger, log file and heartbeat beats.

- `tagger`: started by the shim before the program; its forked process writes the rank's whole lines tagged
  `[host:rank] `, to its log file, and the `beat` control lines `hpcdist mpirun`'s heartbeat watch listens for;
- `streams`: the variables that start the tagger, rank lists, log names and the tagged line's format, which the
  supervisor's router (`launching.output`) reads back (pure).

May import: errors, values, waits, control. Never the supervisor (launching), torch, mpi4py, the runtime or the CLI.
"""
