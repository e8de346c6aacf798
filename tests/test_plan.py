"""`gpudecode plan`: the max-flow plan against small cases computed by hand, the cut's
capacity against the flow (max-flow min-cut duality), splits over a node-local cache,
the command line end to end on this machine's measured bench JSON."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpudecode.cli import main
from gpudecode.errors import GpuDecodeError, PlanError
from gpudecode.planning import (TIERS, Consumer, FormatCost, Node, Tier, build_network, costs_from_json,
                                parse_cost, plan, solve, tier)

FORMATS_JSON = Path(__file__).resolve().parents[1] / "bench" / "results" / "formats" / "formats.json"

# 100 kB images, 1 core-ms each; GPUs eating 1,000 img/s each
JPG = FormatCost("jpg", 100_000, 0.001)
EAT = Consumer(1000.0)
BIG = Node(gpus=8, cores=1000, links=1, link_gbit=1000.0, pcie_gb_s=1000.0)


def _one(cost, t, gpus, node=BIG, consumer=EAT, dataset_images=10_000):
    doc = plan([cost], gpus=[gpus], consumer=consumer, tiers=[t], node=node, dataset_images=dataset_images)
    assert len(doc["rows"]) == 1
    return doc["rows"][0]


def test_local_disks_are_the_cut():
    # 1 drive of 100 MB/s = 1,000 img/s of 100 kB; 2 GPUs want 2,000: half the demand, per GPU 500
    disks = Tier("d", "local", device_mb_s=100, devices=1)
    r = _one(JPG, disks, 2)
    assert r["fraction"] == pytest.approx(0.5, rel=1e-5)
    assert r["delivered_img_s_per_gpu"] == pytest.approx(500, rel=1e-5)
    assert r["cut"] == ["node-local disks"]
    assert r["needed"]["devices_per_node"] == 2 and r["needed"]["cores_per_node"] == 2
    assert r["edges"]["local"]["flow_img_s"] == pytest.approx(1000, rel=1e-5)
    assert r["edges"]["local"]["bytes_s"] == pytest.approx(100e6, rel=1e-5)
    assert "2 drives per node (has 1)" in r["move"]


def test_cpu_cores_are_the_cut():
    # 1 core at 1 ms an image = 1,000 img/s for 2 GPUs wanting 2,000
    r = _one(JPG, Tier("d", "local", device_mb_s=1e6, devices=1), 2, node=BIG.with_(cores=1))
    assert r["fraction"] == pytest.approx(0.5, rel=1e-5) and r["cut"] == ["CPU cores"]
    assert "2 cores per node (has 1)" in r["move"] and "decode on the GPU" in r["move"]


def test_shared_server_link_over_two_nodes():
    # 16 GPUs on 2 nodes want 16,000 img/s = 1.6 GB/s; the server's 8 Gbit/s = 1 GB/s = 10,000 img/s
    nas = Tier("n", "shared", device_mb_s=1e6, devices=1, server_gbit=8.0)
    r = _one(JPG, nas, 16)
    assert r["nodes"] == 2
    assert r["fraction"] == pytest.approx(10_000 / 16_000, rel=1e-5)
    assert r["cut"] == ["the storage system's network"]
    assert r["needed"]["server_gbit"] == pytest.approx(12.8)
    assert r["edges"]["server"]["bytes_s"] == pytest.approx(1e9, rel=1e-5)


def test_uneven_nodes_run_at_the_slowest_pace():
    # 12 GPUs: nodes of 8 and 4; each node's drive gives 5,000 img/s. The full node can feed
    # 5,000 / 8,000 of its demand; data-parallel training holds every GPU to that pace
    disks = Tier("d", "local", device_mb_s=500, devices=1)
    r = _one(JPG, disks, 12)
    assert r["nodes"] == 2
    assert r["delivered_img_s_per_gpu"] == pytest.approx(625, rel=1e-5)
    assert r["edges"]["step"]["flow_img_s"] == pytest.approx(12 * 625, rel=1e-5)
    assert r["needed"]["devices_per_node"] == 2  # the fullest node's 8,000 img/s


def test_node_local_cache_splits_the_reads():
    # the node link carries 500 img/s (400 Mbit/s of 100 kB images). The cache holds 60% of the
    # data (6 GB of 10 GB): it may serve 60% of the reads, the link the other 40%:
    # 0.4 x 2,000 x s <= 500 -> s = 0.625, and the cache serves 0.6 x 1,250 = 750 img/s
    nas = Tier("n", "shared", device_mb_s=1e6, devices=None)
    node = BIG.with_(link_gbit=0.4, cache_gb=6.0)
    r = _one(JPG, nas, 2, node=node, dataset_images=100_000)
    assert r["fraction"] == pytest.approx(0.625, rel=1e-5)
    assert r["edges"]["link"]["flow_img_s"] == pytest.approx(500, rel=1e-5)
    assert r["edges"]["cache"]["flow_img_s"] == pytest.approx(750, rel=1e-5)
    assert set(r["cut"]) == {"node network links", "the part of the data the node-local cache holds"}
    # no cache: the link alone, 500 of 2,000
    r0 = _one(JPG, nas, 2, node=BIG.with_(link_gbit=0.4), dataset_images=100_000)
    assert r0["fraction"] == pytest.approx(0.25, rel=1e-5) and r0["cut"] == ["node network links"]
    # a cache holding everything serves everything, up to its own bandwidth (100 MB/s = 1,000 img/s)
    r1 = _one(JPG, nas, 2, node=BIG.with_(link_gbit=0.4, cache_gb=50, cache_mb_s=100), dataset_images=100_000)
    assert r1["fraction"] == pytest.approx(0.5, rel=1e-5)
    assert r1["cut"] == ["node-local cache bandwidth"]
    assert r1["edges"]["link"]["flow_img_s"] == 0  # what the cache holds is never read from the tier again


def test_gpu_path_moves_the_cpu_cost_and_the_pcie_bytes():
    # the GPU decodes 3,000 img/s; the host only reads (0.1 core-ms): 1 core feeds 10,000 img/s
    gpu = FormatCost("jpg", 100_000, 0.001, gpu_img_s=3000, gpu_cpu_core_s=0.0001)
    r = _one(gpu, Tier("d", "local", device_mb_s=1e6, devices=1), 2, node=BIG.with_(cores=1), consumer=Consumer(4000))
    assert r["fraction"] == pytest.approx(0.75, rel=1e-5) and r["cut"] == ["GPU decoders"]
    assert r["edges"]["pcie"]["bytes_s"] == pytest.approx(6000 * 100_000, rel=1e-5)  # encoded bytes cross PCIe
    assert r["needed"]["cores_per_node"] == 1


def test_demand_met_names_the_step_and_the_next_cut():
    r = _one(JPG, Tier("d", "local", device_mb_s=400, devices=1), 2)  # 4,000 img/s of drive for 2,000
    assert r["fraction"] == 1.0 and r["headroom"] == pytest.approx(2.0, rel=1e-5)
    assert r["cut"] == ["the GPUs' step"] and r["next_cut"] == ["node-local disks"]
    assert r["move"].startswith("nothing: the input has 2.0x")


@pytest.mark.parametrize("name", list(TIERS))
def test_min_cut_capacity_equals_the_max_flow(name):
    """Duality on every default tier: the cut found just past the feasible point carries
    (at that point) what the max-flow delivers there; checked with networkx directly."""
    import networkx as nx

    cost = FormatCost("jpg", 110_000, 0.0024)
    node = Node(cache_gb=20.0) if TIERS[name].kind == "shared" else Node()
    net = build_network(cost, TIERS[name], 24, Consumer(3000), node, dataset_gb=140.0)
    sol = solve(net)
    assert 0 < sol.s <= 1e4
    s = min(1e4, sol.s * (1 + 1e-3))
    g = net.graph(s)
    value = nx.maximum_flow_value(g, "data", "trained")
    cut_cap = sum(g.edges[e.u, e.v].get("capacity", math.inf) for e in sol.cut)
    assert cut_cap == pytest.approx(value, rel=1e-6)


def test_errors_are_plan_errors():
    with pytest.raises(PlanError, match="bytes per image"):
        FormatCost("x", 0, 1)
    with pytest.raises(PlanError, match="unknown storage tier 'tape'"):
        tier("tape")
    with pytest.raises(PlanError, match="no field 'drives'"):
        tier("nfs-hdd:drives=3")
    with pytest.raises(PlanError, match="NAME:KB_PER_IMAGE"):
        parse_cost("jpg:110")
    with pytest.raises(PlanError, match=">= 1"):
        plan([JPG], gpus=[0], consumer=EAT)
    assert issubclass(PlanError, GpuDecodeError) and issubclass(PlanError, ValueError)
    assert tier("nfs-hdd:devices=48,derate=0.7").devices == 48
    assert parse_cost("jpg:110:2.4:4000") == FormatCost("jpg", 110_000, 0.0024, gpu_img_s=4000)


@pytest.mark.parametrize("make,match", [
    (lambda: Node().with_(gpus=float("nan")), "not a finite number"),
    (lambda: Node().with_(gpus=2.5), "whole number"),
    (lambda: Node().with_(cores=None), "cannot be none"),
    (lambda: tier("nfs-hdd:devices=inf"), "not a finite number"),
    (lambda: tier("nfs-hdd:devices=1.5"), "whole number"),
    (lambda: tier("nfs-hdd:server_gbit=nan"), "not a finite number"),
    (lambda: plan([JPG], gpus=[1.5], consumer=EAT), "whole numbers"),
    (lambda: plan([JPG], gpus=[10**9], consumer=EAT), "not planned"),
    (lambda: plan([JPG], gpus=[8], consumer=EAT, dataset_images=0), "dataset_images"),
])
def test_counts_that_are_not_counts_are_plan_errors(make, match):
    """NaN, infinity and fractions where a count goes, and a GPU count whose flow network
    would not fit (issue 35): a PlanError naming the field, never a TypeError or a
    MemoryError after a minute."""
    with pytest.raises(PlanError, match=match):
        make()


def test_a_malformed_bench_json_is_a_plan_error(tmp_path):
    for text in ('[1]', '{"command": "formats", "img_per_s": {"jpg": {"gpudecode": {}}}}',
                 '{"command": "formats", "args": {"threads": 2}, "img_per_s": {"jpg": {"gpudecode": {"median": 0}}},'
                 ' "dataset": {"bytes_per_image": {"jpg": 100}}}',
                 '{"command": "formats", "img_per_s": {"jpg": [1]}}'):
        f = tmp_path / "f.json"
        f.write_text(text)
        with pytest.raises(PlanError, match="f.json"):
            costs_from_json(f)


def test_costs_from_a_formats_json(tmp_path):
    doc = json.loads(FORMATS_JSON.read_text())
    costs = {c.name: c for c in costs_from_json(FORMATS_JSON)}
    threads = doc["args"]["threads"]
    for fmt, c in costs.items():
        assert c.bytes_per_image == doc["dataset"]["bytes_per_image"][fmt]
        assert c.cpu_core_s == pytest.approx(threads / doc["img_per_s"][fmt]["gpudecode"]["median"])
        assert c.gpu_img_s is None  # measured on a CPU: no GPU figure is made up
    classic = {c.name: c for c in costs_from_json(FORMATS_JSON, pipeline="classic")}
    assert classic["jpg"].cpu_core_s > costs["jpg"].cpu_core_s
    (tmp_path / "x.json").write_text(json.dumps({"command": "io"}))
    with pytest.raises(PlanError, match="not a `gpudecode bench formats` result"):
        costs_from_json(tmp_path / "x.json")


def test_cli_the_issue_command(tmp_path, capsys):
    """The command of the issue, on this machine's measured JSON: the table printed, JSON,
    markdown and the plot written; a row checked by hand."""
    out = tmp_path / "plan"
    rc = main(["plan", "--from", str(FORMATS_JSON), "--gpus", "1,4,8,16,64,256", "--step-ms", "120", "--batch",
               "256", "--storage", "nfs-hdd,object-store,local-nvme", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    # the short view: per GPU count and tier, the best format and every cut in order, on 100 columns
    assert "256 GPUs (32 nodes)" in text and "| GPUs |" not in text
    assert max(len(line) for line in text.splitlines() if not line.startswith("written:")) <= 100
    assert "1. storage devices bind at" in text and "2. the storage system's network bind at" in text
    assert "then the GPUs' step binds" in text
    # what the costs rest on, and the advice to measure on the target node
    src = json.loads(FORMATS_JSON.read_text())
    flat = " ".join(text.split())
    assert f"of {src['machine']['cpu']}" in flat and "Measure on the target node" in flat
    doc = json.loads((out / "plan.json").read_text())
    assert (out / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(doc["rows"]) == 6 * 3 * 3
    src = json.loads(FORMATS_JSON.read_text())
    jpg_core_s = src["args"]["threads"] / src["img_per_s"]["jpg"]["gpudecode"]["median"]
    per_gpu = 256 / 0.120
    # 8 GPUs of one DGX-class node on local NVMe, JPEG: cores by hand
    r = next(r for r in doc["rows"] if r["gpus"] == 8 and r["tier"] == "local-nvme" and r["format"] == "jpg")
    assert r["demand_img_s"] == pytest.approx(8 * per_gpu)
    assert r["needed"]["cores_per_node"] == math.ceil(8 * per_gpu * jpg_core_s)
    assert r["needed"]["cores_per_gpu"] == pytest.approx(per_gpu * jpg_core_s)
    # 256 GPUs on one NFS server of 24 HDDs at half of 200 MB/s: 2.4 GB/s in all
    bpi = src["dataset"]["bytes_per_image"]["tensor"]
    r = next(r for r in doc["rows"] if r["gpus"] == 256 and r["tier"] == "nfs-hdd" and r["format"] == "tensor")
    assert r["delivered_img_s_per_gpu"] == pytest.approx(24 * 100e6 / bpi / 256, rel=1e-4)
    assert r["cut"] == ["storage devices"]
    assert r["needed"]["devices"] == math.ceil(256 * per_gpu * bpi / 100e6)
    # the cuts in the order they bind: the drives, then the server's 2 x 25 GbE, then the GPUs
    assert [c["binds"] for c in r["cuts"]] == [["storage devices"], ["the storage system's network"]]
    assert r["cuts"][0]["fraction"] == pytest.approx(r["fraction"])
    assert r["cuts"][1]["fraction"] == pytest.approx(2 * 25e9 / 8 / (256 * per_gpu * bpi), rel=1e-4)
    # delivered, not capacity: an edge with room to spare carries the demand, no more
    r = next(r for r in doc["rows"] if r["gpus"] == 8 and r["tier"] == "local-nvme" and r["format"] == "jpg")
    e = r["edges"]["local"]
    assert e["bytes_s"] == pytest.approx(8 * per_gpu * src["dataset"]["bytes_per_image"]["jpg"], rel=1e-6)
    assert e["capacity_bytes_s"] > e["bytes_s"]
    # --all: every row, edge by edge
    main(["plan", "--from", str(FORMATS_JSON), "--gpus", "8", "--step-ms", "120", "--all", "--out", ""])
    text = capsys.readouterr().out
    assert "| GPUs | tier | format |" in text and "GB/s delivered/capacity at each edge" in text


def test_cli_errors_are_one_line(capsys):
    assert main(["plan", "--rate", "100", "--out", ""]) == 1
    assert "no per-image costs" in capsys.readouterr().err
    assert main(["plan", "--cost", "jpg:110:2.4", "--out", "", "--step-ms", "100", "--rate", "5"]) == 1
    assert "--step-ms" in capsys.readouterr().err
    assert main(["plan", "--cost", "jpg:110:2.4", "--rate", "2000", "--node", "cores=64", "--out", ""]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "changed: cores=64" in text and "1 GPU (1 node)" in text


@pytest.mark.parametrize("images, node, tier, how", [
    (50_000, Node(), "gpu", "keep='gpu'"),                         # 7.5 GB decoded
    (1_281_167, Node(), "ram", "keep='ram', keep_size=128"),       # 193 GB decoded, 48 GB at a shorter side of 128
    (400_000, Node(), "ram", "keep='ram' ("),                      # 60 GB decoded
    (10_000_000, Node(ram_gb=4096), "page cache", "page cache"),   # 377 GB at 128; the JPEGs' 1.1 TB fit in RAM
    (50_000_000, Node(), "network", "streamed"),                   # LAION-sized
    (50_000_000, Node(cache_gb=30_000), "local disk", "cache_dir="),
])
def test_plan_says_where_the_set_lives(images, node, tier, how):
    """The talks' table: decoded under 8 GB on the GPU, under 128 GB in RAM (within half of
    each), then the stored bytes in the page cache, a node-local disk, the network."""
    from gpudecode.planning import residency

    costs = [FormatCost("jpg", bytes_per_image=110_000, cpu_core_s=0.004),
             FormatCost("tensor", bytes_per_image=150_528, cpu_core_s=0.0004)]
    r = residency(costs, images, node)
    assert r["tier"] == tier and how in r["how"], r
    assert r["decoded_gb"] == pytest.approx(images * 150_528 / 1e9)
    doc = plan(costs, gpus=[8], consumer=Consumer(img_s_per_gpu=3000), tiers=["local-nvme"], node=node,
               dataset_images=images)
    assert "Where the set lives" in doc["summary"] and doc["residency"]["tier"] == tier
