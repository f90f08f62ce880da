"""Job generation: hostfiles, batch scripts (five schedulers), torchrun lines, mpirun scripts; submitted jobs followed.

- `render`: the one Jinja environment and the quoting filters;
- `sbatchspec`: a Slurm job (SbatchSpec) and the checks of its values (pure);
- `sbatch`, `torchrun`: specs -> script text or argv (pure);
- `batch`: what every scheduler's script shares (the job, its hpcdist mpirun line, the body job.sh.j2), and
  `gridengine`, `pbs`, `lsf`, `flux`: each scheduler's job script in its submit command's words (pure);
- `profiles`: NCCL/Gloo settings, env files and trap warnings;
- `arrays`: Slurm's --array syntax (pure);
- `slurmjob`: a submitted job as `scontrol` shows it (parsing is pure; the queries go through launching.spawn);
- `local`: what the submitting Python brings to a script (its interpreter, the mpirun and torchrun beside it);
- `submit`: `hpcdist.submit`, a Python function as a batch job of any scheduler with a command-line client;
  `scripts`: its job script for Grid Engine, PBS, LSF and Flux; `handle`: its `Job` handle; `queued`: a job of
  those four as their commands show it (the words are the scheduler plug-in's);
- `torchrunlogs`: where torchrun-mode jobs' ranks wrote their files (the script's layout, read back; lookups only);
- `examples`: the rendered example files of hostfiles/ and slurm/;
- `kubernetes`: a Kubeflow Trainer TrainJob and an mpi-operator MPIJob for a program, as JSON manifests (pure);
- `templates/`: the bundled template set (a site's --template-dir is searched first).

May import: the leaves (errors, values, waits, contract, events, lines, settings, settingtable, program, proctree:
`capture` for the schedulers' commands), the plug-in wings (families, schedulers), launching's pure builders (hostfile,
names, mpirun, output), its pipeline (world, options, plan, execute: a script's mpirun step is planned as every launch
is), placement.binding's `check_bind`, calling.calls (a call's files), launching.families' `resolve_family` (the one
choice of MPI dialect), and launching.spawn's `submit_sbatch` and `submit_script`. Never the rank side, torch, mpi4py or
the CLI.
"""

__all__ = ["LAUNCHES"]

LAUNCHES = ("srun", "mpirun", "torchrun")  # how a job script starts its ranks (sbatch --launch)
