"""Every module of the package is reachable from the product (issue 20): walking the imports,
read from the source with `ast`, from the public facade (``gnnorch``, i.e. gnnorch/__init__.py
with `gnnorch.Runtime`) and the command line (``gnnorch.cli``, ``gnnorch.__main__``) reaches
every module under src/gnnorch.

What counts as an edge from module A to module B:
* ``import B`` / ``from B import x`` anywhere in A -- at the top or inside a function (it runs
  sooner or later), relative imports resolved; not under ``if TYPE_CHECKING:`` (never runs);
* ``from P import name`` where ``P.name`` is itself a module (``from . import world``);
* importing B also runs every parent package's ``__init__`` (``import gnnorch.a.b`` runs
  ``gnnorch.a``);
* A names B in a string constant equal to B's full name (``python -m gnnorch.launch.worker``,
  ``importlib.import_module("gnnorch.x")``): the module is started or loaded by name.

Besides the facade and the command line, the walk starts at the modules a user's script
imports by name (`USER_IMPORTS`: the bundled datasets), checked against examples/.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "gnnorch"
ROOT = Path(__file__).resolve().parents[1] / "src" / PACKAGE
ENTRY_POINTS = (PACKAGE, f"{PACKAGE}.cli", f"{PACKAGE}.__main__")
# Modules a user's own script imports by name besides ``gnnorch`` itself: the bundled datasets
# (``from gnnorch.datasets import load_cora`` in examples/ and the README). The test below
# checks that an example really does, so this is no free pass.
USER_IMPORTS = (f"{PACKAGE}.datasets",)


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _walk(node: ast.AST):
    """ast.walk, minus the bodies of ``if TYPE_CHECKING:`` (their ``else`` is kept)."""
    yield node
    children = node.orelse if _type_checking(node) else ast.iter_child_nodes(node)
    for child in children:
        yield from _walk(child)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _with_parents(name: str, known: dict[str, Path]) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(known)


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules that running `module` imports or starts (module docstring)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= _with_parents(alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_package, node)
            found |= _with_parents(target, known)
            for alias in node.names:                 # `from pkg import submodule`
                if f"{target}.{alias.name}" in known:
                    found.add(f"{target}.{alias.name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in known and node.value.startswith(f"{PACKAGE}."):
            found |= _with_parents(node.value, known)
    found.discard(module)
    return found


def reachable(known: dict[str, Path], roots=ENTRY_POINTS + USER_IMPORTS) -> set[str]:
    seen: set[str] = set()
    todo = [r for r in roots if r in known]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(imports_of(module, known[module], known) - seen)
    return seen


def test_the_walk_follows_function_level_relative_and_string_imports():
    known = _modules()
    cli = imports_of(f"{PACKAGE}.cli", known[f"{PACKAGE}.cli"], known)
    assert f"{PACKAGE}.place" in cli                      # inside a function, relative
    assert f"{PACKAGE}.tune.schema" in cli and f"{PACKAGE}.tune" in cli   # parent runs too
    main = imports_of(f"{PACKAGE}.__main__", known[f"{PACKAGE}.__main__"], known)
    assert main == {PACKAGE, f"{PACKAGE}.cli"}


def test_the_user_imports_are_what_examples_import():
    examples = Path(__file__).resolve().parents[1] / "examples"
    named: set[str] = set()
    for path in examples.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                named.add(node.module or "")
            elif isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
    assert set(USER_IMPORTS) <= named


def test_every_module_is_reachable_from_the_runtime_or_the_command_line():
    known = _modules()
    assert set(ENTRY_POINTS) <= set(known)
    missing = sorted(set(known) - reachable(known))
    assert not missing, (
        f"{len(missing)} module(s) under src/{PACKAGE} are imported on no path from "
        f"{', '.join(ENTRY_POINTS + USER_IMPORTS)} (wire them in, or move them out of the "
        f"package): "
        + ", ".join(missing))
