"""Where a rank runs on its node: the node's topology and `--bind auto`'s per-rank plan (pure: data in, plan out).

- `topology`: a node's NUMA nodes, cores, GPUs and NICs, read from sysfs or hwloc's XML (readers only read files);
- `binding`: each local rank's cores, GPU and NIC planned from a Topology, and the variables that carry the plan.

May import: the leaves (errors, values, contract, settings, settingtable). Never torch, mpi4py, the runtime, launching
or the CLI.
"""
