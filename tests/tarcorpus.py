"""A corpus of tar archives, valid and corrupt, each with its exact expected outcome:
the regular members and links it holds (name, data, type) up to the fault, and the
fault (message, header offset, member cut off) or None. Every tar driver of gpudecode
must give exactly this (tests/test_tar_semantics.py); the fuzzers start from it too
(`write_seeds`).

Headers are crafted byte by byte here (not with tarfile), so the corpus can hold what
no well-behaved writer produces; archives written by tarfile and webdataset are checked
against tarfile itself in the tests.
"""
from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 512


def header(name: bytes = b"k.jpg", size: int = 0, type_: bytes = b"0", *, prefix: bytes = b"",
           magic: bytes = b"ustar\x0000", size_field: bytes | None = None, chksum: bytes | None = None,
           signed: bool = False, linkname: bytes = b"", extra: bytes = b"") -> bytes:
    h = bytearray(BLOCK)
    h[0:100] = name.ljust(100, b"\0")[:100]
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = size_field if size_field is not None else f"{size:011o}\0".encode()
    h[136:148] = b"00000000000\0"
    h[156:157] = type_
    h[157:257] = linkname.ljust(100, b"\0")[:100]
    h[257:265] = magic
    h[345:500] = prefix.ljust(155, b"\0")[:155]
    if extra:
        h[500:500 + len(extra)] = extra
    h[148:156] = b" " * 8
    if chksum is None:
        total = sum(b - 256 if b > 127 else b for b in h) if signed else sum(h)
        chksum = f"{total & 0o777777:06o}\0 ".encode() if total >= 0 else b"-" + f"{-total:06o}".encode() + b" "
    h[148:156] = chksum
    return bytes(h)


def rechecksum(h: bytes, fmt: str) -> bytes:
    """`h` with its checksum written as `fmt.format(sum)` (8 bytes), e.g. " {:06o}\\0"."""
    b = bytearray(h)
    b[148:156] = b" " * 8
    field = fmt.format(sum(b)).encode()
    assert len(field) == 8
    b[148:156] = field
    return bytes(b)


def pad(data: bytes) -> bytes:
    return data + bytes(-len(data) % BLOCK)


def member(name: bytes, data: bytes, type_: bytes = b"0", **kw) -> bytes:
    return header(name, len(data), type_, **kw) + pad(data)


def pax_payload(records: dict[bytes, bytes]) -> bytes:
    out = b""
    for k, v in records.items():
        body = b" " + k + b"=" + v + b"\n"
        n = len(body) + 1
        while len(str(n).encode()) + len(body) != n:
            n += 1
        out += str(n).encode() + body
    return out


def pax(records: dict[bytes, bytes] | bytes, type_: bytes = b"x") -> bytes:
    payload = records if isinstance(records, bytes) else pax_payload(records)
    return header(b"PaxHeaders/x", len(payload), type_) + pad(payload)


def gnu_long(name: bytes, type_: bytes = b"L") -> bytes:
    payload = name + b"\0"
    return header(b"././@LongLink", len(payload), type_, magic=b"ustar  \0") + pad(payload)


END = bytes(2 * BLOCK)


@dataclass
class Case:
    """An archive and what every driver must report for it."""

    name: str
    data: bytes
    members: list[tuple[str, bytes, str]]  # (name, data, type) up to the fault
    # (message contains, header offset, member named: the one cut off, or whose header
    # (checksum valid) is refused)
    fault: tuple[str, int, str | None] | None = None
    tags: set[str] = field(default_factory=set)
    tarfile_names: list[str] | None = None  # where Python's tarfile names members otherwise, on purpose


D1, D2, D3 = b"first image bytes" * 7, b"7", bytes(range(256)) * 3


def _pos(*parts: bytes) -> int:
    return sum(len(p) for p in parts)


