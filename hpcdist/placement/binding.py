"""`--bind auto`: plan each local rank's cores, GPU and NIC from a node's Topology (pure: data in, plan out).

On a GPU node, local rank r uses GPU r mod #GPUs (in PCI bus order, or $CUDA_VISIBLE_DEVICES' order), gets an
equal share of whole cores of that GPU's NUMA node (the ranks whose GPUs share a NUMA node split its cores),
and the NIC nearest its GPU (same PCIe switch first, then same NUMA node) for NCCL. Elsewhere the node's
cores are split evenly in order (NUMA node by NUMA node, so a share crosses a node only when it must): so
also when a GPU's NUMA node is unknown on a multi-socket node (a VM) or holds none of the job's CPUs.
A share is whole cores with all their SMT siblings; OMP_NUM_THREADS is its number of cores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import UsageError
from ..records import record, replace
from .topology import Device, Topology

__all__ = ["BIND_MODES", "RankBinding", "binding_env", "check_bind", "plan_binding"]

BIND_MODES = ("none", "auto")


@record(frozen=True)
class RankBinding:
    """One local rank's share: its logical CPUs, how many whole cores they are, its NUMA nodes, GPU and NIC."""

    local_rank: int
    cpus: tuple[int, ...]
    cores: int
    numa: tuple[int, ...]
    gpu: Device | None = None
    nic: Device | None = None

    def describe(self) -> str:
        """E.g. 'local rank 0: 4 cores (CPUs 0-3,112-115) NUMA 0, GPU 0000:18:00.0, NIC mlx5_1'."""
        cores = f"{self.cores} core{'s' * (self.cores != 1)}"
        parts = [f"local rank {self.local_rank}: {cores} (CPUs {_cpulist(self.cpus)}) NUMA "]
        parts[0] += ",".join(map(str, self.numa))
        if self.gpu:
            parts.append(f"GPU {self.gpu.name}")
        if self.nic:
            parts.append(f"NIC {self.nic.name}")
        return ", ".join(parts)


def check_bind(mode: str, bind_to: str, what: str = "--bind") -> str:
    """`--bind` as given, unless it cannot be used with mpirun's own `--bind-to`.

    Raises:
        UsageError: an unknown mode, or --bind auto with a --bind-to other than none.
    """
    if mode not in BIND_MODES:
        raise UsageError(f"{what} {mode!r}: use one of {', '.join(BIND_MODES)}")
    if mode == "auto" and bind_to != "none":
        raise UsageError(
            f"--bind auto and --bind-to {bind_to} both bind the ranks; give --bind auto (hpcdist plans each rank's "
            "cores) or --bind-to (mpirun binds), not both"
        )
    return mode


def plan_binding(
    topology: Topology, local_world_size: int, environ: Mapping[str, str] | None = None
) -> tuple[RankBinding, ...]:
    """Every local rank's share of `topology`, in local-rank order; `environ` may narrow GPUs (CUDA_VISIBLE_DEVICES).

    Raises:
        UsageError: fewer cores than ranks (on the node, or on a GPU's NUMA node shared by several ranks).
    """
    if local_world_size < 1:
        raise UsageError(f"the local world size must be at least 1, got {local_world_size}")
    if len(topology.nodes) == 1:  # one NUMA node: a device whose node is unknown (-1, common there) is on it
        only = topology.nodes[0].id
        topology = replace(
            topology,
            gpus=tuple(replace(g, numa=only) if g.numa is None else g for g in topology.gpus),
            nics=tuple(replace(n, numa=only) if n.numa is None else n for n in topology.nics),
        )
    gpus = _visible_gpus(topology.gpus, (environ or {}).get("CUDA_VISIBLE_DEVICES"))
    numa_cores = {n.id: n.cores for n in topology.nodes}
    if gpus and all(g.numa in numa_cores for g in gpus):
        rank_gpu = [gpus[r % len(gpus)] for r in range(local_world_size)]
        shares: dict[int, tuple[tuple[int, ...], ...]] = {}
        for numa in sorted({g.numa for g in rank_gpu if g.numa is not None}):
            ranks = [r for r, g in enumerate(rank_gpu) if g.numa == numa]
            where = f"NUMA node {numa} (the GPUs of local ranks {_cpulist(ranks)})"
            shares.update(zip(ranks, _split(numa_cores[numa], len(ranks), where), strict=True))
        return tuple(
            _binding(r, shares[r], topology, rank_gpu[r], _nearest(rank_gpu[r], topology.nics))
            for r in range(local_world_size)
        )
    cores = [core for node in topology.nodes for core in node.cores]
    split = _split(tuple(cores), local_world_size, "this node")
    return tuple(_binding(r, share, topology) for r, share in enumerate(split))


