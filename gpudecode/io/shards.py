"""Shard lists: expansion of the ways users name their shards, and the split of one
epoch's shards over ranks and DataLoader workers."""
from __future__ import annotations

import os
import random
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, Union

import braceexpand

from ..errors import ShardReadError
from . import files as _files
from .pattern import FIELD, ShardPattern

ShardSpec = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

SHARD_SUFFIXES = (".tar", ".tgz", ".tar.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")  # (by name, any case: io/parquet.is_parquet)
_LIST_SUFFIXES = (".txt", ".list", ".lst", ".shards")
_AT_PATTERN = re.compile(r"^(.*)@(\d+)([^/]*)$")
MAX_SHARDS = 1_000_000  # a pattern naming more is refused before it is expanded
_RANGE = re.compile(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.(-?\d+))?")


def _count_bound(spec: str) -> float:
    """An upper bound of how many strings braceexpand makes of `spec`: the product of
    every brace group's size (a range's length, a list's items), nested ones included."""
    bound = 1.0
    stack: list[tuple[int, int]] = []  # (position after "{", commas at that depth)
    i = 0
    while i < len(spec):
        ch = spec[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            stack.append((i + 1, 0))
        elif ch == "," and stack:
            start, commas = stack[-1]
            stack[-1] = (start, commas + 1)
        elif ch == "}" and stack:
            start, commas = stack.pop()
            m = _RANGE.fullmatch(spec[start:i])
            if commas:
                bound *= commas + 1
            elif m:
                a, b, step = m.groups()
                if len(a) > 18 or len(b) > 18 or (step is not None and len(step) > 18):
                    return float("inf")
                numeric = a.lstrip("-").isdigit(), b.lstrip("-").isdigit()
                if numeric == (True, True):
                    lo, hi = int(a), int(b)
                elif numeric == (False, False):  # letters, one each
                    lo, hi = ord(a), ord(b)
                else:  # a letter and a number: braceexpand leaves it as it is
                    i += 1
                    continue
                bound *= abs(hi - lo) // max(1, abs(int(step or 1))) + 1
        i += 1
    return bound


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def local_path(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url


def _expand_one(spec: str, seen: frozenset[str] = frozenset(), files: dict | None = None) -> list[str]:
    if "::" in spec:  # webdataset's separator of several patterns in one string
        return [u for part in spec.split("::") for u in _expand_one(part, seen, files)]
    m = _AT_PATTERN.match(spec)
    if m and "://" not in m.group(3):
        # dlinputs' shard-count pattern: imagenet-@001000.tgz -> imagenet-000000.tgz .. -000999.tgz
        prefix, digits, suffix = m.groups()
        if len(digits) > 7 or int(digits) > MAX_SHARDS:
            raise ValueError(f"shard pattern {spec!r} names more than {MAX_SHARDS} shards")
        return [f"{prefix}{i:0{len(digits)}d}{suffix}" for i in range(int(digits))]
    if _count_bound(spec) > MAX_SHARDS:
        raise ValueError(f"shard pattern {spec!r} names more than {MAX_SHARDS} shards")
    urls = list(braceexpand.braceexpand(spec))
    if len(urls) != 1:
        return [u for url in urls for u in _matched(url)]
    url = urls[0]
    if _GLOB.search(url) or FIELD.search(url.rpartition("/")[2]):
        return _matched(url)
    if is_local(url):
        path = Path(local_path(url))
        try:
            is_dir, is_file = path.is_dir(), path.is_file()
        except OSError as e:  # a name too long for the file system, ...: not a bare OSError
            raise ShardReadError(f"cannot look at the path: {e.strerror or e}", shard=url) from e
        if is_dir:
            names = [p.name for p in path.iterdir() if _is_data(p.name) and p.is_file()]
            found = _folder_data(str(path), names, [p.name for p in path.glob("*-classes.json")])
            if found:
                return found
            if files is None:
                raise ShardReadError("directory holds no .tar/.tgz/.tar.gz shards or Parquet files (an ImageFolder "
                                     "tree is read by gpudecode.Loader and ShardReader as it is)", shard=url)
            return [_register(_files.scan_tree(str(path)), files)]
        if path.suffix in _LIST_SUFFIXES and is_file and files is not None and _files.looks_like_file_list(path):
            return [_register(_files.read_list(path), files)]
        if path.suffix in _LIST_SUFFIXES and is_file:
            key = os.path.realpath(path)
            if key in seen:
                raise ValueError(f"shard list {url!r} includes itself")
            out = []
            for line in _entries(path.read_text(encoding="utf-8-sig")):  # (a BOM is no part of the first line)
                if is_local(line) and not os.path.isabs(local_path(line)):
                    line = str(path.parent / local_path(line))
                out.extend(_expand_one(line, seen | {key}, files))
            return out
    elif not url.lower().startswith(("http://", "https://")):
        return _remote_folder_or_list(url, seen, files)
    return [url]


def _remote_folder_or_list(url: str, seen: frozenset[str], files: dict | None) -> list[str]:
    """A URL on an fsspec file system that lists (s3://, gs://, memory://; not HTTP) read as
    a local path is: a folder (a URL ending in "/", or a name without a dot that is a folder
    there) gives its shards, sorted; a list file (.txt, .list, ...) its lines, relative ones
    from its folder; anything else is the URL itself (a shard), with no request made.

    Raises:
        ShardReadError: the folder holds no shards, or cannot be listed or read.
    """
    name = url.rstrip("/").rpartition("/")[2]
    is_list = name.endswith(_LIST_SUFFIXES)
    maybe_folder = url.endswith("/") or (name and "." not in name)
    if not (is_list or maybe_folder):
        return [url]
    if is_list and url in seen:
        raise ValueError(f"shard list {url!r} includes itself")
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(url)
        if maybe_folder:
            if not fs.isdir(path):
                return [url]  # (a shard named without a suffix)
            entries = fs.ls(path, detail=True)
        else:
            text = fs.cat_file(path).decode("utf-8-sig")  # (a BOM is no part of the first line)
    except Exception as e:  # fsspec and its backends raise their own types
        raise ShardReadError(f"cannot {'list the folder' if maybe_folder else 'read the list'}: "
                             f"{type(e).__name__}: {e}", shard=url) from e
    if maybe_folder:
        names = [e["name"].rstrip("/").rpartition("/")[2] for e in entries if e.get("type") == "file"]
        found = _folder_data(url.rstrip("/"), [n for n in names if _is_data(n)],
                             [n for n in names if n.endswith("-classes.json")])
        if not found:
            raise ShardReadError("the folder holds no .tar/.tgz/.tar.gz shards or Parquet files (a remote "
                                 "ImageFolder tree is not read: make shards of it with gpudecode shard)", shard=url)
        return found
    lines = _entries(text)
    if _files.names_images(lines):
        raise ShardReadError("the list names image files (a file list of `path label` lines): remote file lists are "
                             "not read; make shards of the images with gpudecode shard, or copy both here.", shard=url)
    folder = url.rpartition("/")[0]
    return [u for line in lines
            for u in _expand_one(line if "://" in line or line.startswith("/") else f"{folder}/{line}",
                                 seen | {url}, files)]


def _entries(text: str) -> list[str]:
    """A shard list's entries: its lines stripped, blank ones and `#` comments left out."""
    return [line for raw in text.splitlines() if (line := raw.strip()) and not line.startswith("#")]


def _is_data(name: str) -> bool:
    return name.endswith(SHARD_SUFFIXES) or name.lower().endswith(PARQUET_SUFFIXES)


_SPLIT_FILE = re.compile(r"(.+?)-\d+-of-\d+\.(?:parquet|pq)", re.IGNORECASE)  # Hugging Face: train-00000-of-00004.parquet


def _folder_data(folder: str, names: list[str], indexes: list[str]) -> list[str]:
    """A folder's data files (`names`: those _is_data takes), sorted, as paths under
    `folder`: its tar shards, or its Parquet files (a Hugging Face dataset's data/ folder);
    [] where it holds neither.

    Raises:
        ShardReadError: the folder holds both kinds; or the sets of several splits (see
            _one_set; Parquet files named as the Hugging Face Hub names them:
            train-00000-of-00004.parquet beside test-00000-of-00001.parquet).
    """
    tars = sorted(n for n in names if n.endswith(SHARD_SUFFIXES))
    parquet = sorted(n for n in names if n.lower().endswith(PARQUET_SUFFIXES))
    if tars and parquet:
        raise ShardReadError(f"the folder holds both tar shards ({len(tars)}) and Parquet files ({len(parquet)}): "
                             f"name the ones to read, e.g. {folder}/*.tar or {folder}/*.parquet", shard=folder)
    if parquet:
        splits: dict[str, int] = {}
        for n in parquet:
            if m := _SPLIT_FILE.fullmatch(n):
                splits[m.group(1)] = splits.get(m.group(1), 0) + 1
        if len(splits) > 1:
            shown = ", ".join(f"{h}: {k}" for h, k in sorted(splits.items())[:4])
            raise ShardReadError(f"the folder holds the Parquet files of {len(splits)} splits ({shown}): name one, "
                                 f"e.g. {folder}/{'train' if 'train' in splits else sorted(splits)[0]}-*.parquet", shard=folder)
    found = [f"{folder}/{n}" for n in tars or parquet]
    if found:
        _one_set(folder, found, indexes)
    return found


def _one_set(folder: str, found: list[str], indexes: list[str]) -> None:
    """A folder holding the shards of several sets `gpudecode shard` wrote (train-*, val-*,
    each with its class index beside: `indexes`, the folder's *-classes.json names) is not
    one dataset: refused, naming the sets.

    Raises:
        ShardReadError: two sets or more.
    """
    sets = {}
    for idx in indexes:
        head = idx[:-len("-classes.json")]
        rx = re.compile(re.escape(head) + r"[-_.]?\d+(\.tar|\.tgz|\.tar\.gz)")
        members = [f for f in found if rx.fullmatch(f.rpartition("/")[2])]
        if members:
            sets[head] = members
    if len(sets) > 1:
        shown = ", ".join(f"{h}-*: {len(m)}" for h, m in sorted(sets.items()))
        first = sorted(sets)[0]
        raise ShardReadError(f"the folder holds {len(sets)} sets of shards written by gpudecode shard ({shown}): "
                             f"name one, e.g. {folder}/{first}-%06d.tar, or all with {folder}/*.tar",
                             shard=folder)
    # shards of another tool: names that differ before their numbers (train-000.tar beside
    # val-000.tar) are read as one set, as asked, but said
    groups: dict[str, int] = {}
    for f in found:  # a name with its numbers taken out: train-000003.tar -> train-#.tar
        head = _DIGITS.sub("#", f.rpartition("/")[2])
        groups[head] = groups.get(head, 0) + 1
    if len(groups) > 1 and all(n > 0 for n in groups.values()) and len(groups) < len(found):
        shown = ", ".join(f"{h}: {n}" for h, n in sorted(groups.items())[:4])
        warnings.warn(f"{folder}: its shards are read as one set, but their names fall in {len(groups)} groups "
                      f"({shown}): if these are different splits (train and val), name one with a pattern, e.g. "
                      f"{folder}/{sorted(groups)[0].replace('#', '*')}", RuntimeWarning, stacklevel=5)


_GLOB = re.compile(r"[*?[]")
_DIGITS = re.compile(r"\d+")


def _matched(url: str) -> list[str]:
    """A glob (`train-*.tar`, sorted) or a shard-number pattern as ShardWriter and
    `gpudecode shard` take it (`train-%06d.tar`, `train-{:06d}.tar`: the files that fit
    it, by number), local or fsspec; anything else (or a path that exists as it is) is
    itself.

    Raises:
        ShardReadError: the pattern matches no file.
    """
    if url.startswith(("http://", "https://")):  # no listing there; '?' and '%' are the URL's own
        return [url]
    numbered = FIELD.search(url.rpartition("/")[2])  # (the shard number: in the file name only, io/pattern.py)
    if not _GLOB.search(url) and numbered is None:
        return [url]
    if is_local(url) and os.path.exists(local_path(url)):
        return [url]
    if numbered is not None:
        sp = ShardPattern(url)  # (raises: two fields, a field of 100 digits or more)
        rx: re.Pattern | None = sp.regex
        pattern = sp.glob(escape=False)
    else:
        rx, pattern = None, url
    if is_local(url):
        import glob

        found = glob.glob(local_path(pattern))
        prefix = "file://" if url.startswith("file://") else ""
        found = [prefix + f for f in found if os.path.isfile(f)]
    else:
        try:
            import fsspec

            fs, path = fsspec.core.url_to_fs(pattern)  # (get_fs_token_paths would glob it itself)
            listed = fs.glob(path)
        except Exception as e:  # fsspec and its backends raise their own types (a backend not installed: ImportError)
            raise ShardReadError(f"cannot list the files the pattern names: {type(e).__name__}: {e}", shard=url) from e
        proto, rest = url.split("://", 1)
        # in the user's spelling (memory:// lists "/a/b" for memory://a/b): what the pattern's regex matches
        found = [p if "://" in p else f"{proto}://{p if rest.startswith('/') else p.lstrip('/')}" for p in listed]
    if rx is not None:
        hits = [(int(mm.group(1)), f) for f in found if (mm := rx.fullmatch(f))]
        found = [f for _, f in sorted(hits)]
        numbers = sorted({n for n, _ in hits})
        if numbers and numbers[-1] - numbers[0] + 1 != len(numbers):  # a shard missing in the run: said
            have = set(numbers)
            gaps = [n for n in range(numbers[0], numbers[-1] + 1) if n not in have]
            shown = ", ".join(map(str, gaps[:5])) + (f" and {len(gaps) - 5} more" if len(gaps) > 5 else "")
            warnings.warn(f"shard pattern {url!r}: the numbers {numbers[0]}..{numbers[-1]} lack {shown} (a shard "
                          "not copied, or deleted?): the others are read", RuntimeWarning, stacklevel=4)
    else:
        found.sort()
    if not found:
        raise ShardReadError("the pattern matches no file", shard=url)
    return found


def _register(flist, files: dict) -> str:
    if flist.name in files:
        raise ValueError(f"{flist.name[len(_files.PREFIX):]!r} is named twice (to read a set more than once an "
                         "epoch, give it once as gpudecode.Source(..., repeat=k))")
    if flist.root:
        real = os.path.realpath(flist.root)
        for other in files.values():  # the same tree through a symlinked alias is the same tree
            if other.root and os.path.realpath(other.root) == real and other.classes and flist.classes:
                raise ValueError(f"{flist.root!r} and {other.root!r} are the same tree (one links to the other): "
                                 "it would be read twice an epoch")
    files[flist.name] = flist
    return flist.name


def _named_once(urls: list[str], origins: list[str]) -> None:
    """Each shard once, unless repeated on purpose: two different names (overlapping
    patterns, a folder and a pattern, a symlinked alias) that reach the same shard would
    read it twice an epoch by accident. The same name given again (a list that repeats its
    shards for a longer epoch) is taken as meant. `origins[i]`: the spec urls[i] came from.

    Raises:
        ValueError: naming the shard and the two names that reach it.
    """
    seen: dict[str, tuple[str, str]] = {}
    for u, spec in zip(urls, origins):
        if u.startswith(_files.PREFIX):
            continue
        key = os.path.realpath(local_path(u)) if is_local(u) else u
        if key in seen and seen[key][1] != spec:
            raise ValueError(f"the shard {key!r} is named by {seen[key][1]!r} and by {spec!r}: it would be read twice "
                             "an epoch; name each shard once (repeat a name to read a shard twice on purpose)")
        seen.setdefault(key, (u, spec))


def expand_urls(urls: ShardSpec, *, files: dict | None = None) -> list[str]:
    """All shard URLs named by `urls`.

    Accepts a list of URLs or paths; a brace pattern (`train-{000000..000099}.tar`); the
    dlinputs shard-count pattern (`imagenet-@001000.tgz`: 1000 shards 000000..000999); a
    directory (its .tar/.tgz/.tar.gz files, sorted); a text file (.txt/.list/.lst/.shards)
    of URLs, one a line, relative paths taken from the file's folder; several patterns
    joined by `::`; a glob (`train-*.tar`, sorted) and the printf pattern `gpudecode shard`
    writes (`train-%06d.tar`: the files that fit it, in number order). Folders, list files,
    globs and printf patterns work local or on an fsspec file system that lists (s3://,
    gs://; not HTTP). Local paths, `file://` and any fsspec URL (`http://`, `s3://`, ...).

    With `files` (a dict), image files are taken too (gpudecode.io.files): an ImageFolder
    tree, a list file of `path label` lines, image paths or (path, label) pairs in a list
    (one file list for all of them); each becomes one name in the result and its
    FileList in `files`.
    """
    if isinstance(urls, (str, os.PathLike, _files.FileList)):
        items: list = [urls]
    else:
        items = list(urls)
    if files is not None and any(isinstance(u, _files.FileList) for u in items):
        given = [_register(u, files) for u in items if isinstance(u, _files.FileList)]
        rest = [u for u in items if not isinstance(u, _files.FileList)]
        return given + (expand_urls(rest, files=files) if rest else [])
    if files is not None and any(_files.is_file_item(u) for u in items):
        named = [u for u in items if _files.is_file_item(u)]
        rest = [u for u in items if not _files.is_file_item(u)]
        return [_register(_files.from_items(named), files)] + (expand_urls(rest, files=files) if rest else [])
    specs = [os.fspath(u) for u in items]
    out: list[str] = []
    origins: list[str] = []
    for spec in specs:
        got = _expand_one(spec, files=files)
        out.extend(got)
        origins.extend([spec] * len(got))
        if len(out) > MAX_SHARDS:
            raise ValueError(f"more than {MAX_SHARDS} shards named")
    _named_once(out, origins)
    return out


def detect_rank(*, array: bool = False) -> tuple[int, int]:
    """(rank, world_size): the one rank detector of every command.

    From torch.distributed when initialized, else torchrun's RANK and WORLD_SIZE, else
    SLURM's SLURM_PROCID and SLURM_NTASKS (the tasks of one job step), else (0, 1).
    With `array`, the elements of a SLURM array job are ranks too, before all that
    (SLURM_ARRAY_TASK_ID, _MIN, _STEP, _COUNT; task t of element a is a * tasks + t): for
    work that an array shares out (`gpudecode precache`), not for training, where an
    array is usually a sweep of independent jobs that each read everything."""
    env = os.environ
    if array and "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
        first = int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
        step = int(env.get("SLURM_ARRAY_TASK_STEP", "1"))
        element = (int(env["SLURM_ARRAY_TASK_ID"]) - first) // max(1, step)
        count = int(env["SLURM_ARRAY_TASK_COUNT"])
        task, tasks = int(env.get("SLURM_PROCID", "0")), int(env.get("SLURM_NTASKS", "1"))
        return element * tasks + task, count * tasks
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
    return 0, 1


def detect_worker() -> tuple[int, int]:
    """(worker id, number of workers) inside a torch DataLoader worker, else (0, 1)."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    return (info.id, info.num_workers) if info is not None else (0, 1)


def epoch_order(shards: Sequence[str], *, shuffle: bool, seed: int, epoch: int) -> list[str]:
    """The epoch's shard order: as given, or shuffled from (seed, epoch) alone."""
    order = list(shards)
    if shuffle:
        random.Random(f"gpudecode-shards:{seed}:{epoch}").shuffle(order)
    return order


def split(items: Sequence, index: int, count: int) -> list:
    """Every count-th item starting at index: rank i of N gets items i, i+N, i+2N, ..."""
    return list(items[index::count])


# -- the split of an epoch over consumers (ranks x DataLoader workers) ---------------------


@dataclass(frozen=True, slots=True)
class Segment:
    """Samples [start, stop) of one shard (stop None: to its end)."""

    url: str
    start: int = 0
    stop: int | None = None


@dataclass(frozen=True, slots=True)
class Share:
    """What one consumer reads in one epoch: its segments in reading order, how many
    samples they hold (None when unknown: shard mode without counts), and how many it
    yields (`target`: the count, padded or trimmed for an `even` policy)."""

    segments: tuple[Segment, ...]
    count: int | None
    target: int | None


def choose_mode(split: str, n_shards: int, consumers: int, even: str | None) -> str:
    """"shard" (whole shards per consumer) or "sample" (contiguous runs of samples).

    auto: whole shards when there are at least as many as consumers and no `even` policy
    (nothing needs counting then); otherwise samples, which splits exactly (to one sample)
    and, for even="drop", drops the tail of the epoch as DistributedSampler(drop_last=True)
    does."""
    if split not in ("auto", "shard", "sample", "elastic"):
        raise ValueError(f"split must be 'auto', 'shard', 'sample' or 'elastic', not {split!r}")
    if split == "shard" and n_shards < consumers:
        raise ValueError(f"split='shard' gives each of the {consumers} consumers (ranks x DataLoader workers) whole "
                         f"shards, and there {'is' if n_shards == 1 else 'are'} {n_shards}: some would read nothing. "
                         "Use split='sample' or 'elastic' (split='auto' splits by sample when shards are fewer)")
    if split != "auto":
        return split
    return "shard" if n_shards >= consumers and even is None else "sample"


def _segments(order: Sequence[str], counts: dict[str, int], a: int, b: int) -> list[Segment]:
    """Global sample positions [a, b) of the concatenation of `order` as segments;
    positions past the end wrap around to the start (padding)."""
    total = sum(counts[u] for u in order)
    out: list[Segment] = []
    pos = a
    while pos < b:
        p = pos % total
        base = 0
        for u in order:
            n = counts[u]
            if p < base + n:
                start = p - base
                take = min(n - start, b - pos)
                # a run to the shard's end reads to its end: a fault there is seen and reported
                out.append(Segment(u, start, None if start + take == n else start + take))
                pos += take
                break
            base += n
    return out


def plan_share(urls: Sequence[str], *, consumer: int, consumers: int, mode: str, even: str | None,
               shuffle: bool, seed: int, epoch: int, counts: dict[str, int] | None) -> Share:
    """Consumer `consumer`'s share of `epoch` (see choose_mode). `counts` (samples per
    shard) is needed in sample mode and for `even`.

    Raises:
        ValueError: fewer samples than consumers (sample mode), or counts missing.
    """
    order = epoch_order(urls, shuffle=shuffle, seed=seed, epoch=epoch)
    if mode == "shard":
        mine = order[consumer::consumers]
        segs = tuple(Segment(u) for u in mine)
        if counts is None:
            return Share(segs, None, None)
        per = [sum(counts[u] for u in order[c::consumers]) for c in range(consumers)]
        count = per[consumer]
        target = count if even is None else (max(per) if even == "pad" else min(per))
        return Share(segs, count, target)
    if counts is None:
        raise ValueError("sample mode needs the shards' sample counts")
    total = sum(counts[u] for u in order)
    if total < consumers:
        raise ValueError(f"{total} samples cannot be split over {consumers} consumers (ranks x workers): "
                         "each needs at least one")
    if even == "drop":
        q = total // consumers
        a, b = consumer * q, (consumer + 1) * q
    elif even == "pad":
        q = -(-total // consumers)
        a, b = consumer * q, (consumer + 1) * q
    else:
        a, b = consumer * total // consumers, (consumer + 1) * total // consumers
    segs = tuple(_segments([u for u in order if counts[u]], counts, a, b))
    return Share(segs, b - a, b - a)


def even_cost(urls: Sequence[str], counts: dict[str, int], *, consumers: int, mode: str, even: str,
              shuffle: bool, seed: int, epoch: int) -> int:
    """Samples repeated (pad) or left out (drop) in one epoch over all consumers."""
    shares = [plan_share(urls, consumer=c, consumers=consumers, mode=mode, even=even, shuffle=shuffle, seed=seed,
                         epoch=epoch, counts=counts) for c in range(consumers)]
    total = sum(counts.values())
    return abs(sum(s.target or 0 for s in shares) - total)
