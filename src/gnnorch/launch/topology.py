"""Read the real CPU topology: usable CPUs, cgroup quota, physical cores, NUMA nodes.

Everything is read from sysfs / cgroupfs files whose roots can be redirected, so tests can
build a fake tree. Every read is best-effort: a missing or unreadable file falls back to a
safe default (each CPU its own core, one NUMA node, no quota) rather than failing.
"""
from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

__all__ = [
    "Topology",
    "parse_cpulist",
    "format_cpulist",
    "read_topology",
    "current_topology",
]


# --------------------------------------------------------------------------- cpulist strings


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a kernel cpulist such as "0-3,8,10-11" into sorted unique CPU ids.

    Blank input gives (). Raises ValueError on a malformed item or a descending range.
    """
    cpus: set[int] = set()
    for item in text.strip().split(","):
        item = item.strip()
        if not item:
            continue
        lo, sep, hi = item.partition("-")
        try:
            start = int(lo)
            stop = int(hi) if sep else start
        except ValueError:
            raise ValueError(f"malformed cpulist item {item!r} in {text!r}") from None
        if start < 0 or stop < start:
            raise ValueError(f"bad cpulist range {item!r} in {text!r}")
        cpus.update(range(start, stop + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPU ids as a compact kernel cpulist; inverse of parse_cpulist."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


# --------------------------------------------------------------------------- the dataclass


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass(frozen=True)
class Topology:
    """CPUs this process may use, grouped into physical cores and NUMA nodes.

    Invariant (as produced by read_topology): usable_cpus is sorted and unique; `cores` and
    `numa_nodes` each partition usable_cpus into non-empty sorted groups, ordered by their
    lowest CPU (cores) or node id (NUMA nodes).
    """

    usable_cpus: tuple[int, ...]
    cpu_quota: float | None
    cores: tuple[tuple[int, ...], ...]
    numa_nodes: tuple[tuple[int, ...], ...]

    @property
    def num_usable(self) -> int:
        """CPUs a plan may use: the affinity size, capped by floor(cgroup quota), at least 1."""
        n = len(self.usable_cpus)
        if self.cpu_quota is not None:
            n = min(n, math.floor(self.cpu_quota))
        return max(1, n)

    @property
    def num_physical(self) -> int:
        """Number of physical cores holding at least one usable CPU."""
        return len(self.cores)

    @property
    def smt(self) -> bool:
        """True when some physical core offers more than one usable logical CPU."""
        return any(len(core) > 1 for core in self.cores)

    def to_dict(self) -> dict:
        """JSON-ready description (lists, not tuples) including the derived counts."""
        return {
            "usable_cpus": list(self.usable_cpus),
            "cpu_quota": self.cpu_quota,
            "cores": [list(c) for c in self.cores],
            "numa_nodes": [list(n) for n in self.numa_nodes],
            "num_usable": self.num_usable,
            "num_physical": self.num_physical,
            "smt": self.smt,
        }

    def __str__(self) -> str:
        details = [
            _plural(self.num_physical, "physical core"),
            "SMT" if self.smt else "no SMT",
            _plural(len(self.numa_nodes), "NUMA node"),
        ]
        if self.cpu_quota is not None:
            details.append(
                f"cgroup quota {self.cpu_quota:g} cores on CPUs {format_cpulist(self.usable_cpus)}"
            )
        return f"{_plural(self.num_usable, 'usable CPU')} ({', '.join(details)})"


# --------------------------------------------------------------------------- file readers


def _read_text(path: Path) -> str | None:
    """File contents stripped, or None when missing/unreadable."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _read_cpulist(path: Path) -> tuple[int, ...] | None:
    """Parsed cpulist file, or None when missing, unreadable or malformed."""
    text = _read_text(path)
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _real_affinity() -> tuple[int, ...]:
    """CPUs this process may run on (cgroup cpuset included); psutil/cpu_count as fallbacks."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        pass
    try:
        import psutil

        cpus = psutil.Process().cpu_affinity()
        if cpus:
            return tuple(sorted(cpus))
    except Exception:  # psutil missing or no affinity support on this platform
        pass
    return tuple(range(os.cpu_count() or 1))


def _quota_ratio(quota: float, period: float) -> float | None:
    if quota <= 0 or period <= 0:
        return None
    return quota / period


def read_cpu_quota(cgroup_root: str | os.PathLike = "/sys/fs/cgroup") -> float | None:
    """cgroup CPU quota in cores (v2 cpu.max, else v1 cfs quota/period); None if unlimited."""
    root = Path(cgroup_root)
    text = _read_text(root / "cpu.max")
    if text is not None:
        fields = text.split()
        if len(fields) >= 1 and fields[0] != "max":
            try:
                period = float(fields[1]) if len(fields) > 1 else 100000.0
                return _quota_ratio(float(fields[0]), period)
            except ValueError:
                return None
        return None
    for sub in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        quota = _read_int(root / sub / "cpu.cfs_quota_us")
        period = _read_int(root / sub / "cpu.cfs_period_us")
        if quota is not None and period is not None:
            return _quota_ratio(quota, period)
    return None


def _core_key(cpu_dir: Path, cpu: int) -> tuple:
    """A key shared by exactly the SMT siblings of `cpu`; the CPU itself when unknown."""
    topo = cpu_dir / "topology"
    for name in ("thread_siblings_list", "core_cpus_list"):
        siblings = _read_cpulist(topo / name)
        if siblings:
            return ("siblings", siblings)
    core_id = _read_int(topo / "core_id")
    if core_id is not None:
        package = _read_int(topo / "physical_package_id")
        return ("ids", package if package is not None else -1, core_id)
    return ("cpu", cpu)


def read_cores(sysfs_root: str | os.PathLike, usable: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Group usable CPUs into physical cores; groups sorted inside and by their lowest CPU."""
    cpu_root = Path(sysfs_root) / "devices" / "system" / "cpu"
    groups: dict[tuple, list[int]] = {}
    for cpu in usable:
        groups.setdefault(_core_key(cpu_root / f"cpu{cpu}", cpu), []).append(cpu)
    return tuple(sorted(tuple(sorted(g)) for g in groups.values()))


