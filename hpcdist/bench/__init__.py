"""`hpcdist bench`: nccl-tests' collective benchmark per backend beside raw mpi4py, and a DDP step benchmark.

- `plan`: the options -> BenchPlan, sizes, byte counts and bus-bandwidth factors (pure);
- `fmt`: nccl-tests' table, footer and the side-by-side comparison (pure);
- `data`: the values sent and expected per rank (numpy);
- `impl`: the implementations timed (a torch group, raw mpi4py), `groups`: one group per backend;
- `run`: the interleaved rounds; `describe`: hosts, devices and versions; `ddp`: the DDP step;
- `plot`: `--plot`'s pictures, drawn from the JSON document (matplotlib, an optional extra), and `--from`'s redraw;
- `startup`: `bench startup`'s rows, jobs, stop rules and table (pure), `startup_model` its fitted model (pure),
  `startup_probe` the program each rank runs, `startup_run` the jobs launched and timed, `startup_plot` the picture;
- `recovery`: `bench recovery`'s rows, jobs and the step log's reading (pure), `recovery_run` the jobs launched, a
  rank killed in each, and the table.

May import: errors, values, runtime, mpi_backend, forensics (the timeline: --report, --trace-cost), launching (the
mpirun to start, for bench startup), workloads (the step log, for bench recovery). Never the CLI.
"""
