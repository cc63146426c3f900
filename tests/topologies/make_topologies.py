#!/usr/bin/env python3
"""Writes the hwloc 2.x XML topologies of four GPU node types that canopy's tests load."""

# Run with no arguments to rewrite the XML files beside this script; with --check
# to exit 1 when a checked-in file differs from what would be written.
#
# The output is what hwloc 2.9's own XML exporter writes (same attribute order and
# bitmap format; gp_index numbers CPU objects in document order, then I/O objects),
# so `lstopo --of xml` on one of these files gives the same text back. README.md
# lists the public source of each fact and which ones are assumptions.

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

# hwloc_obj_osdev_type_e values, as written in osdev_type="N".
OSDEV_GPU = 1
OSDEV_NETWORK = 2
OSDEV_COPROC = 5

# Group kind hwloc uses for a NUMA node whose cpuset matches no CPU object
# (HWLOC_GROUP_KIND_MEMORY in hwloc/include/private/private.h).
GROUP_KIND_MEMORY = 1001

GIB = 1 << 30
KIB_PER_GIB = 1 << 20

# PCIe link speed as hwloc computes it (GB/s): Gen4 x16 and Gen5 x16.
LINK_GEN4_X16 = "31.507692"
LINK_GEN5_X16 = "63.015385"


# ---------------------------------------------------------------- node descriptions

@dataclass
class Cache:
    size: int
    ways: int


@dataclass
class CpuLayout:
    packages: int
    cores_per_package: int
    cores_per_numa: int
    cores_per_l3: int
    numa_memory: int             # bytes per NUMA node
    package_info: list           # (name, value) pairs hwloc's x86 backend sets
    l3: Cache
    l2: Cache
    l1d: Cache
    l1i: Cache
    threads_per_core: int = 2

    @property
    def cores(self):
        return self.packages * self.cores_per_package

    def pus_of_core(self, core):
        # Linux numbers the second hardware thread of every core after all first threads.
        return [core + t * self.cores for t in range(self.threads_per_core)]


@dataclass
class OsDev:
    name: str
    osdev_type: int
    subtype: str = None
    infos: list = field(default_factory=list)
    children: list = field(default_factory=list)   # Level Zero subdevices


@dataclass
class PciDev:
    bus: int                     # device sits at <bus>:00.0
    pci_type: str                # "class [vendor:device] [subvendor:subdevice] rev"
    link: str
    osdevs: list


@dataclass
class HostBridge:
    attach: tuple                # ("package", p), ("numa", n) or ("l3", k)
    first_bus: int
    last_bus: int
    port_id: str                 # root-port bridge vendor:device
    devices: list                # PciDev, one root port each


@dataclass
class Node:
    file_name: str
    host_name: str
    cpu: CpuLayout
    host_bridges: list


# ---------------------------------------------------------------- device builders

def drm_osdevs(card):
    # hwloc's Linux backend adds the DRM nodes of every GPU as plain GPU osdevs;
    # they are here so a loader cannot count GPUs by osdev type alone.
    return [OsDev(f"card{card}", OSDEV_GPU), OsDev(f"renderD{128 + card}", OSDEV_GPU)]


def nvidia_a100(ordinal, bus):
    model = "NVIDIA A100-SXM4-40GB"
    cuda = OsDev(f"cuda{ordinal}", OSDEV_COPROC, "CUDA", [
        ("Backend", "CUDA"),
        ("GPUVendor", "NVIDIA Corporation"),
        ("GPUModel", model),
        ("CUDAGlobalMemorySize", "41322944"),
        ("CUDAL2CacheSize", "40960"),
        ("CUDAMultiProcessors", "108"),
        ("CUDACoresPerMP", "64"),
        ("CUDASharedMemorySizePerMP", "48"),
    ])
    nvml = OsDev(f"nvml{ordinal}", OSDEV_GPU, "NVML", [
        ("Backend", "NVML"),
        ("GPUVendor", "NVIDIA Corporation"),
        ("GPUModel", model),
        ("NVIDIASerial", f"13206210{ordinal:05d}"),
        ("NVIDIAUUID", f"GPU-a1000000-0000-4000-8000-{ordinal:012x}"),
    ])
    # hwloc runs the Linux I/O discovery first, then cuda, then nvml (component priorities).
    return PciDev(bus, "0302 [10de:20b0] [10de:134f] a1", LINK_GEN4_X16,
                  drm_osdevs(ordinal) + [cuda, nvml])


