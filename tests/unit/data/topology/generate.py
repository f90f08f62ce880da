"""Write the fixture topologies of test_binding.py: sysfs trees (`*.sysfs`) and hwloc XML (`*.xml`).

Run once by hand (`python tests/unit/data/topology/generate.py`, needs hwloc's `lstopo` for the XML); the
tests only read the files it wrote. Each machine is written down as a layout like that of a real one:

- dgx: 2 sockets x 56 cores, SMT on, Intel numbering (CPU n and n+112 are siblings), one NUMA node per
  socket, 8 GPUs (0-3 on NUMA 0, 4-7 on NUMA 1), one mlx5 NIC per GPU pair behind the pair's PCIe switch
  (named out of bus order, as on real machines), and a plain management NIC;
- 1s4gpu: 1 socket x 32 cores, SMT on, 4 GPUs and an Ethernet NIC on NUMA 0 (no RDMA), lo and docker0;
- odd7: 7 cores, SMT off, no GPU;
- 2s3c: 2 sockets x 3 cores, SMT on with adjacent numbering (AMD-style: CPUs 0,1 are siblings), no GPU.

A `.sysfs` file lists a tree: `PATH<TAB>TEXT` a file, `PATH<TAB>-> TARGET` a symbolic link.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))

# (packages, cores per package, threads per core, numbering), then I/O: per package, PCIe switches, each a list
# of (kind, bus id, name) with kind gpu, rdma (name: HCA, netdev) or eth (name: netdev, operstate).
Machine = tuple[tuple[int, int, int, str], list[list[list[tuple[str, str, str]]]]]
MACHINES: dict[str, Machine] = {
    "dgx": (
        (2, 56, 2, "intel"),
        [
            [
                [("gpu", "0000:18:00.0", ""), ("gpu", "0000:2a:00.0", ""), ("rdma", "0000:1f:00.0", "mlx5_1:ibp31s0")],
                [("gpu", "0000:3a:00.0", ""), ("gpu", "0000:5d:00.0", ""), ("rdma", "0000:40:00.0", "mlx5_0:ibp64s0")],
                [("eth", "0000:0c:00.0", "eno1:up")],
            ],
            [
                [("gpu", "0000:9a:00.0", ""), ("gpu", "0000:ab:00.0", ""), ("rdma", "0000:9f:00.0", "mlx5_2:ibp159s0")],
                [("gpu", "0000:ba:00.0", ""), ("gpu", "0000:db:00.0", ""), ("rdma", "0000:c0:00.0", "mlx5_3:ibp192s0")],
            ],
        ],
    ),
    "1s4gpu": (
        (1, 32, 2, "intel"),
        [
            [
                [("gpu", "0000:01:00.0", ""), ("gpu", "0000:21:00.0", "")],
                [("gpu", "0000:41:00.0", ""), ("gpu", "0000:61:00.0", ""), ("eth", "0000:81:00.0", "enp129s0:up")],
                [("eth", "0000:82:00.0", "enp130s0:down")],
            ]
        ],
    ),
    "odd7": ((1, 7, 1, "intel"), [[]]),
    "2s3c": ((2, 3, 2, "adjacent"), [[], []]),
}


def _cpus(packages: int, cores: int, threads: int, numbering: str) -> list[list[list[int]]]:
    """Per package, per core, its logical CPUs."""
    total = packages * cores
    if numbering == "intel":
        return [[[p * cores + c + t * total for t in range(threads)] for c in range(cores)] for p in range(packages)]
    return [[[(p * cores + c) * threads + t for t in range(threads)] for c in range(cores)] for p in range(packages)]


def _cpulist(cpus: list[int]) -> str:
    """Linux's list format."""
    runs: list[list[int]] = []
    for n in sorted(cpus):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def sysfs(name: str) -> str:
    """The sysfs listing of one machine."""
    (packages, cores, threads, numbering), io = MACHINES[name]
    layout = _cpus(packages, cores, threads, numbering)
    every = sorted(c for pkg in layout for core in pkg for c in core)
    lines = [f"sys/devices/system/cpu/online\t{_cpulist(every)}"]
    for p, pkg in enumerate(layout):
        lines.append(f"sys/devices/system/node/node{p}/cpulist\t{_cpulist([c for core in pkg for c in core])}")
        for core in pkg:
            for cpu in core:
                base = f"sys/devices/system/cpu/cpu{cpu}/topology"
                lines += [f"{base}/thread_siblings_list\t{_cpulist(core)}", f"{base}/physical_package_id\t{p}"]
    lines += ["sys/class/net/lo/operstate\tunknown", "sys/class/net/docker0/operstate\tup"]
    for p, switches in enumerate(io):
        root = f"sys/devices/pci0000:{p * 0x80:02x}/0000:{p * 0x80:02x}:01.0"
        for s, switch in enumerate(switches):
            up = f"{root}/0000:{p * 0x80 + s + 1:02x}:00.0"
            lines.append(f"{up}/numa_node\t{p}")
            for kind, bus, what in switch:
                dev = f"{up}/{bus}"
                rel = "../../../" + dev.removeprefix("sys/")
                lines += [f"{dev}/numa_node\t{p}", f"sys/bus/pci/devices/{bus}\t-> {rel}"]
                if kind == "gpu":
                    lines += [f"{dev}/vendor\t0x10de", f"{dev}/class\t0x030200"]
                    continue
                vendor, klass = ("0x15b3", "0x020700") if kind == "rdma" else ("0x8086", "0x020000")
                lines += [f"{dev}/vendor\t{vendor}", f"{dev}/class\t{klass}"]
                netdev, _, state = what.partition(":")
                if kind == "rdma":
                    hca, netdev, state = netdev, state, "up"
                    lines.append(f"sys/class/infiniband/{hca}/device\t-> ../../../{dev.removeprefix('sys/')}")
                lines += [
                    f"{dev}/net/{netdev}/operstate\t{state}",
                    f"sys/class/net/{netdev}/operstate\t{state}",
                    f"sys/class/net/{netdev}/device\t-> ../../../{dev.removeprefix('sys/')}",
                ]
    return "\n".join(lines) + "\n"


