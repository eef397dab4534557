"""The package's layering (docs/architecture.md), checked on the source with `ast`: no import
cycle between modules, and no import from a lower floor to a higher one. Imports inside
functions count too (they run sooner or later); imports under ``if TYPE_CHECKING:`` do not
(they never run); only the package's own modules are looked at.

Floors, lowest first:
  0  pure components: errors, options, datasets, run_options, sampling/, trim/, rewrite/, cache/,
     launch/topology.py, launch/plan.py, launch/config.py -- know nothing of processes, seams
     or the tuner
  1  launch/ (processes: serialisation, rank context, allocator, supervisor, worker)
  2  intercept/ (the seams)
  3  execute/ (one way to run the user's function)
  4  tune/ (the auto-tuner)
  5  runtime.py, cli.py, __init__.py, __main__.py (the public facade)
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from source_tree import PACKAGE, ROOT
from source_tree import modules as _modules
from source_tree import resolve as _resolve
from source_tree import walk as _walk

# longest matching prefix (relative to the package) wins
FLOORS = {
    "errors": 0, "options": 0, "datasets": 0,
    "run_options": 0,       # plain validated data about a run; launch/context.py carries it
    "sampling": 0, "trim": 0, "rewrite": 0, "cache": 0,
    "place": 0,             # DGTP placement planner: numpy, stdlib, options, errors
    "partition": 0,         # partitioner, hot rows, feature store (plain torch), its option
    "device": 0,            # data placement decisions and the prefetching pipeline (issue 15)
    "compat": 0,            # every private PyG / torch name, resolved once, failing closed
    "launch.topology": 0, "launch.plan": 0,
    "launch.config": 0,     # LaunchConfig: plain validated data (RunOptions reads its allocator)
    "launch": 1,
    "intercept": 2,
    "execute": 3,
    "tune": 4,
    "runtime": 5, "cli": 5, "__main__": 5, "": 5,   # "": the package's __init__.py
}

# Known violations, each with a comment naming the issue that removes it and who does, e.g.
#     ("gnnorch.cache.refresh", "gnnorch.launch.context"),   # issue 13: the lead (layer seam)
# The lead removes an entry when it is fixed; a fixed entry left here fails
# `test_allow_list_is_current`. (Empty: cache/refresh.py no longer reaches launch.context.)
ALLOWED_UPWARD: set[tuple[str, str]] = set()
ALLOWED_CYCLES: set[frozenset] = set()







def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the package's modules it imports (a submodule when the name is one)."""
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in _walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules
                              else base for alias in node.names]
            else:
                continue
            for target in candidates:
                while target and target not in modules:      # import a.b.c -> longest module
                    target = target.rpartition(".")[0]
                if target.split(".")[0] == PACKAGE and target != name:
                    targets.add(target)
        edges[name] = targets
    return edges


def floor(module: str) -> int:
    rel = module[len(PACKAGE) + 1:] if module != PACKAGE else ""
    parts = rel.split(".") if rel else []
    for k in range(len(parts), -1, -1):
        key = ".".join(parts[:k])
        if key in FLOORS:
            return FLOORS[key]
    raise KeyError(module)


def _upward(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in edges.items() for b in targets if floor(b) > floor(a)}


