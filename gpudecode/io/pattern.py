"""One grammar for shard-name patterns, for everything that writes or reads them (the
writer, `gpudecode shard`, precache's manifest and state, the reader's pattern sources).

A pattern is a path whose file name holds one shard-number field: printf's `%d` / `%06d`,
or str.format's `{}` / `{:d}` / `{:06d}`. The field is looked for in the file name only,
so a folder may hold `%` or `{` in its name. A width without a leading zero (`%6d`,
`{:6}`) pads with spaces: a reader still reads it as "a number of at least 6 digits",
but nothing is written under it (`train-     5.tar` is no shard name anyone means).
"""
from __future__ import annotations

import glob as _glob
import os
import re

# the zero flag and the width of each form (a format field's spec is optional: "{}" and "{:06d}")
FIELD = re.compile(r"%(0?)(\d*)d|\{(?::(0?)(\d*)d?)?\}")


class ShardPattern:
    """A parsed shard-name pattern (see the module doc).

    Raises:
        ValueError: no field, or more than one, in the file name; a width of 100 digits
            or more (found by the fuzzer).
    """

    __slots__ = ("pattern", "before", "after", "width", "zero")

    def __init__(self, pattern: str) -> None:
        folder, sep, name = pattern.rpartition("/")
        found = list(FIELD.finditer(name))
        if len(found) != 1:
            raise ValueError(f"shard pattern {pattern!r} needs one %d or {{}} placeholder for the shard number in its "
                             f"file name (it has {len(found)})")
        m = found[0]
        zero = m.group(1) if m.group(0).startswith("%") else m.group(3)
        width = m.group(2) if m.group(0).startswith("%") else m.group(4)
        if width and len(width) > 2:
            raise ValueError(f"shard pattern {pattern!r}: a shard number field of 100 digits or more")
        self.pattern = pattern
        self.before = folder + sep + name[:m.start()]
        self.after = name[m.end():]
        self.width = int(width) if width else 0
        self.zero = bool(zero)

    @classmethod
    def find(cls, path: str) -> "ShardPattern | None":
        """The pattern in `path`, or None when its file name has no field."""
        name = path.rpartition("/")[2]
        return cls(path) if FIELD.search(name) else None

    @staticmethod
    def head_of(pattern: str) -> str:
        """What comes before the shard number (`out/train-%06d.tar` -> `out/train-`; a name
        without a field: up to its first % or {): a run's state folder, manifest and class
        index are named from it."""
        folder, sep, name = pattern.rpartition("/")
        m = FIELD.search(name)
        return folder + sep + (name[:m.start()] if m else name.split("%", 1)[0].split("{", 1)[0])

    @property
    def head(self) -> str:
        return self.before

    def format(self, index: int) -> str:
        """The name of shard `index`.

        Raises:
            ValueError: the field pads with spaces (write %06d or {:06d}), or a negative index.
        """
        if self.width and not self.zero:
            raise ValueError(f"shard pattern {self.pattern!r} pads the shard number with spaces: write it with a "
                             f"leading zero (%0{self.width}d or {{:0{self.width}d}})")
        if index < 0:
            raise ValueError(f"shard number {index} is negative")
        return f"{self.before}{str(index).zfill(self.width)}{self.after}"

    @property
    def regex(self) -> re.Pattern:
        """Matches a shard's whole name; group 1 is its number."""
        digits = f"[0-9]{{{self.width},}}" if self.width else "[0-9]+"
        return re.compile(re.escape(self.before) + f"({digits})" + re.escape(self.after))

    def glob(self, *, escape: bool = True) -> str:
        """A glob for every shard name (the pattern's own parts escaped, unless `escape`
        is False: a URL's glob for fsspec)."""
        if not escape:
            return f"{self.before}*{self.after}"
        return f"{_glob.escape(self.before)}*{_glob.escape(self.after)}"

    def number(self, name: str) -> int | None:
        """The shard number in `name`, or None when it is no name of this pattern."""
        m = self.regex.fullmatch(name)
        return int(m.group(1)) if m else None

    def written(self) -> list[str]:
        """The local files of this pattern that exist, in number order (what a run left)."""
        hits = [(n, f) for f in _glob.glob(self.glob()) if (n := self.number(f)) is not None and os.path.isfile(f)]
        return [f for _, f in sorted(hits)]

    def __repr__(self) -> str:
        return f"ShardPattern({self.pattern!r})"
