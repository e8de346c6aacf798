"""The README's promises that no other test held to: the error types and their message
format, what a skipped entry records, the remote defaults and which HTTP answers are
retried, GPUDECODE_TMPDIR, and CLI options (--version, verify --quick, inspect
--keep-going, shard --seed)."""
from __future__ import annotations

import os

import gzip
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

import gpudecode
from gpudecode import (DecodeError, GpuDecodeError, LabelError, RemoteOptions, ShardFormatError, ShardReadError,
                       ShardReader, ShardWriteError)
from gpudecode.cli import main

from conftest import encode, make_shard, seeded_bytes


def _shard(tmp_path, n=6, name="s.tar") -> str:
    return make_shard(tmp_path / name, [{"__key__": f"k{i:03d}", "jpg": seeded_bytes(700 + i, "p", i),
                                         "cls": str(i % 3).encode()} for i in range(n)])


def test_error_types_are_the_builtins_they_resemble():
    assert issubclass(ShardFormatError, ValueError) and issubclass(ShardFormatError, GpuDecodeError)
    assert issubclass(ShardReadError, OSError) and issubclass(ShardReadError, GpuDecodeError)
    assert issubclass(LabelError, ValueError) and issubclass(DecodeError, ValueError)
    assert issubclass(ShardWriteError, OSError)
    assert issubclass(gpudecode.InternalError, RuntimeError) and issubclass(gpudecode.InternalError, GpuDecodeError)


def test_our_own_promises_are_checked_under_python_O_too():
    """The library has no `assert` (ruff's S101 holds it): a state its own code promised
    that did not hold is an InternalError naming what was unset, also where `python -O`
    would have dropped an assert."""
    import subprocess
    import sys

    from gpudecode.errors import known

    assert known(0, "x") == 0  # (only None is unset)
    with pytest.raises(gpudecode.InternalError, match="the sources' mixture is unset here"):
        known(None, "the sources' mixture")
    code = ("import gpudecode.errors as e\n"
            "try:\n    e.known(None, 'a thing')\nexcept e.InternalError as x:\n    print(type(x).__name__, x)")
    out = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("InternalError a thing is unset here"), out


def test_a_damaged_shard_names_shard_key_and_offset_and_keeps_the_cause(tmp_path):
    """README: `truncated tar: member 's03.jpg' needs 5120 bytes, 700 left (shard
    'train-000007.tar', key 's03', byte offset 5632)`; a library's own exception is kept
    as __cause__."""
    path = _shard(tmp_path)
    data = Path(path).read_bytes()
    with tarfile.open(path) as t:
        m = next(m for m in t.getmembers() if m.name == "k003.jpg")
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:m.offset_data + 100])
    with pytest.raises(ShardFormatError) as ei:
        list(ShardReader(str(cut)))
    e = ei.value
    # the offset of the member's header (of its ustar header, after any pax header tarfile counts from)
    assert (e.shard, e.key) == (str(cut), "k003") and m.offset <= e.offset < m.offset_data
    assert str(e).endswith(f"(shard {str(cut)!r}, key 'k003', byte offset {e.offset})"), str(e)
    assert "k003.jpg" in str(e) and "truncated" in str(e)
    # under skip, the same facts are what the skipped entry records
    r = ShardReader(str(cut), on_error="skip")
    got = [s.key for s in r]
    assert got == ["k000", "k001", "k002"]
    (sk,) = r.skipped
    assert (sk.shard, sk.key, sk.offset, sk.error) == (str(cut), "k003", e.offset, "ShardFormatError")
    assert "truncated" in sk.reason and "byte offset" not in sk.reason  # the reason alone, the place apart
    # a label the json module cannot read: LabelError, json's error as __cause__
    bad = make_shard(tmp_path / "j.tar", [{"__key__": "a", "jpg": encode(np.zeros((8, 8, 3), np.uint8)),
                                           "json": b"{label: 3"}])
    with pytest.raises(LabelError) as ei:
        list(gpudecode.Loader(bad, batch_size=1, transform=gpudecode.transforms.Compose(
            [gpudecode.transforms.Resize((8, 8))]), device="cpu", label_ext="json"))
    assert isinstance(ei.value.__cause__, json.JSONDecodeError) and ei.value.key == "a"


def test_remote_defaults_are_the_readmes():
    o = RemoteOptions()
    assert (o.connect_timeout, o.read_timeout, o.retries) == (10.0, 60.0, 3)


@pytest.mark.parametrize("status,retried", [(404, False), (403, False), (410, False), (408, True), (429, True),
                                            (503, True)])