def _with_package_inits(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Importing a.b.c runs a/__init__ and a/b/__init__ first: those count for cycles (not for
    floors), except the importer's own packages and the root package (already running)."""
    full = {a: set(t) for a, t in edges.items()}
    for a, targets in edges.items():
        own = {".".join(a.split(".")[:k]) for k in range(1, a.count(".") + 2)}
        for b in targets:
            parts = b.split(".")
            for k in range(2, len(parts)):
                parent = ".".join(parts[:k])
                if parent not in own and parent in edges:
                    full[a].add(parent)
    return full


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    return _imports(_modules())


def test_every_module_has_a_floor(edges):
    missing = []
    for module in edges:
        try:
            floor(module)
        except KeyError:
            missing.append(module)
    assert not missing, f"give these modules a floor in FLOORS (and docs/architecture.md): " \
                        f"{missing}"


def test_no_import_from_a_lower_floor_to_a_higher_one(edges):
    bad = sorted(_upward(edges) - ALLOWED_UPWARD)
    assert not bad, "imports that run up the floors (importer floor < imported floor):\n" + \
        "\n".join(f"  {a} (floor {floor(a)}) imports {b} (floor {floor(b)})" for a, b in bad)


def test_no_import_cycle(edges):
    cycles = [c for c in _cycles(_with_package_inits(edges)) if frozenset(c) not in ALLOWED_CYCLES]
    assert not cycles, "import cycles:\n" + "\n".join(f"  {' <-> '.join(c)}" for c in cycles)


def test_allow_list_is_current(edges):
    fixed = sorted(ALLOWED_UPWARD - _upward(edges))
    assert not fixed, f"fixed: remove these entries from ALLOWED_UPWARD: {fixed}"


def test_the_checker_sees_what_it_must():
    """The walker itself: relative and absolute imports, imports inside functions, package
    inits, and a planted cycle and upward import are all found."""
    modules = {"gnnorch": ROOT / "__init__.py", "gnnorch.launch": ROOT / "launch/__init__.py",
               "gnnorch.launch.worker": ROOT / "launch/worker.py",
               "gnnorch.launch.context": ROOT / "launch/context.py",
               "gnnorch.launch.serialize": ROOT / "launch/serialize.py"}
    edges = _imports(modules)
    assert "gnnorch.launch.serialize" in edges["gnnorch.launch.worker"]   # inside a function
    assert _upward({"gnnorch.trim.x": {"gnnorch.tune.y"}}) == {("gnnorch.trim.x", "gnnorch.tune.y")}
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    tree = ast.parse("if TYPE_CHECKING:\n    import x\nelse:\n    import y\nimport z\n")
    names = [a.name for n in _walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert names == ["y", "z"]
    assert floor("gnnorch.launch.topology") == 0 and floor("gnnorch.launch.worker") == 1
    assert floor("gnnorch") == 5 and floor("gnnorch.rewrite.rules.gcn") == 0


MODULE_LINES = 400   # a longer module states why in a "# size: ..." line near its top
CLASS_LINES = 250


def test_modules_and_classes_stay_small():
    """Small modules with one job: none over MODULE_LINES lines without a stated reason, no
    class over CLASS_LINES lines (docs/architecture.md)."""
    too_long = []
    for name, path in _modules().items():
        text = path.read_text()
        lines = text.count("\n") + 1
        head = "\n".join(text.splitlines()[:40])
        if lines > MODULE_LINES and "# size:" not in head:
            too_long.append(f"module {name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                size = node.end_lineno - node.lineno + 1
                if size > CLASS_LINES:
                    too_long.append(f"class {name}.{node.name}: {size} lines")
    assert not too_long, too_long


# -- collaborators are typed (issue 20) --------------------------------------------------------
# A *collaborator* is an object of gnnorch's own making that a seam or a run is handed: the rank
# context, another seam, a component of floor 0, a hook, a timer, a loader's record. In
# intercept/ and execute/ none may be annotated `Any` (bare, `Any | None`, `Optional[Any]`, or a
# sequence / list / iterable of `Any`): it is typed by its class, or by a `typing.Protocol` owned
# by the floor that owns the concept. The rule looks at function parameters and annotated
# assignments (dataclass fields, `self.x: T = ...`), and flags such an `Any` when
#   (1) the name (leading underscores stripped) is one of COLLABORATOR_NAMES, or ends with one
#       of them after an underscore (`layer_seam`, `comm_device`), or
#   (2) the line carries a comment naming a class defined in the package (the comment standing in
#       for the type: ``cache: Any = None  # its LoaderCache``).
# User objects (the user's model, layers, batches, arguments, return values) stay `Any`.
TYPED_FLOORS = ("intercept", "execute")
COLLABORATOR_NAMES = frozenset({
    "ctx", "context", "seam", "seams", "cache", "manager", "partition", "distribution",
    "device_path", "device", "rewrites", "engine", "hook", "hooks", "timer", "state", "states",
    "feed", "store", "exchange", "worker", "process", "plan", "request", "sampler", "shard",
    "watchdog", "synchronizer", "spec", "job", "info", "config", "options", "interceptor",
})


def _is_any(node: ast.AST | None) -> bool:
    """`Any`, `typing.Any`, `Any | None`, `Optional[Any]`, `Sequence[Any]` (and the like)."""
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(node, ast.Name):
        return node.id == "Any"
    if isinstance(node, ast.Attribute):
        return node.attr == "Any"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [node.left, node.right]
        return any(_is_any(p) for p in parts) and all(
            _is_any(p) or (isinstance(p, ast.Constant) and p.value is None) for p in parts)
    if isinstance(node, ast.Subscript):
        outer = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(
            node.value, "id", "")
        if outer in ("Optional", "Sequence", "list", "List", "Iterable", "tuple", "Tuple"):
            inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return all(_is_any(e) or isinstance(e, ast.Constant) for e in inner) and any(
                _is_any(e) for e in inner)
    return False


def _collaborator_name(name: str) -> bool:
    name = name.lstrip("_")
    return name in COLLABORATOR_NAMES or any(name.endswith("_" + c) for c in COLLABORATOR_NAMES)


def _package_classes() -> set[str]:
    return {node.name for path in ROOT.rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)}


def _untyped_collaborators(source: str, classes: set[str], where: str = "") -> list[str]:
    """'where:line name' for each collaborator annotated `Any` in `source` (the rule above)."""
    lines = source.splitlines()
    found = []

    def check(name: str, annotation: ast.AST | None, lineno: int) -> None:
        if not _is_any(annotation):
            return
        comment = lines[lineno - 1].partition("#")[2]
        named = {w.strip("`.,;:()'\"") for w in comment.split()} & classes
        if _collaborator_name(name) or named:
            found.append(f"{where}:{lineno} {name}" + (f" (# names {sorted(named)})"
                                                          if named else ""))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs:
                check(arg.arg, arg.annotation, arg.lineno)
        elif isinstance(node, ast.AnnAssign):
            target = node.target
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            check(name, node.annotation, node.lineno)
    return found


def test_no_collaborator_is_typed_any_in_the_seams_and_execution():
    classes = _package_classes()
    bad = []
    for name, path in _modules().items():
        if name.split(".")[1:2] and name.split(".")[1] in TYPED_FLOORS:
            bad += _untyped_collaborators(path.read_text(), classes,
                                          str(path.relative_to(ROOT.parent)))
    assert not bad, ("collaborators typed `Any` (type them by their class or a Protocol owned "
                     "by the lower floor):\n  " + "\n  ".join(bad))


def test_the_any_rule_sees_what_it_must():
    source = (
        "from typing import Any, Optional, Sequence\n"
        "class A:\n"
        "    cache: Any = None\n"
        "    other: Any = None  # a LoaderCache or None\n"
        "    batch: Any = None\n"
        "    def __init__(self, ctx: Any, layer_seam: 'Any | None', hooks: Sequence[Any],\n"
        "                 x: Any, comm_device: Optional[Any] = None) -> None:\n"
        "        self.rewrites: Any = None\n"
        "        self.model: Any = None\n"
        "def f(state: 'LoaderState', timer: 'EpochTimer | None', plan: dict[str, Any]) -> Any:\n"
        "    pass\n")
    found = _untyped_collaborators(source, {"LoaderCache", "LoaderState"})
    assert [f.split(" ")[1] for f in found] == ["cache", "other", "ctx", "layer_seam", "hooks",
                                                "comm_device", "rewrites"], found
