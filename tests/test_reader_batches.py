"""A local shard's read batches are grouped natively and assembled a sample at a time
(`_plain_runs`, `_Assembler.run`); the member-by-member path is the reference. Both must
deliver the same samples, failures (type, message, offset) and sample starts, whatever
the batch size, range, extension filter and error policy, and the native grouping must
agree with `split_key` / `is_metadata` on every name."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudecode import _native
from gpudecode.io import members
from gpudecode.io.reader import Failure, Grouper, iter_shard
from gpudecode.io.tario import is_metadata, split_key

from tarcorpus import BLOCK, header, member


def _python_grouping(names, prev_key):
    """What group_names should say, from the Python rules."""
    g = Grouper()
    g.key, g.index = prev_key, 0
    groups, exts = [], []
    for n in names:
        i = g.group(n)
        groups.append(-1 if i is None else i)
        exts.append(None if i is None else split_key(n)[1])
    return groups, exts


TRICKY = ["a.jpg", "a.JPG", "a.cls", "./a.txt", "././a.x", "dir/a.jpg", "dir/a.b.c", "dir.x/a", "dir.x/.a",
          ".hidden", "noext", "__key__", "__index__", "___", "__", "__/x.jpg", "___/x.jpg", "__a__/x.jpg",
          "__a__.jpg", "x/__a__.jpg", "a..b", "a.", "/abs.jpg", "a/", "./", ".", "A.JpEg", "b.jpg", "b.jpg",
          "a.jpg", "k 1.png", "k\t.png", "é.jpg", "a.JPĞ", "__a__\n", "a.jpg\n"]


def test_native_grouping_agrees_with_the_python_rules():
    ascii_names = [n for n in TRICKY if all(0x20 <= ord(c) <= 0x7e for c in n)]
    for prev in (None, "a", "dir/a", "zzz"):
        rel, exts, keys = _native.group_names(ascii_names, prev)
        want_groups, want_exts = _python_grouping(ascii_names, prev)
        assert rel.tolist() == want_groups
        assert exts == want_exts
        starts = [n for n, r, r0 in zip(ascii_names, rel.tolist(), [0, *rel.tolist()]) if r > 0 and r != r0]
        assert keys == [split_key(n)[0] for n in starts]
    for odd in ("é.jpg", "k\t.png", "__a__\n", "a.JPĞ", "a\x7f.jpg"):  # decided in Python
        assert _native.group_names(["a.jpg", odd], None) is None
    rel, exts, keys = _native.group_names([], "a")
    assert rel.size == 0 and exts == [] and keys == []
    printable = "".join(chr(c) for c in range(0x20, 0x7f)) + ".JPG"  # every byte the native rule takes
    rel, exts, keys = _native.group_names([printable], None)
    assert keys == [split_key(printable)[0]] and exts == [split_key(printable)[1]]
    with pytest.raises(TypeError):
        _native.group_names([b"a.jpg"], None)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab./_Xx\u00e9\n", max_size=8), max_size=12),
       st.one_of(st.none(), st.sampled_from(["a", "b", "", "./a"])))
def test_native_grouping_on_any_names(names, prev):
    got = _native.group_names(names, prev)
    if got is None:
        assert any(not 0x20 <= ord(c) <= 0x7e for n in names for c in n)
        return
    rel, exts, keys = got
    want_groups, want_exts = _python_grouping(names, prev)
    assert rel.tolist() == want_groups and exts == want_exts
    assert len(keys) == (max(want_groups) if want_groups and max(want_groups) > 0 else 0)
    for n, r in zip(names, want_groups):
        assert (r == -1) == (is_metadata(n) or split_key(n) is None)
        if r > 0:
            assert keys[r - 1] == split_key(n)[0]


def _tar(path, entries):
    """entries: (name, data) for regular files, (name, None) for a symbolic link."""
    out = b""
    for name, data in entries:
        raw = name.encode("utf-8", "surrogateescape")
        out += header(raw, 0, b"2", linkname=b"x") if data is None else member(raw, data)
    path.write_bytes(out + bytes(2 * BLOCK))
    return str(path)


RUNS = [0]


def _outcome(url, monkeypatch, batch, members_only, **kw):
    monkeypatch.setattr(members, "_READ_BATCH", batch)
    real = members._plain_runs
    if members_only:
        monkeypatch.setattr(members, "_plain_runs", lambda *a: None)
    else:  # count the batches that went as runs
        def spy(*a):
            out = real(*a)
            RUNS[0] += out is not None
            return out
        monkeypatch.setattr(members, "_plain_runs", spy)
    starts: list[int] = []
    got = []
    for item in iter_shard(url, starts=starts, **kw):
        if isinstance(item, Failure):
            e = item.error
            got.append(("F", type(e).__name__, str(e), getattr(e, "offset", None), item.fatal))
        else:
            got.append(("S", item.key, {k: bytes(v) for k, v in item.fields.items()}, item.shard, item.index))
    monkeypatch.undo()
    return got, starts


CASES = {
    "plain": [(f"s{i:02d}.{e}", f"{i}{e}".encode()) for i in range(9) for e in ("jpg", "cls", "json")],
    "metadata and no extension between fields": [
        ("__index__", b"idx"), ("a.jpg", b"1"), ("__meta__/x.jpg", b"m"), ("a.cls", b"2"), ("noext", b"n"),
        ("a.txt", b"3"), ("b.jpg", b"4"), ("dir/__x__", b"m"), ("b.cls", b"5")],
    "repeated extension": [("a.jpg", b"1"), ("a.cls", b"2"), ("a.JPG", b"3"), ("b.jpg", b"4"), ("b.cls", b"5"),
                           ("c.jpg", b"6"), ("c.jpg", b"7"), ("c.cls", b"8"), ("d.jpg", b"9")],
    "a key again later": [("a.jpg", b"1"), ("b.jpg", b"2"), ("a.jpg", b"3"), ("a.cls", b"4"), ("c.jpg", b"5")],
    "a link": [("a.jpg", b"1"), ("b.jpg", b"2"), ("b.cls", None), ("c.jpg", b"3")],
    "names not ASCII": [("a.jpg", b"1"), ("\u00e9t\u00e9.jpg", b"2"), ("\u00e9t\u00e9.cls", b"3"), ("b.JP\u011e", b"4"),
                        ("c.jpg", b"5")],
    "dot-slash and mixed case": [("./a.JPG", b"1"), ("./a.Cls", b"2"), ("././b.jpg", b"3"), ("b.CLS", b"4"),
                                 ("dir/c.tar.gz", b"5"), ("dir/c.jpg", b"6")],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_batches_deliver_what_members_do(tmp_path, monkeypatch, case):
    url = _tar(tmp_path / "s.tar", CASES[case])
    for on_error in ("raise", "skip"):
        for kw in ({}, {"extensions": frozenset({"jpg"})}, {"extensions": frozenset()}, {"start": 1, "stop": 3},
                   {"start": 2}, {"mapped": frozenset({"jpg"})}):
            want = _outcome(url, monkeypatch, 256, True, on_error=on_error, **kw)
            assert want[0] or kw, case  # every case delivers something when read whole
            for batch in (1, 2, 3, 5, 256):
                RUNS[0] = 0
                assert _outcome(url, monkeypatch, batch, False, on_error=on_error, **kw) == want, (case, batch, kw)
                if case == "plain":  # went through the batched path
                    assert RUNS[0] > 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "__m__", "./a", "x/b"]),
                          st.sampled_from(["jpg", "cls", "JPG", "", "json"]), st.booleans()), min_size=1, max_size=14),
       st.integers(1, 6), st.sampled_from(["raise", "skip"]))
def test_batches_on_any_shard(tmp_path, monkeypatch, entries, batch, on_error):
    tar = [(k + ("." + e if e else ""), None if link else (k + e).encode()) for k, e, link in entries]
    url = _tar(tmp_path / "h.tar", tar)
    for kw in ({}, {"extensions": frozenset({"jpg", "cls"})}):
        assert _outcome(url, monkeypatch, batch, False, on_error=on_error, **kw) == \
            _outcome(url, monkeypatch, 256, True, on_error=on_error, **kw)


def test_a_shard_that_shrinks_under_a_batch_is_named(tmp_path, monkeypatch):
    """The file cut while a batch is read: the member path names the member cut off.
    (Small members that came in with the index's reads of their headers are not read
    again: here none is held, so every member is read after the cut.)"""
    monkeypatch.setattr(members, "_HELD", 0)
    url = _tar(tmp_path / "s.tar", CASES["plain"])
    real = members._PartReader.read
    calls = []

    def read(self, part, wanted, *rest):
        if not calls:
            with open(url, "r+b") as f:
                f.truncate(part.offsets[5] + 1)
        calls.append(1)
        return real(self, part, wanted, *rest)

    monkeypatch.setattr(members._PartReader, "read", read)
    items = list(iter_shard(url, on_error="skip"))
    assert [i.key for i in items if not isinstance(i, Failure)] == ["s00"]
    fault = items[-1]
    assert isinstance(fault, Failure) and fault.fatal and "shrank" in str(fault.error)
    assert fault.error.key == "s01" and "s01.json" in str(fault.error)


def test_held_members_are_the_shard_as_indexed(tmp_path, monkeypatch):
    """Members small enough to come in with the index's reads (the whole of this small
    shard) are delivered as they were then: a cut made after the index loses or alters
    nothing, every sample is the original's, as tarfile reads it."""
    import tarfile

    url = _tar(tmp_path / "s.tar", CASES["plain"])
    with tarfile.open(url) as tf:
        original = {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
    real = members._PartReader.read

    def read(self, part, wanted, *rest):
        with open(url, "r+b") as f:
            f.truncate(part.offsets[5] + 1)
        return real(self, part, wanted, *rest)

    monkeypatch.setattr(members._PartReader, "read", read)
    items = list(iter_shard(url, on_error="skip"))
    assert not any(isinstance(i, Failure) for i in items)
    got = {f"{s.key}.{e}": bytes(d) for s in items for e, d in s.fields.items()}
    assert got == original


# -- a read batch probed and labelled in one native call (Pipeline._probe) ------------------


def _python_label(fields, exts, negative, classes):
    from gpudecode.errors import LabelError
    from gpudecode.labels import parse_label

    try:
        return parse_label(fields, exts, shard="s", key="k", allow_negative=negative, num_classes=classes)
    except LabelError as e:
        return str(e)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=70), st.from_regex(rb"\s*[+-]?[0-9]{1,22}\s*", fullmatch=True),
                 st.integers(-(1 << 64), 1 << 64).map(lambda v: str(v).encode())),
       st.booleans(), st.sampled_from([None, 10, 1 << 40]))