def binding_env(binding: RankBinding, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a rank's share sets: OMP_NUM_THREADS and NCCL's NIC, each only where the user set none."""
    env = {"OMP_NUM_THREADS": str(binding.cores)}
    if binding.nic is not None:
        # `=` asks NCCL for exactly this name: a plain `mlx5_1` would also match mlx5_10 and up
        env["NCCL_IB_HCA" if binding.nic.rdma else "NCCL_SOCKET_IFNAME"] = f"={binding.nic.name}"
    return {name: value for name, value in env.items() if name not in environ}


def _visible_gpus(gpus: tuple[Device, ...], visible: str | None) -> tuple[Device, ...]:
    """The GPUs CUDA shows, in its order: all of them, or $CUDA_VISIBLE_DEVICES' indexes (UUIDs cannot be mapped)."""
    if visible is None:
        return gpus
    words = [w.strip() for w in visible.split(",") if w.strip()]
    if not all(w.isdigit() for w in words):
        return ()  # UUIDs or MIG names (not mapped to PCI here), or "-1"/"" (none): plan as for a CPU node
    chosen = []
    for word in words:
        if int(word) >= len(gpus):
            break  # CUDA stops at the first invalid index
        chosen.append(gpus[int(word)])
    return tuple(chosen)


def _split(cores: tuple[tuple[int, ...], ...], ranks: int, where: str) -> list[tuple[tuple[int, ...], ...]]:
    """`cores` in `ranks` consecutive shares, the first ones one core larger when they do not divide evenly."""
    if len(cores) < ranks:
        raise UsageError(
            f"--bind auto: {ranks} ranks need a core each, but {where} has {len(cores)} cores this job may use; "
            "run fewer ranks per node, or use --bind none to let them share the cores"
        )
    size, extra = divmod(len(cores), ranks)
    shares, start = [], 0
    for rank in range(ranks):
        end = start + size + (rank < extra)
        shares.append(cores[start:end])
        start = end
    return shares


def _nearest(gpu: Device, nics: Sequence[Device]) -> Device | None:
    """The NIC closest to `gpu`: the longest shared PCI path, then the same NUMA node; RDMA NICs before others."""
    candidates = [n for n in nics if n.rdma] or list(nics)
    if not candidates:
        return None

    def closeness(nic: Device) -> tuple[int, bool]:
        shared = 0
        for mine, theirs in zip(gpu.pci_path, nic.pci_path, strict=False):
            if mine != theirs:
                break
            shared += 1
        return shared, nic.numa == gpu.numa and gpu.numa is not None

    best = max(candidates, key=closeness)  # max keeps the first of equals: the NIC listed first
    return best if closeness(best) > (0, False) else None


def _binding(
    rank: int,
    share: tuple[tuple[int, ...], ...],
    topology: Topology,
    gpu: Device | None = None,
    nic: Device | None = None,
) -> RankBinding:
    """A RankBinding for `share`, with the NUMA nodes its cores are on."""
    cpus = tuple(sorted(c for core in share for c in core))
    numa = tuple(n.id for n in topology.nodes if any(core in n.cores for core in share))
    return RankBinding(rank, cpus, len(share), numa, gpu, nic)


def _cpulist(numbers: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (Linux's CPU list format)."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)