def test_which_http_answers_are_retried(http_server, status, retried):
    """README: a 4xx is not retried, except 408 (timeout), 425 and 429 (too many requests),
    which ask for a later try; 5xx are retried."""
    from httpfault import Fault

    http_server.files["/s.tar"] = b"x" * 1000
    http_server.faults["/s.tar"] = [Fault("status", status=status)] * 5
    fast = RemoteOptions(connect_timeout=2, read_timeout=2, retries=2, backoff=0.01)
    with pytest.raises(ShardReadError, match=f"HTTP {status}"):
        list(ShardReader(http_server.url("/s.tar"), remote=fast))
    assert len(http_server.requests) == (3 if retried else 1)


def test_gzip_shards_unpack_in_gpudecode_tmpdir(tmp_path, monkeypatch):
    path = _shard(tmp_path)
    gz = tmp_path / "s.tar.gz"
    gz.write_bytes(gzip.compress(Path(path).read_bytes()))
    where = tmp_path / "scratch"
    where.mkdir()
    seen = []
    import tempfile

    real = tempfile.TemporaryFile

    def spy(*a, **kw):
        seen.append(kw.get("dir"))
        return real(*a, **kw)

    monkeypatch.setattr(tempfile, "TemporaryFile", spy)
    monkeypatch.setenv("GPUDECODE_TMPDIR", str(where))
    assert [s.key for s in ShardReader(str(gz))] == [f"k{i:03d}" for i in range(6)]
    assert seen == [str(where)]


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["--version"])
    assert ei.value.code == 0 and capsys.readouterr().out.strip() == f"gpudecode {gpudecode.__version__}"


def test_inspect_keep_going_and_verify_quick(tmp_path, capsys, photos):
    good = make_shard(tmp_path / "a.tar", [{"__key__": "g0", "jpg": encode(np.ascontiguousarray(photos["coffee"][:32, :32])),
                                            "cls": b"0"}])
    broken = tmp_path / "b.tar"
    broken.write_bytes(Path(good).read_bytes()[:700])
    assert main(["inspect", str(broken)]) == 1  # stops at the damage, one line
    assert "b.tar" in capsys.readouterr().err
    with pytest.warns(RuntimeWarning, match="b.tar"):  # it says what it skipped as it goes
        assert main(["inspect", "--keep-going", f"{tmp_path}/{{a,b}}.tar"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 1 and len(out["skipped"]) == 1 and "b.tar" in out["skipped"][0]
    from gpudecode.precache import precache

    r = precache([good], str(tmp_path / "pc"), size=16, num_threads=1)
    shard = r.shards[0]
    with tarfile.open(shard) as t:
        m = next(m for m in t.getmembers() if m.name.endswith(".npy"))
    with open(shard, "r+b") as f:  # a flipped byte in the pixels: same size, other content
        f.seek(m.offset_data + m.size - 10)
        b = f.read(1)
        f.seek(-1, io.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    assert main(["verify", "--quick", str(tmp_path / "pc")]) == 0  # sizes and counts only
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "pc")]) == 1  # the sha256 finds it
    assert "sha256" in capsys.readouterr().err


def test_shard_seed_fixes_the_order(tmp_path, photos):
    for c in ("a", "b"):
        (tmp_path / "tree" / c).mkdir(parents=True)
        for i in range(5):
            (tmp_path / "tree" / c / f"{i}.jpg").write_bytes(encode(np.full((8, 8, 3), 10 * i, np.uint8)))

    def order(seed, name):
        assert main(["shard", str(tmp_path / "tree"), str(tmp_path / f"{name}-%06d.tar"), "--seed", str(seed),
                     "--quiet"]) == 0
        with tarfile.open(tmp_path / f"{name}-000000.tar") as t:
            return [json.loads(t.extractfile(m).read())["path"] for m in t.getmembers()  # type: ignore[union-attr]
                    if m.name.endswith(".json")]

    a, b, c = order(1, "x"), order(1, "y"), order(2, "z")
    assert a == b and a != c and sorted(a) == sorted(c)