def amd_mi250x_gcd(ordinal, bus):
    rsmi = OsDev(f"rsmi{ordinal}", OSDEV_GPU, "RSMI", [
        ("Backend", "RSMI"),
        ("GPUVendor", "AMD"),
        ("GPUModel", "AMD Instinct MI250X"),
        ("AMDSerial", f"69211800{ordinal:04d}"),
        ("AMDUUID", f"2a0000000000{ordinal:04x}"),
        ("XGMIHiveID", "6a1f0000000f2a1c"),
        # hwloc 2.9 writes these sizes in KiB without a unit.
        ("RSMIVRAMSize", "67092480"),
        ("RSMIVisibleVRAMSize", "67092480"),
        ("RSMIGTTSize", "263520256"),
    ])
    return PciDev(bus, "0380 [1002:7408] [1002:0b0c] 01", LINK_GEN4_X16,
                  drm_osdevs(ordinal) + [rsmi])


def intel_pvc(ordinal, bus, tiles=2):
    hbm_per_tile_kib = 64 * KIB_PER_GIB
    subdevices = [OsDev(f"ze{ordinal}.{tile}", OSDEV_COPROC, "LevelZero", [
        ("Backend", "LevelZero"),
        ("LevelZeroSubdeviceID", str(tile)),
        ("LevelZeroDeviceType", "GPU"),
        ("LevelZeroHBMSize", str(hbm_per_tile_kib)),
    ]) for tile in range(tiles)]
    ze = OsDev(f"ze{ordinal}", OSDEV_COPROC, "LevelZero", [
        ("Backend", "LevelZero"),
        ("LevelZeroDriverIndex", "0"),
        ("LevelZeroDriverDeviceIndex", str(ordinal)),
        ("LevelZeroDeviceType", "GPU"),
        ("LevelZeroVendor", "Intel(R) Corporation"),
        ("LevelZeroModel", "Intel(R) Data Center GPU Max 1550"),
        ("LevelZeroSubdevices", str(tiles)),
        ("LevelZeroHBMSize", str(tiles * hbm_per_tile_kib)),
    ], subdevices)
    return PciDev(bus, "0380 [8086:0bd6] [8086:0000] 2f", LINK_GEN5_X16,
                  drm_osdevs(ordinal) + [ze])


def slingshot_nic(ordinal, bus, nid):
    # hsn<N> is what hwloc 2.9.1+ reports (2.9.0 leaves out the subtype);
    # cxi<N> only appears with hwloc releases that carry open-mpi/hwloc PR #764.
    hsn = OsDev(f"hsn{ordinal}", OSDEV_NETWORK, "Slingshot", [
        ("Address", f"02:00:00:00:{nid >> 8 & 0xff:02x}:{nid & 0xff:02x}"),
    ])
    cxi = OsDev(f"cxi{ordinal}", OSDEV_NETWORK, "Slingshot", [
        ("CassiniVersion", "1.1"),
        ("NID", f"0x{nid:x}"),
    ])
    return PciDev(bus, "0200 [17db:0501] [17db:0501] 02", LINK_GEN4_X16, [hsn, cxi])


def one_port_bridges(attach, devices, port_id):
    """One host bridge per device, its root bus just below the device's bus."""
    return [HostBridge(attach, dev.bus - 1, dev.bus, port_id, [dev]) for dev in devices]


# ---------------------------------------------------------------- the four node types

