"""A node's topology (NUMA nodes, cores and their SMT siblings, GPUs, NICs) read from sysfs or hwloc's XML.

Readers only read files: `read_sysfs(root)` walks a sysfs tree (the machine's, or a test's copy under
`root`), `parse_hwloc_xml(text)` reads what `lstopo --of xml` wrote, so a site can hand one in.
"""

from __future__ import annotations

import glob
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping

from .. import settings, settingtable
from ..errors import UsageError
from ..records import record, replace

__all__ = [
    "Device",
    "Numa",
    "Topology",
    "load_topology",
    "parse_cpulist",
    "parse_hwloc_xml",
    "read_sysfs",
]

_NVIDIA = "0x10de"
_GPU_CLASSES = ("0x0302", "0x0300")  # 3D controller (A100, H100) and VGA controller (workstation cards)
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")


@record(frozen=True)
class Numa:
    """A NUMA node: its package (socket) and its cores, each the tuple of its logical CPUs (SMT siblings)."""

    id: int
    package: int
    cores: tuple[tuple[int, ...], ...]


@record(frozen=True)
class Device:
    """A GPU or NIC: name (PCI address of a GPU, `mlx5_0` of an RDMA NIC, `eth0`), NUMA node, PCI path.

    `pci_path` lists the PCI addresses from the root complex down to the device; two devices behind the
    same PCIe switch share a longer prefix. `rdma` marks a NIC that NCCL uses through verbs (NCCL_IB_HCA).
    """

    name: str
    numa: int | None
    pci_path: tuple[str, ...] = ()
    rdma: bool = False


@record(frozen=True)
class Topology:
    """One node: NUMA nodes (ascending), NVIDIA GPUs in PCI bus order, its physical NICs (RDMA ones first, by name)."""

    nodes: tuple[Numa, ...]
    gpus: tuple[Device, ...] = ()
    nics: tuple[Device, ...] = ()

    def restrict(self, allowed: Iterable[int]) -> Topology:
        """Only the CPUs in `allowed` (e.g. this process's affinity, a Slurm cgroup); emptied cores and nodes go."""
        keep = set(allowed)
        nodes = []
        for node in self.nodes:
            cores = tuple(kept for core in node.cores if (kept := tuple(c for c in core if c in keep)))
            if cores:
                nodes.append(replace(node, cores=cores))
        return replace(self, nodes=tuple(nodes))

    def describe(self) -> str:
        """E.g. '2 NUMA nodes, 112 cores (224 CPUs), 8 GPUs, 4 NICs (mlx5_0, ...)'."""
        cores = sum(len(n.cores) for n in self.nodes)
        cpus = sum(len(c) for n in self.nodes for c in n.cores)
        nics = f" ({', '.join(d.name for d in self.nics)})" if self.nics else ""
        return (
            f"{len(self.nodes)} NUMA node{'s' * (len(self.nodes) != 1)}, {cores} cores ({cpus} CPUs), "
            f"{len(self.gpus)} GPU{'s' * (len(self.gpus) != 1)}, "
            f"{len(self.nics)} NIC{'s' * (len(self.nics) != 1)}{nics}"
        )


def parse_cpulist(text: str) -> list[int]:
    """Linux's CPU list format: '0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def _read(path: str, default: str = "") -> str:
    """A sysfs file's text, stripped, or `default` if it cannot be read."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return default


def _numa_of(path: str) -> int | None:
    """The NUMA node in `path`/numa_node or its nearest parent's (a virtio NIC has it on its PCI parent)."""
    while len(path) > 1:
        text = _read(os.path.join(path, "numa_node"))
        if text:
            return int(text) if int(text) >= 0 else None
        path = os.path.dirname(path)
    return None


def _pci_path(path: str) -> tuple[str, ...]:
    """The PCI addresses along a device's resolved sysfs path."""
    return tuple(part for part in path.split(os.sep) if _PCI_ADDRESS.match(part))


