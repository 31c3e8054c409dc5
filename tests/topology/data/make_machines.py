#!/usr/bin/env python3
"""Writes the described machines used by the topology tests.

Each machine is NCCL's topology XML schema (what NCCL_TOPO_DUMP_FILE writes);
the layouts follow the public descriptions of the systems, the bus ids are
made up. Run from this folder: python3 make_machines.py
"""

GEN3, GEN4, GEN5 = "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe"
INTEL_BDW = dict(arch="x86_64", vendor="GenuineIntel", familyid="6", modelid="79")
INTEL_SKL = dict(arch="x86_64", vendor="GenuineIntel", familyid="6", modelid="85")
INTEL_SPR = dict(arch="x86_64", vendor="GenuineIntel", familyid="6", modelid="143")
AMD_ROME = dict(arch="x86_64", vendor="AuthenticAMD", familyid="23", modelid="49")


def attrs(d):
    return " ".join(f'{k}="{v}"' for k, v in d.items())


def pci(busid, cls, speed, width, inner="", vendor="0x10de", device="0x0000", indent=4):
    pad = " " * indent
    head = (f'{pad}<pci busid="{busid}" class="{cls}" vendor="{vendor}" device="{device}" '
            f'subsystem_vendor="{vendor}" subsystem_device="0x0000" link_speed="{speed}" link_width="{width}"')
    return head + ("/>\n" if not inner else ">\n" + inner + f"{pad}</pci>\n")


def gpu(busid, dev, sm, speed, nvlinks, indent):
    pad = " " * (indent + 2)
    inner = f'{pad}<gpu dev="{dev}" sm="{sm}" rank="{dev}" gdr="1"'
    if nvlinks:
        inner += ">\n" + "".join(f'{pad}  <nvlink target="{t}" count="{c}" tclass="{cls}"/>\n'
                                 for t, c, cls in nvlinks) + f"{pad}</gpu>\n"
    else:
        inner += "/>\n"
    return pci(busid, "0x030200", speed, 16, inner, indent=indent)


def nic(busid, name, dev, mbps, speed, indent):
    pad = " " * (indent + 2)
    inner = (f"{pad}<nic>\n{pad}  <net name=\"{name}\" dev=\"{dev}\" speed=\"{mbps}\" port=\"1\" "
             f"latency=\"0.000000\" guid=\"0x{0xa000 + dev:x}\" maxconn=\"131072\" gdr=\"1\"/>\n{pad}</nic>\n")
    return pci(busid, "0x020700", speed, 16, inner, vendor="0x15b3", device="0x101b", indent=indent)


def switch(busid, speed, children, indent=4):
    return pci(busid, "0x060400", speed, 16, "".join(children), vendor="0x10b5", device="0x9797", indent=indent)


def cpu(numa, affinity, kind, children):
    return f'  <cpu numaid="{numa}" affinity="{affinity}" {attrs(kind)}>\n' + "".join(children) + "  </cpu>\n"


def system(cpus):
    return '<system version="1">\n' + "".join(cpus) + "</system>\n"


def dgx1():
    # Hybrid cube mesh: two fully connected quads plus i <-> i+4; six NVLink 2
    # links per GPU, doubled where the table says 2 (nvidia-smi topo -m of a DGX-1V).
    mesh = {0: {1: 1, 2: 1, 3: 2, 4: 2}, 1: {0: 1, 2: 2, 3: 1, 5: 2}, 2: {0: 1, 1: 2, 3: 2, 6: 1},
            3: {0: 2, 1: 1, 2: 2, 7: 1}, 4: {0: 2, 5: 1, 6: 1, 7: 2}, 5: {1: 2, 4: 1, 6: 2, 7: 1},
            6: {2: 1, 4: 1, 5: 2, 7: 2}, 7: {3: 1, 4: 2, 5: 1, 6: 2}}
    bus = {g: f"0000:{0x06 + 0x10 * g:02x}:00.0" for g in range(8)}
    cpus = []
    for s in range(2):
        switches = []
        for k in range(2):
            gs = [4 * s + 2 * k, 4 * s + 2 * k + 1]
            kids = [gpu(bus[g], g, 70, GEN3, [(bus[p], c, "0x030200") for p, c in mesh[g].items()], 6) for g in gs]
            kids.append(nic(f"0000:{0x05 + 0x20 * (2 * s + k):02x}:01.0", f"mlx5_{2 * s + k}", 2 * s + k, 100000, GEN3, 6))
            switches.append(switch(f"0000:{0x04 + 0x20 * (2 * s + k):02x}:00.0", GEN3, kids))
        cpus.append(cpu(s, ["0000ffff,f0000f", "ffff0000,fff0"][s], INTEL_BDW, switches))
    return system(cpus)