def test_devices_as_torch_device_objects(tmp_path, photos):
    """PyTorch users pass devices as objects: torch.device("cpu") is "cpu" everywhere a
    device is taken; anything else that is not a device name is refused by name."""
    import torch

    from gpudecode import transforms as T
    from gpudecode.precache import precache

    url = make_shard(tmp_path / "d.tar", [{"__key__": f"k{i}", "jpg": encode(np.ascontiguousarray(photos["rocket"][:40, :40])),
                                           "cls": b"1"} for i in range(3)])
    tf = T.Compose([T.Resize((16, 16))])
    ld = gpudecode.Loader(url, batch_size=3, transform=tf, device=torch.device("cpu"))
    assert ld.describe()["device"] == "cpu" and next(iter(ld)).images.shape == (3, 3, 16, 16)
    assert precache([url], str(tmp_path / "pc"), size=16, num_threads=1, device=torch.device("cpu")).samples == 3
    with pytest.raises(ValueError, match="torch.device"):
        gpudecode.Loader(url, batch_size=3, transform=tf, device=0)


def test_precache_command_line_errors_and_progress(tmp_path, capsys, photos):
    """SRC and OUT, or --merge OUT alone: each misuse is one line naming the way; the
    progress bar counts every image and is gone afterwards (--quiet: no bar at all)."""
    url = make_shard(tmp_path / "s.tar", [{"__key__": f"k{i}", "jpg": encode(np.ascontiguousarray(photos["camera"][:30, :30])),
                                           "cls": b"0"} for i in range(5)])
    assert main(["precache", url]) == 1
    assert "give SRC and OUT (or --merge OUT)" in capsys.readouterr().err
    assert main(["precache", url, str(tmp_path / "o"), "--merge", str(tmp_path / "o")]) == 1
    assert "--merge OUT takes no SRC/OUT" in capsys.readouterr().err
    assert main(["precache", url, str(tmp_path / "o"), "--size", "16"]) == 0
    out = capsys.readouterr()
    assert "5/5" in out.err and "precache" in out.err  # tqdm's bar on stderr, counted to the end
    assert "wrote 5 samples from 1 source shard in" in out.out and "5 samples in 1 tensor shard," in out.out
    assert main(["precache", url, str(tmp_path / "q"), "--size", "16", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_the_environment_is_never_taken_for_bad_data(tmp_path, monkeypatch):
    """A missing GPUDECODE_TMPDIR, descriptors run out: a ResourceError (an OSError) naming
    what failed, under every policy, from len() and from iteration alike, never a skipped
    shard (it used to skip every gzip shard: an epoch of 0 samples, then a bare
    FileNotFoundError from len())."""
    import errno
    import gzip

    from gpudecode import Loader, ResourceError
    from gpudecode import transforms as T

    samples = [{"__key__": f"k{i:03d}", "jpg": encode(np.full((16, 16, 3), i, np.uint8)), "cls": b"1"} for i in range(6)]
    plain = make_shard(tmp_path / "p.tar", samples)
    gz = tmp_path / "g.tar.gz"
    gz.write_bytes(gzip.compress(Path(plain).read_bytes()))
    monkeypatch.setenv("GPUDECODE_TMPDIR", str(tmp_path / "no-such-folder"))
    tf = T.Compose([T.Resize((8, 8))])
    for policy in ("raise", "skip", "warn"):
        ld = Loader(str(gz), batch_size=4, transform=tf, device="cpu", on_error=policy, split="sample")
        with pytest.raises(ResourceError, match="no-such-folder.*GPUDECODE_TMPDIR sets the folder") as e:
            len(ld)
        assert isinstance(e.value, OSError) and ld.skipped == []
        ld = Loader(str(gz), batch_size=4, transform=tf, device="cpu", on_error=policy)
        with pytest.raises(ResourceError, match="not the data's"):
            list(ld)
        assert ld.skipped == []
    monkeypatch.delenv("GPUDECODE_TMPDIR")
    # no descriptors left: opening a shard, an image file
    import builtins

    real_open = builtins.open

    def no_fds(path, *a, **kw):
        if str(path).endswith((".tar", ".jpg")):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *a, **kw)

    real_os_open = os.open

    def no_os_fds(path, *a, **kw):  # (image files are opened with os.open: O_NONBLOCK, a FIFO never waits)
        if str(path).endswith((".tar", ".jpg")):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_os_open(path, *a, **kw)

    (tmp_path / "t" / "c").mkdir(parents=True)
    (tmp_path / "t" / "c" / "x.jpg").write_bytes(samples[0]["jpg"])
    monkeypatch.setattr(builtins, "open", no_fds)
    monkeypatch.setattr(os, "open", no_os_fds)
    for source in (plain, str(tmp_path / "t")):
        ld = Loader(source, batch_size=4, transform=tf, device="cpu", on_error="skip")
        with pytest.raises(ResourceError, match="EMFILE"):
            list(ld)
        assert ld.skipped == []
