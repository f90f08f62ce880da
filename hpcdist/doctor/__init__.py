"""`hpcdist doctor`: is this machine (and a hostfile's hosts) ready for MPI + torch.distributed jobs?

- `facts`: what the checks look at and what they say (Facts, Probe, Check);
- `checks` (and `network`, the interface settings, `bindplan`, the --bind auto plan, `image`, the MPI inside a
  --container-image against the launcher's): pure, Facts in, Check lines out;
- `probe`: gathers Facts by running commands (through proctree.capture; its probe jobs planned by the launch
  pipeline), one of which runs the jobs' own rendezvous in each rank (`runtime.rendezvous.doctor_probe`).

May import: the leaves, the plug-in wings (families, containers), launching, placement, and of the rank side only
`runtime.env`: the doctor may itself run as a rank (`hpcdist mpirun -- hpcdist doctor`), and it reads where it runs
as a rank does (`LaunchEnv`). Never the rest of the rank side, or the CLI.
"""
