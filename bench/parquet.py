"""Parquet against tar shards (issue 58): the same samples (the bench's JPEGs of 500x375,
q 90, with labels) read by the ShardReader from tar shards and from Parquet files written
by Hugging Face's `datasets` (Dataset.to_parquet: an Image column of {bytes, path}, a
label column; uncompressed, plain-encoded, its own row groups), one file a shard, both
from the page cache, alternated --rounds times; samples a second and MB a second of image
bytes, and their ratio. Parquet twice: a file's first read (its pages walked, its labels
read by pyarrow) and a later epoch's (the walk kept: gpudecode.io.parquet's layouts).
Target: Parquet at least the tar rate. Then the same with
pyarrow's default writer (snappy, dictionary pages tried, row groups of --rows), a layout
other tools write.

    python bench/parquet.py [--images 4096] [--threads 2] [--rows 100] [--rounds 3] [--pool]

--pool reads the images into the reader's recycled blocks (pool_extensions), as the Loader
reads them, for both formats.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("GPUDECODE_BENCH_OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_out"))


def make_parquet(shards: list[str], out: Path, rows: int | None) -> list[str]:
    """One Parquet file a shard: written by `datasets` (rows None), or by pyarrow's
    defaults with row groups of `rows`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpudecode.io.reader import ShardReader

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, url in enumerate(shards):
        path = out / f"train-{i:05d}-of-{len(shards):05d}.parquet"
        paths.append(str(path))
        if path.exists():
            continue
        images, labels = [], []
        for s in ShardReader([url], shuffle=False, num_threads=1):
            images.append({"bytes": bytes(s.fields["jpg"]), "path": f"{s.key}.jpg"})
            labels.append(int(s.fields["cls"]))
        if rows is None:
            import datasets

            features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
            datasets.Dataset.from_dict({"image": images, "label": labels}, features=features).to_parquet(str(path))
        else:
            pq.write_table(pa.table({"image": pa.array(images), "label": pa.array(labels, pa.int64())}), str(path),
                           row_group_size=rows)
    return paths


def read_rate(urls: list[str], threads: int, first: bool = False, pool: bool = False) -> tuple[float, float]:
    from gpudecode.io import parquet
    from gpudecode.io.reader import ShardReader

    if first:
        parquet.forget_layouts()
    t = time.perf_counter()
    n = size = 0
    reader = ShardReader(urls, shuffle=False, num_threads=threads, pool_extensions=("jpg",) if pool else ())
    for s in reader:
        n += 1
        size += sum(len(v) for k, v in s.fields.items() if k != "cls")
    dt = time.perf_counter() - t
    reader.close()
    return n / dt, size / dt / 1e6


def main(argv: list[str] | None = None) -> int:
    from gpudecode._args import COUNT
    from gpudecode.bench.common import machine
    from gpudecode.bench.suite import OUT, save
    from gpudecode.bench.suite.loader import build

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=COUNT, default=4096)
    ap.add_argument("--threads", type=COUNT, default=2)
    ap.add_argument("--rows", type=COUNT, default=100, help="rows a row group (datasets writes about 100 images)")
    ap.add_argument("--rounds", type=COUNT, default=3)
    ap.add_argument("--pool", action="store_true", help="read images into recycled blocks, as the Loader does")
    a = ap.parse_args(argv)
    shards = build(a.images)[0]
    report: dict = {"machine": machine(), "images": a.images, "threads": a.threads, "pool": a.pool}
    print(f"{machine().get('cpu')}; {a.images} JPEGs, {a.threads} reader threads, median of {a.rounds} alternated "
          f"rounds{', images into pooled blocks (as the Loader reads them)' if a.pool else ''}")
    for layout, rows in (("datasets", None), (f"pyarrow defaults, row groups of {a.rows}", a.rows)):
        parquet = make_parquet(shards, OUT / f"parquet_{a.images}_{'datasets' if rows is None else rows}", rows)
        rates: dict[str, list[tuple[float, float]]] = {"tar": [], "parquet, first read": [], "parquet, later": []}
        read_rate(shards, a.threads)  # the page cache warmed for both
        read_rate(parquet, a.threads)
        for _ in range(a.rounds):
            for name, urls in (("tar", shards), ("parquet, first read", parquet), ("parquet, later", parquet)):
                rates[name].append(read_rate(urls, a.threads, first=name.endswith("first read"), pool=a.pool))
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in rates.items()}
        ratios = {k: med[k][0] / med["tar"][0] for k in med if k != "tar"}
        print(f"Parquet written by {layout}:")
        for k, (sps, mbs) in med.items():
            print(f"  {k:20s} {sps:10,.0f} samples/s  {mbs:8,.0f} MB/s")
        for k, ratio in ratios.items():
            print(f"  {k} / tar: {ratio:.2f} (target >= 1.0: {'met' if ratio >= 1.0 else 'NOT met'})")
        report[layout] = {"rates": rates, "median": med, "ratios": ratios}
    save("parquet", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
