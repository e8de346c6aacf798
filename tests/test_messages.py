"""Every message gpudecode raises is a whole sentence (issue 58, item 5: a refusal stopped
mid-sentence, "its eval form (no random scale or aspect) is", and so did AutoAugment's):
read from the source, each raise's message (its literal text, a formatted value standing
for itself) must not end on a word that needs more after it, or on a colon or comma."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
DANGLING = {"is", "are", "was", "the", "a", "an", "of", "to", "and", "or", "its", "for", "in", "by", "as", "be",
            "than", "that", "which", "not", "no", "but", "if", "when", "from", "into", "on", "at"}


def _message(call: ast.Call) -> str | None:
    """The raise's message, formatted values as {}: the last of a concatenation."""
    arg = call.args[0] if call.args else None
    while isinstance(arg, ast.BinOp):
        arg = arg.right
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in arg.values)
    return None


def messages() -> list[tuple[str, int, str]]:
    out = []
    for path in sorted([*(ROOT / "gpudecode").rglob("*.py"), *(ROOT / "kernels").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                msg = _message(node.exc)
                if msg:
                    out.append((str(path.relative_to(ROOT)), node.lineno, msg.rstrip()))
    return out


def test_every_raised_message_is_a_whole_sentence():
    found = messages()
    assert len(found) > 400  # (the scan reads them: if this drops, the scan broke)
    cut = [(p, n, m[-70:]) for p, n, m in found
           if m.endswith((":", ",", ";", "(", " -")) or (m.split() or [""])[-1].lower() in DANGLING]
    assert not cut, cut


def test_the_scan_sees_a_cut_message():
    tree = ast.parse('raise ValueError(f"x {y} cannot be fused: its eval form is")')
    call = tree.body[0].exc  # type: ignore[attr-defined]
    assert _message(call).split()[-1] in DANGLING
