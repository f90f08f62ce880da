"""The rank's runtime: which launcher started this process, the rendezvous, the network, and `hpcdist.init`.

- `process`: this rank process's contract with its launcher, read once (by the shim, else `hpcdist.init`), and what
  the shim and init set up in it;
- `env`: launch detection (LaunchEnv), pure; `readings`: what each launcher's variables say, read and checked,
  pure; `slurm`: what srun says about a task's step, pure;
- `netif`: this host's interfaces and name resolution; `sockets`: this process's TCP sockets, and cutting some;
- `addresses`: the address rank 0 offers and each rank's interface towards it (pure, but one probe);
- `rendezvous`: MASTER_ADDR/MASTER_PORT by MPI, Slurm or this host, and the reachability check;
- `backends`: which torch backend and store a job uses, and those that cannot work on this host;
- `prepare`: a rank's rendezvous, the torch variables it writes into os.environ, and where torch's store lives
  (served over rank 0's socket, released, or over MPI); the job's and the start-up's timeouts;
- `mpistore`: torch's store over MPI, as every rank calls it; `storeserver`: its keys and rank 0's thread serving them;
- `bootstrap`: `hpcdist.init`: the process group's start-up (init_process_group, forensics on) and its shutdown;
- `adopt`: the shim's import hook that routes a program's own init_process_group through bootstrap;
- `pycall`: a rank's side of `hpcdist.launch` (run as `python -m hpcdist.runtime.pycall` under the shim).
- `pmi`: the PMI `finalize` that MPICH sends at C exit, sent by the shim before it leaves with os._exit.

May import: the leaves (errors, values, waits, abort, contract, events, lines, settings, settingtable); mpi_backend and
forensics (lazily, from `init`, `prepare` and `adopt`). Never the CLI, launching or jobs.
"""
