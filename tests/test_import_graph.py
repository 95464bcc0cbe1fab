"""The package's imports point one way (STYLE.md): no import cycle in src/harnesslearn, counting the
imports inside functions too (a function-local import that climbs is the same dependency, hidden).

``from A import B`` is an edge to the module ``A.B`` when that is a module, else to ``A``; a module's
import of its own parent packages, and imports under ``if TYPE_CHECKING:``, are not edges."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def modules() -> dict[str, Path]:
    out = {}
    for p in (SRC / "harnesslearn").rglob("*.py"):
        parts = p.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    for m, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_lines(tree)
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                o = owner(t) if t.startswith("harnesslearn") else None
                if o is not None and o != m and not m.startswith(o + "."):
                    edges[m].add(o)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(edges[v]):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(edges):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_package_has_no_import_cycle() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