AMD_MILAN_PORT = "1022:1483"
AMD_TRENTO_PORT = "1022:14be"
INTEL_SPR_PORT = "8086:352a"

MILAN_CACHES = dict(l3=Cache(32 << 20, 16), l2=Cache(512 << 10, 8),
                    l1d=Cache(32 << 10, 8), l1i=Cache(32 << 10, 8))


def polaris():
    cpu = CpuLayout(packages=1, cores_per_package=32, cores_per_numa=8, cores_per_l3=4,
                    numa_memory=128 * GIB, package_info=[
                        ("CPUVendor", "AuthenticAMD"), ("CPUFamilyNumber", "25"),
                        ("CPUModelNumber", "1"),
                        ("CPUModel", "AMD EPYC 7543P 32-Core Processor"),
                        ("CPUStepping", "1")], **MILAN_CACHES)
    # ALCF's affinity table: GPU 0 on NUMA 3 ... GPU 3 on NUMA 0; CUDA and NVML number
    # GPUs in PCI bus order, so the lowest bus range belongs to NUMA 3.
    gpu_numa = [3, 2, 1, 0]
    # ALCF's table puts the first NIC beside GPU 3 (NUMA 0) and the second beside GPU 1 (NUMA 2).
    nic_numa = [0, 2]
    bridges = []
    for gpu, numa in enumerate(gpu_numa):
        base = 0x40 * gpu
        devices = [nvidia_a100(gpu, base + 0x07)]
        if numa in nic_numa:
            nic = nic_numa.index(numa)
            devices.append(slingshot_nic(nic, base + 0x05, 0x1a00 + nic))
        devices.sort(key=lambda d: d.bus)
        bridges.append(HostBridge(("numa", numa), base, base + 0x3f, AMD_MILAN_PORT, devices))
    return Node("polaris.xml", "polaris-model", cpu, bridges)


def aurora():
    cpu = CpuLayout(packages=2, cores_per_package=52, cores_per_numa=52, cores_per_l3=52,
                    numa_memory=512 * GIB, package_info=[
                        ("CPUVendor", "GenuineIntel"), ("CPUFamilyNumber", "6"),
                        ("CPUModelNumber", "143"),
                        ("CPUModel", "Intel(R) Xeon(R) CPU Max 9470C"),
                        ("CPUStepping", "8")],
                    l3=Cache(105 << 20, 15), l2=Cache(2 << 20, 16),
                    l1d=Cache(48 << 10, 12), l1i=Cache(32 << 10, 8))
    gpus_per_package, nics_per_package = 3, 4
    bridges = []
    for package in range(cpu.packages):
        base = 0x80 * package
        gpus = [intel_pvc(package * gpus_per_package + g, base + 0x18 + 0x20 * g)
                for g in range(gpus_per_package)]
        nics = [slingshot_nic(package * nics_per_package + n, base + 0x0a + 2 * n,
                              0x2b00 + package * nics_per_package + n)
                for n in range(nics_per_package)]
        devices = sorted(gpus + nics, key=lambda d: d.bus)
        bridges += one_port_bridges(("package", package), devices, INTEL_SPR_PORT)
    return Node("aurora.xml", "aurora-model", cpu, bridges)


def perlmutter_gpu():
    cpu = CpuLayout(packages=1, cores_per_package=64, cores_per_numa=16, cores_per_l3=8,
                    numa_memory=64 * GIB, package_info=[
                        ("CPUVendor", "AuthenticAMD"), ("CPUFamilyNumber", "25"),
                        ("CPUModelNumber", "1"),
                        ("CPUModel", "AMD EPYC 7763 64-Core Processor"),
                        ("CPUStepping", "1")], **MILAN_CACHES)
    # GPU i and NIC i share NUMA 3-i; GPUs are numbered in PCI bus order.
    bridges = []
    for index in range(4):
        base = 0x40 * index
        devices = [nvidia_a100(index, base + 0x03),
                   slingshot_nic(index, base + 0x04, 0x3c00 + index)]
        bridges.append(HostBridge(("numa", 3 - index), base, base + 0x3f, AMD_MILAN_PORT, devices))
    return Node("perlmutter-gpu.xml", "perlmutter-gpu-model", cpu, bridges)


