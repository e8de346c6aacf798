"""Words for counts in messages: "1 shard", "2 shards"."""
from __future__ import annotations

_IRREGULAR = {"class": "classes", "batch": "batches", "process": "processes", "is": "are", "does": "do"}


def plural(n: int, word: str) -> str:
    """`n word`, the word in the plural unless n is 1 ("1 shard", "3 shards", "2 classes")."""
    return f"{n} {word if n == 1 else _IRREGULAR.get(word, word + 's')}"
