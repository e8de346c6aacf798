"""The package's shape (issue 36): the transforms a package of small modules, one per kind
of op, and no import circle among gpudecode's modules (imports at module level, those a
module needs to be imported; TYPE_CHECKING blocks and imports inside functions aside)."""
from __future__ import annotations

import ast
import pathlib

import gpudecode

PKG = pathlib.Path(gpudecode.__file__).parent


def _module(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """The gpudecode modules `path` imports at module level."""
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:  # module level only
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if not target.startswith("gpudecode"):
                continue
            for alias in node.names:  # `from . import x` names a module; `from .m import x` a name of m
                sub = f"{target}.{alias.name}"
                found.add(sub if (PKG.parent / (sub.replace(".", "/") + ".py")).exists()
                          or (PKG.parent / sub.replace(".", "/")).is_dir() else target)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("gpudecode")}
    return found - {me}


def _graph() -> dict[str, set[str]]:
    files = [p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts]
    mods = {_module(p): p for p in files}
    return {m: {t for t in _imports(p) if t in mods} for m, p in mods.items()}


def test_no_import_circle():
    graph = _graph()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for t in sorted(graph[m]):
            if t.startswith(m + "."):  # a package importing its own modules: how a package is built
                continue
            assert state.get(t) != 1, "import circle: " + " -> ".join(path[path.index(t):] + [t])
            if t not in state:
                visit(t)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_the_transforms_are_modules_of_their_kind_each_under_600_lines():
    modules = sorted((PKG / "transforms").glob("*.py"))
    assert {"geometry.py", "colour.py", "warps.py", "policies.py", "containers.py", "output.py",
            "compose.py", "plan.py", "draws.py"} <= {p.name for p in modules}
    sizes = {p.name: len(p.read_text().splitlines()) for p in modules}
    assert max(sizes.values()) <= 600, sizes


def test_the_kernels_are_modules_each_under_600_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in sorted((PKG / "kernels").glob("*.py"))}
    assert {"fused.py", "layout.py", "cuda_program.py", "cpu_passes.py", "cpu_resample.py", "cpu_twin.py"} <= set(sizes)
    assert max(sizes.values()) <= 600, sizes


def test_the_graph_sees_imports():  # the check above is not vacuous: the graph holds the package's imports
    graph = _graph()
    assert "gpudecode.transforms.base" in graph["gpudecode.transforms.geometry"]
    assert "gpudecode.transforms.draws" in graph["gpudecode.transforms.compose"]
    assert "gpudecode.kernels.fused" in graph["gpudecode.transforms.draws"]
    assert "gpudecode.transforms.plan" not in graph["gpudecode.transforms.draws"]  # (TYPE_CHECKING only)


def test_the_draws_know_the_plan_not_the_compose():
    """Draws hold the plan they were drawn for and encode themselves (no call back into a
    Compose); the launch is the kernels' (kernels.launch), not Compose's."""
    graph = _graph()
    for name in ("draws", "plan", "canvas"):
        assert not any(m == "gpudecode.transforms.compose" for m in graph[f"gpudecode.transforms.{name}"]), name
    text = (PKG / "transforms" / "draws.py").read_text()
    assert "compose" not in text.replace("Compose", "")
    assert "gpudecode.kernels.launch" in graph["gpudecode.transforms.compose"]
    assert "cuda_launch" not in (PKG / "transforms" / "compose.py").read_text()


def test_every_relative_import_names_a_module_of_the_package():
    """Imports inside functions too (a module moved into a package keeps its lazy imports
    working only if their dots were counted again: ruff cannot see these)."""
    bad = []
    for path in (p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts):
        me = _module(path)
        package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
                where = PKG.parent / target.replace(".", "/")
                if not (where.with_suffix(".py").exists() or (where / "__init__.py").exists()
                        or where.is_dir() or list(where.parent.glob(where.name + ".*.so"))):
                    bad.append(f"{path.relative_to(PKG)}:{node.lineno}: {'.' * node.level}{node.module or ''}")
    assert not bad, bad
