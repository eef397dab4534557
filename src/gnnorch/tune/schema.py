"""The documented schema of a tuning report (``report.json``), as JSON Schema (draft 2020-12
subset), and a small validator for the keywords it uses (type, const, enum, minimum, required,
properties, additionalProperties, items, anyOf), so validation needs no extra package.

``python -m gnnorch schema`` prints the schema. Field meanings:

* ``format`` / ``version``: always "gnnorch-tuning-report" / 1.
* ``status``: "tuning" (probes running), "training" (the real run is going on), "done",
  "failed" (the real run raised).
* ``created`` / ``updated``: ISO 8601 UTC times; the file is rewritten atomically after every
  probe and every training epoch.
* ``platform``: usable cores (affinity and cgroup quota), physical cores, SMT, NUMA nodes (CPU
  lists), the device, and the versions of python, torch, PyG, scikit-optimize and gnnorch.
* ``space``: searched dimensions (name, bounds, int/real, prior), fixed values, constraints (as
  text) and the number of feasible points (null when not enumerable).
* ``tuner``: every `TuneConfig` setting, plus ``n_initial_points_used``.
* ``decision``: whether tuning ran (``tuned``), why (``reason``), and the projection behind it.
* ``trials``: one entry per probe, in order: the configuration, each rank's CPUs, each rank's
  batch size (its share: 1/p of a batch every rank runs whole), the measured throughput
  (training seeds per second over all ranks, counted by those shares; steady state, and when the probe saw an epoch start after its first epoch, with that per-epoch start cost
  amortised over the epoch: ``steady_throughput`` and ``epoch_start_seconds`` give both parts),
  status ("ok", "short": fewer measured steps than asked because the run ended, "failed"), wall
  seconds of the probe (start-up included), measured seconds and steps, warm-up steps excluded,
  who chose it ("default", "initial" design, "tuner", or "confirm": a finalist's second probe),
  the surrogate's prediction for tuner points, and the best throughput so far.
* ``confirmation``: null, or the finalists re-probed after the search (``margin``, and per
  finalist its ``config``, every ``throughputs`` measured and their ``mean``) and the chosen
  configuration; ``best`` is then the finalist with the highest mean.
* ``best_so_far``: the best-so-far curve (one value per trial).
* ``default`` / ``best`` / ``speedup_over_default``: the default configuration's measured
  throughput, the chosen configuration (its throughput: the best probe's, or the mean of its
  probes after confirmation), and best / default (means of their probes after confirmation).
* ``overhead``: BO compute seconds (fitting, acquisition), probe seconds, and the whole tuning
  phase's seconds.
* ``run``: the real run with the chosen configuration: its cores, every training epoch
  (loader index, epoch, batches, seeds, seconds and seeds/s, rank 0's view while running, all
  ranks' seeds once done) and its wall seconds (null while it runs).
"""
from __future__ import annotations

from typing import Any

FORMAT = "gnnorch-tuning-report"
VERSION = 1

_NUM = {"type": "number"}
_NUM_OR_NULL = {"type": ["number", "null"]}
_INT = {"type": "integer"}
_STR_OR_NULL = {"type": ["string", "null"]}
_CPUS = {"type": "array", "items": {"type": "integer", "minimum": 0}}

_CONFIG = {
    "type": "object",
    "required": ["processes", "sampler_cores", "threads"],
    "properties": {
        "processes": {"type": "integer", "minimum": 1},
        "sampler_cores": {"type": "integer", "minimum": 0},
        "threads": {"type": "integer", "minimum": 1},
    },
    "additionalProperties": True,       # room for more dimensions (hot ratio, staleness, ...)
}

_CORES = {
    "type": ["array", "null"],
    "items": {
        "type": "object",
        "required": ["rank", "trainer_cpus", "sampler_cpus"],
        "properties": {"rank": {"type": "integer", "minimum": 0}, "trainer_cpus": _CPUS,
                       "sampler_cpus": _CPUS},
    },
}

