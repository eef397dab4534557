"""Real citation graphs (Cora, CiteSeer) read offline through PyG's own `Planetoid`: the raw
files shipped in the package are copied into a writable root first, so `Planetoid` never
downloads (see the package docstring)."""
from __future__ import annotations

import contextlib
import importlib.resources
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from torch_geometric.data import Data
from torch_geometric.datasets import Planetoid

#: Planetoid graphs bundled with the package, in PyG's spelling.
PLANETOID_NAMES: tuple[str, ...] = ("Cora", "CiteSeer")

_DATA_DIR_ENV = "GNNORCH_DATA_DIR"
_RAW_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


# --------------------------------------------------------------------------- Planetoid


def bundled_data_dir() -> pathlib.Path:
    """Folder of the raw Planetoid files shipped in the package (``gnnorch/data/planetoid``).

    Holds ``LICENSE`` and ``<Name>/raw/ind.<name>.*`` for every name in
    :data:`PLANETOID_NAMES`. It may be read-only; never write into it.
    """
    resource = importlib.resources.files("gnnorch") / "data" / "planetoid"
    if isinstance(resource, pathlib.Path):
        return resource
    return pathlib.Path(__file__).resolve().parents[1] / "data" / "planetoid"


def default_data_root() -> pathlib.Path:
    """Writable root for processed Planetoid data: ``$GNNORCH_DATA_DIR`` or
    ``~/.cache/gnnorch/planetoid``."""
    env = os.environ.get(_DATA_DIR_ENV)
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path.home() / ".cache" / "gnnorch" / "planetoid"


def _canonical_name(name: str) -> str:
    """PyG spelling of a bundled dataset name, matched case-insensitively."""
    by_lower = {n.lower(): n for n in PLANETOID_NAMES}
    try:
        return by_lower[str(name).lower()]
    except KeyError:
        raise ValueError(
            f"unknown Planetoid dataset {name!r}; valid names (case-insensitive): "
            f"{', '.join(PLANETOID_NAMES)}"
        ) from None


def _raw_file_names(name: str) -> list[str]:
    """The eight raw files ``Planetoid`` expects for ``name`` (same list as PyG's)."""
    return [f"ind.{name.lower()}.{suffix}" for suffix in _RAW_SUFFIXES]


def _copy_atomic(src: pathlib.Path, dst: pathlib.Path) -> None:
    """Copy ``src`` to ``dst`` so that ``dst`` is either absent or complete.

    The bytes go to a unique temporary name in ``dst``'s folder, then ``os.replace`` moves
    it into place; concurrent writers of the same file all write identical bytes.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; make the cache readable like a copy
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _ensure_raw_files(name: str, root: pathlib.Path) -> pathlib.Path:
    """Make ``root/<name>/raw`` hold every raw file of ``name``; copy only missing ones."""
    src_dir = bundled_data_dir() / name / "raw"
    raw_dir = root / name / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    for file_name in _raw_file_names(name):
        dst = raw_dir / file_name
        if not dst.exists():
            _copy_atomic(src_dir / file_name, dst)
    return raw_dir


@contextlib.contextmanager
def _dataset_lock(folder: pathlib.Path) -> Iterator[None]:
    """Exclusive inter-process lock on ``folder/.gnnorch.lock`` (POSIX ``flock``).

    Serialises ``Planetoid``'s one-time processing, which writes ``processed/*.pt`` in
    place. Where ``fcntl`` is unavailable, it is a no-op (raw copies stay atomic anyway).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".gnnorch.lock", "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def load_planetoid(
    name: str = "Cora",
    root: str | os.PathLike[str] | None = None,
    **planetoid_kwargs: Any,
) -> Planetoid:
    """PyG's ``Planetoid(root, name, **planetoid_kwargs)`` built from the bundled raw files.

    ``name`` is ``"Cora"`` or ``"CiteSeer"`` in any case. ``root`` (default
    :func:`default_data_root`) must be writable: the raw files are copied to
    ``root/<Name>/raw`` when missing there, and ``Planetoid`` writes ``root/<Name>/processed``
    on first use and reuses it afterwards. Never touches the network. Safe to call from
    several processes at once.

    ``split="geom-gcn"`` is refused: its split files are not bundled and would be downloaded.
    """
    canonical = _canonical_name(name)
    if str(planetoid_kwargs.get("split", "public")).lower() == "geom-gcn":
        raise ValueError(
            "split='geom-gcn' needs split files that are not bundled; use split "
            "'public', 'full' or 'random'"
        )
    root_path = pathlib.Path(root).expanduser() if root is not None else default_data_root()
    _ensure_raw_files(canonical, root_path)
    with _dataset_lock(root_path / canonical):
        return Planetoid(str(root_path), canonical, **planetoid_kwargs)


def load_cora(**kwargs: Any) -> Data:
    """The Cora graph (2708 nodes, 1433 features, 7 classes): ``load_planetoid("Cora")[0]``."""
    return load_planetoid("Cora", **kwargs)[0]


def load_citeseer(**kwargs: Any) -> Data:
    """The CiteSeer graph (3327 nodes, 3703 features, 6 classes):
    ``load_planetoid("CiteSeer")[0]``."""
    return load_planetoid("CiteSeer", **kwargs)[0]
