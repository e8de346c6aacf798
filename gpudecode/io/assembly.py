"""One shard's samples: its members (gpudecode.io.members) assembled into samples, each
delivered whole or as a Failure naming it (see reader.py's module doc for what is delivered
around a fault), entered at any sample of a counted local shard."""
from __future__ import annotations

from typing import Iterator



from .._threads import ThreadGroup
from ..errors import (GpuDecodeError, LocatedError, ShardFormatError,
                      ShardReadError)
from . import shards as _shards
from .cache import ShardCache
from .remote import RemoteOptions
from .tario import BLOCK, Member, TarFault, is_metadata, split_key
from .count_store import sample_starts
from .parquet import is_parquet, sample_lists
from .members import (Failure, Sample, _link_kind, _MapCache, _Pooled, _Run, _Runs, _Want,
                      iter_members)


__all__ = ["iter_shard"]


def iter_shard(url: str, *, on_error: str = "raise", extensions: frozenset[str] | None = None,
               remote: RemoteOptions | None = None, group: ThreadGroup | None = None,
               start: int = 0, stop: int | None = None, cache: ShardCache | None = None,
               starts: list[int] | None = None, mapped: frozenset[str] = frozenset(),
               maps: _MapCache | None = None, pooled: _Pooled | None = None) -> Iterator[Sample | Failure]:
    """Samples start..stop-1 of one shard (Grouper's numbering; stop None: to its end),
    in order, interleaved with Failure records (see the module doc for what is delivered
    around a fault). Under "raise" the first failure ends the shard. Members of other
    samples are not read; a local shard counted before is entered at sample `start`'s
    headers. `starts` (a list) collects the chain offset of each sample's first member."""
    for items in _shard_lists(url, on_error=on_error, extensions=extensions, remote=remote, group=group, start=start,
                              stop=stop, cache=cache, starts=starts, mapped=mapped, maps=maps, pooled=pooled):
        yield from items


def _shard_lists(url: str, *, on_error: str = "raise", extensions: frozenset[str] | None = None,
                 remote: RemoteOptions | None = None, group: ThreadGroup | None = None,
                 start: int = 0, stop: int | None = None, cache: ShardCache | None = None,
                 starts: list[int] | None = None, mapped: frozenset[str] = frozenset(),
                 maps: _MapCache | None = None, pooled: _Pooled | None = None) -> Iterator[list[Sample | Failure]]:
    """iter_shard's items a list at a time (a read batch's samples together: no generator
    step a sample); a list with a fatal Failure ends with it, and is the last."""
    if is_parquet(url):  # rows as samples (io/parquet.py)
        yield from sample_lists(url, start=start, stop=stop, extensions=extensions, mapped=mapped, maps=maps,
                                pooled=pooled)
        return
    end = stop if stop is not None else float("inf")
    want = _Want(start, end, extensions)
    seek = None
    if start > 0 and _shards.is_local(url):
        known = sample_starts(url)
        if known is not None and start < len(known):
            seek = (int(known[start]), start)
    samples = _Assembler(url, on_error, starts)
    try:
        for item in iter_members(url, want=want, remote=remote, group=group, cache=cache, seek=seek, mapped=mapped,
                                 maps=maps, runs=True, pooled=pooled):
            if isinstance(item, _Runs):  # a plain read batch's runs
                done, past = samples.runs(item, start, end)
                if done:
                    yield done
                    if isinstance(done[-1], Failure) and done[-1].fatal:  # under "raise", a member's fault
                        return
                if past:
                    break
                continue
            if isinstance(item, TarFault):
                yield list(samples.fault(item))
                return
            member, data, g = item
            if g is None or g < start:
                continue
            if g >= end:  # the next sample begins: the last one of the range is complete
                break
            out = samples.member(member, data, g)
            if out:
                yield out
                if isinstance(out[-1], Failure) and out[-1].fatal:  # under "raise", this member's fault
                    return
        if samples.key is not None:
            yield [samples.pending()]
    except GpuDecodeError as e:
        # the shard failed under the reader (open, network, gzip): the sample being
        # assembled may be incomplete, and is named
        if isinstance(e, LocatedError) and e.key is None and samples.key is not None:
            e = type(e)(e.reason, shard=e.shard, key=samples.key, offset=e.offset)
        yield [Failure(e, fatal=True)]


