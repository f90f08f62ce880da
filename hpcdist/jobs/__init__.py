"""Job generation: hostfiles, sbatch scripts, torchrun lines and mpirun scripts as text, from Jinja templates.

- `render`: the one Jinja environment and the quoting filters;
- `sbatch`, `torchrun`: specs -> script text or argv (pure);
- `profiles`: NCCL/Gloo settings, env files and trap warnings;
- `arrays`: Slurm's --array syntax (pure);
- `slurmjob`: a submitted job as `scontrol` shows it (parsing is pure; the queries go through launching.spawn);
- `torchrunlogs`: where torchrun-mode jobs' ranks wrote their files (the script's layout, read back; lookups only);
- `examples`: the rendered example files of hostfiles/ and slurm/;
- `templates/`: the bundled template set (a site's --template-dir is searched first).

May import: errors, values, launching's pure builders (hostfile, names, nodelist, program, mpirun), and
launching.spawn's `capture` for slurmjob's scontrol calls. Never torch, mpi4py,
the runtime or the CLI.
"""