def frontier():
    cpu = CpuLayout(packages=1, cores_per_package=64, cores_per_numa=16, cores_per_l3=8,
                    numa_memory=128 * GIB, package_info=[
                        ("CPUVendor", "AuthenticAMD"), ("CPUFamilyNumber", "25"),
                        ("CPUModelNumber", "48"),
                        ("CPUModel", "AMD EPYC 7A53 64-Core Processor"),
                        ("CPUStepping", "1")], **MILAN_CACHES)
    # Bus ranges and the L3 (CCD) each one is wired to come from hwloc's own
    # HPE Cray EX235a locality quirk (hwloc/pci-common.c); ROCm numbers GCDs in bus
    # order, which gives OLCF's map (GCD 4 on cores 0-7, GCD 0 on cores 48-55, ...).
    # The three-bus ranges also hold a Cassini NIC, numbered in bus order too.
    ccd_buses = [  # (first bus, last bus, L3 index) in bus order
        (0xc0, 0xc1, 6), (0xc4, 0xc6, 7), (0xc8, 0xc9, 2), (0xcc, 0xce, 3),
        (0xd0, 0xd1, 0), (0xd4, 0xd6, 1), (0xd8, 0xd9, 4), (0xdc, 0xde, 5),
    ]
    bridges, nic = [], 0
    for gcd, (first, last, l3) in enumerate(ccd_buses):
        devices = []
        if last - first == 2:
            devices.append(slingshot_nic(nic, first + 1, 0x4d00 + nic))
            nic += 1
        devices.append(amd_mi250x_gcd(gcd, last))
        bridges.append(HostBridge(("l3", l3), first, last, AMD_TRENTO_PORT, devices))
    return Node("frontier.xml", "frontier-model", cpu, bridges)


NODES = [polaris, aurora, perlmutter_gpu, frontier]


# ---------------------------------------------------------------- XML tree