def hwloc_xml(name: str) -> str:
    """The hwloc XML of one machine: lstopo's synthetic CPU part, with the PCI tree added as lstopo writes it."""
    (packages, cores, threads, numbering), io = MACHINES[name]
    total = packages * cores
    indexes = f"{threads}*{total}:1*{threads}" if numbering == "intel" else f"1*{total * threads}"
    synthetic = f"pack:{packages} [numa] core:{cores} pu:{threads}(indexes={indexes})"
    text = subprocess.run(["lstopo", "-i", synthetic, "--of", "xml", "-"], check=True, capture_output=True, text=True)
    root = ET.fromstring(text.stdout)
    gp = 10000
    pkgs = [o for o in root.iter("object") if o.get("type") == "Package"]
    for pkg, switches in zip(pkgs, io, strict=True):
        p = int(pkg.get("os_index", "0"))
        gp += 1
        host = ET.SubElement(pkg, "object", type="Bridge", gp_index=str(gp), bridge_type="0-1", depth="0")
        for s, switch in enumerate(switches):
            gp += 1
            up = ET.SubElement(host, "object", type="Bridge", gp_index=str(gp), bridge_type="1-1", depth="1")
            up.set("pci_busid", f"0000:{p * 0x80 + s + 1:02x}:00.0")
            for kind, bus, what in switch:
                gp += 1
                pci_type = {"gpu": "0302 [10de:2330]", "rdma": "0207 [15b3:1021]", "eth": "0200 [8086:1521]"}[kind]
                dev = ET.SubElement(up, "object", type="PCIDev")
                dev.set("gp_index", str(gp))
                dev.set("pci_busid", bus)
                dev.set("pci_type", f"{pci_type} [0000:0000] 00")
                if kind == "gpu":
                    ET.SubElement(dev, "object", type="OSDev", name=f"card{gp}", osdev_type="1")
                    continue
                netdev, _, state = what.partition(":")
                if kind == "rdma":
                    ET.SubElement(dev, "object", type="OSDev", name=state, osdev_type="2")
                    ET.SubElement(dev, "object", type="OSDev", name=netdev, osdev_type="3")
                elif state == "up":  # hwloc lists interfaces whatever their state; the fixture keeps the live one
                    ET.SubElement(dev, "object", type="OSDev", name=netdev, osdev_type="2")
    ET.indent(root)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n'
        + ET.tostring(root, encoding="unicode")
        + "\n"
    )


if __name__ == "__main__":
    for machine in MACHINES:
        for suffix, make in ((".sysfs", sysfs), (".xml", hwloc_xml)):
            with open(os.path.join(HERE, machine + suffix), "w") as handle:
                handle.write(make(machine))
