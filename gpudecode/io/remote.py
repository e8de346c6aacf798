"""Remote shards: HTTP(S) streams with timeouts, bounded retries and resumption; other
fsspec protocols (s3://, gs://, ...) through fsspec with their errors named.

An HTTP read that stalls longer than `read_timeout`, a connection that drops, a body
shorter than its Content-Length, or a 5xx/408/429 answer is retried up to `retries`
times in a row with exponential backoff (bytes received reset the count: a long stream
survives separate hiccups); a retry asks for the rest of the body with `Range: bytes=N-`
(or, from a server that ignores ranges, reads the body again and drops what was already
taken). A 4xx answer is not retried, but for 408, 425 and 429, which ask for a later try. Every error names the URL, and the HTTP status
where there is one.
"""
from __future__ import annotations

import http.client
import io
import socket
import ssl
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass

from ..errors import ShardReadError

_RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}
_REDIRECT_STATUS = {301, 302, 303, 307, 308}
_MAX_REDIRECTS = 5


@dataclass(frozen=True, slots=True)
class RemoteOptions:
    """How remote shards are read.

    Args:
        connect_timeout: seconds to wait for a connection.
        read_timeout: seconds a read may wait for the next bytes (a stalled server).
        retries: further tries after a failed one (connection, timeout, short body, 5xx),
            in a row: a try that receives bytes resets the count.
        backoff: seconds before the first retry; doubled each time, at most 30 s.
        min_rate: bytes per second a read must average over each `rate_window` seconds
            (0: no floor): a server that trickles a few bytes at a time, never silent long
            enough for `read_timeout`, is given up on (ShardReadError) instead of holding
            a shard "in progress" for hours. Not retried: a retry would be as slow.
        rate_window: seconds over which `min_rate` is measured.
        revalidate: with a `cache_dir`, check each cached copy against its remote shard
            once per epoch (one small request: ETag, Last-Modified and size); a shard that
            changed is fetched again. Off (False) for datasets known never to change.
    """

    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    retries: int = 3
    backoff: float = 0.5
    min_rate: float = 1024.0
    rate_window: float = 60.0
    revalidate: bool = True

    def __post_init__(self) -> None:
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ValueError("timeouts must be positive")
        if self.retries < 0:
            raise ValueError("retries must be >= 0")
        if self.backoff < 0:
            raise ValueError("backoff must be >= 0")
        if self.min_rate < 0 or self.rate_window <= 0:
            raise ValueError("min_rate must be >= 0 and rate_window positive")


class _Retry(Exception):
    """A failure worth another try."""


