"""A Python function run on ranks, the caller's side: `hpcdist.launch`, and the files a call travels in.

- `byvalue`: cloudpickle with the code it ships by value named and with its source, for the ranks' tracebacks (pure);
- `calls`: a call sent to ranks and their outcomes read back (pure; `hpcdist.launch` and `hpcdist.submit` share it);
- `pyfunc`: `hpcdist.launch`, a function on N ranks through the launch pipeline, as `hpcdist mpirun` runs it
  (`runtime.pycall` is each rank's side); only packing the call, reading the outcomes and its errors are its own.

May import: errors, values, waits, contract, launching. Never torch, mpi4py, the runtime or the CLI.
"""
