"""`gpudecode plan`: what a training cluster needs to keep its GPUs fed, from measured
per-image costs, as a flow network whose minimum cut is the weakest link.

The input pipeline of every node is a chain of capacities: storage devices, the storage
system's network, each node's links, node-local disks or a node-local cache, CPU cores
(read, probe, decode and augment), the GPUs' own decoders where measured, PCIe, and the
GPUs consuming batches at their step's rate. Each is an edge of a graph, its capacity in
images per second (bytes/s divided by the format's bytes per image where bytes flow).
A real max-flow (networkx) over that graph says how many images per second reach the
GPUs; the minimum cut names the edges that hold it there. Data-parallel training runs
every GPU at the pace of the slowest, so the plan finds the largest fraction `s` of the
GPUs' demand that every node can have at once (bisection over max-flows, each node's
sink edge `s x its demand`), and a node-local cache that holds a part `h` of the data
set serves at most `h` of its node's reads (the rest comes from the shared tier): both
splits come out of the max-flow, not a formula.

    from gpudecode.planning import plan, Consumer, costs_from_json
    doc = plan(costs_from_json("bench/results/formats/formats.json"),
               gpus=[1, 8, 64], consumer=Consumer.from_step(step_ms=120, batch=256),
               tiers=["local-nvme", "nfs-hdd", "object-store"])
    print(doc["markdown"])

Every default below (storage parts, the node) is a documented assumption, named in the
output beside the table, and every one can be overridden (`Tier.with_`, `Node(...)`,
`--tier`, `--node` on the command line).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

from .errors import PlanError


# ---------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FormatCost:
    """What one image of a format costs on its way to a GPU.

    Attributes:
        name: the format (jpg, png, tensor, or a name of the user's).
        bytes_per_image: what storage and the links carry per image (the stored size).
        cpu_core_s: CPU core-seconds per image for the whole host pipeline (read, probe,
            decode, augment), e.g. threads / img/s of a measured run that kept its
            threads busy.
        gpu_img_s: images/s one GPU decodes and augments itself (nvJPEG and the CUDA
            kernel), where that was measured; None: the GPU path is not planned.
        gpu_cpu_core_s: CPU core-seconds per image that remain on the host when the GPU
            decodes (reading and probing); used only with gpu_img_s.
        out_bytes_per_image: bytes per image that cross PCIe on the CPU path (the
            augmented output, float32 NCHW at the crop size by default).
        source: where the figures come from (a file, "command line").
    """

    name: str
    bytes_per_image: float
    cpu_core_s: float
    gpu_img_s: float | None = None
    gpu_cpu_core_s: float = 0.0
    out_bytes_per_image: float = 3 * 224 * 224 * 4
    source: str = "command line"
    # where cpu_core_s goes, core-seconds per image by stage (read, probe, decode, augment),
    # where the bench run timed its stages; informational (the plan needs the sum)
    stages: dict = dataclasses.field(default_factory=dict)
    # how the figures were measured (machine, cores, images, runs and their spread): what the
    # plan scales to the planned node, said beside it
    measured: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise PlanError("a format needs a name")
        if not (self.bytes_per_image > 0 and math.isfinite(self.bytes_per_image)):
            raise PlanError(f"format {self.name}: bytes per image must be > 0, got {self.bytes_per_image}")
        if not (self.cpu_core_s > 0 and math.isfinite(self.cpu_core_s)):
            raise PlanError(f"format {self.name}: CPU core-seconds per image must be > 0, got {self.cpu_core_s}")
        if self.gpu_img_s is not None and not self.gpu_img_s > 0:
            raise PlanError(f"format {self.name}: GPU img/s must be > 0, got {self.gpu_img_s}")

    @property
    def host_core_s(self) -> float:
        """Host core-seconds per image on the path this format is planned with."""
        return self.gpu_cpu_core_s if self.gpu_img_s is not None else self.cpu_core_s


MIN_RATE, MAX_RATE = 1e-3, 1e8  # img/s per GPU a plan takes: one image in 17 minutes .. 100 million a second


@dataclass(frozen=True)
class Consumer:
    """The GPUs' appetite: images per second one GPU's training step consumes."""

    img_s_per_gpu: float
    label: str = ""

    def __post_init__(self) -> None:
        if not (self.img_s_per_gpu > 0 and math.isfinite(self.img_s_per_gpu)):
            raise PlanError(f"the consumer's img/s per GPU must be > 0, got {self.img_s_per_gpu}")
        if not MIN_RATE <= self.img_s_per_gpu <= MAX_RATE:  # (past these the flows lose their precision)
            raise PlanError(f"the consumer's img/s per GPU must be within {MIN_RATE:g}..{MAX_RATE:g}, got "
                            f"{self.img_s_per_gpu:g} (a step of that many ms, or that batch, is a typo)")

    @classmethod
    def from_step(cls, *, step_ms: float, batch: int) -> "Consumer":
        """A step of `step_ms` milliseconds on a per-GPU batch of `batch` images."""
        if step_ms <= 0 or batch < 1:
            raise PlanError(f"step_ms must be > 0 and batch >= 1, got {step_ms} and {batch}")
        return cls(batch / (step_ms / 1000.0), f"batch {batch} per GPU in {step_ms:g} ms")


@dataclass(frozen=True)
class Tier:
    """Where the data lives.

    Attributes:
        name: e.g. local-nvme, nfs-hdd, object-store.
        kind: "local": a copy of the data on every node's own devices; "shared": one
            storage system every node reads over the network.
        device_mb_s: sequential read bandwidth of one device, MB/s (shards are read in
            order; a device serving many readers at once gets less: see `derate`).
        devices: local: devices per node; shared: devices in the storage system.
            None: not a limit (an object store scales its devices with the load).
        server_gbit: shared: the storage system's own network, Gbit/s in all; None: not
            a limit.
        stream_mb_s: MB/s one read stream gets (an object store's per-connection rate);
            None: not a limit.
        streams_per_node: concurrent read streams per node (reader threads).
        first_byte_ms: latency before the first byte of a read (documentation; the
            measured tiers of `gpudecode bench io` show what it costs small files).
        derate: the fraction of device_mb_s a device gives under many readers.
        note: where the defaults come from.
    """

    name: str
    kind: Literal["local", "shared"]
    device_mb_s: float
    devices: int | None
    server_gbit: float | None = None
    stream_mb_s: float | None = None
    streams_per_node: int = 16
    first_byte_ms: float = 0.0
    derate: float = 1.0
    note: str = ""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name not in ("name", "kind", "note"):
                _check_number(f"tier {self.name}", f.name, getattr(self, f.name), str(f.type))
        if self.kind not in ("local", "shared"):
            raise PlanError(f"tier {self.name}: kind must be local or shared, got {self.kind!r}")
        if not self.device_mb_s > 0 or not 0 < self.derate <= 1:
            raise PlanError(f"tier {self.name}: device_mb_s must be > 0 and derate in (0, 1]")
        if self.devices is not None and self.devices < 1:
            raise PlanError(f"tier {self.name}: devices must be >= 1 (or None: not a limit)")
        for k in ("server_gbit", "stream_mb_s"):
            v = getattr(self, k)
            if v is not None and not v > 0:
                raise PlanError(f"tier {self.name}: {k} must be > 0 (or None: not a limit)")
        if self.streams_per_node < 1:
            raise PlanError(f"tier {self.name}: streams_per_node must be >= 1")

    def with_(self, **changes: Any) -> "Tier":
        """This tier with some fields changed (e.g. from `--tier nfs-hdd:devices=48`)."""
        return _replace(self, f"tier {self.name}", changes, fixed=("name", "kind"))


def _replace(obj: Any, what: str, changes: dict[str, Any], *, fixed: Sequence[str] = ()) -> Any:
    fields = {f.name: f for f in dataclasses.fields(obj) if f.name not in fixed}
    for k, v in changes.items():
        if k not in fields:
            raise PlanError(f"{what}: no field {k!r} to set (fields: {', '.join(fields)})")
        _check_number(what, k, v, str(fields[k].type))
    return dataclasses.replace(obj, **changes)


def _check_number(what: str, name: str, v: Any, annotation: str) -> None:
    """A tier's or node's field as given: a finite number, a whole one where the field
    counts things (devices, streams, GPUs, cores, links), None only where it means "not a
    limit" (PlanError naming the field otherwise)."""
    if v is None:
        if "None" not in annotation:
            raise PlanError(f"{what}: {name} cannot be none (it is not optional)")
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise PlanError(f"{what}: {name}={v!r} is not a finite number")
    if annotation.startswith("int") and v != int(v):
        raise PlanError(f"{what}: {name}={v!r} counts things: a whole number")


# Documented defaults for common parts. Rated figures of current data-centre parts,
# derated where many readers share a device; every one can be overridden.
TIERS: dict[str, Tier] = {
    "local-nvme": Tier("local-nvme", "local", device_mb_s=3500, devices=4, derate=0.8,
                       note="PCIe Gen4 data-centre NVMe, 3.5 GB/s sequential read each (rated 6-7 GB/s; "
                            "0.8 of 3.5 under many readers), 4 per node"),
    "local-ssd": Tier("local-ssd", "local", device_mb_s=530, devices=2, derate=0.9,
                      note="SATA SSD, 530 MB/s each, 2 per node"),
    "local-hdd": Tier("local-hdd", "local", device_mb_s=200, devices=2, derate=0.6,
                      note="7,200 rpm HDD, 200 MB/s sequential, 0.6 of it with several readers seeking, 2 per node"),
    "nfs-hdd": Tier("nfs-hdd", "shared", device_mb_s=200, devices=24, server_gbit=50.0, derate=0.5,
                    first_byte_ms=2.0,
                    note="one NFS server: 24 HDDs of 200 MB/s, half of it under many clients' interleaved "
                         "reads; 2 x 25 GbE at the server"),
    "nfs-flash": Tier("nfs-flash", "shared", device_mb_s=2000, devices=24, server_gbit=400.0, derate=0.8,
                      first_byte_ms=0.5,
                      note="an all-flash NFS/parallel file system: 24 NVMe of 2 GB/s, 4 x 100 GbE at the server"),
    "object-store": Tier("object-store", "shared", device_mb_s=1.0, devices=None, server_gbit=None,
                         stream_mb_s=90.0, streams_per_node=32, first_byte_ms=30.0,
                         note="S3-like: scales with the load; about 90 MB/s per connection, 30 ms to first "
                              "byte; 32 connections per node"),
}


@dataclass(frozen=True)
class Node:
    """One training node (the defaults: a DGX-class 8-GPU server).

    Attributes:
        gpus: GPUs per node.
        cores: CPU cores per node given to the input pipeline (physical cores; leave
            some to the trainer's own processes if they need them).
        links: network interfaces per node that carry storage traffic.
        link_gbit: Gbit/s of each.
        pcie_gb_s: host-to-device bandwidth per GPU, GB/s.
        cache_gb: a node-local cache (`cache_dir=` on NVMe) for a shared tier, GB; 0: none.
        cache_mb_s: the cache's read bandwidth, MB/s.
        gpu_memory_gb, ram_gb: each GPU's memory and the node's RAM, GB (where the set
            may be kept resident: `Loader(keep=...)`).
    """

    gpus: int = 8
    cores: int = 128
    links: int = 2
    link_gbit: float = 200.0
    pcie_gb_s: float = 25.0
    cache_gb: float = 0.0
    cache_mb_s: float = 10000.0
    gpu_memory_gb: float = 80.0
    ram_gb: float = 2048.0
    note: str = ("DGX-class: 8 GPUs of 80 GB, 128 cores (2 x 64), 2 TB of RAM, 2 x 200 Gbit/s storage links, PCIe "
                 "Gen4 x16 (25 GB/s) per GPU")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name != "note":
                _check_number("node", f.name, getattr(self, f.name), str(f.type))
        if self.gpus < 1 or self.cores < 1 or self.links < 1:
            raise PlanError("a node needs at least 1 GPU, 1 core and 1 link")
        if not (self.link_gbit > 0 and self.pcie_gb_s > 0 and self.cache_gb >= 0 and self.cache_mb_s > 0):
            raise PlanError("link_gbit, pcie_gb_s and cache_mb_s must be > 0, cache_gb >= 0")
        if not (self.gpu_memory_gb > 0 and self.ram_gb > 0):
            raise PlanError("gpu_memory_gb and ram_gb must be > 0")

    def with_(self, **changes: Any) -> "Node":
        """This node with some fields changed (e.g. from `--node cores=64,cache_gb=3000`)."""
        node = _replace(self, "node", changes, fixed=("note",))
        said = ", ".join(f"{k}={v}" for k, v in changes.items())
        return dataclasses.replace(node, note=f"{self.note}; changed: {said}") if changes else node


# ---------------------------------------------------------------------------------------
# Costs from a bench run
# ---------------------------------------------------------------------------------------

def costs_from_json(path: str | os.PathLike, *, pipeline: str = "gpudecode") -> list[FormatCost]:
    """Per-format costs from a `gpudecode bench formats` JSON (formats.json).

    CPU core-seconds per image = the run's threads / its median img/s for `pipeline`
    (gpudecode or classic): what the whole host pipeline cost on that machine's cores.
    Bytes per image are the dataset's; the PCIe bytes are the float32 output at the
    crop size. GPU figures are taken where the run was on a GPU (`args.device` cuda).

    Raises:
        PlanError: the file is not a formats JSON or has no figure for `pipeline`.
    """
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise PlanError(f"{p}: cannot read a bench JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("command") != "formats":
        got = doc.get("command") if isinstance(doc, dict) else type(doc).__name__
        raise PlanError(f"{p}: not a `gpudecode bench formats` result (command: {got!r}); "
                        "run `gpudecode bench formats DATA --out DIR` and pass DIR/formats.json")
    try:
        return _costs(doc, p, pipeline)
    except PlanError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError, OverflowError) as e:
        raise PlanError(f"{p}: a `gpudecode bench formats` result with a missing or malformed entry "
                        f"({type(e).__name__}: {e}); run the bench again") from e


def _costs(doc: dict, p: Path, pipeline: str) -> list[FormatCost]:
    args = doc.get("args") or {}
    threads = int(args.get("threads") or 0)
    crop = int(args.get("crop") or 224)
    on_gpu = str(args.get("device", "cpu")).startswith("cuda")
    out: list[FormatCost] = []
    machine = doc.get("machine") or {}
    for fmt, rows in (doc.get("img_per_s") or {}).items():
        r = rows.get(pipeline)
        if r is None:
            continue
        rate = float(r["median"])
        runs = r.get("runs") or [rate]
        spread = (max(runs) - min(runs)) / rate if rate > 0 else 0.0
        measured = (f"{len(runs)} run{'s' if len(runs) != 1 else ''} of {doc['dataset'].get('count', '?')} images on "
                    f"{threads} thread{'s' if threads != 1 else ''} of {machine.get('cpu') or 'an unnamed CPU'} "
                    f"({machine.get('cores', '?')} cores), runs {spread:.0%} apart")
        bpi = float(doc["dataset"]["bytes_per_image"][fmt])
        if not (rate > 0 and math.isfinite(rate)) or threads < 1:
            raise PlanError(f"{p}: format {fmt}: {pipeline} ran at {rate} img/s on {threads} threads: no cost to "
                            "plan with")
        if on_gpu and pipeline == "gpudecode":
            # measured on a GPU: the GPU did decode and augment; the host only read and probed
            med = (doc.get("gpudecode_stages") or {}).get(fmt, {}).get("median_s", {})
            host = (med.get("read", 0.0) + med.get("probe", 0.0)) / max(1, int(args.get("batch") or 1))
            out.append(FormatCost(fmt, bpi, cpu_core_s=threads / rate, gpu_img_s=rate,
                                  gpu_cpu_core_s=host, out_bytes_per_image=3 * crop * crop,
                                  source=f"{p} ({pipeline}, {doc['machine'].get('gpu')})", measured=measured))
        else:
            out.append(FormatCost(fmt, bpi, cpu_core_s=threads / rate, out_bytes_per_image=3 * crop * crop * 4,
                                  stages=_stage_split(doc, fmt, threads / rate),
                                  source=f"{p} ({pipeline} on {threads} cores of {doc['machine'].get('cpu')})",
                                  measured=measured))
    if not out:
        raise PlanError(f"{p}: no {pipeline} figures (pipelines measured: "
                        f"{sorted({n for rows in (doc.get('img_per_s') or {}).values() for n in rows})})")
    return out


def _stage_split(doc: dict, fmt: str, total: float) -> dict:
    """cpu_core_s split by stage, in proportion to each stage's CPU time per batch: read and
    probe on one thread, decode and augment on all of the run's threads."""
    med = (doc.get("gpudecode_stages") or {}).get(fmt, {}).get("median_s", {})
    threads = int((doc.get("args") or {}).get("threads") or 1)
    busy = {k: float(med[k]) * (threads if k in ("decode", "augment") else 1)
            for k in ("read", "probe", "decode", "augment") if med.get(k)}
    whole = sum(busy.values())
    return {k: total * v / whole for k, v in busy.items()} if whole > 0 else {}


def parse_cost(text: str) -> FormatCost:
    """`NAME:KB_PER_IMAGE:CORE_MS_PER_IMAGE[:GPU_IMG_S]`, e.g. `jpg:110:1.2` (ImageNet JPEGs
    of 110 kB at 1.2 core-ms each) or `jpg:110:1.2:4000` (a GPU decoding 4,000 img/s)."""
    parts = text.split(":")
    if len(parts) not in (3, 4):
        raise PlanError(f"--cost {text!r}: expected NAME:KB_PER_IMAGE:CORE_MS_PER_IMAGE[:GPU_IMG_S]")
    try:
        kb, ms = float(parts[1]), float(parts[2])
        gpu = float(parts[3]) if len(parts) == 4 else None
    except ValueError as e:
        raise PlanError(f"--cost {text!r}: {e}") from e
    return FormatCost(parts[0], kb * 1000, ms / 1000, gpu_img_s=gpu)


def tiers_from_io(path: str | os.PathLike) -> dict[str, Tier]:
    """Tiers measured by `gpudecode bench io --tiers` (io.json), to plan with beside the
    defaults: "measured-disk" (this machine's disk, cold, shards read in order: one
    device) and "measured-object-store" (the HTTP stand-in read by gpudecode's remote
    path: MB/s per connection for shards, every format's median). A tier whose rows are
    absent is left out.

    Raises:
        PlanError: the file is not an io result.
    """
    import statistics

    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise PlanError(f"{p}: cannot read a bench JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("command") != "io" or not isinstance(doc.get("rows"), list):
        raise PlanError(f"{p}: not a `gpudecode bench io` result of this version (run it again)")
    try:
        return _io_tiers(doc, p)
    except PlanError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError, statistics.StatisticsError) as e:
        raise PlanError(f"{p}: a `gpudecode bench io` result with a missing or malformed row "
                        f"({type(e).__name__}: {e}); run the bench again") from e


def _io_tiers(doc: dict, p: Path) -> dict[str, Tier]:
    import statistics

    rows = doc["rows"]
    out: dict[str, Tier] = {}
    cold = [r["mb_per_s"] for r in rows if r["tier"] == "local disk (cold)" and r["access"] == "shards"]
    if cold:
        out["measured-disk"] = Tier("measured-disk", "local", device_mb_s=max(cold), devices=1,
                                    note=f"this machine's disk, shards read cold: {max(cold):,.0f} MB/s ({p})")
    per_conn = [r["mb_per_s"] / r["connections"] for r in rows
                if r["tier"] == "object-store" and r["access"] == "shards" and r["cache"] == "none"
                and r.get("connections")]
    if per_conn:
        st = doc.get("settings", {})
        mb = statistics.median(per_conn)
        out["measured-object-store"] = dataclasses.replace(
            TIERS["object-store"], name="measured-object-store", stream_mb_s=mb,
            first_byte_ms=float(st.get("first_byte_ms", TIERS["object-store"].first_byte_ms)),
            note=f"gpudecode's remote reader on the HTTP stand-in ({st.get('link_mb_s')} MB/s and "
                 f"{st.get('first_byte_ms')} ms per connection): {mb:,.0f} MB/s per connection for shards; "
                 f"32 per node ({p})")
    return out


def parse_overrides(text: str, what: str) -> dict[str, Any]:
    """`key=value,key=value` (numbers, or `none`) for --tier and --node."""
    out: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        k, sep, v = item.partition("=")
        if not sep:
            raise PlanError(f"{what} {text!r}: expected key=value[,key=value]")
        k = k.strip().replace("-", "_")
        v = v.strip()
        if v.lower() == "none":
            out[k] = None
            continue
        try:
            out[k] = int(v) if v.lstrip("-").isdigit() else float(v)
        except ValueError as e:
            raise PlanError(f"{what} {text!r}: {k}={v} is not a number") from e
    return out


def tier(spec: str, known: dict[str, Tier] | None = None) -> Tier:
    """A tier by name, with overrides: `nfs-hdd` or `nfs-hdd:devices=48,derate=0.7`;
    `known` adds tiers (e.g. tiers_from_io's) to the defaults."""
    name, _, over = spec.partition(":")
    known = {**TIERS, **(known or {})}
    if name not in known:
        raise PlanError(f"unknown storage tier {name!r} (known: {', '.join(known)}; override a known one's "
                        "fields with NAME:key=value,...)")
    t = known[name]
    return t.with_(**parse_overrides(over, "--tier")) if over else t


# ---------------------------------------------------------------------------------------
# The flow network
# ---------------------------------------------------------------------------------------

SOURCE, SINK = "data", "trained"
# the largest GPU count planned: a plan row's flow network has a part per node and is solved by
# bisection, so time grows with the node count (16,384 GPUs: ~33 s a tier and format on one
# core here, 65,536: over 300 s)
MAX_GPUS = 16_384

# what each kind of edge is, and what moves it when it is the cut
_KINDS = {
    "devices": "storage devices",
    "server": "the storage system's network",
    "streams": "read streams per node",
    "link": "node network links",
    "local": "node-local disks",
    "cache-size": "the part of the data the node-local cache holds",
    "cache": "node-local cache bandwidth",
    "uncached": "the part of the data not in the node-local cache",
    "cpu": "CPU cores",
    "gpu-decode": "GPU decoders",
    "pcie": "PCIe",
    "step": "the GPUs' step",
}


_SHORT = {"devices": "drives", "server": "server", "link": "links", "streams": "streams", "local": "disks",
          "cache": "cache", "pcie": "PCIe"}
_SCALED = ("step", "cache-size", "uncached")  # capacities that are a share of the demand: multiplied by s


@dataclass
class Edge:
    u: str
    v: str
    kind: str
    capacity: float           # img/s (inf: no limit)
    bytes_per_image: float    # what one image weighs on this edge (0: a count, not bytes)
    node: int | None = None   # the training node it belongs to, None: shared


@dataclass
class Network:
    edges: list[Edge] = field(default_factory=list)
    demand: list[float] = field(default_factory=list)   # img/s per training node at s = 1

    def add(self, u: str, v: str, kind: str, capacity: float, bpi: float = 0.0, node: int | None = None) -> None:
        self.edges.append(Edge(u, v, kind, capacity, bpi, node))

    def graph(self, s: float) -> Any:
        import networkx as nx

        g = nx.DiGraph()
        for e in self.edges:
            cap = e.capacity * (s if e.kind in _SCALED else 1.0)
            if g.has_edge(e.u, e.v):  # parallel edges of one pair never occur (names are unique)
                raise PlanError(f"two edges {e.u} -> {e.v}")
            if math.isfinite(cap):
                g.add_edge(e.u, e.v, capacity=cap, kind=e.kind)
            else:
                g.add_edge(e.u, e.v, kind=e.kind)  # no capacity attribute: unbounded for networkx
        return g


def _cache_share(t: Tier, node: Node, dataset_gb: float) -> float:
    """The part of a node's reads its node-local cache serves: the fraction of the data it
    holds (a cache is planned in front of a shared tier only)."""
    if t.kind != "shared" or node.cache_gb <= 0 or dataset_gb <= 0:
        return 0.0
    return min(1.0, node.cache_gb / dataset_gb)


def build_network(cost: FormatCost, t: Tier, gpus: int, consumer: Consumer, node: Node, *,
                  dataset_gb: float) -> Network:
    """The graph of one row: `gpus` GPUs on as many nodes as they need, reading `cost`'s
    format from tier `t`. Capacities in img/s; the step edges carry each node's demand
    (multiplied by `s` when the graph is made)."""
    if gpus < 1:
        raise PlanError(f"gpus must be >= 1, got {gpus}")
    inf = math.inf
    b = cost.bytes_per_image
    n_nodes = -(-gpus // node.gpus)
    net = Network()
    shared = t.kind == "shared"
    if shared:
        dev = inf if t.devices is None else t.devices * t.device_mb_s * t.derate * 1e6 / b
        net.add(SOURCE, "storage", "devices", dev, b)
        srv = inf if t.server_gbit is None else t.server_gbit * 1e9 / 8 / b
        net.add("storage", "fabric", "server", srv, b)
    hold = _cache_share(t, node, dataset_gb)
    for i in range(n_nodes):
        g_i = min(node.gpus, gpus - i * node.gpus)
        d_i = g_i * consumer.img_s_per_gpu
        net.demand.append(d_i)
        host = f"node{i}"
        if shared:
            streams = inf if t.stream_mb_s is None else t.streams_per_node * t.stream_mb_s * 1e6 / b
            net.add("fabric", f"{host}:nic", "link", node.links * node.link_gbit * 1e9 / 8 / b, b, i)
            if hold > 0:
                # a cached shard is read from the cache, never again from the tier: the tier serves
                # the part of the data the cache does not hold (scaled with the demand)
                net.add(f"{host}:nic", f"{host}:remote", "streams", streams, b, i)
                net.add(f"{host}:remote", host, "uncached", (1.0 - hold) * d_i, 0.0, i)
            else:
                net.add(f"{host}:nic", host, "streams", streams, b, i)
            if hold > 0:
                # at most `hold` of this node's images come from its cache (the rest are not in it)
                # (scaled with the demand, as the step edges are), at most its read bandwidth
                net.add(SOURCE, f"{host}:cached", "cache-size", hold * d_i, 0.0, i)
                net.add(f"{host}:cached", f"{host}:cache", "cache", node.cache_mb_s * 1e6 / b, b, i)
                net.add(f"{host}:cache", host, "cache-in", inf, b, i)
        else:
            dev = inf if t.devices is None else t.devices * t.device_mb_s * t.derate * 1e6 / b
            net.add(SOURCE, f"{host}:disks", "local", dev, b, i)
            net.add(f"{host}:disks", host, "local-in", inf, b, i)
        # One path per format, as the Loader runs: the CPU path (the host decodes and augments, the
        # output crosses PCIe) or, where a GPU rate was measured, the GPU path (the host reads and
        # probes, the encoded bytes cross PCIe, the GPU decodes and augments).
        gpu_path = cost.gpu_img_s is not None
        core_s = cost.host_core_s
        net.add(host, f"{host}:cpu", "cpu", node.cores / core_s if core_s > 0 else inf, 0.0, i)
        over = cost.bytes_per_image if gpu_path else cost.out_bytes_per_image
        net.add(f"{host}:cpu", f"{host}:pcie", "pcie", g_i * node.pcie_gb_s * 1e9 / over, over, i)
        if cost.gpu_img_s is not None:
            net.add(f"{host}:pcie", f"{host}:gpus", "gpu-decode", g_i * cost.gpu_img_s, 0.0, i)
        else:
            net.add(f"{host}:pcie", f"{host}:gpus", "pcie-in", inf, 0.0, i)
        net.add(f"{host}:gpus", SINK, "step", d_i, 0.0, i)
    return net


@dataclass
class Solved:
    s: float                  # the fraction of demand every node gets (capped at `cap`)
    flow: dict                # networkx flow dict at s
    cut: list[Edge]           # the edges of the minimum cut just past s
    total: float              # img/s delivered in all at s


def solve(net: Network, *, cap: float = 1e4, rel_tol: float = 1e-6) -> Solved:
    """The largest `s` (<= cap) at which every node gets s x its demand, by bisection over
    max-flows, and the minimum cut that stops it going higher."""
    import networkx as nx

    want = sum(net.demand)

    def feasible(s: float) -> tuple[bool, float, dict]:
        value, flow = nx.maximum_flow(net.graph(s), SOURCE, SINK)
        return value >= want * s * (1 - 1e-9), value, flow

    lo, hi = 0.0, cap
    ok, value, flow = feasible(hi)
    if ok:
        lo = hi
    else:
        best: tuple[float, dict] = (0.0, {})
        for _ in range(200):
            mid = (lo + hi) / 2
            ok, v, f = feasible(mid)
            if ok:
                lo, best = mid, (v, f)
            else:
                hi = mid
            if hi - lo <= rel_tol * max(hi, 1e-12):
                break
        value, flow = best
    # the cut: a minimum cut of the graph just past the feasible point
    g = net.graph(min(cap, lo * (1 + 1e-3)) if lo > 0 else 1e-6)
    _, (reach, _) = nx.minimum_cut(g, SOURCE, SINK)
    cut = [e for e in net.edges if e.u in reach and e.v not in reach and e.capacity > 0]
    return Solved(lo, flow, cut, value)


def _cut_kinds(cut: Sequence[Edge]) -> list[str]:
    kinds = []
    for e in cut:
        k = e.kind.removesuffix("-in")
        if k not in kinds:
            kinds.append(k)
    return kinds


def _needed(cost: FormatCost, t: Tier, gpus: int, consumer: Consumer, node: Node, dataset_gb: float) -> dict:
    """What the row needs to meet its demand: counts per node and in all (the CPU path)."""
    b = cost.bytes_per_image
    per_node = min(gpus, node.gpus) * consumer.img_s_per_gpu  # the fullest node
    total = gpus * consumer.img_s_per_gpu
    hold = _cache_share(t, node, dataset_gb)
    read_total = total * b * (1 - hold)
    need: dict[str, Any] = {
        "cores_per_node": math.ceil(per_node * cost.host_core_s - 1e-9),
        "cores_per_gpu": consumer.img_s_per_gpu * cost.host_core_s,
        "read_bytes_s": total * b,
        "remote_bytes_s": read_total if t.kind == "shared" else 0.0,
        "dataset_gb": dataset_gb,
    }
    if t.kind == "local":
        need["devices_per_node"] = math.ceil(per_node * b / (t.device_mb_s * t.derate * 1e6) - 1e-9)
    else:
        need["links_per_node"] = math.ceil(per_node * b * (1 - hold) / (node.link_gbit * 1e9 / 8) - 1e-9)
        if t.devices is not None:
            need["devices"] = math.ceil(read_total / (t.device_mb_s * t.derate * 1e6) - 1e-9)
        if t.server_gbit is not None:
            need["server_gbit"] = read_total * 8 / 1e9
        if t.stream_mb_s is not None:
            need["streams_per_node"] = math.ceil(per_node * b * (1 - hold) / (t.stream_mb_s * 1e6) - 1e-9)
    return need


def _advice(kinds: list[str], cost: FormatCost, t: Tier, need: dict, node: Node, s: float,
            others: dict[str, FormatCost]) -> str:
    if s >= 1.0:
        nxt = ", ".join(_KINDS.get(k, k) for k in kinds)
        return (f"nothing: the input has {s:.1f}x the step's rate ({nxt} would bind next)" if s < 1e4
                else "nothing: the input is not a limit")
    moves = []
    cheaper = sorted((c for c in others.values() if c.host_core_s < cost.host_core_s), key=lambda c: c.host_core_s)
    smaller = sorted((c for c in others.values() if c.bytes_per_image < cost.bytes_per_image),
                     key=lambda c: c.bytes_per_image)
    for k in kinds:
        if k == "cpu":
            m = f"{need['cores_per_node']} cores per node (has {node.cores})"
            if cost.gpu_img_s is None:
                m += ", or decode on the GPU (device='cuda')"
            if cheaper:
                m += f", or precache to {cheaper[0].name} ({cheaper[0].host_core_s * 1e3:.2f} core-ms/img)"
            moves.append(m)
        elif k == "local":
            moves.append(f"{need['devices_per_node']} drives per node (has {t.devices})")
        elif k == "devices":
            moves.append(f"{need.get('devices')} drives in the storage system (has {t.devices})"
                         + (", or a node-local cache (cache_dir=)" if node.cache_gb == 0 else ""))
        elif k == "server":
            moves.append(f"{need.get('server_gbit', 0):,.0f} Gbit/s at the storage server (has {t.server_gbit:g})"
                         + (", or a node-local cache (cache_dir=)" if node.cache_gb == 0 else ""))
        elif k == "link":
            m = f"{need.get('links_per_node')} x {node.link_gbit:g} Gbit/s links per node (has {node.links})"
            if smaller:
                m += f", or a smaller format ({smaller[0].name}: {smaller[0].bytes_per_image / 1e3:,.0f} kB/img)"
            moves.append(m + (", or a node-local cache (cache_dir=)" if node.cache_gb == 0 else ""))
        elif k == "streams":
            moves.append(f"{need.get('streams_per_node')} concurrent reads per node (has {t.streams_per_node})")
        elif k == "cache-size":
            moves.append("a larger node-local cache (it holds "
                         f"{min(1.0, node.cache_gb / max(1e-9, need['dataset_gb'])):.0%} of the data set)")
        elif k == "uncached":
            moves.append("more of the data set in the node-local cache, or more from the tier")
        elif k == "cache":
            moves.append(f"a faster node-local cache (reads {node.cache_mb_s:,.0f} MB/s)")
        elif k == "pcie":
            moves.append("less per image over PCIe: uint8, float16 or bfloat16 output, or augment on the GPU")
        elif k == "gpu-decode":
            moves.append("more GPU decode throughput (hardware decoder, larger batches)")
    return "; ".join(moves)


def plan(costs: Sequence[FormatCost], *, gpus: Iterable[int], consumer: Consumer,
         tiers: Sequence[str | Tier] = ("local-nvme", "nfs-hdd", "object-store"), node: Node | None = None,
         dataset_images: int = 1_281_167) -> dict:
    """The datapath table: one row per (GPU count, tier, format).

    Args:
        costs: per-format costs (costs_from_json, parse_cost).
        gpus: GPU counts, e.g. [1, 4, 8, 16, 64, 256].
        consumer: the step's appetite per GPU.
        tiers: tier names (with `:key=value` overrides) or Tier objects.
        node: the training node (default: DGX-class, see Node).
        dataset_images: images in the data set (the cache's share; ImageNet-1k's train set).

    Returns:
        A JSON-ready dict: "rows" (each with demand, needed counts, bytes/s at each kind
        of edge, delivered img/s, the cut and what moves it), "assumptions", "markdown".
    """
    node = node or Node()
    ts = [tier(x) if isinstance(x, str) else x for x in tiers]
    if not ts:
        raise PlanError(f"no storage tier to plan: name one or more ({', '.join(TIERS)})")
    gpus = list(gpus)
    if any(isinstance(g, bool) or not isinstance(g, int) for g in gpus):
        raise PlanError(f"GPU counts must be whole numbers, got {gpus}")
    counts = sorted(set(gpus))
    if not counts or counts[0] < 1:
        raise PlanError(f"GPU counts must be >= 1, got {gpus}")
    if counts[-1] > MAX_GPUS:  # (one flow network has a vertex set per node: memory grows with the count)
        raise PlanError(f"GPU counts above {MAX_GPUS:,} are not planned (got {counts[-1]:,}; the time grows with "
                        "the node count): plan a representative part of the cluster, its nodes are alike")
    if isinstance(dataset_images, bool) or not isinstance(dataset_images, int) or dataset_images < 1:
        raise PlanError(f"dataset_images must be a whole number >= 1, got {dataset_images!r}")
    if not costs:
        raise PlanError("no format costs to plan with")
    by_name = {c.name: c for c in costs}
    rows = []
    for g in counts:
        for t in ts:
            for c in costs:
                dataset_gb = dataset_images * c.bytes_per_image / 1e9
                net = build_network(c, t, g, consumer, node, dataset_gb=dataset_gb)
                rows.append(_row(net, solve(net), c, t, g, consumer, node, by_name, dataset_gb))
    doc = {
        "command": "plan",
        "consumer": {"img_s_per_gpu": consumer.img_s_per_gpu, "label": consumer.label},
        "node": dataclasses.asdict(node),
        "tiers": {t.name: dataclasses.asdict(t) for t in ts},
        "formats": {c.name: dataclasses.asdict(c) for c in costs},
        "dataset_images": dataset_images,
        "gpus": counts,
        "rows": rows,
        "best": _best(rows),
    }
    doc["residency"] = residency(costs, dataset_images, node)
    doc["summary"] = summary(doc)
    doc["markdown"] = markdown(doc)
    return doc


# The talks' rule for where a training set lives: decoded under 8 GB on the GPU, under 128 GB
# in RAM; then the compressed bytes in RAM (the page cache), a node-local disk, the network.
GPU_RESIDENT_GB = 8.0
RAM_RESIDENT_GB = 128.0
_DECODED_DEFAULT = 3 * 256 * 341  # bytes of a decoded image at a shorter side of 256 (ImageNet's usual precache)


def residency(costs: Sequence[FormatCost], dataset_images: int, node: Node) -> dict:
    """Where the data set should live on each node, by the talks' rule and this node's
    memory: the decoded set's size (a tensor format's bytes an image where one is planned,
    else a 256-pixel image's), the stored set's per format, and the tier they allow, with
    the Loader's argument for it. Half of each memory is the budget (the Loader's own)."""
    tensor = [c for c in costs if c.name in ("tensor", "npy")]
    per = tensor[0].bytes_per_image if tensor else _DECODED_DEFAULT
    decoded_gb = dataset_images * per / 1e9
    stored = {c.name: dataset_images * c.bytes_per_image / 1e9 for c in costs}
    smallest = min(stored.values())
    gpu_budget, ram_budget = node.gpu_memory_gb / 2, node.ram_gb / 2
    if decoded_gb <= min(GPU_RESIDENT_GB, gpu_budget):
        tier, how = "gpu", "keep='gpu' (each GPU holds the set, decoded: later epochs read nothing)"
    elif decoded_gb <= min(RAM_RESIDENT_GB, ram_budget):
        tier, how = "ram", "keep='ram' (the node's RAM holds the set, decoded, for each rank)"
    elif decoded_gb * (128 * 171) / (256 * 341) <= min(RAM_RESIDENT_GB, ram_budget):
        tier, how = "ram", "keep='ram', keep_size=128 (decoded at a shorter side of 128, as precache --size 128)"
    elif smallest <= ram_budget:
        tier, how = "page cache", "the stored shards in RAM (the page cache: the first epoch reads them)"
    elif node.cache_gb and smallest <= node.cache_gb:
        tier, how = "local disk", "cache_dir= on the node-local disk (remote shards kept there after the first read)"
    else:
        tier, how = "network", "streamed from the storage tier each epoch (the plan's rows)"
    return {"decoded_gb": decoded_gb, "decoded_bytes_per_image": per, "decoded_from": "a tensor format" if tensor
            else "a 256-pixel image (no tensor format planned)", "stored_gb": stored, "tier": tier, "how": how,
            "rule": f"decoded under {GPU_RESIDENT_GB:g} GB: the GPU; under {RAM_RESIDENT_GB:g} GB: RAM; each within "
                    f"half the memory ({node.gpu_memory_gb:g} GB a GPU, {node.ram_gb:g} GB of RAM a node)"}


def _residency_line(doc: dict) -> str:
    r = doc.get("residency")
    if not r:
        return ""
    stored = ", ".join(f"{k} {v:,.1f} GB" for k, v in r["stored_gb"].items())
    return (f"Where the set lives ({doc['dataset_images']:,} images; decoded {r['decoded_gb']:,.1f} GB from "
            f"{r['decoded_from']}; stored {stored}): {r['tier']}: {r['how']}. The rule: {r['rule']}.")


def _cuts_in_order(net: Network, sol: Solved, c: FormatCost, t: Tier, need: dict, node: Node,
                   by_name: dict[str, FormatCost], most: int = 6) -> list[dict]:
    """Every cut between the data and the GPUs' step, in the order they bind: the first
    cut's edges are given what the demand needs, the network solved again, and so on until
    the GPUs' step binds (or `most` cuts). Each: what binds, the fraction of the demand fed
    with the cuts before it moved, and what moves it."""
    work = Network([dataclasses.replace(e) for e in net.edges], list(net.demand))
    out: list[dict] = []
    while sol.s < 1.0 and len(out) < most:
        kinds = _cut_kinds(sol.cut)
        out.append({"binds": [_KINDS.get(k, k) for k in kinds], "fraction": sol.s,
                    "move": _advice(kinds, c, t, need, node, sol.s, by_name)})
        grow = 1.0 / max(sol.s, 1e-9) * (1 + 1e-6)
        for e in work.edges:
            if e.kind.removesuffix("-in") in kinds and math.isfinite(e.capacity):
                e.capacity *= grow
        sol = solve(work, cap=1.0)
    if sol.s < 1.0:
        out.append({"binds": ["..."], "fraction": sol.s, "move": f"more cuts after these {most}"})
    return out


def _row(net: Network, sol: Solved, c: FormatCost, t: Tier, g: int, consumer: Consumer, node: Node,
         by_name: dict[str, FormatCost], dataset_gb: float) -> dict:
    kinds = _cut_kinds(sol.cut)
    need = _needed(c, t, g, consumer, node, dataset_gb)
    # the solver's flow is at its largest feasible rate (up to 10^4 x the demand where the input
    # keeps up): scaled to what is delivered (a feasible flow scaled down stays feasible)
    scale = min(1.0, sol.s) * sum(net.demand) / sol.total if sol.total > 0 else 0.0
    # per kind of edge, summed over nodes: capacity (img/s; the step's at s = 1), the flow at
    # the delivered rate, bytes/s, and whether it is in the cut
    edges: dict[str, dict] = {}
    for e in net.edges:
        if e.kind.endswith("-in"):
            continue
        f = sol.flow.get(e.u, {}).get(e.v, 0.0) * scale
        d = edges.setdefault(e.kind, {"name": _KINDS.get(e.kind, e.kind), "capacity_img_s": 0.0, "flow_img_s": 0.0,
                                      "bytes_s": 0.0, "capacity_bytes_s": 0.0, "cut": e.kind in kinds})
        d["capacity_img_s"] += e.capacity
        d["flow_img_s"] += f
        d["bytes_s"] += f * e.bytes_per_image
        d["capacity_bytes_s"] += e.capacity * e.bytes_per_image
    bound = sol.s < 1.0
    names = [_KINDS.get(k, k) for k in kinds]
    return {
        "gpus": g, "nodes": len(net.demand), "tier": t.name, "format": c.name,
        "demand_img_s": g * consumer.img_s_per_gpu, "needed": need,
        "delivered_img_s_per_gpu": min(1.0, sol.s) * consumer.img_s_per_gpu, "fraction": min(1.0, sol.s),
        "headroom": sol.s,
        # where the input keeps up, the cut is the GPUs' own step; the input's cut binds next
        "cut": names if bound else [_KINDS["step"]], "next_cut": [] if bound else names,
        "edges": edges, "move": _advice(kinds, c, t, need, node, sol.s, by_name),
        "cuts": _cuts_in_order(net, sol, c, t, need, node, by_name) if bound else [],
    }


def _best(rows: list[dict]) -> dict:
    """Per (GPU count, tier): the format that delivers most (then: fewest cores)."""
    best: dict[str, str] = {}
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["gpus"], r["tier"]), []).append(r)
    for (g, t), rs in groups.items():
        top = max(rs, key=lambda r: (round(r["fraction"], 6), -r["needed"]["cores_per_node"]))
        best[f"{g}:{t}"] = top["format"]
    return best


def _gb(x: float) -> str:
    if not math.isfinite(x):
        return "no limit"
    return f"{x / 1e9:,.2f}" if x < 1e11 else f"{x / 1e9:,.0f}"


def _head(doc: dict) -> list[str]:
    c, n = doc["consumer"], doc["node"]
    return [f"Consumer: {c['img_s_per_gpu']:,.0f} img/s per GPU ({c['label'] or 'given'}); node: {n['note']} "
            f"(cores {n['cores']}, links {n['links']} x {n['link_gbit']:g} Gbit/s, node-local cache "
            f"{n['cache_gb']:g} GB); data set {doc['dataset_images']:,} images."]


def _measurement(doc: dict) -> str:
    """What the per-image costs rest on, and how far the plan scales them."""
    fs = doc["formats"].values()
    cores = doc["node"]["cores"]
    how = "; ".join(f"{f['name']}: {f['measured']}" for f in fs if f.get("measured"))
    if not how:
        return (f"The per-image costs were given by hand; the plan scales them to {cores} cores a node. Measure "
                "them on the target node: `gpudecode bench formats DATA --out DIR` there, then --from DIR/formats.json.")
    return (f"The per-image costs were measured on {how}; the plan scales them to {cores} cores a node, as if each "
            "core ran as those did (a small or loaded machine's figures are thin ground: cores share caches and "
            "memory bandwidth). Measure on the target node: `gpudecode bench formats DATA --out DIR` there, then "
            "--from DIR/formats.json.")


def summary(doc: dict, width: int = 100) -> str:
    """The short view: per GPU count and tier, the best format, how much of the demand it
    feeds, the cores it needs, and every cut in the order it binds with what moves it."""
    import textwrap

    def fill(text: str, initial_indent: str = "", subsequent_indent: str = "") -> str:
        return textwrap.fill(text, width, break_on_hyphens=False, initial_indent=initial_indent,
                             subsequent_indent=subsequent_indent)

    lines = [fill(_head(doc)[0]), fill(_measurement(doc))]
    if _residency_line(doc):
        lines.append(fill(_residency_line(doc)))
    by_key = {(r["gpus"], r["tier"], r["format"]): r for r in doc["rows"]}
    tw = max(len(t) for t in doc["tiers"])
    fw = max(len(f) for f in doc["formats"])
    for g in doc["gpus"]:
        rows = [by_key[(g, t, doc["best"][f"{g}:{t}"])] for t in doc["tiers"]]
        lines.append(f"\n{g:,} GPU{'s' if g > 1 else ''} ({rows[0]['nodes']} node{'s' if rows[0]['nodes'] > 1 else ''}),"
                     f" {rows[0]['demand_img_s']:,.0f} img/s wanted; per storage tier, the best format:")
        for r in rows:
            lead = (f"  {r['tier']:<{tw}}  {r['format']:<{fw}}  fed {r['fraction']:>4.0%}  "
                    f"{r['needed']['cores_per_node']:>3} cores/node  ")
            pad = " " * len(lead)
            if not r["cuts"]:
                nxt = ", ".join(r["next_cut"]) or "nothing"
                text = (f"the GPUs' step binds (the input has {r['headroom']:.1f}x; {nxt} next)" if r["headroom"] < 1e4
                        else "the GPUs' step binds (the input is no limit)")
                lines.append(fill(text, initial_indent=lead, subsequent_indent=pad))
                continue
            for i, cut in enumerate(r["cuts"]):
                text = f"{i + 1}. {', '.join(cut['binds'])} bind at {cut['fraction']:.0%}: {cut['move']}"
                lines.append(fill(text, initial_indent=lead if i == 0 else pad, subsequent_indent=pad + "   "))
            lines.append(f"{pad}then the GPUs' step binds")
    lines.append("\nEvery row, edge by edge: `gpudecode plan ... --all` (and plan.md).")
    return "\n".join(lines)


def markdown(doc: dict) -> str:
    """The full table: every (GPU count, tier, format), edge by edge."""
    from ._report import table

    head = _head(doc) + [_measurement(doc)] + ([_residency_line(doc)] if _residency_line(doc) else [])
    for name, f in doc["formats"].items():
        gpu = f"; GPU decode {f['gpu_img_s']:,.0f} img/s per GPU" if f["gpu_img_s"] else "; GPU decode: not measured"
        split = ", ".join(f"{k} {v * 1e3:.3f}" for k, v in (f.get("stages") or {}).items())
        head.append(f"- {name}: {f['bytes_per_image'] / 1e3:,.1f} kB/img, {f['cpu_core_s'] * 1e3:.3f} core-ms/img on "
                    f"the CPU path ({1 / f['cpu_core_s']:,.0f} img/s per core{'; ' + split if split else ''}){gpu}; "
                    f"from {f['source']}")
    for name, t in doc["tiers"].items():
        head.append(f"- tier {name}: {t['note']}")
    rows = []
    for r in doc["rows"]:
        n = r["needed"]
        storage = (f"{n['devices_per_node']}/node" if "devices_per_node" in n
                   else (f"{n['devices']}" if "devices" in n else "-"))
        links = f"{n['links_per_node']}/node" if "links_per_node" in n else "-"
        edges = ", ".join(f"{_SHORT.get(k, k)} {_gb(e['bytes_s'])}/{_gb(e['capacity_bytes_s'])}"
                          for k, e in r["edges"].items() if e["bytes_s"] > 0)
        cuts = " -> ".join(", ".join(c["binds"]) for c in r["cuts"]) or ", ".join(r["cut"])
        moves = "; then ".join(c["move"] for c in r["cuts"]) or r["move"]
        rows.append([r["gpus"], r["tier"], r["format"], r["demand_img_s"], _gb(n["read_bytes_s"]), edges,
                     n["cores_per_node"], f"{n['cores_per_gpu']:.1f}", storage, links,
                     r["delivered_img_s_per_gpu"], f"{r['fraction']:.0%}", cuts, moves])
    body = table(["GPUs", "tier", "format", "demand img/s", "read GB/s", "GB/s delivered/capacity at each edge",
                  "cores/node needed", "cores/GPU", "drives needed", "links needed", "img/s per GPU", "of demand",
                  "cuts, in the order they bind", "what moves each"], rows)
    parts = []
    for k, v in doc["best"].items():
        g, t = k.split(":", 1)
        parts.append(f"{g} GPU{'' if g == '1' else 's'} on {t}: {v}")
    best = ", ".join(parts)
    return "\n".join(head) + "\n\n" + body + f"\n\nbest format per row (most img/s, then fewest cores): {best}"


def write(doc: dict, out: str | os.PathLike, *, plot_row: int | None = None) -> list[str]:
    """plan.json, plan.md and plan.png (rates against GPU count, and one row's flow graph
    with its cut drawn) into `out`; returns the paths written."""
    from ._report import write_json

    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [str(write_json(outdir / "plan.json", doc))]
    (outdir / "plan.md").write_text(doc["summary"] + "\n\n" + doc["markdown"] + "\n")
    paths.append(str(outdir / "plan.md"))
    try:
        from .plots import plan_figure
    except ImportError:  # pragma: no cover - matplotlib is in [bench] and [test]
        return paths
    rows = doc["rows"]
    if plot_row is None:  # the largest cluster's first data-bound row, else the largest cluster's first
        last = [r for r in rows if r["gpus"] == doc["gpus"][-1]]
        plot_row = rows.index(next((r for r in last if r["fraction"] < 1), last[0]))
    try:
        paths.append(plan_figure(doc, rows[plot_row], outdir / "plan.png"))
    except ImportError as e:  # no matplotlib
        doc["plots"] = f"no plots: {e}"
    return paths


__all__ = ["plan", "PlanError", "FormatCost", "Consumer", "Tier", "Node", "TIERS", "costs_from_json", "tiers_from_io",
           "parse_cost", "tier", "build_network", "solve", "write", "residency"]