def nvswitch_box(sm, count, gen, nic_mbps, kind, gpus_per_switch, nics_per_switch):
    cpus, g, n = [], 0, 0
    for s in range(2):
        switches = []
        for k in range(8 // gpus_per_switch // 2):
            kids = []
            for _ in range(gpus_per_switch):
                kids.append(gpu(f"0000:{0x10 + 0x10 * g:02x}:00.0", g, sm, gen, [("0000:c0:00.0", count, "0x068000")], 6))
                g += 1
            for _ in range(nics_per_switch):
                kids.append(nic(f"0000:{0x18 + 0x10 * n:02x}:00.0", f"mlx5_{n}", n, nic_mbps, gen, 6))
                n += 1
            switches.append(switch(f"0000:{0x0f + 0x10 * (g - 1):02x}:01.0", gen, kids))
        cpus.append(cpu(s, ["00000000,ffffffff", "ffffffff,00000000"][s], kind, switches))
    return system(cpus)


def pcie_box(with_nics=True):
    cpus = []
    for s in range(2):
        kids = [gpu(f"0000:{0x21 + 0x40 * s + i:02x}:00.0", 2 * s + i, 80, GEN4, [], 6) for i in range(2)]
        children = [switch(f"0000:{0x20 + 0x40 * s:02x}:00.0", GEN4, kids)]
        if with_nics:
            children.append(nic(f"0000:{0x30 + 0x40 * s:02x}:00.0", f"mlx5_{s}", s, 100000, GEN4, 4))
        cpus.append(cpu(s, ["0000ffff", "ffff0000"][s], INTEL_SKL, children))
    return system(cpus)


def cpu_box():
    cpus = [cpu(s, ["00000000,ffffffff", "ffffffff,00000000"][s], AMD_ROME,
                [nic(f"0000:{0x41 + 0x80 * s:02x}:00.0", f"eth{s}", s, 100000, GEN4, 4)]) for s in range(2)]
    return system(cpus)


def single_gpu_box():
    # One A100 and one HDR NIC under one PCIe switch: the "2 nodes x 1 A100"
    # setups of published nccl-tests runs.
    kids = [gpu("0000:21:00.0", 0, 80, GEN4, [], 6), nic("0000:22:00.0", "mlx5_0", 0, 200000, GEN4, 6)]
    return system([cpu(0, "ffffffff", AMD_ROME, [switch("0000:20:00.0", GEN4, kids)])])


def nvl72():
    # GB200 NVL72: one NVLink domain of 72 Blackwell GPUs (18 NVLink 5 links
    # each, all to the NVSwitch trays); 36 Grace CPUs, each with two GPUs on
    # C2C and one 400 Gb/s NIC per GPU for the scale-out network.
    grace = dict(arch="arm64", vendor="ARM", familyid="0", modelid="0")
    cpus = []
    for s in range(36):
        kids = []
        for i in range(2):
            g = 2 * s + i
            busid = f"{s:04x}:{0x01 + i:02x}:00.0"
            inner = (f'        <gpu dev="{g}" sm="100" rank="{g}" gdr="1">\n'
                     f'          <nvlink target="0000:c0:00.0" count="18" tclass="0x068000"/>\n'
                     f'          <c2c bw="225000" count="1"/>\n        </gpu>\n')
            kids.append(pci(busid, "0x030200", GEN5, 16, inner, indent=4))
            kids.append(nic(f"{s:04x}:{0x11 + i:02x}:00.0", f"mlx5_{g}", g, 400000, GEN5, 4))
        cpus.append(cpu(s, "ffffffff", grace, kids))
    return system(cpus)


def cluster(file, count):
    return f'<cluster>\n  <node file="{file}" count="{count}"/>\n</cluster>\n'


FILES = {
    "dgx1_v100.xml": dgx1(),
    "dgx_a100.xml": nvswitch_box(80, 12, GEN4, 200000, AMD_ROME, 2, 2),
    "hgx_h100.xml": nvswitch_box(90, 18, GEN5, 400000, INTEL_SPR, 1, 1),
    "hgx_b200.xml": nvswitch_box(100, 18, GEN5, 400000, INTEL_SPR, 1, 1),
    "pcie_4gpu_2socket.xml": pcie_box(),
    "a100_single.xml": single_gpu_box(),
    "gb200_nvl72.xml": nvl72(),
    "cpu_2socket.xml": cpu_box(),
    "cluster_dgx1_x4.xml": cluster("dgx1_v100.xml", 4),
    "cluster_a100_x8.xml": cluster("dgx_a100.xml", 8),
    "cluster_h100_x16.xml": cluster("hgx_h100.xml", 16),
    "cluster_pcie_x2.xml": cluster("pcie_4gpu_2socket.xml", 2),
    "cluster_cpu_x4.xml": cluster("cpu_2socket.xml", 4),
}

if __name__ == "__main__":
    for name, text in FILES.items():
        with open(name, "w") as f:
            f.write(text)