def test_native_labels_are_parse_labels(data, negative, classes):
    """probe_fields parses what parse_label takes to the same value, and leaves the rest
    (with `fits`, the sign and num_classes checks) to parse_label itself."""
    from gpudecode._probe import probe_samples
    from gpudecode.io.reader import Sample

    fields = {"jpg": b"\xff\xd8 not a jpeg", "cls": data}
    _, _, _, _, _, labels, ok = _native.probe_fields([fields], ["jpg"], ["cls"])
    want = _python_label(fields, ["cls"], negative, classes)
    if ok[0]:
        assert int(labels[0]) == int(data)
    else:
        assert isinstance(want, str) or not -(1 << 63) <= int(data) < (1 << 63)
    got = []

    def fits(v):
        return (v >= 0 or negative) and (classes is None or v < classes)

    s = Sample("k", fields, "s", 0)
    probed = probe_samples([s], ["jpg"], 0, lambda e: got.append(str(e)),
                           lambda smp: _python_label(smp.fields, ["cls"], negative, classes), label_exts=["cls"],
                           fits=fits)
    # the image is refused (not a JPEG) before the label is read, as in probe_samples
    assert not probed and len(got) == 1 and "k" in got[0]


def test_probe_samples_against_pillow_and_parse_label(tmp_path):
    """probe_samples (one native call a batch) keeps the samples whose first image field
    Pillow reads, with Pillow's size, in order, and with `label_exts` the labels
    parse_label gives, failures (no image, unreadable, too large, bad label) reported as
    parse_label and the probe report them: the same with the labels parsed natively as
    with parse_label called for each."""
    import io

    import numpy as np
    from PIL import Image

    from gpudecode._probe import probe_samples
    from gpudecode.errors import ErrorPolicy, LabelError
    from gpudecode.io.reader import Sample
    from gpudecode.labels import parse_label

    def enc(fmt, h, w):
        b = io.BytesIO()
        Image.fromarray(np.zeros((h, w, 3), np.uint8)).save(b, fmt)
        return b.getvalue()

    jpg, png, bmp = enc("JPEG", 5, 7), enc("PNG", 6, 4), enc("BMP", 3, 9)
    rows = [{"jpg": jpg, "cls": b"3"}, {"cls": b"1"}, {"png": png, "cls": b" -2\n"}, {"jpg": b"junk", "cls": b"1"},
            {"jpg": jpg, "json": b'{"label": 4}'}, {"jpg": bmp, "cls": b"9"}, {"jpg": jpg, "cls": b"1.5"},
            {"jpg": jpg}, {"jpg": jpg, "cls": b"12"}, {"png": png, "cls": b"99999999999999999999"},
            {"jpg": enc("JPEG", 400, 400), "cls": b"2"}, {"jpg": jpg, "cls": memoryview(b"5")}]
    chunk = [Sample(f"k{i}", f, "shard.tar", i) for i, f in enumerate(rows)]
    limit = 150 * 150
    for negative, classes in ((False, None), (True, None), (False, 10)):
        def label(s, negative=negative, classes=classes):
            return parse_label(s.fields, ["cls", "json"], shard=s.shard, key=s.key, allow_negative=negative,
                               num_classes=classes)

        def fits(v, negative=negative, classes=classes):
            return (v >= 0 or negative) and (classes is None or v < classes)

        # the reference: Pillow's size of the first image field, parse_label's label
        want, bad = [], []
        for s in chunk:
            data = next((s.fields[e] for e in ("jpg", "png") if e in s.fields), None)
            try:
                w, h = Image.open(io.BytesIO(bytes(data))).size if data is not None else (0, 0)
            except Exception:
                bad.append(s.key)
                continue
            if data is None or h * w > limit:
                bad.append(s.key)
                continue
            try:
                want.append((s.key, h, w, label(s)))
            except LabelError:
                bad.append(s.key)
        a, b = ErrorPolicy("skip"), ErrorPolicy("skip")
        native = probe_samples(chunk, ["jpg", "png"], limit, a, label, label_exts=["cls", "json"], fits=fits)
        each = probe_samples(chunk, ["jpg", "png"], limit, b, label)
        assert [(p.sample.key, p.height, p.width, p.extra) for p in native] == want
        assert [(p.sample.key, p.format, p.height, p.width, p.extra, bytes(p.data)) for p in native] == \
            [(p.sample.key, p.format, p.height, p.width, p.extra, bytes(p.data)) for p in each]
        assert sorted(x.key for x in a.skipped) == sorted(bad)
        assert [(x.key, x.reason, x.error) for x in a.skipped] == [(x.key, x.reason, x.error) for x in b.skipped]
        assert [p.format for p in native if p.sample.key == "k0"] == ["jpeg"] and len(want) >= 4
        with pytest.raises(Exception) as ea:
            probe_samples(chunk, ["jpg", "png"], limit, ErrorPolicy("raise"), label)
        with pytest.raises(Exception) as eb:
            probe_samples(chunk, ["jpg", "png"], limit, ErrorPolicy("raise"), label, label_exts=["cls", "json"],
                          fits=fits)
        assert type(ea.value) is type(eb.value) and str(ea.value) == str(eb.value)
