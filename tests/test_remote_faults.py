"""Remote shards against a loopback HTTP server that fails on purpose (tests/httpfault.py):
stalls, dropped connections, short bodies, 404 and 500. Reads resume where they broke
off, give up after the configured retries, and every error names the URL (and status).
Every test is bounded in time by small timeouts."""
from __future__ import annotations

import time

import pytest

from gpudecode import ShardReader, ShardReadError
from gpudecode.io.remote import RemoteOptions

from conftest import make_shard, seeded_bytes
from httpfault import Fault

FAST = RemoteOptions(connect_timeout=2, read_timeout=0.5, retries=2, backoff=0.05)


@pytest.fixture
def shard(tmp_path):
    samples = [{"__key__": f"k{i:03d}", "jpg": seeded_bytes(3000 + i, "remote", i), "cls": b"%d" % (i % 7)} for i in range(40)]
    path = make_shard(tmp_path / "r.tar", samples)
    with open(path, "rb") as f:
        return f.read(), samples


def keys_and_bytes(samples):
    return [(s["__key__"], s["jpg"], s["cls"]) for s in samples]


def read(url, **kw):
    return [(s.key, s.fields["jpg"], s.fields["cls"]) for s in ShardReader(url, remote=FAST, **kw)]


@pytest.mark.parametrize("kind", ["stall", "drop", "short"])
def test_one_fault_mid_body_resumes_with_range(http_server, shard, kind):
    data, samples = shard
    http_server.files["/s.tar"] = data
    http_server.faults["/s.tar"] = [Fault(kind, after=50_000)]
    t = time.monotonic()
    assert read(http_server.url("/s.tar")) == keys_and_bytes(samples)
    assert http_server.requests == [("/s.tar", None), ("/s.tar", "bytes=50000-")]
    assert time.monotonic() - t < 30  # a watchdog: the default read timeout (60 s) was not waited out


def test_resume_from_a_server_without_ranges(http_server, shard):
    data, samples = shard
    http_server.files["/s.tar"] = data
    http_server.no_range = True
    http_server.faults["/s.tar"] = [Fault("drop", after=70_000)]
    assert read(http_server.url("/s.tar")) == keys_and_bytes(samples)
    assert len(http_server.requests) == 2  # the body again from 0, the first 70000 bytes dropped


def test_stalled_server_gives_up_after_the_retries(http_server, shard):
    data, _ = shard
    http_server.files["/s.tar"] = data
    # progress, then a stall: that try and the two retries (retries=2) bring nothing more
    http_server.faults["/s.tar"] = [Fault("stall", after=10_000)] + [Fault("stall", after=0)] * 2
    t = time.monotonic()
    with pytest.raises(ShardReadError, match="timed out .gave up after 3 tries") as ei:
        read(http_server.url("/s.tar"))
    assert time.monotonic() - t < 30  # a watchdog: the default read timeout (60 s) was not waited out
    assert ei.value.shard == http_server.url("/s.tar")
    assert ei.value.key == "k001"  # the sample the stall cut off (k000, about 6.6 KB with headers, came whole)
    assert len(http_server.requests) == 3


def test_separate_stalls_with_progress_between_them_are_survived(http_server, shard):
    data, samples = shard
    http_server.files["/s.tar"] = data
    http_server.faults["/s.tar"] = [Fault("stall", after=20_000)] * 4  # more than `retries`, each after progress
    assert read(http_server.url("/s.tar")) == keys_and_bytes(samples)
    assert len(http_server.requests) == 5


def test_404_is_not_retried(http_server):
    with pytest.raises(ShardReadError, match="HTTP 404") as ei:
        read(http_server.url("/missing.tar"))
    assert ei.value.shard == http_server.url("/missing.tar")
    assert len(http_server.requests) == 1


def test_500_is_retried_then_succeeds(http_server, shard):
    data, samples = shard
    http_server.files["/s.tar"] = data
    http_server.faults["/s.tar"] = [Fault("status", status=500), Fault("status", status=503)]
    assert read(http_server.url("/s.tar")) == keys_and_bytes(samples)
    assert len(http_server.requests) == 3


def test_500_every_time_names_status_and_url(http_server, shard):
    data, _ = shard
    http_server.files["/s.tar"] = data
    http_server.faults["/s.tar"] = [Fault("status", status=500)] * 10
    with pytest.raises(ShardReadError, match=r"HTTP 500 .* \(gave up after 3 tries\)") as ei:
        read(http_server.url("/s.tar"))
    assert http_server.url("/s.tar") in str(ei.value)


def test_skip_policy_names_the_bad_url_and_keeps_the_rest(http_server, shard):
    data, samples = shard
    http_server.files["/good.tar"] = data
    urls = [http_server.url("/gone.tar"), http_server.url("/good.tar")]
    r = ShardReader(urls, remote=FAST, on_error="skip")
    got = [(s.key, s.fields["jpg"], s.fields["cls"]) for s in r]
    assert got == keys_and_bytes(samples)
    assert [(s.shard, s.error) for s in r.skipped] == [(urls[0], "ShardReadError")]
    assert "HTTP 404" in r.skipped[0].reason


def test_refused_connection(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # held, never listening: connections are refused, and no other
        port = s.getsockname()[1]  # process can take the port while the test runs
        url = f"http://127.0.0.1:{port}/x.tar"
        with pytest.raises(ShardReadError, match="gave up after 3 tries") as ei:
            read(url)
        assert ei.value.shard == url


def test_options_are_checked():
    with pytest.raises(ValueError):
        RemoteOptions(read_timeout=0)
    with pytest.raises(ValueError):
        RemoteOptions(retries=-1)


def test_a_trickling_server_is_given_up_on(http_server, shard):
    """A server sending a little every 50 ms is never silent long enough for read_timeout
    (such a 1 MB shard stayed "in progress" for 40 minutes): below min_rate over a window
    the read ends with a ShardReadError naming the URL and the rate, without retries; the
    same server at full speed is read whole."""
    data, samples = shard
    http_server.files["/t.tar"] = data
    http_server.faults["/t.tar"] = [Fault("trickle", after=100)]
    opts = RemoteOptions(read_timeout=5, retries=3, backoff=0.01, min_rate=20_000, rate_window=0.3)
    with pytest.raises(ShardReadError, match=r"too slow: \d+ bytes/s over the last 0 s, below "
                                             r"RemoteOptions.min_rate=20000") as e:
        list(ShardReader(http_server.url("/t.tar"), remote=opts))
    assert e.value.shard == http_server.url("/t.tar")
    assert len(http_server.requests) == 1  # not retried
    got = [(s.key, s.fields["jpg"], s.fields["cls"]) for s in ShardReader(http_server.url("/t.tar"), remote=opts)]
    assert got == keys_and_bytes(samples)
    with pytest.raises(ValueError, match="min_rate"):
        RemoteOptions(min_rate=-1)