def cases() -> list[Case]:
    c: list[Case] = []
    m1, m2, m3 = member(b"a.jpg", D1), member(b"a.cls", D2), member(b"b.jpg", D3)
    good = [("a.jpg", D1, "0"), ("a.cls", D2, "0"), ("b.jpg", D3, "0")]
    base = m1 + m2 + m3

    # --- valid ---------------------------------------------------------------------------
    c.append(Case("plain", base + END, good, tags={"valid"}))
    c.append(Case("one end block", base + bytes(BLOCK), good, tags={"valid"}))
    c.append(Case("record padding", base + bytes(10240 - len(base) % 10240), good, tags={"valid"}))
    c.append(Case("only end blocks", END, [], tags={"valid"}))
    c.append(Case("empty member", member(b"e.txt", b"") + END, [("e.txt", b"", "0")], tags={"valid"}))
    c.append(Case("exact block", member(b"x.bin", b"z" * 512) + member(b"y.bin", b"q" * 513) + END,
                  [("x.bin", b"z" * 512, "0"), ("y.bin", b"q" * 513, "0")], tags={"valid"}))
    c.append(Case("nul and 7 types", member(b"a.jpg", D1, b"\0") + member(b"b.jpg", D3, b"7") + END,
                  [("a.jpg", D1, "0"), ("b.jpg", D3, "0")], tags={"valid"}))
    c.append(Case("ustar prefix", member(b"img.jpg", D1, prefix=b"some/deep/dir") + END,
                  [("some/deep/dir/img.jpg", D1, "0")], tags={"valid"}))
    # old GNU headers keep atime/ctime where ustar has its prefix: the prefix is read only
    # under the POSIX magic (as GNU tar and libarchive do; tarfile reads it always)
    c.append(Case("gnu magic ignores prefix", member(b"img.jpg", D1, prefix=b"zz", magic=b"ustar  \0") + END,
                  [("img.jpg", D1, "0")], tags={"valid"}, tarfile_names=["zz/img.jpg"]))
    long = b"d/" * 80 + b"long-key.jpg"
    c.append(Case("gnu long name", gnu_long(long) + member(b"trunc.jpg", D1) + m2 + END,
                  [(long.decode(), D1, "0"), ("a.cls", D2, "0")], tags={"valid"}))
    c.append(Case("pax path", pax({b"path": long, b"mtime": b"1.5"}) + member(b"trunc.jpg", D1) + END,
                  [(long.decode(), D1, "0")], tags={"valid"}))
    # both extensions name the member: the POSIX one wins, whatever their order (tarfile: the GNU one)
    c.append(Case("pax path beats long name", gnu_long(b"gnu.jpg") + pax({b"path": b"pax.jpg"})
                  + member(b"hdr.jpg", D1) + END, [("pax.jpg", D1, "0")], tags={"valid"}, tarfile_names=["gnu.jpg"]))
    c.append(Case("pax size", pax({b"size": str(len(D3)).encode()}) + header(b"p.jpg", 0) + pad(D3) + END,
                  [("p.jpg", D3, "0")], tags={"valid"}))
    c.append(Case("pax applies once", pax({b"path": b"one.jpg"}) + m1 + m3 + END,
                  [("one.jpg", D1, "0"), ("b.jpg", D3, "0")], tags={"valid"}))
    # a global header's records are checked but not applied (a global path would name every member alike)
    c.append(Case("global pax ignored", pax({b"path": b"global.jpg", b"comment": b"hi"}, b"g") + m1 + END,
                  [("a.jpg", D1, "0")], tags={"valid"}, tarfile_names=["global.jpg"]))
    c.append(Case("utf8 and raw names", member("é/ñ.jpg".encode(), D1) + member(b"\xff\xfe.jpg", D2) + END,
                  [("é/ñ.jpg", D1, "0"), (b"\xff\xfe.jpg".decode("utf-8", "surrogateescape"), D2, "0")],
                  tags={"valid"}))
    c.append(Case("base-256 size", header(b"b.jpg", size_field=b"\x80" + bytes(7) + (len(D3)).to_bytes(4, "big"))
                  + pad(D3) + END, [("b.jpg", D3, "0")], tags={"valid"}))
    c.append(Case("signed checksum", member("ÿ.jpg".encode("latin-1"), D1, signed=True) + END,
                  [("ÿ.jpg".encode("latin-1").decode("utf-8", "surrogateescape"), D1, "0")], tags={"valid"}))
    c.append(Case("checksum field spacing", rechecksum(header(b"c.jpg", len(D1)), "  {:05o}\0") + pad(D1)
                  + rechecksum(header(b"d.jpg", len(D2)), "{:07o} ") + pad(D2) + END,
                  [("c.jpg", D1, "0"), ("d.jpg", D2, "0")], tags={"valid"}))
    c.append(Case("dirs devices fifos passed over", header(b"dir/", 0, b"5") + header(b"dev", 0, b"3")
                  + header(b"fifo", 0, b"6") + header(b"blk", 0, b"4") + m1 + END, [("a.jpg", D1, "0")],
                  tags={"valid"}))
    c.append(Case("dir size field ignored", header(b"dir/", 4096, b"5") + m1 + END, [("a.jpg", D1, "0")],
                  tags={"valid"}))
    c.append(Case("links listed", header(b"l.jpg", 0, b"2", linkname=b"a.jpg") + header(b"h.jpg", 0, b"1",
                  linkname=b"a.jpg") + m1 + END, [("l.jpg", b"", "2"), ("h.jpg", b"", "1"), ("a.jpg", D1, "0")],
                  tags={"valid"}))
    c.append(Case("long link name", gnu_long(b"x" * 200, b"K") + header(b"l2.jpg", 0, b"2") + END,
                  [("l2.jpg", b"", "2")], tags={"valid"}))

    # --- corrupt -------------------------------------------------------------------------
    c.append(Case("empty file", b"", [], ("empty file", 0, None)))
    c.append(Case("junk", bytes(range(256)) * 8, [], ("checksum", 0, None)))
    c.append(Case("cut in data", (base + END)[:_pos(m1, m2) + 512 + 100], good[:2],
                  (f"member 'b.jpg' needs {len(D3)} bytes, 100 left", _pos(m1, m2), "b.jpg")))
    c.append(Case("cut in header", (base + END)[:_pos(m1) + 200], good[:1],
                  ("partial header block", _pos(m1), None)))
    c.append(Case("cut at member boundary", base, good, ("without an end-of-archive block", _pos(base), None)))
    c.append(Case("cut in padding", m1 + header(b"a.cls", 1) + D2, good[:2],
                  ("without an end-of-archive block", _pos(m1, m2), None)))
    c.append(Case("cut right after header", m1 + header(b"a.cls", 1), good[:1],
                  ("member 'a.cls' needs 1 bytes, 0 left", _pos(m1), "a.cls")))
    bad = bytearray(base + END)
    bad[_pos(m1) + 10] ^= 0x20
    c.append(Case("bad checksum", bytes(bad), good[:1], ("checksum mismatch", _pos(m1), None)))
    c.append(Case("checksum field junk", m1 + header(b"a.cls", 1, chksum=b"12x4567\0") + pad(D2) + END,
                  good[:1], ("bad checksum field", _pos(m1), None)))
    c.append(Case("checksum off by 65521", m1 + header(b"a.cls", 1, chksum=f"{sum(header(b'a.cls', 1, chksum=b'        ')) + 65521:06o}\0 ".encode())
                  + pad(D2) + END, good[:1], ("checksum mismatch", _pos(m1), None)))
    c.append(Case("size field junk", m1 + header(b"a.cls", size_field=b"0000000001x\0") + pad(D2) + END,
                  good[:1], ("bad size field", _pos(m1), "a.cls")))
    c.append(Case("size field python int syntax", m1 + header(b"a.cls", size_field=b"0o000000001\0") + pad(D2)
                  + END, good[:1], ("bad size field", _pos(m1), "a.cls")))
    c.append(Case("size field with underscore", m1 + header(b"a.cls", size_field=b"0000_000001\0") + pad(D2)
                  + END, good[:1], ("bad size field", _pos(m1), "a.cls")))
    c.append(Case("negative base-256 size", m1 + header(b"a.cls", size_field=b"\xff" * 12) + END, good[:1],
                  ("out of range", _pos(m1), "a.cls")))
    c.append(Case("base-256 size near 2^63", m1 + header(b"a.cls", size_field=b"\x80" + bytes(3)
                  + (2**63 - 5).to_bytes(8, "big")) + END, good[:1], ("out of range", _pos(m1), "a.cls")))
    c.append(Case("base-256 size 2^62", m1 + header(b"big.jpg", size_field=b"\x80" + bytes(3)
                  + (2**62).to_bytes(8, "big")) + END, good[:1],
                  (f"member 'big.jpg' needs {2**62} bytes", _pos(m1), "big.jpg")))
    c.append(Case("base-256 size in long name", m1 + header(b"././@LongLink", size_field=b"\x80" + bytes(3)
                  + (2**63 - 5).to_bytes(8, "big"), type_=b"L") + END, good[:1], ("out of range", _pos(m1), None)))
    big_ext = 1 << 21
    c.append(Case("extended header over the limit", m1 + header(b"././@LongLink", big_ext, b"L") + END,
                  good[:1], ("over the limit", _pos(m1), None)))
    c.append(Case("pax size wraps negative", m1 + pax({b"size": b"18446744073709551000"}) + header(b"a.cls", 1)
                  + pad(D2) + END, good[:1], ("bad pax size", _pos(m1), "a.cls")))
    c.append(Case("pax size negative", m1 + pax({b"size": b"-5"}) + header(b"a.cls", 1) + pad(D2) + END,
                  good[:1], ("bad pax size", _pos(m1), "a.cls")))
    c.append(Case("pax size empty", m1 + pax({b"size": b""}) + header(b"a.cls", 1) + pad(D2) + END,
                  good[:1], ("bad pax size", _pos(m1), "a.cls")))
    c.append(Case("pax size python syntax", m1 + pax({b"size": b"1_0"}) + header(b"a.cls", 1) + pad(D2) + END,
                  good[:1], ("bad pax size", _pos(m1), "a.cls")))
    # a refused pax size names its member (the next header's, or a pax path wherever it
    # stands), so the sample before, of another key, is known complete
    c.append(Case("pax size wraps, next of another key", m1 + pax({b"size": b"18446744073709551000"})
                  + member(b"b.jpg", D3) + END, good[:1], ("bad pax size", _pos(m1), "b.jpg")))
    c.append(Case("pax size bad, path after it", m1 + pax({b"size": b"-1", b"path": b"c/long.jpg"})
                  + member(b"trunc", D3) + END, good[:1], ("bad pax size", _pos(m1), "c/long.jpg")))
    c.append(Case("pax size bad, next header damaged", m1 + pax({b"size": b"-1"})
                  + header(b"b.jpg", len(D3), chksum=b"0000000\0") + pad(D3) + END, good[:1],
                  ("bad pax size", _pos(m1), None)))
    c.append(Case("pax size beyond data", m1 + pax({b"size": b"100000"}) + header(b"a.cls", 1) + pad(D2) + END,
                  good[:1], ("member 'a.cls' needs 100000 bytes", _pos(m1) + 1024, "a.cls")))
    c.append(Case("pax record length too long", m1 + pax(b"99 path=x.jpg\n") + m2 + END, good[:1],
                  ("bad pax extended header record", _pos(m1), None)))
    c.append(Case("pax record no newline", m1 + pax(b"13 path=x.jpgZ") + m2 + END, good[:1],
                  ("bad pax extended header record", _pos(m1), None)))
    c.append(Case("pax record no equals", m1 + pax(b"12 pathxjpg\n\n") + m2 + END, good[:1],
                  ("bad pax extended header record", _pos(m1), None)))
    c.append(Case("pax record length junk", m1 + pax(b"1x path=x\n") + m2 + END, good[:1],
                  ("bad pax extended header record", _pos(m1), None)))
    c.append(Case("pax record length zero", m1 + pax(b"0 path=x\n") + m2 + END, good[:1],
                  ("bad pax extended header record", _pos(m1), None)))
    c.append(Case("pax record length huge", m1 + pax(b"99999999999999999999999 path=x\n") + m2 + END, good[:1],
                  ("bad pax extended header record", _pos(m1), None)))
    c.append(Case("pax path with NUL", m1 + pax({b"path": b"a\0b.jpg"}) + m2 + END, good[:1],
                  ("NUL", _pos(m1), None)))
    c.append(Case("gnu sparse pax", m1 + pax({b"GNU.sparse.size": b"100"}) + m2 + END, good[:1],
                  ("sparse", _pos(m1), None)))
    c.append(Case("gnu sparse type", m1 + header(b"s.jpg", 10, b"S") + pad(b"x" * 10) + END, good[:1],
                  ("sparse", _pos(m1), "s.jpg")))
    c.append(Case("unknown type", m1 + header(b"v.jpg", 10, b"V") + pad(b"x" * 10) + END, good[:1],
                  ("type 'V' is not supported", _pos(m1), "v.jpg")))
    c.append(Case("extended header cut", m1 + header(b"././@LongLink", 300, b"L", magic=b"ustar  \0") + b"x" * 100,
                  good[:1], ("extended header cut off", _pos(m1), None)))
    c.append(Case("extended then nothing", m1 + pax({b"path": b"p.jpg"}), good[:1],
                  ("without an end-of-archive block", _pos(m1) + 1024, None)))
    c.append(Case("data after end", base + END + member(b"c.jpg", D1) + END, good,
                  ("data after the end-of-archive", _pos(base) + 1024, None)))
    c.append(Case("zeroed header mid archive", m1 + bytes(BLOCK) + m3 + END, good[:1],
                  ("data after the end-of-archive", _pos(m1) + 512, None)))
    c.append(Case("junk in record padding", base + END + bytes(600) + b"\x01" + bytes(100), good,
                  ("data after the end-of-archive", _pos(base) + 1024 + 512, None)))
    c.append(Case("partial zero header", m1 + bytes(100), good[:1], ("partial header block", _pos(m1), None)))
    return c


def tarfile_members(data: bytes) -> list[tuple[str, bytes, str]]:
    """Python's tarfile's view of an archive: regular files with their data, links."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for m in tf:
            if m.isreg():
                f = tf.extractfile(m)
                assert f is not None
                out.append((m.name, f.read(), "0"))
            elif m.issym() or m.islnk():
                out.append((m.name, b"", "2" if m.issym() else "1"))
    return out


def write_seeds(out: Path) -> int:
    """Writes every case's archive as a fuzzing seed; returns how many."""
    out.mkdir(parents=True, exist_ok=True)
    for i, case in enumerate(cases()):
        (out / f"case-{i:03d}").write_bytes(case.data[:1 << 16])
    return len(cases())
