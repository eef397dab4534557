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

from source_tree import PACKAGE
from source_tree import modules as _modules
from source_tree import resolve as _resolve
from source_tree import walk as _walk
ENTRY_POINTS = (PACKAGE, f"{PACKAGE}.cli", f"{PACKAGE}.__main__")
# Modules a user's own script imports by name besides ``gnnorch`` itself: the bundled datasets
# (``from gnnorch.datasets import load_cora`` in examples/ and the README). The test below
# checks that an example really does, so this is no free pass.
USER_IMPORTS = (f"{PACKAGE}.datasets",)






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