def read_sysfs(root: str = "/") -> Topology:
    """The topology under `root`/sys: NUMA nodes and cores, NVIDIA GPUs, RDMA devices and physical NICs."""
    sys_dir = os.path.join(root, "sys")
    online = set(parse_cpulist(_read(f"{sys_dir}/devices/system/cpu/online")))
    node_cpus = {
        int(os.path.basename(path)[4:]): parse_cpulist(_read(f"{path}/cpulist"))
        for path in glob.glob(f"{sys_dir}/devices/system/node/node[0-9]*")
    } or {0: sorted(online)}  # a kernel without NUMA: one node
    nodes = []
    for node_id, cpus in sorted(node_cpus.items()):
        cores: dict[tuple[int, ...], None] = {}
        package = 0
        for cpu in cpus:
            if online and cpu not in online:
                continue
            topo = f"{sys_dir}/devices/system/cpu/cpu{cpu}/topology"
            siblings = parse_cpulist(_read(f"{topo}/thread_siblings_list", str(cpu)))
            cores[tuple(c for c in siblings if c in cpus) or (cpu,)] = None
            package = int(_read(f"{topo}/physical_package_id", "0"))
        if cores:
            nodes.append(Numa(node_id, package, tuple(sorted(cores))))
    return Topology(tuple(nodes), _sysfs_gpus(sys_dir), _sysfs_nics(sys_dir))


def _sysfs_gpus(sys_dir: str) -> tuple[Device, ...]:
    """NVIDIA GPUs (vendor 0x10de, a display or 3D controller) in PCI bus order."""
    gpus = []
    for path in sorted(glob.glob(f"{sys_dir}/bus/pci/devices/*")):
        if _read(f"{path}/vendor") == _NVIDIA and _read(f"{path}/class").startswith(_GPU_CLASSES):
            real = os.path.realpath(path)
            gpus.append(Device(os.path.basename(path), _numa_of(real), _pci_path(real)))
    return tuple(gpus)


def _sysfs_nics(sys_dir: str) -> tuple[Device, ...]:
    """RDMA devices (/sys/class/infiniband), then NICs with a device that are up and not an RDMA device's."""
    nics: list[Device] = []
    taken: set[str] = set()
    for path in sorted(glob.glob(f"{sys_dir}/class/infiniband/*")):
        real = os.path.realpath(f"{path}/device")
        nics.append(Device(os.path.basename(path), _numa_of(real), _pci_path(real), rdma=True))
        taken.update(os.path.basename(n) for n in glob.glob(f"{real}/net/*"))
    for path in sorted(glob.glob(f"{sys_dir}/class/net/*")):
        name = os.path.basename(path)
        if name in taken or not os.path.exists(f"{path}/device") or _read(f"{path}/operstate") != "up":
            continue  # virtual (lo, veth, bridges), an RDMA device's own netdev, or down
        real = os.path.realpath(f"{path}/device")
        nics.append(Device(name, _numa_of(real), _pci_path(real)))
    return tuple(nics)


def _bitmap(text: str | None) -> set[int]:
    """An hwloc bitmap ('0x000000ff,0xffffffff': 32-bit words, most significant first) as a set of indexes."""
    words = (text or "").split(",")
    bits: set[int] = set()
    for shift, word in enumerate(reversed(words)):
        value = int(word, 16) if word.strip() else 0
        bits.update(32 * shift + i for i in range(value.bit_length()) if value >> i & 1)
    return bits


_IO_TYPES = ("Bridge", "PCIDev", "OSDev", "Misc")