class HttpStream(io.RawIOBase):
    """A GET body as a readable binary stream, retried and resumed (see the module doc)."""

    def __init__(self, url: str, options: RemoteOptions | None = None, *, probe: bool = False) -> None:
        super().__init__()
        self._probe = probe  # ask for byte 0 only: what validators() needs
        self.url = url
        self.options = options or RemoteOptions()
        self._pos = 0           # body bytes handed to the reader
        self._conn: http.client.HTTPConnection | None = None
        self._sock: socket.socket | None = None
        self._resp: http.client.HTTPResponse | None = None
        self._skip = 0          # bytes to drop after a restart from 0
        self._tries = 0
        self._cancelled = False
        self.expected_size: int | None = None  # the body's size, as the server announced it
        self.etag: str | None = None            # the validators of the first answer
        self.last_modified: str | None = None
        self._window = (time.monotonic(), 0)  # (start, bytes then) of the min_rate window
        self._with_retries(self._open)

    def cancel(self) -> None:
        """Ends the stream from another thread: a read blocked on the network returns and
        raises ShardReadError("cancelled"); no retry follows."""
        self._cancelled = True
        sock = self._sock  # kept from connect(): a response may own the connection's socket
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- plumbing ---------------------------------------------------------------------------

    def _fail(self, why: str) -> ShardReadError:
        return ShardReadError(f"HTTP read failed: {why}", shard=self.url)

    def _with_retries(self, fn):
        delay = self.options.backoff
        while True:
            if self._cancelled:
                raise self._fail("cancelled")
            try:
                return fn()
            except _Retry as e:
                if self._cancelled:
                    raise self._fail("cancelled") from None
                self._close_conn()
                self._tries += 1
                if self._tries > self.options.retries:
                    raise self._fail(f"{e} (gave up after {self._tries} tries)") from None
                time.sleep(delay)
                delay = min(30.0, delay * 2 if delay else 0.0)

    def _connection(self, parts: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        host = parts.hostname or ""
        port = parts.port
        proxies = urllib.request.getproxies()
        proxy = proxies.get(parts.scheme) if not urllib.request.proxy_bypass(host) else None
        timeout = self.options.connect_timeout
        if parts.scheme == "https":
            ctx = ssl.create_default_context()
            if proxy:
                p = urllib.parse.urlsplit(proxy)
                conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                    p.hostname or "", p.port, timeout=timeout, context=ctx)
                conn.set_tunnel(host, port)
            else:
                conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
        else:
            if proxy:
                p = urllib.parse.urlsplit(proxy)
                conn = http.client.HTTPConnection(p.hostname or "", p.port, timeout=timeout)
            else:
                conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(self.options.read_timeout)
            self._sock = conn.sock
        return conn

    def _open(self) -> http.client.HTTPResponse:
        """The body's answer, from self._pos on (also kept as self._resp)."""
        url = self.url
        for _ in range(_MAX_REDIRECTS + 1):
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https"):
                raise self._fail(f"redirected to a non-HTTP URL {url!r}")
            conn = None
            try:
                conn = self._connection(parts)
                headers = {"User-Agent": "gpudecode", "Accept-Encoding": "identity"}
                if self._pos:
                    headers["Range"] = f"bytes={self._pos}-"
                elif self._probe:
                    headers["Range"] = "bytes=0-0"
                proxied = parts.scheme == "http" and conn.host != parts.hostname
                target = url if proxied else (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                conn.request("GET", target, headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                if conn is not None:
                    conn.close()
                raise _Retry(_describe(e)) from None
            status = resp.status
            if status in _REDIRECT_STATUS and resp.getheader("Location"):
                url = urllib.parse.urljoin(url, resp.getheader("Location"))
                _close(resp, conn)
                continue
            if status in _RETRY_STATUS:
                _close(resp, conn)
                raise _Retry(f"HTTP {status} {resp.reason}")
            if self._pos == 0 and self.etag is None and self.last_modified is None:
                self.etag, self.last_modified = resp.getheader("ETag"), resp.getheader("Last-Modified")
            if status == 206 and self._probe and not self._pos:
                self.expected_size = _range_total(resp.getheader("Content-Range"))
            elif status == 206 and self._pos:
                start = _range_start(resp.getheader("Content-Range"))
                if start != self._pos:
                    _close(resp, conn)
                    raise self._fail(f"HTTP 206 for bytes {self._pos}- answered from {start}")
                tag = resp.getheader("ETag")
                if self.etag and tag and tag != self.etag:  # the rest of another version: never spliced
                    _close(resp, conn)
                    raise self._fail(f"the shard changed while it was read (ETag {self.etag} became {tag})")
                self._skip = 0
            elif status == 200:
                self._skip = self._pos  # the whole body again: drop what was already read
                if resp.length is not None:
                    self.expected_size = resp.length
            elif status == 416 and self._pos:
                self._skip = 0  # nothing left past what was read
            else:
                _close(resp, conn)
                raise self._fail(f"HTTP {status} {resp.reason}")
            self._conn, self._resp = conn, resp
            return resp
        raise self._fail(f"more than {_MAX_REDIRECTS} redirects")

    def _close_conn(self) -> None:
        # a response that will close owns the socket (http.client hands it over): close both
        if self._resp is not None:
            self._resp.close()
        if self._conn is not None:
            self._conn.close()
        self._conn = self._resp = None

    # -- RawIOBase ---------------------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError("read from a closed stream")
        if len(b) == 0:
            return 0
        return self._with_retries(lambda: self._readinto(b))

    def _readinto(self, b) -> int:
        resp = self._resp if self._resp is not None else self._open()
        try:
            while self._skip:
                dropped = resp.read(min(self._skip, 1 << 20))
                if not dropped:
                    raise _Retry("connection closed while skipping to the resume point")
                self._skip -= len(dropped)
            if resp.status == 416:
                return 0
            # read1: what has arrived (one recv), so progress is counted byte for byte and a
            # stall loses nothing already received (readinto would wait to fill all of b)
            chunk = resp.read1(len(b))
        except (OSError, http.client.HTTPException) as e:
            raise _Retry(_describe(e)) from None
        n = len(chunk)
        if n == 0 and resp.length:  # http.client returns b"", not an error, at a short body
            raise _Retry(f"connection closed {resp.length} bytes before the end of the body")
        b[:n] = chunk
        self._pos += n
        if n:
            self._tries = 0  # progress: a later failure gets its own retries
        self._check_rate()
        return n

    def _check_rate(self) -> None:
        if not self.options.min_rate:
            return
        start, then = self._window
        now = time.monotonic()
        if now - start < self.options.rate_window:
            return
        rate = (self._pos - then) / (now - start)
        if rate < self.options.min_rate:
            raise self._fail(f"too slow: {rate:.0f} bytes/s over the last {now - start:.0f} s, below "
                             f"RemoteOptions.min_rate={self.options.min_rate:g} ({self._pos} bytes in all)")
        self._window = (now, self._pos)

    def close(self) -> None:
        self._close_conn()
        super().close()


def _close(resp: http.client.HTTPResponse, conn: http.client.HTTPConnection) -> None:
    resp.close()
    conn.close()


def _range_start(content_range: str | None) -> int | None:
    try:
        return int((content_range or "").split()[1].split("-")[0])
    except (IndexError, ValueError):
        return None


def _range_total(content_range: str | None) -> int | None:
    try:
        return int((content_range or "").rsplit("/", 1)[1])
    except (IndexError, ValueError):
        return None


def _describe(e: BaseException) -> str:
    if isinstance(e, socket.timeout):
        return "timed out"
    if isinstance(e, http.client.IncompleteRead):
        return f"body cut off ({e.expected} bytes missing)" if e.expected else "body cut off"
    return f"{type(e).__name__}: {e}"


@dataclass(frozen=True, slots=True)
class Validators:
    """What a remote shard's server says about its current version: ETag, Last-Modified
    (as sent) and size; None where it says nothing."""

    etag: str | None = None
    last_modified: str | None = None
    size: int | None = None

    def same_as(self, other: "Validators") -> bool | None:
        """True or False where a validator both sides have decides (the ETag first, then
        the size, then Last-Modified); None when they have none in common."""
        if self.etag and other.etag:
            return self.etag == other.etag
        decided = None
        if self.size is not None and other.size is not None:
            if self.size != other.size:
                return False
            decided = True
        if self.last_modified and other.last_modified:
            return self.last_modified == other.last_modified
        return decided

    def as_dict(self) -> dict:
        return {"etag": self.etag, "last_modified": self.last_modified, "size": self.size}


def validators(url: str, options: RemoteOptions | None = None) -> Validators:
    """The current validators of a remote shard: for HTTP one GET of byte 0 (`Range:
    bytes=0-0`; allowed where HEAD is not, e.g. presigned URLs), with the usual timeouts
    and retries; other protocols through fsspec's `info()`.

    Raises:
        ShardReadError: the server cannot be reached or refuses (names the URL).
    """
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("http", "https"):
        s = HttpStream(url, options, probe=True)
        try:
            return Validators(s.etag, s.last_modified, s.expected_size)
        finally:
            s.close()
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url)
        info = fs.info(path)
    except Exception as e:  # fsspec backends raise their own types: name the URL
        raise ShardReadError(f"cannot stat shard: {type(e).__name__}: {e}", shard=url) from e
    etag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
    modified = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("last_modified")
    size = info.get("size")
    return Validators(str(etag) if etag else None, str(modified) if modified else None,
                      int(size) if isinstance(size, int) else None)


def open_remote(url: str, options: RemoteOptions | None = None) -> io.BufferedReader:
    """A buffered binary stream (with peek) of a remote shard (http(s) here; other
    protocols through fsspec).

    Raises:
        ShardReadError: cannot be opened (after the retries, for HTTP), naming the URL.
    """
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("http", "https"):
        return io.BufferedReader(HttpStream(url, options), buffer_size=1 << 20)
    import fsspec

    try:
        f = fsspec.open(url, "rb").open()
    except Exception as e:  # fsspec backends raise their own types: name the URL
        raise ShardReadError(f"cannot open shard: {type(e).__name__}: {e}", shard=url) from e
    return f if isinstance(f, io.BufferedReader) else io.BufferedReader(f, buffer_size=1 << 20)