def hwloc_bitmap(bits):
    """hwloc_bitmap_snprintf's format: 32-bit words, most significant first; a zero
    word in the middle is left empty and a zero last word is written 0x0."""
    if not bits:
        return "0x0"
    values = [0] * (max(bits) // 32 + 1)
    for bit in bits:
        values[bit // 32] |= 1 << (bit % 32)
    words = list(reversed(values))
    text = [f"0x{words[0]:08x}"]
    for position, value in enumerate(words[1:], start=1):
        if value:
            text.append(f"0x{value:08x}")
        else:
            text.append("0x0" if position == len(words) - 1 else "")
    return ",".join(text)


class Element:
    def __init__(self, tag, attrs, children=None):
        self.tag = tag
        self.attrs = attrs
        self.children = children or []

    def lines(self, indent):
        pad = "  " * indent
        attrs = "".join(f' {name}="{escape(value)}"' for name, value in self.attrs)
        if not self.children:
            yield f"{pad}<{self.tag}{attrs}/>"
            return
        yield f"{pad}<{self.tag}{attrs}>"
        for child in self.children:
            yield from child.lines(indent + 1)
        yield f"{pad}</{self.tag}>"


def escape(value):
    return (str(value).replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;").replace('"', "&quot;"))


def info_elements(infos):
    return [Element("info", [("name", name), ("value", value)]) for name, value in infos]


class TreeBuilder:
    """Builds the object tree of one node: CPU objects first, then the I/O hung from them."""

    def __init__(self, node):
        self.node = node
        self.cpu = node.cpu
        self.next_gp_index = 1
        self.attach_points = {}

    def gp_index(self):
        value = self.next_gp_index
        self.next_gp_index += 1
        return ("gp_index", str(value))

    def sets(self, cores, numa_nodes):
        pus = [pu for core in cores for pu in self.cpu.pus_of_core(core)]
        cpuset, nodeset = hwloc_bitmap(pus), hwloc_bitmap(numa_nodes)
        return [("cpuset", cpuset), ("complete_cpuset", cpuset),
                ("nodeset", nodeset), ("complete_nodeset", nodeset)]

    def numa_of_core(self, core):
        return core // self.cpu.cores_per_numa

    def cpu_object(self, obj_type, os_index, cores, extra=()):
        attrs = [("type", obj_type)]
        if os_index is not None:
            attrs.append(("os_index", str(os_index)))
        numa = sorted({self.numa_of_core(core) for core in cores})
        attrs += self.sets(cores, numa)
        attrs.append(self.gp_index())
        attrs += list(extra)
        return Element("object", attrs)

    def cache(self, obj_type, os_index, cores, cache, depth, cache_type, inclusive):
        element = self.cpu_object(obj_type, os_index, cores, [
            ("cache_size", str(cache.size)), ("depth", str(depth)),
            ("cache_linesize", "64"), ("cache_associativity", str(cache.ways)),
            ("cache_type", str(cache_type))])
        element.children += info_elements([("Inclusive", inclusive)])
        return element

    def core_subtree(self, core):
        # Parents are created before children so gp_index follows document order.
        l2 = self.cache("L2Cache", core, [core], self.cpu.l2, 2, 0, "1")
        l1d = self.cache("L1Cache", core, [core], self.cpu.l1d, 1, 1, "0")
        l1i = self.cache("L1iCache", core, [core], self.cpu.l1i, 1, 2, "0")
        core_obj = self.cpu_object("Core", core, [core])
        core_obj.children = [self.pu(core, pu) for pu in self.cpu.pus_of_core(core)]
        l1i.children.append(core_obj)
        l1d.children.append(l1i)
        l2.children.append(l1d)
        return l2

    def pu(self, core, pu):
        bit = hwloc_bitmap([pu])
        nodeset = hwloc_bitmap([self.numa_of_core(core)])
        return Element("object", [("type", "PU"), ("os_index", str(pu)),
                                  ("cpuset", bit), ("complete_cpuset", bit),
                                  ("nodeset", nodeset), ("complete_nodeset", nodeset),
                                  self.gp_index()])

    def numa_node(self, numa):
        cores = range(numa * self.cpu.cores_per_numa, (numa + 1) * self.cpu.cores_per_numa)
        element = self.cpu_object("NUMANode", numa, cores,
                                  [("local_memory", str(self.cpu.numa_memory))])
        pages = self.cpu.numa_memory // 4096
        element.children = [Element("page_type", [("size", "4096"), ("count", str(pages))]),
                            Element("page_type", [("size", "2097152"), ("count", "0")]),
                            Element("page_type", [("size", "1073741824"), ("count", "0")])]
        return element

    def l3_subtree(self, l3):
        per = self.cpu.cores_per_l3
        cores = range(l3 * per, (l3 + 1) * per)
        element = self.cache("L3Cache", l3, cores, self.cpu.l3, 3, 0, "0")
        element.children += [self.core_subtree(core) for core in cores]
        self.attach_points[("l3", l3)] = element
        return element

    def l3s_of(self, cores):
        per = self.cpu.cores_per_l3
        return [self.l3_subtree(l3) for l3 in range(cores.start // per, cores.stop // per)]

    def package(self, package):
        cpu = self.cpu
        cores = range(package * cpu.cores_per_package, (package + 1) * cpu.cores_per_package)
        element = self.cpu_object("Package", package, cores)
        element.children += info_elements(cpu.package_info)
        self.attach_points[("package", package)] = element
        if cpu.cores_per_numa == cpu.cores_per_package:
            # The Package's cpuset matches the NUMA node's, so hwloc hangs the node there.
            element.children.append(self.numa_node(package))
            self.attach_points[("numa", package)] = element
            element.children += self.l3s_of(cores)
            return element
        per_package = cpu.cores_per_package // cpu.cores_per_numa
        for numa in range(package * per_package, (package + 1) * per_package):
            numa_cores = range(numa * cpu.cores_per_numa, (numa + 1) * cpu.cores_per_numa)
            # No CPU object spans exactly one NUMA node here, so hwloc inserts a Group.
            group = self.cpu_object("Group", None, numa_cores,
                                    [("kind", str(GROUP_KIND_MEMORY)), ("subkind", "0")])
            group.children.append(self.numa_node(numa))
            group.children += self.l3s_of(numa_cores)
            self.attach_points[("numa", numa)] = group
            element.children.append(group)
        return element

    def osdev(self, dev):
        attrs = [("type", "OSDev"), self.gp_index(), ("name", dev.name)]
        if dev.subtype:
            attrs.append(("subtype", dev.subtype))
        attrs.append(("osdev_type", str(dev.osdev_type)))
        element = Element("object", attrs, info_elements(dev.infos))
        element.children += [self.osdev(child) for child in dev.children]
        return element

    def host_bridge(self, bridge):
        buses = f"0000:[{bridge.first_bus:02x}-{bridge.last_bus:02x}]"
        root = Element("object", [("type", "Bridge"), self.gp_index(), ("bridge_type", "0-1"),
                                  ("depth", "0"), ("bridge_pci", buses)])
        for port, dev in enumerate(bridge.devices, start=1):
            port_obj = Element("object", [
                ("type", "Bridge"), self.gp_index(), ("bridge_type", "1-1"), ("depth", "1"),
                ("bridge_pci", f"0000:[{dev.bus:02x}-{dev.bus:02x}]"),
                ("pci_busid", f"0000:{bridge.first_bus:02x}:{port:02x}.1"),
                ("pci_type", f"0604 [{bridge.port_id}] [0000:0000] 00"),
                ("pci_link_speed", dev.link)])
            pci = Element("object", [
                ("type", "PCIDev"), self.gp_index(), ("pci_busid", f"0000:{dev.bus:02x}:00.0"),
                ("pci_type", dev.pci_type), ("pci_link_speed", dev.link)])
            pci.children = [self.osdev(osdev) for osdev in dev.osdevs]
            port_obj.children.append(pci)
            root.children.append(port_obj)
        return root

    def build(self):
        cpu = self.cpu
        all_pus = [pu for core in range(cpu.cores) for pu in cpu.pus_of_core(core)]
        cpuset = hwloc_bitmap(all_pus)
        nodeset = hwloc_bitmap(range(cpu.cores // cpu.cores_per_numa))
        machine = Element("object", [
            ("type", "Machine"), ("os_index", "0"),
            ("cpuset", cpuset), ("complete_cpuset", cpuset), ("allowed_cpuset", cpuset),
            ("nodeset", nodeset), ("complete_nodeset", nodeset), ("allowed_nodeset", nodeset),
            self.gp_index()])
        machine.children += info_elements([
            ("Backend", "Linux"), ("OSName", "Linux"), ("HostName", self.node.host_name),
            ("Architecture", "x86_64")])
        machine.children += [self.package(p) for p in range(cpu.packages)]
        # I/O children follow the CPU children of the object they hang from.
        for bridge in sorted(self.node.host_bridges, key=lambda b: b.first_bus):
            self.attach_points[bridge.attach].children.append(self.host_bridge(bridge))
        return machine


def render(node):
    machine = TreeBuilder(node).build()
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
             '<topology version="2.0">']
    lines += machine.lines(1)
    lines.append("</topology>")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- command line

def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a checked-in file differs from what would be written")
    args = parser.parse_args()

    stale = []
    for make_node in NODES:
        node = make_node()
        path = HERE / node.file_name
        text = render(node)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)}; run {Path(__file__).name} to rewrite them",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