def parse_hwloc_xml(text: str, where: str = "the hwloc XML") -> Topology:
    """The topology in `lstopo --of xml` output (hwloc 2.x): NUMA nodes, cores, GPUs, OpenFabrics and network devices.

    Raises:
        UsageError: the text is not hwloc XML or describes no NUMA node.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise UsageError(f"{where} is not XML ({exc}); write it with `lstopo --of xml FILE`") from None
    parents = {child: parent for parent in root.iter() for child in parent}
    numa_cpus = {
        int(o.get("os_index", "0")): _bitmap(o.get("cpuset"))
        for o in root.iter("object")
        if o.get("type") == "NUMANode"
    }
    if root.tag != "topology" or not numa_cpus:
        raise UsageError(f"{where} holds no hwloc topology with a NUMANode; write it with `lstopo --of xml FILE`")
    cores: dict[int, list[tuple[int, ...]]] = {n: [] for n in numa_cpus}
    packages: dict[int, int] = {}
    for obj in root.iter("object"):
        kind = obj.get("type")
        if kind not in ("Core", "PU") or (kind == "PU" and parents[obj].get("type") == "Core"):
            continue
        pus = [obj] if kind == "PU" else [p for p in obj.iter("object") if p.get("type") == "PU"]
        cpus = tuple(sorted(int(p.get("os_index", "0")) for p in pus))
        node = next((n for n, s in sorted(numa_cpus.items()) if cpus and cpus[0] in s), None)
        if node is not None:
            cores[node].append(cpus)
            packages[node] = _package(obj, parents)
    nodes = tuple(Numa(n, packages.get(n, 0), tuple(sorted(c))) for n, c in sorted(cores.items()) if c)
    gpus, nics = [], []
    for dev in root.iter("object"):
        if dev.get("type") != "PCIDev":
            continue
        path, numa = _hwloc_pci(dev, parents)
        kinds = {o.get("osdev_type"): o.get("name", "") for o in dev.iter("object") if o.get("type") == "OSDev"}
        if (dev.get("pci_type") or "").startswith(("0302 [10de:", "0300 [10de:")):
            gpus.append(Device(dev.get("pci_busid", ""), numa, path))
        elif "3" in kinds:  # OpenFabrics (verbs): an RDMA NIC such as mlx5_0
            nics.append(Device(kinds["3"], numa, path, rdma=True))
        elif "2" in kinds:  # a network interface
            nics.append(Device(kinds["2"], numa, path))
    return Topology(
        nodes, tuple(sorted(gpus, key=lambda d: d.name)), tuple(sorted(nics, key=lambda d: (not d.rdma, d.name)))
    )


def _package(obj: ET.Element, parents: Mapping[ET.Element, ET.Element]) -> int:
    """The os_index of the Package that holds `obj` (0 when there is none)."""
    while obj in parents:
        obj = parents[obj]
        if obj.get("type") == "Package":
            return int(obj.get("os_index", "0"))
    return 0


def _hwloc_pci(dev: ET.Element, parents: Mapping[ET.Element, ET.Element]) -> tuple[tuple[str, ...], int | None]:
    """A PCI device's path of bus ids from the host bridge down, and the NUMA node of its first non-I/O ancestor."""
    path = [dev.get("pci_busid", "")]
    obj = dev
    while obj in parents:
        obj = parents[obj]
        if obj.get("type") not in _IO_TYPES:
            numa = sorted(_bitmap(obj.get("nodeset")))
            return tuple(reversed(path)), numa[0] if len(numa) == 1 else None
        if obj.get("type") == "PCIDev" or obj.get("pci_busid"):
            path.append(obj.get("pci_busid", ""))
    return tuple(reversed(path)), None


def load_topology(environ: Mapping[str, str], allowed: Iterable[int] | None = None) -> Topology:
    """The TOPOLOGY setting's hwloc XML if set, else this machine's sysfs; only the `allowed` CPUs when given.

    Raises:
        UsageError: the setting's file cannot be read or parsed, or no CPU is left.
    """
    path = settings.topology(environ)
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise UsageError(
                f"${settingtable.TOPOLOGY.name} {path!r} cannot be read ({exc.strerror}); write it with "
                "`lstopo --of xml FILE`"
            ) from None
        topology = parse_hwloc_xml(text, f"${settingtable.TOPOLOGY.name} {path!r}")
    else:
        topology = read_sysfs()
    if allowed is not None:
        topology = topology.restrict(allowed)
    if not topology.nodes:
        raise UsageError(
            f"no usable CPU in the topology{f' of ${settingtable.TOPOLOGY.name} {path!r}' if path else ''}"
            " (none of this process's allowed CPUs is in it); check the file, or use --bind none"
        )
    return topology
