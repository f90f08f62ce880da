"""The rank's runtime: which launcher started this process, the rendezvous, the network, and `hpcdist.init`.

- `env`: launch detection (LaunchEnv), pure; `slurm`: what srun says about a task's step, pure;
- `netif`: this host's interfaces and name resolution; `sockets`: this process's TCP sockets, and cutting some;
- `rendezvous`: MASTER_ADDR/MASTER_PORT by MPI, Slurm or this host, and the reachability check;
- `bootstrap`: the one place that writes os.environ and calls init_process_group;
- `adopt`: the shim's import hook that routes a program's own init_process_group through bootstrap;
- `pycall`: a rank's side of `hpcdist.launch` (run as `python -m hpcdist.runtime.pycall` under the shim).
- `pmi`: the PMI `finalize` that MPICH sends at C exit, sent by the shim before it leaves with os._exit.

May import: errors, values, waits, abort; mpi_backend and forensics (lazily, from `init` and `adopt`).
Never the CLI, launching or jobs.
"""
