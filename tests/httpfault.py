"""A loopback HTTP server for tests, serving bytes from a dict, with faults on demand.

    srv = FaultServer(); srv.files["/a.tar"] = data
    srv.faults["/a.tar"] = [Fault("drop", after=1000)]   # applied to successive requests
    url = srv.url("/a.tar"); ...; srv.close()

Faults (each consumed by one request; a path with no faults left is served normally):
    stall  after N body bytes, stop sending (until the server closes)
    drop   after N body bytes, close the connection
    status answer with that HTTP status and no body
    short  announce the full Content-Length, send N bytes, close
Range requests ("bytes=N-" or "bytes=N-M") are answered with 206 unless `no_range` is set.
`etags[path]` and `modified[path]`, where set, are sent as ETag and Last-Modified.
Every request is recorded in `requests` as (path, Range header or None).
"""
from __future__ import annotations

import http.server
import threading
from dataclasses import dataclass


@dataclass
class Fault:
    kind: str  # "stall" | "drop" | "status" | "short" | "trickle" (`after` bytes every 50 ms)
    after: int = 0
    status: int = 500


class FaultServer:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.faults: dict[str, list[Fault]] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.no_range = False
        self.etags: dict[str, str] = {}
        self.modified: dict[str, str] = {}
        self._closing = threading.Event()
        self.stalling = threading.Event()  # a stall fault has begun
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                rng = self.headers.get("Range")
                with server._lock:
                    server.requests.append((path, rng))
                    queue = server.faults.get(path) or []
                    fault = queue.pop(0) if queue else None
                data = server.files.get(path)
                if fault is not None and fault.kind == "status":
                    self.send_response(fault.status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start, end = 0, len(data)
                if rng and rng.startswith("bytes=") and not server.no_range:
                    first, last = rng[6:].split("-")
                    start = int(first)
                    end = min(end, int(last) + 1) if last else end
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                else:
                    self.send_response(200)
                    self.send_header("Accept-Ranges", "none" if server.no_range else "bytes")
                if path in server.etags:
                    self.send_header("ETag", server.etags[path])
                if path in server.modified:
                    self.send_header("Last-Modified", server.modified[path])
                body = data[start:end]
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    if fault is None:
                        self.wfile.write(body)
                    elif fault.kind == "stall":
                        self.wfile.write(body[:fault.after])
                        self.wfile.flush()
                        server.stalling.set()  # tests wait on this, not on a sleep
                        server._closing.wait(60)
                    elif fault.kind == "trickle":  # never silent for long, never done
                        for at in range(0, len(body), max(1, fault.after)):
                            self.wfile.write(body[at:at + fault.after])
                            self.wfile.flush()
                            if server._closing.wait(0.05):
                                break
                    elif fault.kind in ("drop", "short"):
                        self.wfile.write(body[:fault.after])
                        self.wfile.flush()
                    self.close_connection = True
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self._closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()
