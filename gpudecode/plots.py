"""The figures gpudecode draws, as PNG files: `gpudecode bench`'s, ProfileReport.plot's
and `gpudecode plan`'s (matplotlib's object API with the Agg canvas: no pyplot, no global
backend change). A library module: the benchmarks, the profiler and the planner use it."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

WAIT, STEP, WEAK, OK = "#d9534f", "#4a7ebb", "#d9534f", "#7aa974"
_STAGES = ("read", "probe", "decode", "h2d", "augment")
_COLORS = {"read": "#8c6bb1", "probe": "#f0ad4e", "decode": "#d9534f", "h2d": "#5bc0de", "augment": "#4a7ebb"}


def _figure(w: float, h: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: str | Path, *, bottom: float = 0.0) -> str:
    fig.tight_layout(rect=(0, bottom, 1, 1))  # bottom: room kept for notes below the axes
    fig.savefig(str(path))
    return str(path)


def formats_figure(doc: dict, path: str | Path) -> str:
    """Images/s per format (groups) and pipeline (bars), min-max as error bars."""
    results = doc["img_per_s"]
    fmts = list(results)
    names: list[str] = []
    for rows in results.values():
        names += [n for n in rows if n not in names]
    fig = _figure(max(6, 1.8 * len(fmts) * max(1, len(names)) / 2), 4.2)
    ax = fig.add_subplot(111)
    width = 0.8 / max(1, len(names))
    cmap = ["#4a7ebb", "#d9534f", "#7aa974", "#f0ad4e", "#8c6bb1", "#999999"]
    peak = 1.0
    for j, name in enumerate(names):
        xs, ys, lo, hi = [], [], [], []
        for i, f in enumerate(fmts):
            r = results[f].get(name)
            if r is None:
                continue
            xs.append(i + (j - (len(names) - 1) / 2) * width)
            ys.append(r["median"])
            lo.append(r["median"] - r["min"])
            hi.append(r["max"] - r["median"])
        if not xs:
            continue
        label = next(results[f][name]["label"] for f in fmts if name in results[f])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=label, color=cmap[j % len(cmap)])
        for x, y, h in zip(xs, ys, hi):
            top = max(y + h, y) * 1.12  # above the error bar (log axis: a factor)
            ax.text(x, top, f"{y:,.0f}", ha="center", va="bottom", fontsize=7)
            peak = max(peak, top)
    ax.set_xticks(range(len(fmts)), fmts)
    ax.set_yscale("log")
    ax.set_ylim(top=peak * 2.5)
    ax.set_ylabel("images/s (log)")
    d = doc["dataset"]
    ax.set_title(f"{d['size'][1]}x{d['size'][0]} images, {doc['args']['threads']} threads/workers: training "
                 "transforms, img/s", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    # what the bars cannot say: why one is missing, and what the in-memory row is
    notes = [f"no bar: {f} {name}: {why}" for f, rows in (doc.get("skipped") or {}).items()
             for name, why in rows.items()]
    if any("synthetic" in rows for rows in results.values()):
        notes.append("synthetic (in memory): gpudecode's kernel on pixels already in memory, no reading or "
                     "decoding: the ceiling of the augment stage, not a pipeline")
    bottom = 0.0
    if notes:
        fig.set_figheight(fig.get_figheight() + 0.16 * len(notes))
        bottom = 0.16 * len(notes) / fig.get_figheight() + 0.02
        fig.text(0.01, 0.01, "\n".join(notes), fontsize=6, va="bottom", ha="left")
    return _save(fig, path, bottom=bottom)


def stages_figure(doc: dict, path: str | Path) -> str:
    """gpudecode's median time per batch in each stage, per format (stacked)."""
    stats = doc.get("gpudecode_stages") or {}
    fig = _figure(6, 3.6)
    ax = fig.add_subplot(111)
    fmts = list(stats)
    for i, f in enumerate(fmts):
        med = stats[f].get("median_s", {})
        bottom = 0.0
        for s in _STAGES:
            if s in med:
                v = med[s] * 1e3
                ax.bar(i, v, 0.6, bottom=bottom, color=_COLORS[s], label=s if i == 0 else None)
                bottom += v
        ax.text(i, bottom, f"slowest: {stats[f].get('slowest_stage')}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(fmts)), fmts)
    ax.set_ylabel("ms per batch (median)")
    ax.set_title("gpudecode: where a batch's time goes\n(read, probe and decode on one thread, augment on another)",
                 fontsize=8)
    if fmts:
        ax.legend(fontsize=7)
    return _save(fig, path)


def _capacities(stats: dict, batch: int) -> dict[str, float]:
    if stats.get("stage_capacity_img_s"):  # images over each stage's time in all (LoaderStats.summary)
        return {s: v for s, v in stats["stage_capacity_img_s"].items() if s in _STAGES}
    med = stats.get("median_s", {})  # results of an earlier version: medians only
    return {s: batch / med[s] for s in _STAGES if med.get(s, 0) > 0}


def _integer_ticks(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def datapath_figure(doc: dict, path: str | Path) -> str:
    """Per format: each gpudecode stage's capacity (img/s it could sustain alone), what
    gpudecode and the classic pipeline delivered; the weakest stage marked."""
    stats = doc.get("gpudecode_stages") or {}
    fmts = list(doc["img_per_s"])
    fig = _figure(7, 1.0 + 2.0 * max(1, len(fmts)))
    for k, f in enumerate(fmts):
        ax = fig.add_subplot(len(fmts), 1, k + 1)
        caps = _capacities(stats.get(f, {}), doc["args"]["batch"])
        weakest = min(caps, key=lambda s: caps[s]) if caps else None
        labels, values, colors = [], [], []
        for s, v in caps.items():
            labels.append(f"stage: {s}")
            values.append(v)
            colors.append(WEAK if s == weakest else OK)
        for name, r in doc["img_per_s"][f].items():
            labels.append(f"delivered: {r['label']}")
            values.append(r["median"])
            colors.append(STEP if name == "gpudecode" else "#bbbbbb")
        ax.barh(range(len(values)), values, color=colors)
        ax.set_yticks(range(len(values)), labels, fontsize=7)
        ax.set_xscale("log")
        ax.invert_yaxis()
        for i, v in enumerate(values):
            ax.text(v, i, f" {v:,.0f}", va="center", fontsize=7)
        ax.set_title(f"{f}: the datapath (img/s; red: the weakest link, which sets the pace)", fontsize=8)
    return _save(fig, path)


def train_figure(doc: dict, path: str | Path) -> str:
    """Per run: each batch's wait (red) and step (blue), stacked; stalls show as tall red."""
    runs = doc["runs"]
    fig = _figure(8, 1.2 + 1.9 * len(runs))
    first = None
    for k, (label, r) in enumerate(runs.items()):
        ax = fig.add_subplot(len(runs), 1, k + 1, sharey=first)  # one scale: the runs compare at a glance
        first = first or ax
        idx = range(len(r["wait"]))
        ax.bar(idx, [w * 1e3 for w in r["wait"]], color=WAIT, width=1.0, label="waiting for the batch")
        ax.bar(idx, [s * 1e3 for s in r["step"]], bottom=[w * 1e3 for w in r["wait"]], color=STEP, width=1.0,
               label="step")
        per = f", stalls every {r['period']}" if r["period"] else ""
        ax.set_title(f"{label}: {r['images_per_s']:,.0f} img/s, waiting {r['wait_fraction']:.0%}{per}", fontsize=8)
        ax.set_ylabel("ms", fontsize=7)
        if k == 0:
            ax.legend(fontsize=7, loc="upper right")
    fig.axes[-1].set_xlabel("batch")
    _integer_ticks(fig.axes[-1])
    return _save(fig, path)


def io_figure(doc: dict, path: str | Path) -> str:
    """Images/s of each tier, format and access (shards: blue; small files: red), log scale."""
    rows = [r for r in doc["rows"] if r["images"]]
    fig = _figure(8, 1.2 + 0.28 * max(1, len(rows)))
    ax = fig.add_subplot(111)
    labels = [f"{r['tier']}, {r['format']}, {r['access']}" + ("" if r["cache"] == "none" else f", {r['cache']}")
              for r in rows]
    vals = [r["img_per_s"] for r in rows]
    ax.barh(range(len(vals)), vals, color=[STEP if r["access"] == "shards" else WAIT for r in rows])
    ax.set_yticks(range(len(vals)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    for i, r in enumerate(rows):
        ax.text(vals[i], i, f" {vals[i]:,.0f} img/s, {r['mb_per_s']:,.0f} MB/s", va="center", fontsize=6.5)
    ax.set_xlim(min(vals, default=1) / 2, max(vals, default=1) * 20)  # room for the labels
    ax.set_xlabel("images/s (log)")
    ax.set_title(f"reading {doc['path']}: shards (blue) against small files (red), per storage tier", fontsize=8)
    return _save(fig, path)


def profile_figure(report: Any, path: str | Path, *, max_batches: int = 80) -> str:
    """The life of each batch on a time line (waiting for it, then the step), the
    per-batch times with stalls marked, and a gpudecode Loader's stage capacities."""
    n = min(report.batches, max_batches)
    panels = 3 if report.stage_capacity else 2
    fig = _figure(8, 2.6 * panels)
    ax = fig.add_subplot(panels, 1, 1)
    for i, (t0, t1, t2) in enumerate(report.timeline[:n]):
        ax.barh(i, t1 - t0, left=t0, color=WAIT, height=0.8, label="waiting" if i == 0 else None)
        ax.barh(i, t2 - t1, left=t1, color=STEP, height=0.8, label="step" if i == 0 else None)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_ylabel("batch")
    ax.set_title(f"{report.loader}: the life of a batch ({report.bound}-bound, waiting {report.wait_fraction:.0%})",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    ax2 = fig.add_subplot(panels, 1, 2)
    ax2.plot([w * 1e3 for w in report.wait], color=WAIT, lw=1, label="wait")
    ax2.plot([s * 1e3 for s in report.step], color=STEP, lw=1, label="step")
    if report.stalls:
        ax2.scatter(report.stalls, [report.wait[i] * 1e3 for i in report.stalls], color=WAIT, s=12, zorder=3,
                    label=f"stalls{f' (every {report.period})' if report.period else ''}")
    ax2.axhline(report.stall_threshold * 1e3, color="#999999", lw=0.8, ls="--",
                label=f"stall threshold ({report.stall_threshold * 1e3:.0f} ms)")
    ax2.set_xlabel("batch")
    _integer_ticks(ax2)
    ax2.set_ylabel("ms")
    ax2.legend(fontsize=7, loc="upper right")
    if report.stage_capacity:
        ax3 = fig.add_subplot(panels, 1, 3)
        caps = report.stage_capacity
        names = list(caps)
        ax3.barh(range(len(names)), [caps[k] for k in names],
                 color=[WEAK if k == report.weakest else OK for k in names])
        need = statistics.median(report.sizes) / statistics.median(report.step) if statistics.median(report.step) > 0 \
            else None
        if need:
            ax3.axvline(need, color=STEP, ls="--", lw=1, label=f"the step consumes {need:,.0f} img/s")
            ax3.legend(fontsize=7)
        ax3.set_yticks(range(len(names)), names, fontsize=8)
        ax3.invert_yaxis()
        ax3.set_xscale("log")
        ax3.set_xlabel("img/s each stage sustains (red: the weakest link)")
    return _save(fig, path)


_CHAIN = ("devices", "server", "link", "streams", "local", "cpu", "pcie", "gpu-decode", "step")
_HOPS = {"devices": "storage", "server": "fabric", "link": "node NICs", "streams": "node", "local": "node",
         "cpu": "host pipeline", "pcie": "GPU memory", "gpu-decode": "GPUs", "step": "trained"}


def _short(x: float) -> str:
    """A number in at most about 6 characters: 950, 12.3k, 4.56M."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            v = x / div
            return f"{v:.3g}{unit}" if v < 1000 else f"{v:,.0f}{unit}"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def _wrap_name(name: str, width: int = 16) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(name, width)) or name


def plan_figure(doc: dict, row: dict, path: str | Path) -> str:
    """`gpudecode plan`: img/s per GPU against the GPU count for every tier and format
    (the step's demand dashed), and one row's flow network, each edge's flow against its
    capacity, the minimum cut in red."""
    fig = _figure(10, 7.5)
    tiers = list(doc["tiers"])
    fmts = list(doc["formats"])
    grid = fig.add_gridspec(2, len(tiers), height_ratios=[1.0, 1.1])
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v", "P"]
    cmap = ["#4a7ebb", "#d9534f", "#7aa974", "#f0ad4e", "#8c6bb1", "#999999"]
    need = doc["consumer"]["img_s_per_gpu"]
    # one panel per storage tier (lines of different tiers that all meet the demand would lie
    # on top of each other in one panel); within a panel, one line per format
    for i, t in enumerate(tiers):
        ax = fig.add_subplot(grid[0, i])
        for j, f in enumerate(fmts):
            rs = [r for r in doc["rows"] if r["tier"] == t and r["format"] == f]
            ax.plot([r["gpus"] for r in rs], [r["fraction"] * 100 for r in rs], marker=markers[j % len(markers)],
                    ms=5 - 1.5 * j / max(1, len(fmts)), lw=2.0 - 1.0 * j / max(1, len(fmts)),
                    ls=styles[j % len(styles)], color=cmap[j % len(cmap)], label=f, alpha=0.9)
        ax.axhline(100, color="#333333", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks(doc["gpus"], [str(g) for g in doc["gpus"]], fontsize=6)
        ax.tick_params(axis="y", labelsize=6)
        ax.set_ylim(0, 110)
        ax.set_title(t, fontsize=8)
        ax.set_xlabel("GPUs", fontsize=7)
        if i == 0:
            ax.set_ylabel(f"% of the demand fed\n(100% = {need:,.0f} img/s per GPU)", fontsize=7)
            ax.legend(fontsize=6, loc="lower left")
    fig.suptitle("what each storage tier feeds the GPUs, per format (below 100%: data-bound)", fontsize=9)
    ax2 = fig.add_subplot(grid[1, :])
    edges = row["edges"]
    chain = [k for k in _CHAIN if k in edges]
    xs = list(range(len(chain) + 1))
    ax2.set_xlim(-0.6, len(chain) + 0.6)
    ax2.set_ylim(-1.6 if "cache" in edges else -0.7, 0.9)
    ax2.axis("off")
    hops = ["data"] + [_HOPS[k] for k in chain]
    for x, name in zip(xs, hops):
        ax2.scatter([x], [0], s=260, color="#dddddd", edgecolor="#555555", zorder=3)
        ax2.text(x, -0.28, name, ha="center", va="top", fontsize=7)
    for k, x in zip(chain, xs):
        e = edges[k]
        color = WEAK if e["cut"] else OK
        ax2.annotate("", xy=(x + 0.85, 0), xytext=(x + 0.15, 0),
                     arrowprops={"arrowstyle": "-|>", "color": color, "lw": 2.5 if e["cut"] else 1.5})
        cap = e["capacity_img_s"]
        cap_s = "no limit" if cap == float("inf") else _short(cap)
        gbs = f"\n{_short(e['bytes_s'] / 1e9)} GB/s" if e["bytes_s"] else ""
        ax2.text(x + 0.5, 0.12, f"{_wrap_name(e['name'])}\n{_short(e['flow_img_s'])} / {cap_s} img/s{gbs}",
                 ha="center", va="bottom", fontsize=6, color=color, clip_on=True)
        if e["cut"]:
            ax2.plot([x + 0.5, x + 0.5], [-0.15, 0.1], color=WEAK, lw=1, ls="--")
    if "cache" in edges:  # the node-local cache: a second path from the data into the node
        e = edges["cache"]
        size = edges.get("cache-size", {})
        red = e["cut"] or size.get("cut", False)
        node_x = chain.index("streams") + 1 if "streams" in chain else 1
        ax2.annotate("", xy=(node_x, -0.1), xytext=(0, -0.1),
                     arrowprops={"arrowstyle": "-|>", "color": WEAK if red else OK, "lw": 2.5 if red else 1.5,
                                 "connectionstyle": "arc3,rad=0.35"})
        ax2.text(node_x / 2, -1.05, f"node-local cache: {e['flow_img_s']:,.0f} img/s (bandwidth "
                 f"{e['capacity_img_s']:,.0f}; the part of the data it holds: {size.get('capacity_img_s', 0):,.0f} "
                 "at the step's demand)", ha="center", fontsize=6.5, color=WEAK if red else "#333333")
    state = (f"{row['fraction']:.0%} of the demand" if row["fraction"] < 1
             else f"demand met, {row['headroom']:.1f}x headroom")
    ax2.set_title(f"{row['gpus']} GPUs ({row['nodes']} nodes), {row['tier']}, {row['format']}: {state}\n"
                  f"flow / capacity in img/s, all nodes together; red: the minimum cut ({', '.join(row['cut'])})",
                  fontsize=8)
    return _save(fig, path)
