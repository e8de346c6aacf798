"""Storage tiers that one machine can stand in for, for `gpudecode bench io --tiers`:

- object-store: an HTTP server on 127.0.0.1 (started and stopped here) serving the
  data with a bandwidth per connection and a latency before each answer's first byte,
  read through gpudecode's own remote path (ShardReader over http:// URLs, with and
  without `cache_dir`) for shards, and one GET per image for small files;
- nfs: the files on this machine read as an NFS client reads them: every request (an
  open, and every `rsize` read) costs one round trip of `latency`;
- local disk, cold and warm, measured by `storage.run_io` itself.

Each answers: how many images per second, and MB/s, shards against small files, and
JPEG against tensor shards, on that tier. The server's request loops are bounded: a
socket timeout on every connection, a bounded number of requests, and shutdown when
the measurement ends."""
from __future__ import annotations

import concurrent.futures
import http.server
import os
import shutil
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Link:
    """A stand-in network: MB/s per connection and ms before the first byte."""

    mb_s: float = 100.0
    first_byte_ms: float = 20.0

    def __post_init__(self) -> None:
        if self.mb_s <= 0 or self.first_byte_ms < 0:
            raise ValueError("mb_s must be > 0 and first_byte_ms >= 0")


class ThrottledServer:
    """Serves the files under `root` on 127.0.0.1 at `link`'s pace (GET, HEAD, one
    `Range: bytes=N-` or `N-M`), for at most `max_requests` requests; a context manager
    (`url(path)` names a file)."""

    def __init__(self, root: str | os.PathLike, link: Link, *, max_requests: int = 100_000,
                 timeout: float = 30.0) -> None:
        self.root = Path(root).resolve()
        self.link = link
        self.requests = 0
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.settimeout(timeout)  # a client that stops reading cannot hold a thread

            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def _file(self) -> Path | None:
                rel = urllib.parse.unquote(urllib.parse.urlparse(self.path).path).lstrip("/")
                p = (server.root / rel).resolve()
                return p if p.is_file() and server.root in p.parents else None

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _serve(self, *, body: bool) -> None:
                with server._lock:
                    server.requests += 1
                    over = server.requests > max_requests
                if over:
                    self.send_error(503, "request budget spent")
                    return
                time.sleep(server.link.first_byte_ms / 1000.0)
                p = self._file()
                if p is None:
                    self.send_error(404)
                    return
                size = p.stat().st_size
                start, end = 0, size - 1
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    a, _, b = rng[6:].partition("-")
                    start = int(a or 0)
                    end = min(size - 1, int(b)) if b else size - 1
                    if start >= size:
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(end - start + 1))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if not body:
                    return
                pace = server.link.mb_s * 1e6
                t0 = time.perf_counter()
                sent = 0
                with open(p, "rb") as f:
                    f.seek(start)
                    left = end - start + 1
                    while left > 0:
                        chunk = f.read(min(_CHUNK, left))
                        if not chunk:
                            break
                        # a chunk leaves no earlier than the link would have carried it
                        ahead = (sent + len(chunk)) / pace - (time.perf_counter() - t0)
                        if ahead > 0:
                            time.sleep(ahead)
                        try:
                            self.wfile.write(chunk)
                        except OSError:  # the client went away
                            return
                        sent += len(chunk)
                        left -= len(chunk)

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="gpudecode-bench-http", daemon=True)

    def url(self, path: str | os.PathLike) -> str:
        rel = Path(path).resolve().relative_to(self.root)
        port = self._httpd.server_address[1]
        return f"http://127.0.0.1:{port}/{urllib.parse.quote(rel.as_posix())}"

    def __enter__(self) -> "ThrottledServer":
        self._thread.start()
        return self

    def __exit__(self, *a: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)


def _rate(n: int, nbytes: int, dt: float) -> dict:
    dt = max(dt, 1e-9)
    return {"images": n, "bytes": nbytes, "seconds": dt, "img_per_s": n / dt, "mb_per_s": nbytes / dt / 1e6}


