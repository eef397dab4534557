"""Reading gnnorch's own source as a tree of modules, for the tests that check its shape
(`test_layering`: floors and cycles; `test_reachability`: every module imported; `test_compat`:
private torch / PyG names only in ``gnnorch.compat``)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "gnnorch"
ROOT = Path(__file__).resolve().parents[1] / "src" / PACKAGE


def module_name(path: Path) -> str:
    """``src/gnnorch/a/b.py`` -> ``gnnorch.a.b`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``from ... import`` in `module` names (relative levels applied)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def walk(node: ast.AST):
    """ast.walk, minus the bodies of ``if TYPE_CHECKING:`` (their ``else`` is kept)."""
    yield node
    children = node.orelse if _type_checking(node) else ast.iter_child_nodes(node)
    for child in children:
        yield from walk(child)