_PREDICTED = {
    "anyOf": [
        {"type": "null"},
        {"type": "object", "required": ["throughput", "low", "high"],
         "properties": {"throughput": _NUM, "low": _NUM, "high": _NUM}},
    ]
}

_TRIAL = {
    "type": "object",
    "required": ["index", "config", "cores", "batch_size_per_rank", "throughput", "status",
                 "error", "seconds", "measured_seconds", "measured_batches", "warmup_batches",
                 "chosen_by", "predicted", "best_so_far"],
    "properties": {
        "index": {"type": "integer", "minimum": 0},
        "config": _CONFIG,
        "cores": _CORES,
        "batch_size_per_rank": {"type": "array", "items": {"type": ["integer", "null"]}},
        "throughput": _NUM_OR_NULL,
        "status": {"enum": ["ok", "short", "failed"]},
        "error": _STR_OR_NULL,
        "seconds": {"type": "number", "minimum": 0},
        "measured_seconds": {"type": "number", "minimum": 0},
        "measured_batches": {"type": "integer", "minimum": 0},
        "warmup_batches": {"type": "integer", "minimum": 0},
        "chosen_by": {"enum": ["default", "initial", "tuner", "confirm"]},
        "predicted": _PREDICTED,
        "best_so_far": _NUM_OR_NULL,
        "steady_throughput": _NUM_OR_NULL,
        "epoch_start_seconds": _NUM_OR_NULL,
    },
}

