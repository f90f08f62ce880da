"""`hpcdist doctor`: is this machine (and a hostfile's hosts) ready for MPI + torch.distributed jobs?

- `facts`: what the checks look at and what they say (Facts, Probe, Check);
- `checks` (and `network`, the interface settings, `bindplan`, the --bind auto plan): pure, Facts in, Check lines out;
- `probe`: gathers Facts by running commands (through launching.spawn, built by launching's argv builder), and
  the rendezvous probe that runs the jobs' own rendezvous code in each rank.

May import: errors, launching, placement, runtime. Never the CLI.
"""
