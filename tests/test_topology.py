"""Tests for gnnorch.launch.topology against fake sysfs / cgroup trees."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gnnorch.launch.topology import (
    Topology,
    current_topology,
    format_cpulist,
    parse_cpulist,
    read_topology,
)

# --------------------------------------------------------------------------- fake trees


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def make_sysfs(
    root: Path,
    siblings: dict[int, str] | None = None,
    nodes: dict[int, str] | None = None,
    core_ids: dict[int, tuple[int, int]] | None = None,
    sibling_file: str = "thread_siblings_list",
) -> Path:
    """Fake <root>/devices/system/{cpu,node}; core_ids maps cpu -> (package, core_id)."""
    cpu_root = root / "devices" / "system" / "cpu"
    cpu_root.mkdir(parents=True, exist_ok=True)
    for cpu, text in (siblings or {}).items():
        _write(cpu_root / f"cpu{cpu}" / "topology" / sibling_file, text)
    for cpu, (package, core) in (core_ids or {}).items():
        _write(cpu_root / f"cpu{cpu}" / "topology" / "core_id", str(core))
        _write(cpu_root / f"cpu{cpu}" / "topology" / "physical_package_id", str(package))
    for node, text in (nodes or {}).items():
        _write(root / "devices" / "system" / "node" / f"node{node}" / "cpulist", text)
    return root


def smt_siblings(cores: int, threads: int) -> dict[int, str]:
    """Linux-style numbering: core c has logical CPUs c, c+cores, c+2*cores, ..."""
    out = {}
    for c in range(cores):
        group = [c + k * cores for k in range(threads)]
        for cpu in group:
            out[cpu] = ",".join(map(str, group))
    return out


@pytest.fixture
def no_cgroup(tmp_path: Path) -> Path:
    path = tmp_path / "cgroup"
    path.mkdir()
    return path


# --------------------------------------------------------------------------- cpulist


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)),
        ("0", (0,)),
        ("", ()),
        ("  \n", ()),
        ("5,1,3-4", (1, 3, 4, 5)),
        ("0-1,1-2", (0, 1, 2)),
        ("0-3\n", (0, 1, 2, 3)),
    ],
)
def test_parse_cpulist(text: str, expected: tuple[int, ...]) -> None:
    assert parse_cpulist(text) == expected


@pytest.mark.parametrize("text", ["a", "3-1", "1-x", "-2", "0--1"])
def test_parse_cpulist_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpulist(text)


def test_format_cpulist_round_trips() -> None:
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpulist([]) == ""
    for text in ["0-3,8,10-11", "0", "1,3,5", "0-63"]:
        assert format_cpulist(parse_cpulist(text)) == text


# --------------------------------------------------------------------------- cores / SMT


def test_smt_grouping_4_cores_x_2_threads(tmp_path: Path, no_cgroup: Path) -> None:
    sysfs = make_sysfs(tmp_path / "sys", siblings=smt_siblings(4, 2), nodes={0: "0-7"})
    topo = read_topology(sysfs, no_cgroup, affinity=range(8))
    assert topo.usable_cpus == tuple(range(8))
    assert topo.cores == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert topo.num_physical == 4
    assert topo.smt is True
    assert topo.num_usable == 8
    assert topo.numa_nodes == (tuple(range(8)),)
    assert "SMT" in str(topo) and "no SMT" not in str(topo)


def test_core_cpus_list_is_read_when_thread_siblings_missing(tmp_path: Path, no_cgroup: Path) -> None:
    sysfs = make_sysfs(tmp_path / "sys", siblings={0: "0-1", 1: "0-1"}, sibling_file="core_cpus_list")
    topo = read_topology(sysfs, no_cgroup, affinity=[0, 1])
    assert topo.cores == ((0, 1),)
    assert topo.smt


def test_core_id_fallback_groups_by_package_and_core(tmp_path: Path, no_cgroup: Path) -> None:
    ids = {0: (0, 0), 1: (0, 1), 2: (0, 0), 3: (0, 1), 4: (1, 0), 5: (1, 0)}
    sysfs = make_sysfs(tmp_path / "sys", core_ids=ids)
    topo = read_topology(sysfs, no_cgroup, affinity=range(6))
    assert topo.cores == ((0, 2), (1, 3), (4, 5))


def test_affinity_restricts_cores_and_nodes(tmp_path: Path, no_cgroup: Path) -> None:
    sysfs = make_sysfs(
        tmp_path / "sys", siblings=smt_siblings(4, 2), nodes={0: "0-1,4-5", 1: "2-3,6-7"}
    )
    topo = read_topology(sysfs, no_cgroup, affinity=[0, 1, 4, 3])
    assert topo.usable_cpus == (0, 1, 3, 4)
    assert topo.cores == ((0, 4), (1,), (3,))  # core 2 (CPUs 2, 6) has no usable CPU: dropped
    assert topo.numa_nodes == ((0, 1, 4), (3,))
    assert topo.num_usable == 4
    assert topo.num_physical == 3


def test_two_numa_nodes(tmp_path: Path, no_cgroup: Path) -> None:
    sysfs = make_sysfs(tmp_path / "sys", nodes={0: "0-3", 1: "4-7"})
    topo = read_topology(sysfs, no_cgroup, affinity=range(8))
    assert topo.numa_nodes == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert "2 NUMA nodes" in str(topo)


def test_numa_nodes_sorted_numerically_and_empty_nodes_dropped(tmp_path: Path, no_cgroup: Path) -> None:
    sysfs = make_sysfs(tmp_path / "sys", nodes={10: "2-3", 2: "0-1", 3: ""})
    topo = read_topology(sysfs, no_cgroup, affinity=range(4))
    assert topo.numa_nodes == ((0, 1), (2, 3))


def test_cpus_missing_from_every_node_form_an_extra_node(tmp_path: Path, no_cgroup: Path) -> None:
    sysfs = make_sysfs(tmp_path / "sys", nodes={0: "0-1"})
    topo = read_topology(sysfs, no_cgroup, affinity=range(4))
    assert topo.numa_nodes == ((0, 1), (2, 3))


# --------------------------------------------------------------------------- cgroup quota


@pytest.mark.parametrize(
    "text, quota, usable",
    [
        ("150000 100000", 1.5, 1),
        ("200000 100000", 2.0, 2),
        ("max 100000", None, 4),
        ("max", None, 4),
        ("800000 100000", 8.0, 4),  # quota above the affinity: affinity wins
        ("50000 100000", 0.5, 1),  # below one core: still one usable CPU
        ("garbage here", None, 4),
    ],
)
def test_cgroup_v2_quota(tmp_path: Path, text: str, quota: float | None, usable: int) -> None:
    cgroup = tmp_path / "cgroup"
    _write(cgroup / "cpu.max", text)
    topo = read_topology(tmp_path / "nosys", cgroup, affinity=range(4))
    assert topo.cpu_quota == quota
    assert topo.num_usable == usable
    assert len(topo.usable_cpus) == 4


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    _write(cgroup / "cpu" / "cpu.cfs_quota_us", "300000")
    _write(cgroup / "cpu" / "cpu.cfs_period_us", "100000")
    topo = read_topology(tmp_path / "nosys", cgroup, affinity=range(8))
    assert topo.cpu_quota == 3.0
    assert topo.num_usable == 3
    assert "quota 3" in str(topo)


def test_cgroup_v1_unlimited(tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    _write(cgroup / "cpu" / "cpu.cfs_quota_us", "-1")
    _write(cgroup / "cpu" / "cpu.cfs_period_us", "100000")
    assert read_topology(tmp_path / "nosys", cgroup, affinity=range(2)).cpu_quota is None


# --------------------------------------------------------------------------- fallbacks


def test_missing_everything_falls_back(tmp_path: Path) -> None:
    topo = read_topology(tmp_path / "nosys", tmp_path / "nocgroup", affinity=[3, 1, 2])
    assert topo.usable_cpus == (1, 2, 3)
    assert topo.cpu_quota is None
    assert topo.cores == ((1,), (2,), (3,))
    assert topo.numa_nodes == ((1, 2, 3),)
    assert topo.smt is False
    assert str(topo) == "3 usable CPUs (3 physical cores, no SMT, 1 NUMA node)"


def test_partial_and_malformed_files_fall_back_per_cpu(tmp_path: Path, no_cgroup: Path) -> None:
    sysfs = make_sysfs(tmp_path / "sys", siblings={0: "0,2", 2: "0,2", 1: "not a list"})
    topo = read_topology(sysfs, no_cgroup, affinity=range(4))
    assert topo.cores == ((0, 2), (1,), (3,))


def test_unreadable_sibling_file_falls_back(tmp_path: Path, no_cgroup: Path) -> None:
    sysfs = make_sysfs(tmp_path / "sys")
    # a directory where a file is expected: reading it raises OSError
    (sysfs / "devices/system/cpu/cpu0/topology/thread_siblings_list").mkdir(parents=True)
    topo = read_topology(sysfs, no_cgroup, affinity=[0, 1])
    assert topo.cores == ((0,), (1,))


def test_empty_affinity_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="affinity"):
        read_topology(tmp_path, tmp_path, affinity=[])


# --------------------------------------------------------------------------- output


def test_to_dict_is_json_ready(tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    _write(cgroup / "cpu.max", "150000 100000")
    sysfs = make_sysfs(tmp_path / "sys", siblings=smt_siblings(2, 2))
    topo = read_topology(sysfs, cgroup, affinity=range(4))
    d = topo.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["usable_cpus"] == [0, 1, 2, 3]
    assert d["cores"] == [[0, 2], [1, 3]]
    assert d["numa_nodes"] == [[0, 1, 2, 3]]
    assert d["cpu_quota"] == 1.5
    assert d["num_usable"] == 1 and d["num_physical"] == 2 and d["smt"] is True


def test_str_singular_forms() -> None:
    topo = Topology(usable_cpus=(0,), cpu_quota=None, cores=((0,),), numa_nodes=((0,),))
    assert str(topo) == "1 usable CPU (1 physical core, no SMT, 1 NUMA node)"


def test_topology_is_frozen_and_hashable() -> None:
    topo = Topology(usable_cpus=(0, 1), cpu_quota=None, cores=((0,), (1,)), numa_nodes=((0, 1),))
    with pytest.raises(AttributeError):
        topo.cpu_quota = 1.0  # type: ignore[misc]
    assert hash(topo) == hash(Topology((0, 1), None, ((0,), (1,)), ((0, 1),)))


# --------------------------------------------------------------------------- real machine


def test_current_topology_matches_real_affinity() -> None:
    topo = current_topology()
    assert topo is current_topology()  # cached
    assert topo.num_usable >= 1
    assert set(topo.usable_cpus) == os.sched_getaffinity(0)
    assert sorted(c for core in topo.cores for c in core) == list(topo.usable_cpus)
    assert sorted(c for node in topo.numa_nodes for c in node) == list(topo.usable_cpus)
    assert 1 <= topo.num_physical <= len(topo.usable_cpus)
    assert json.loads(json.dumps(topo.to_dict())) == topo.to_dict()