# csrc/tar.cpp's faults of an extended header ('L', 'x', 'g') whose checksum holds (its own
# member's name unknown: the name was what it carried)
_EXTENDED_FAULTS = ("bad size field", "member size out of range", "extended header of", "bad pax",
                    "GNU sparse member is not supported", "pax path contains")


class _Assembler:
    """iter_shard's samples, member by member: the sample being assembled (key, index,
    fields) and what is wrong with it (`bad`: the sample is delivered as a Failure)."""

    def __init__(self, url: str, on_error: str, starts: list[int] | None) -> None:
        self.url, self.on_error, self.starts = url, on_error, starts
        self.key: str | None = None
        self.index: int | None = None
        self.fields: dict[str, bytes | memoryview] = {}
        self.bad: GpuDecodeError | None = None
        self.seen: dict[str, int] = {}  # key -> sample index, for this run of the shard

    def pending(self) -> Sample | Failure:
        if self.bad is None:
            return Sample(self.key, self.fields, self.url, self.index)  # type: ignore[arg-type]
        return Failure(self.bad, fatal=False)

    def fault(self, item: TarFault) -> Iterator[Sample | Failure]:
        """The archive's fault: the sample it leaves complete (if any), then the fault."""
        parts = split_key(item.member) if item.member is not None else None
        message = item.message
        if item.after_end:  # the archive ended before the fault: its last sample is whole
            if self.key is not None:
                yield self.pending()
            self.key = None
        elif item.member is None and self.key is not None and message.startswith(_EXTENDED_FAULTS):
            # an extended header (a GNU long name, pax records) whose checksum holds but whose
            # size or records are bad: the archive is whole up to it, and it begins the next
            # member, whose name it was to give: the sample before is delivered as the archive
            # holds it, the fault names the place after it. (A header whose checksum fails, or
            # an archive cut off, may have been part of that sample: it is not delivered then.)
            message = f"{message} (in the extended header after sample {self.key!r})"
            yield self.pending()
            self.key = None
        elif parts is not None and parts[0] != self.key:
            if self.key is not None:
                yield self.pending()  # the fault is in another sample's data: this one is complete
            self.key = parts[0]
        cls = ShardReadError if item.io else ShardFormatError
        yield Failure(cls(message, shard=self.url, key=self.key, offset=item.offset), fatal=True)

    def member(self, member: Member, data: bytes | memoryview | None, g: int) -> list[Sample | Failure]:
        """Takes member `member` of sample g. Returns what to deliver, in order: the
        previous sample when this member begins a new one, and a fatal Failure when the
        member is bad under "raise" (a sample already bad takes no more members)."""
        k, ext = split_key(member.name) or ("", "")  # g is not None: the name has a key
        out = self._begin(k, g, member.chain, member.offset) if g != self.index else []
        if self.bad is None:
            self.bad = self._member_error(member, k, ext)
            if self.bad is None:
                if data is not None:
                    self.fields[ext] = data
            elif self.on_error == "raise":
                out.append(Failure(self.bad, fatal=True))
        return out

    def runs(self, runs: _Runs, start: int, end: float) -> tuple[list[Sample | Failure], bool]:
        """Takes a plain read batch's runs of samples start..end-1 (others passed over):
        (what to deliver, in order, a fatal Failure last if one ends the shard; whether a
        run at or past `end` was met). A run that begins a new sample whose key is new
        and whose extensions are distinct is taken here, in one loop; any other goes
        through run()."""
        out: list[Sample | Failure] = []
        seen, starts, url = self.seen, self.starts, self.url
        exts, datas, bounds, keys, chains, at = runs.exts, runs.datas, runs.bounds, runs.keys, runs.part.chains, runs.at
        for j, g in enumerate(runs.gs):
            if g < start:
                continue
            if g >= end:
                return out, True
            a, b = bounds[j], bounds[j + 1]
            key = keys[j]
            # (a sample of two fields, an image and its label, the common case, without the
            # slices, set and zip: fewer objects a sample for the garbage collector)
            pair = b - a == 2 and exts[a] != exts[a + 1]
            if g != self.index and key not in seen and (pair or b - a == 1 or len(set(exts[a:b])) == b - a):
                if self.key is not None:
                    out.append(Sample(self.key, self.fields, url, self.index) if self.bad is None  # type: ignore[arg-type]
                               else Failure(self.bad, fatal=False))
                self.key, self.index, self.bad = key, g, None
                if pair and datas[a] is not None and datas[a + 1] is not None:
                    self.fields = {exts[a]: datas[a], exts[a + 1]: datas[a + 1]}
                else:
                    ds = datas[a:b]
                    self.fields = dict(zip(exts[a:b], ds)) if None not in ds else {
                        e: d for e, d in zip(exts[a:b], ds) if d is not None}
                seen[key] = g
                if starts is not None:
                    starts.append(chains[at[j]])
                continue
            out.extend(self.run(runs.run(j)))
            if out and isinstance(out[-1], Failure) and out[-1].fatal:
                return out, False
        return out, False

    def run(self, r: _Run) -> list[Sample | Failure]:
        """Takes the run of sample r.g's members (a plain read batch's): as member() for
        each, in one step where no extension repeats (the common case)."""
        p, at = r.part, r.at
        out = self._begin(r.key, r.g, p.chains[at], p.offsets[at]) if r.g != self.index else []
        if self.bad is not None:
            return out
        fields = self.fields
        if len(set(r.exts)) == len(r.exts) and fields.keys().isdisjoint(r.exts):
            if None in r.datas:
                fields.update((e, d) for e, d in zip(r.exts, r.datas) if d is not None)
            else:
                fields.update(zip(r.exts, r.datas))
            return out
        # an extension repeats: member by member, for the error naming that member; the
        # run's members are its fields in order (metadata between them passed over)
        i = at
        for ext, data in zip(r.exts, r.datas):
            while (split_key(p.names[i]) or ("", ""))[1] != ext or is_metadata(p.names[i]):
                i += 1
            out.extend(self.member(Member(p.names[i], p.offsets[i], p.sizes[i], "0", p.chains[i]), data, r.g))
            i += 1
            if self.bad is not None:
                break
        return out

    def _begin(self, k: str, g: int, chain: int, offset: int) -> list[Sample | Failure]:
        done = [self.pending()] if self.key is not None else []
        self.key, self.index, self.fields, self.bad = k, g, {}, None
        if self.starts is not None:
            self.starts.append(chain)
        if k in self.seen:  # the same key again, after other samples: a duplicated sample
            self.bad = ShardFormatError(f"key {k!r} appears a second time in the shard (sample {g}; the first was "
                                        f"sample {self.seen[k]}): a duplicated sample", shard=self.url, key=k,
                                        offset=offset - BLOCK)
        else:
            self.seen[k] = g
        return done

    def _member_error(self, member: Member, k: str, ext: str) -> GpuDecodeError | None:
        if member.type != "0":
            return ShardFormatError(f"member {member.name!r} is a {_link_kind(member.type)}: gpudecode reads only "
                                    "regular files (pack the target's bytes instead)", shard=self.url, key=k,
                                    offset=member.offset - BLOCK)
        if ext in self.fields:
            return ShardFormatError(f"repeated extension {ext!r} in one sample", shard=self.url, key=k,
                                    offset=member.offset - BLOCK)
        return None