_EPOCH = {
    "type": "object",
    "required": ["loader", "epoch", "batches", "seeds", "seconds", "throughput"],
    "properties": {"loader": _INT, "epoch": _INT, "batches": _INT, "seeds": _INT,
                   "seconds": _NUM, "throughput": _NUM_OR_NULL},
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "gnnorch tuning report",
    "type": "object",
    "required": ["format", "version", "status", "created", "updated", "platform", "space",
                 "tuner", "decision", "trials", "best_so_far", "stop_reason", "default", "best",
                 "speedup_over_default", "overhead", "run", "notes"],
    "properties": {
        "format": {"const": FORMAT},
        "version": {"const": VERSION},
        "status": {"enum": ["tuning", "training", "done", "failed"]},
        "created": {"type": "string"},
        "updated": {"type": "string"},
        "platform": {
            "type": "object",
            "required": ["usable_cores", "physical_cores", "smt", "numa_nodes", "usable_cpus",
                         "cpu_quota", "device", "versions", "platform"],
            "properties": {
                "usable_cores": {"type": "integer", "minimum": 1},
                "physical_cores": {"type": "integer", "minimum": 1},
                "smt": {"type": "boolean"},
                "numa_nodes": {"type": "array", "items": _CPUS},
                "usable_cpus": _CPUS,
                "cpu_quota": _NUM_OR_NULL,
                "device": {"type": "string"},
                "versions": {"type": "object", "required": ["python", "torch", "torch_geometric",
                                                            "scikit_optimize", "gnnorch"]},
                "platform": {"type": "string"},
            },
        },
        "space": {
            "type": "object",
            "required": ["dimensions", "fixed", "constraints", "usable_cores", "size"],
            "properties": {
                "dimensions": {"type": "array", "items": {
                    "type": "object", "required": ["name", "low", "high", "kind", "prior"],
                    "properties": {"name": {"type": "string"}, "low": _NUM, "high": _NUM,
                                   "kind": {"enum": ["int", "real"]},
                                   "prior": {"enum": ["uniform", "log-uniform"]}}}},
                "fixed": {"type": "object"},
                "constraints": {"type": "array", "items": {"type": "string"}},
                "usable_cores": {"type": "integer", "minimum": 1},
                "size": {"type": ["integer", "null"]},
            },
        },
        "tuner": {"type": "object", "required": ["budget", "n_initial_points", "estimator",
                                                 "acq_func", "seed", "min_gain",
                                                 "warmup_batches", "probe_batches"]},
        "decision": {
            "type": "object",
            "required": ["tuned", "reason", "projected_tuning_seconds", "projected_run_seconds",
                         "epochs", "epochs_source"],
            "properties": {"tuned": {"type": "boolean"}, "reason": {"type": "string"},
                           "projected_tuning_seconds": _NUM_OR_NULL,
                           "projected_run_seconds": _NUM_OR_NULL,
                           "epochs": {"type": ["integer", "null"]},
                           "epochs_source": _STR_OR_NULL},
        },
        "trials": {"type": "array", "items": _TRIAL},
        "best_so_far": {"type": "array", "items": _NUM_OR_NULL},
        "stop_reason": _STR_OR_NULL,
        "default": {"type": "object", "required": ["config", "throughput"],
                    "properties": {"config": _CONFIG, "throughput": _NUM_OR_NULL}},
        "best": {"type": "object", "required": ["config", "throughput", "trial"],
                 "properties": {"config": _CONFIG, "throughput": _NUM_OR_NULL,
                                "trial": {"type": ["integer", "null"]}}},
        "speedup_over_default": _NUM_OR_NULL,
        "confirmation": {"anyOf": [
            {"type": "null"},
            {"type": "object", "required": ["margin", "finalists", "chosen"],
             "properties": {"margin": _NUM, "chosen": _CONFIG,
                            "finalists": {"type": "array", "items": {
                                "type": "object", "required": ["config", "throughputs", "mean"],
                                "properties": {"config": _CONFIG, "mean": _NUM,
                                               "throughputs": {"type": "array",
                                                               "items": _NUM}}}}}}]},
        "overhead": {"type": "object",
                     "required": ["bo_seconds", "probe_seconds", "tuning_seconds"],
                     "properties": {"bo_seconds": _NUM, "probe_seconds": _NUM,
                                    "tuning_seconds": _NUM}},
        "run": {"anyOf": [
            {"type": "null"},
            {"type": "object", "required": ["config", "cores", "epochs", "wall_seconds"],
             "properties": {"config": _CONFIG, "cores": _CORES,
                            "epochs": {"type": "array", "items": _EPOCH},
                            "wall_seconds": _NUM_OR_NULL}},
        ]},
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}

_TYPES = {
    "object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
}


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def validate(data: Any, schema: dict | None = None, path: str = "$") -> list[str]:
    """Every violation of `schema` (default: the report schema) by `data`, as 'path: problem'."""
    schema = SCHEMA if schema is None else schema
    errors: list[str] = []
    if "anyOf" in schema:
        if not any(not validate(data, sub, path) for sub in schema["anyOf"]):
            errors.append(f"{path}: matches none of the allowed forms")
        return errors
    if "const" in schema and data != schema["const"]:
        errors.append(f"{path}: expected {schema['const']!r}, got {data!r}")
    if "enum" in schema and data not in schema["enum"]:
        errors.append(f"{path}: expected one of {schema['enum']}, got {data!r}")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(data, t) for t in types):
            errors.append(f"{path}: expected {' or '.join(types)}, got {type(data).__name__}")
            return errors
    if "minimum" in schema and _is_type(data, "number") and data < schema["minimum"]:
        errors.append(f"{path}: {data} < minimum {schema['minimum']}")
    if isinstance(data, dict):
        for key in schema.get("required", []):
            if key not in data:
                errors.append(f"{path}: missing {key!r}")
        props = schema.get("properties", {})
        for key, value in data.items():
            if key in props:
                errors += validate(value, props[key], f"{path}.{key}")
            elif schema.get("additionalProperties") is False:
                errors.append(f"{path}: unexpected {key!r}")
    if isinstance(data, list) and "items" in schema:
        for i, item in enumerate(data):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    return errors
