"""Tables and JSON results: what the benches and `gpudecode plan` (a library module, not a
bench) both write."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence


def write_json(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=_default))
    return path


def _default(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, Path):
        return str(o)
    return str(o)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table; numbers right-aligned with thousands separators."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            if not math.isfinite(v):
                return "-"
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"
        if isinstance(v, int):
            return f"{v:,}"
        return "-" if v is None else str(v)

    out = ["| " + " | ".join(headers) + " |",
           "|" + "|".join("---:" if i else "---" for i in range(len(headers))) + "|"]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out)
