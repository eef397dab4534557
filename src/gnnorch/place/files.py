"""Cluster and profile files: the JSON that ``python -m gnnorch plan CLUSTER PROFILE`` reads.

**Cluster file** (one object; docs/placement.md has a full example)::

    {"nodes": [{"name": "a", "cores": 16, "memory_gb": 64, "gpus": 2, "nic_gbps": 50},
               {"name": "b", "cores": 8, "memory_gb": 32, "gpus": 1,
                "nic_in_gbps": 20, "nic_out_gbps": 10}],
     "links": [{"from": "a", "to": "b", "gbps": 5}],       (optional: pair caps a -> b)
     "local_gbps": null}                                   (optional: co-located flows' rate)

Every node needs ``cores``, ``memory_gb``, ``gpus`` (>= 0) and either ``nic_gbps`` (both
directions) or ``nic_in_gbps`` and ``nic_out_gbps`` (> 0); ``name`` is optional (default: the
node's index) and unique. Node i holds graph partition i. A link names its nodes by name or
index; unlisted pairs are uncapped (a non-blocking switch).

**Profile file**: one iteration of the job, in one of three forms chosen by ``"kind"``:

* ``"means"`` (default) -- the fields of `Profile` as they are: ``sampler_trainer`` (S,),
  ``store_s`` (P,), ``sampler_s`` (S,), ``trainer_s`` (W,) seconds, ``structure_bytes``
  (P x S), ``batch_bytes`` (S,), ``feature_bytes`` (P x W), ``grad_bytes``; optional
  ``time_cv``, ``volume_cv``;
* ``"steps"`` -- the same names with one leading row per measured step
  (`Profile.from_measurements`), ``sampler_trainer`` and ``grad_bytes`` as above, optional
  ``skip`` (warm-up steps dropped);
* ``"synthetic"`` -- the keywords of `Profile.synthetic` (``n_partitions``, ``n_trainers``,
  ``samplers_per_trainer``, the per-task seconds and bytes, ``locality``; optional
  ``spread``, ``time_cv``, ``volume_cv``, ``seed``).

All forms take an optional ``name`` and ``store_demand`` / ``sampler_demand`` /
``trainer_demand`` objects (``cores``, ``memory_gb``, ``gpus``; defaults as `Profile`'s).

Invariant: a file either yields a valid `Cluster` / `Profile` or raises `PlanFileError`, whose
message starts with the file's path and names the field (``nodes[1].cores``, ``store_s``);
unknown keys are errors (a typo must not fall back to a default silently).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np

from gnnorch.place.cluster import Cluster, PlacementError
from gnnorch.place.profile import Profile, TaskDemand

__all__ = ["PlanFileError", "load_cluster", "load_profile", "cluster_from_dict",
           "profile_from_dict", "PROFILE_KINDS"]

PROFILE_KINDS = ("means", "steps", "synthetic")
_T = TypeVar("_T")
_NODE_KEYS = ("name", "cores", "memory_gb", "gpus", "nic_gbps", "nic_in_gbps", "nic_out_gbps")
_DEMAND_KEYS = ("store_demand", "sampler_demand", "trainer_demand")
_TASK_ARRAYS = ("store_s", "sampler_s", "trainer_s", "structure_bytes", "batch_bytes",
                "feature_bytes")
_SYNTHETIC_COUNTS = ("n_partitions", "n_trainers", "samplers_per_trainer")
_SYNTHETIC_NUMBERS = ("store_s", "sampler_s", "trainer_s", "structure_bytes", "batch_bytes",
                      "feature_bytes", "grad_bytes", "locality")
_SYNTHETIC_OPTIONAL = ("spread", "time_cv", "volume_cv")


class PlanFileError(PlacementError):
    """A cluster or profile file cannot be read or does not describe one (the message names
    the file and the field)."""


def _at(where: str, key: str) -> str:
    """The field path of `key` inside `where` ("" is the file's top level)."""
    return f"{where}.{key}" if where else key


def _fail(where: str, message: str) -> PlanFileError:
    return PlanFileError(f"{where}: {message}" if where else message)


def _read(path: str | Path, what: str) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _fail(str(path), f"cannot read the {what} file ({reason})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(str(path), f"the {what} file is not JSON ({exc.msg} at line {exc.lineno}, "
                               f"column {exc.colno})") from None
    if not isinstance(data, dict):
        raise _fail(str(path), f"a {what} file holds one JSON object, got "
                               f"{type(data).__name__}")
    return data


def _keys(obj: Any, where: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()
          ) -> dict:
    if not isinstance(obj, dict):
        raise _fail(where, f"must be an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise _fail(where, f"unknown key(s) {unknown}; valid keys: {', '.join(allowed)}")
    missing = [k for k in required if k not in obj]
    if missing:
        raise _fail(where, f"missing key(s) {missing}")
    return obj


def _number(value: Any, where: str, positive: bool = False) -> float:
    """A finite JSON number >= 0 (> 0 when `positive`); booleans and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise _fail(where, f"must be a finite number {'> 0' if positive else '>= 0'}, "
                           f"got {value!r}")
    return float(value)


def _integer(value: Any, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _fail(where, f"must be an integer >= {low}, got {value!r}")
    return value


def _array(value: Any, where: str, ndim: int) -> np.ndarray:
    """A rectangular array of numbers with `ndim` dimensions (checked here, so that numpy's
    own messages about ragged lists or strings never reach the user)."""
    def walk(v: Any, depth: int) -> None:
        if depth == ndim:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _fail(where, f"holds {v!r} where a number belongs")
        elif not isinstance(v, list):
            raise _fail(where, f"must be a {ndim}-dimensional list of numbers, found {v!r} "
                               f"at depth {depth}")
        else:
            for item in v:
                walk(item, depth + 1)

    walk(value, 0)
    try:
        arr = np.asarray(value, dtype=float)
    except ValueError:
        raise _fail(where, "rows of different lengths") from None
    if arr.ndim != ndim:
        raise _fail(where, f"must be {ndim}-dimensional, got shape {arr.shape}")
    return arr


# -- cluster ---------------------------------------------------------------------------------
def cluster_from_dict(data: dict, where: str = "") -> tuple[Cluster, list[str]]:
    """(the `Cluster`, node names) from a cluster file's object (module docstring)."""
    _keys(data, where, ("nodes", "links", "local_gbps"), ("nodes",))
    nodes = data["nodes"]
    if not isinstance(nodes, list) or not nodes:
        raise _fail(_at(where, "nodes"), "must be a non-empty list of node objects")
    names: list[str] = []
    columns: dict[str, list[float]] = {k: [] for k in
                                       ("cores", "memory_gb", "gpus", "nic_in", "nic_out")}
    for i, node in enumerate(nodes):
        at = _at(where, f"nodes[{i}]")
        _keys(node, at, _NODE_KEYS, ("cores", "memory_gb", "gpus"))
        name = node.get("name", str(i))
        if not isinstance(name, str) or not name:
            raise _fail(f"{at}.name", f"must be a non-empty string, got {name!r}")
        if name in names:
            raise _fail(f"{at}.name", f"{name!r} names two nodes")
        names.append(name)
        for key in ("cores", "memory_gb", "gpus"):
            columns[key].append(_number(node[key], f"{at}.{key}"))
        if "nic_gbps" in node:
            if "nic_in_gbps" in node or "nic_out_gbps" in node:
                raise _fail(at, "give nic_gbps or nic_in_gbps / nic_out_gbps, not both")
            nic_in = nic_out = _number(node["nic_gbps"], f"{at}.nic_gbps", positive=True)
        elif "nic_in_gbps" in node and "nic_out_gbps" in node:
            nic_in = _number(node["nic_in_gbps"], f"{at}.nic_in_gbps", positive=True)
            nic_out = _number(node["nic_out_gbps"], f"{at}.nic_out_gbps", positive=True)
        else:
            raise _fail(at, "needs nic_gbps, or both nic_in_gbps and nic_out_gbps")
        columns["nic_in"].append(nic_in)
        columns["nic_out"].append(nic_out)
    link = _links(data.get("links"), names, _at(where, "links"))
    local = data.get("local_gbps")
    if local is not None:
        local = _number(local, _at(where, "local_gbps"), positive=True)
    cluster = Cluster(tuple(columns["cores"]), tuple(columns["memory_gb"]),
                      tuple(columns["gpus"]), tuple(columns["nic_in"]),
                      tuple(columns["nic_out"]), link_gbps=link, local_gbps=local)
    return cluster, names


def _links(links: Any, names: list[str], where: str) -> tuple[tuple[float, ...], ...] | None:
    if links is None:
        return None
    if not isinstance(links, list):
        raise _fail(where, "must be a list of {\"from\", \"to\", \"gbps\"} objects")
    n = len(names)
    matrix = [[math.inf] * n for _ in range(n)]

    def node(ref: Any, at: str) -> int:
        if isinstance(ref, str) and ref in names:
            return names.index(ref)
        if isinstance(ref, int) and not isinstance(ref, bool) and 0 <= ref < n:
            return ref
        raise _fail(at, f"{ref!r} is not a node (names: {', '.join(names)}; or 0..{n - 1})")

    for i, entry in enumerate(links):
        at = f"{where}[{i}]"
        _keys(entry, at, ("from", "to", "gbps"), ("from", "to", "gbps"))
        a, b = node(entry["from"], f"{at}.from"), node(entry["to"], f"{at}.to")
        if a == b:
            raise _fail(at, "a link joins two different nodes (traffic within a node: "
                            "local_gbps)")
        if matrix[a][b] != math.inf:
            raise _fail(at, f"a second cap for {names[a]} -> {names[b]}")
        matrix[a][b] = _number(entry["gbps"], f"{at}.gbps", positive=True)
    return tuple(tuple(row) for row in matrix)


def load_cluster(path: str | Path) -> tuple[Cluster, list[str]]:
    """Read a cluster file: (the `Cluster`, node names); `PlanFileError` naming the field."""
    return _build(path, "cluster", cluster_from_dict)


# -- profile ---------------------------------------------------------------------------------
def _demand(value: Any, where: str) -> TaskDemand:
    _keys(value, where, ("cores", "memory_gb", "gpus"))
    return TaskDemand(**{k: _number(v, _at(where, k)) for k, v in value.items()})


def profile_from_dict(data: dict, where: str = "") -> Profile:
    """A `Profile` from a profile file's object (module docstring)."""
    kind = data.get("kind", "means") if isinstance(data, dict) else None
    if kind not in PROFILE_KINDS:
        raise _fail(_at(where, "kind"),
                    f"must be one of {', '.join(PROFILE_KINDS)}, got {kind!r}")
    common = ("kind", "name") + _DEMAND_KEYS
    if kind == "synthetic":
        required = _SYNTHETIC_COUNTS + _SYNTHETIC_NUMBERS
        _keys(data, where, common + required + _SYNTHETIC_OPTIONAL + ("seed",), required)
    else:
        extra = ("time_cv", "volume_cv") if kind == "means" else ("skip",)
        _keys(data, where, common + ("sampler_trainer", "grad_bytes") + _TASK_ARRAYS + extra,
              ("sampler_trainer", "grad_bytes") + _TASK_ARRAYS)
    kwargs: dict[str, Any] = {k: _demand(data[k], _at(where, k))
                              for k in _DEMAND_KEYS if k in data}
    name = data.get("name", "")
    if not isinstance(name, str):
        raise _fail(_at(where, "name"), f"must be a string, got {name!r}")
    kwargs["name"] = name
    if kind == "synthetic":
        for key in _SYNTHETIC_COUNTS:
            kwargs[key] = _integer(data[key], _at(where, key), 1)
        if "seed" in data:
            kwargs["seed"] = _integer(data["seed"], _at(where, "seed"), 0)
        for key in _SYNTHETIC_NUMBERS + _SYNTHETIC_OPTIONAL:
            if key in data:
                kwargs[key] = _number(data[key], _at(where, key))
        return Profile.synthetic(**kwargs)
    steps = 1 if kind == "steps" else 0
    st = data["sampler_trainer"]
    if not isinstance(st, list) or not st or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in st):
        raise _fail(_at(where, "sampler_trainer"),
                    "must be a non-empty list of trainer indices (integers >= 0), one per "
                    "sampler")
    kwargs["sampler_trainer"] = np.asarray(st, dtype=np.int64)
    kwargs["grad_bytes"] = _number(data["grad_bytes"], _at(where, "grad_bytes"))
    for key in _TASK_ARRAYS:
        ndim = 2 if key in ("structure_bytes", "feature_bytes") else 1
        kwargs[key] = _array(data[key], _at(where, key), ndim + steps)
    if kind == "steps":
        if "skip" in data:
            kwargs["skip"] = _integer(data["skip"], _at(where, "skip"), 0)
        for key in _DEMAND_KEYS:                 # from_measurements has no defaults: Profile's
            kwargs.setdefault(key, Profile.__dataclass_fields__[key].default_factory())
        return Profile.from_measurements(**kwargs)
    for key in ("time_cv", "volume_cv"):
        if key in data:
            kwargs[key] = _number(data[key], _at(where, key))
    return Profile(**kwargs)


def load_profile(path: str | Path) -> Profile:
    """Read a profile file (any of the three kinds); `PlanFileError` naming the field."""
    return _build(path, "profile", profile_from_dict)


def _build(path: str | Path, what: str, make: Callable[[dict], _T]) -> _T:
    """`make` applied to the file's object; every failure a `PlanFileError` naming the file."""
    data = _read(path, what)
    try:
        return make(data)
    except PlanFileError as exc:
        raise _fail(str(path), str(exc)) from None
    except (ValueError, TypeError) as exc:      # the dataclasses' own invariants
        raise _fail(str(path), f"not a valid {what}: {exc}") from None