def read_shards(urls: Sequence[str], *, threads: int, cache_dir: str | None = None) -> dict:
    """Every sample of `urls` through gpudecode's ShardReader (its remote path for
    http:// URLs): images/s and MB/s of the shards' bytes."""
    from ..io.reader import ShardReader

    reader = ShardReader(list(urls), num_threads=threads, cache_dir=cache_dir)
    n = nbytes = 0
    t = time.perf_counter()
    for s in reader:
        n += 1
        nbytes += sum(len(v) for v in s.fields.values())
    out = _rate(n, nbytes, time.perf_counter() - t)
    reader.close()
    return out


def get_files(urls: Sequence[str], *, threads: int, timeout: float = 30.0) -> dict:
    """One GET per file, `threads` at a time (as a loader of small objects would)."""
    def get(u: str) -> int:
        with urllib.request.urlopen(u, timeout=timeout) as r:  # noqa: S310 - 127.0.0.1, our own server
            return len(r.read())

    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        sizes = list(ex.map(get, urls))
    return _rate(len(sizes), sum(sizes), time.perf_counter() - t)


def nfs_read(paths: Sequence[Path], *, threads: int, latency_ms: float, rsize: int = 1 << 20,
             per_file: bool) -> dict:
    """Reads `paths` as an NFS client does: an open costs a round trip (LOOKUP/OPEN), every
    `rsize` read another (READ); `threads` files at a time. per_file: each path is one
    image (small files); else shards, whose images the caller counts."""
    lat = latency_ms / 1000.0

    def one(p: Path) -> int:
        time.sleep(lat)  # open
        total = 0
        with open(p, "rb", buffering=0) as f:
            while True:
                time.sleep(lat)  # one READ rpc
                b = f.read(rsize)
                if not b:
                    break
                total += len(b)
        return total

    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        sizes = list(ex.map(one, paths))
    return _rate(len(paths) if per_file else 0, sum(sizes), time.perf_counter() - t)


def run_tiers(groups: dict[str, dict[str, list[Path]]], root: Path, *, threads: int = 8, link: Link = Link(),
              nfs_latency_ms: float = 1.0, max_files: int = 512, samples: dict[str, int] | None = None) -> list[dict]:
    """For each format group ({"shards": [...], "files": [...]}) on the object-store stand-in
    (with and without cache_dir) and the NFS stand-in: one row per measurement."""
    rows: list[dict] = []
    with ThrottledServer(root, link) as srv:
        for fmt, g in groups.items():
            if g["shards"]:
                urls = [srv.url(p) for p in g["shards"]]
                conns = min(threads, len(urls))  # the reader opens one connection per shard at a time
                r = read_shards(urls, threads=threads)
                rows.append({"tier": "object-store", "format": fmt, "access": "shards", "cache": "none",
                             "connections": conns, **r})
                cache = tempfile.mkdtemp(prefix="gpudecode-bench-cache-")
                try:
                    r = read_shards(urls, threads=threads, cache_dir=cache)
                    rows.append({"tier": "object-store", "format": fmt, "access": "shards",
                                 "cache": "cache_dir, first epoch (filling)", "connections": conns, **r})
                    r = read_shards(urls, threads=threads, cache_dir=cache)
                    rows.append({"tier": "object-store", "format": fmt, "access": "shards",
                                 "cache": "cache_dir, next epochs (node-local copy)", "connections": conns, **r})
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
            if g["files"]:
                files = g["files"][:max_files]
                r = get_files([srv.url(p) for p in files], threads=threads)
                rows.append({"tier": "object-store", "format": fmt, "access": "small files", "cache": "none",
                             "connections": min(threads, len(files)), **r})
    for fmt, g in groups.items():
        if g["shards"]:
            r = nfs_read(g["shards"], threads=min(threads, len(g["shards"])), latency_ms=nfs_latency_ms,
                         per_file=False)
            n = (samples or {}).get(fmt, 0)
            r.update(_rate(n, r["bytes"], r["seconds"]))
            rows.append({"tier": "nfs", "format": fmt, "access": "shards", "cache": "none", **r})
        if g["files"]:
            r = nfs_read(g["files"][:max_files], threads=threads, latency_ms=nfs_latency_ms, per_file=True)
            rows.append({"tier": "nfs", "format": fmt, "access": "small files", "cache": "none", **r})
    return rows