def _node_dirs(node_root: Path) -> list[tuple[int, Path]]:
    try:
        entries = list(node_root.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        m = re.fullmatch(r"node(\d+)", entry.name)
        if m:
            found.append((int(m.group(1)), entry))
    return sorted(found)


def read_numa_nodes(
    sysfs_root: str | os.PathLike, usable: tuple[int, ...]
) -> tuple[tuple[int, ...], ...]:
    """Usable CPUs per NUMA node (by node id, empty nodes dropped); one node when unknown.

    Usable CPUs that no node lists are gathered into one extra trailing node so that the
    result always partitions `usable`.
    """
    usable_set = set(usable)
    seen: set[int] = set()
    nodes: list[tuple[int, ...]] = []
    for _, path in _node_dirs(Path(sysfs_root) / "devices" / "system" / "node"):
        cpus = _read_cpulist(path / "cpulist") or ()
        group = tuple(c for c in cpus if c in usable_set and c not in seen)
        if group:
            nodes.append(group)
            seen.update(group)
    rest = tuple(c for c in usable if c not in seen)
    if rest:
        nodes.append(rest)
    return tuple(nodes)


# --------------------------------------------------------------------------- entry points


def read_topology(
    sysfs_root: str | os.PathLike = "/sys",
    cgroup_root: str | os.PathLike = "/sys/fs/cgroup",
    affinity: Iterable[int] | None = None,
) -> Topology:
    """Read the topology under the given roots; `affinity` overrides sched_getaffinity(0)."""
    usable = tuple(sorted(set(affinity))) if affinity is not None else _real_affinity()
    if not usable:
        raise ValueError("affinity must name at least one CPU")
    if any(not isinstance(c, int) or c < 0 for c in usable):
        raise ValueError(f"affinity must hold non-negative CPU ids, got {list(usable)}")
    return Topology(
        usable_cpus=usable,
        cpu_quota=read_cpu_quota(cgroup_root),
        cores=read_cores(sysfs_root, usable),
        numa_nodes=read_numa_nodes(sysfs_root, usable),
    )


@functools.lru_cache(maxsize=None)
def current_topology() -> Topology:
    """The real machine's topology, read once per process."""
    return read_topology()
