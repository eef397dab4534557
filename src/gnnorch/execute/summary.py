"""`render_summary`: what one call did, in a few lines (``Runtime.summary()``, stderr when
``verbose``).

A pure function of the call's `RunInfo`: the plan (ranks, sampler cores, threads, binding),
the epoch times rank 0 measured, and what each feature decided, read from rank 0's statistics
(``info.stats[0][feature]``, as `intercept.session` and the seams record them): the sampler
backend of each NeighborLoader, which models were trimmed and how that was verified, which
layer rewrites were taken, and the state of the cache, the partitioned feature store and the
data path. Rank 0 stands for the others: every rank runs the same loaders, models and
decisions (the features agree across ranks where they could differ).

Statistics are read defensively: a key that is missing, or holds something else than
expected, leaves its part out of the summary; rendering never raises on the statistics. One
line per feature at most (cache, partition and data path share one), identical loaders and
models folded into one entry with a count.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from .info import RunInfo

__all__ = ["render_summary"]

_MAX_EPOCHS_LISTED = 8


def render_summary(info: RunInfo, tuning: str | None = None) -> str:
    """The summary of the call `info` describes; `tuning` is the tuner's one line (how long it
    searched, what it chose, or why it did not tune), shown under the plan when given."""
    stats = info.stats.get(0)
    stats = stats if isinstance(stats, dict) else {}
    lines = [_headline(info)]
    if tuning:
        lines.append(f"autotune: {tuning}")
    parts = (_epochs(info), _samplers(stats), _trim(info, stats), _rewrite(info, stats),
             _fork_guard(info))
    lines += [part for part in parts if part]
    state = [part for part in (_cache(info, stats), _partition(info, stats),
                               _data_path(info, stats)) if part]
    if state:
        lines.append("; ".join(state))
    return "\n".join([lines[0]] + [f"  {line}" for line in lines[1:]])


# -- the plan -------------------------------------------------------------------------------
def _headline(info: RunInfo) -> str:
    plan = info.plan
    ranks = f"{plan.processes} rank{'s' if plan.processes != 1 else ''}"
    per_rank = f"{plan.sampler_cores} sampler core{'s' if plan.sampler_cores != 1 else ''} + " \
               f"{plan.threads} thread{'s' if plan.threads != 1 else ''}"
    per_rank += " per rank" if plan.processes != 1 else ""
    binding = _binding(info)
    return (f"gnnorch: {ranks} on {info.device} ({per_rank}; {binding}); "
            f"{info.wall_seconds:.2f} s in all")


def _binding(info: RunInfo) -> str:
    if not info.cores:
        return "not bound"
    cpus = sorted({c for rank in info.cores for c in rank.cpus})
    return f"bound to cpus {_ranges(cpus)}" if cpus else "bound"


def _ranges(values: list[int]) -> str:
    """'0-3,8' for [0, 1, 2, 3, 8]."""
    out: list[str] = []
    start = prev = None
    for v in values + [None]:
        if start is not None and v == prev + 1:
            prev = v
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = v
    return ",".join(out)


def _epochs(info: RunInfo) -> str | None:
    mine = info.epochs.get(0)
    records = [r for r in (mine if isinstance(mine, list) else [])
               if isinstance(r, dict) and isinstance(r.get("seconds"), (int, float))]
    if not records:
        line = "epochs: no training epoch of a NeighborLoader was seen"
        if info.plan.processes > 1:   # nothing was sharded: the ranks repeated one another
            line += (f"; no loader was sharded, so unless the function splits its data over "
                     f"ranks itself (torch.distributed), each of the {info.plan.processes} "
                     f"ranks ran every batch")
        return line
    by_loader: dict[Any, list[float]] = {}
    for r in records:
        by_loader.setdefault(r.get("loader"), []).append(float(r["seconds"]))
    parts = []
    for loader, seconds in by_loader.items():
        label = f"loader {loader}: " if len(by_loader) > 1 else ""
        parts.append(label + _seconds_list(seconds))
    count = len(records)
    return f"epochs ({count}, rank 0): " + "; ".join(parts)


def _seconds_list(seconds: list[float]) -> str:
    shown = [f"{s:.2f}" for s in seconds]
    if len(shown) > _MAX_EPOCHS_LISTED:
        shown = shown[:3] + ["..."] + shown[-2:]
    mean = f" (mean {sum(seconds) / len(seconds):.2f} s)" if len(seconds) > 2 else ""
    return ", ".join(shown) + " s" + mean


# -- the features ---------------------------------------------------------------------------
def _dicts(value: Any) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _folded(entries: Iterable[str]) -> str:
    """Distinct entries in first-seen order, repeated ones as '3x entry'."""
    counts = Counter(entries)
    return ", ".join(e if counts[e] == 1 else f"{counts[e]}x {e}" for e in counts)


def _samplers(stats: dict) -> str | None:
    section = stats.get("sampler")
    loaders = _dicts(section.get("loaders")) if isinstance(section, dict) else []
    before = section.get("built_before_run", 0) if isinstance(section, dict) else 0
    if not loaders and not before:
        return None
    entries = []
    if before:
        entries.append(f"{before} loader{'s' if before != 1 else ''} built before the call, "
                       f"run as PyG runs {'them' if before != 1 else 'it'}")
    for loader in loaders:
        entry = f"{loader.get('role', 'loader')} {loader.get('backend', '?')}"
        workers = loader.get("num_workers")
        if isinstance(workers, str) and workers != "plan":
            entry += f" [num_workers {workers}]"
        whole = loader.get("kept_whole")   # a graph-level loader not sharded: why, in short
        if isinstance(whole, str):
            entry += f" (whole in every rank: {whole.split(':')[0]})"
        entries.append(entry)
    return "sampler: " + _folded(entries)


def _trim(info: RunInfo, stats: dict) -> str | None:
    if not getattr(info.options, "trim", True):
        return "trim: off (trim=False)"
    section = stats.get("trim")
    if not isinstance(section, dict):
        return None
    models = _dicts(section.get("models"))
    if not models:
        return "trim: no MessagePassing model ran on a NeighborLoader batch"
    entries = []
    for m in models:
        name = m.get("model", "model")
        if m.get("trimmed"):
            how, encoder = m.get("verified_by"), m.get("encoder")
            at = f" at its encoder{'s' * (' and ' in encoder)} {encoder}" if encoder else ""
            entries.append(f"{name} trimmed" + at
                           + (" with layers from data flow" if m.get("layer_plan") else "")
                           + (f" (verified: {how})" if how else ""))
        else:
            reason = m.get("reason")
            entries.append(f"{name} not trimmed" + (f" ({reason})" if reason else ""))
    return "trim: " + _folded(entries)


def _rewrite(info: RunInfo, stats: dict) -> str | None:
    if getattr(info.options, "rewrite", True) is False:
        return "rewrite: off (rewrite=False)"
    section = stats.get("rewrite")
    if not isinstance(section, dict):
        return None
    layers = _dicts(section.get("layers"))
    mode = " (mode 'report': decided, never swapped)" if section.get("mode") == "report" else ""
    taken = [f"{layer.get('name', layer.get('type', 'layer'))} "
             f"{layer.get('rewritten_order') or 'rewritten'} "
             f"({layer.get('rewritten_calls')}/{layer.get('calls')} calls)"
             for layer in layers if _positive(layer.get("rewritten_calls"))]
    if taken:
        return f"rewrite{mode}: " + ", ".join(taken)
    if not layers:
        return f"rewrite{mode}: no layer with a rewrite rule ran"
    kept = "1 layer kept its order" if len(layers) == 1 else \
        f"{len(layers)} layers kept their order"
    return f"rewrite{mode}: none taken ({kept})"


def _fork_guard(info: RunInfo) -> str | None:
    """Only when the guard had to act, on any rank (`launch.fork_guard`)."""
    killed = 0
    for rank_stats in info.stats.values():
        guard = rank_stats.get("fork_guard") if isinstance(rank_stats, dict) else None
        value = guard.get("stuck_killed") if isinstance(guard, dict) else None
        killed += value if isinstance(value, int) and value > 0 else 0
    if not killed:
        return None
    return (f"fork guard: {killed} forked child{'ren' if killed != 1 else ''} stuck in "
            f"CPython's after-fork (gh-112275) killed and forked again")


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _cache(info: RunInfo, stats: dict) -> str | None:
    config = getattr(info.options, "cache_config", None)
    if config is None:
        return "cache: off"
    section = stats.get("cache")
    if not isinstance(section, dict):
        return None
    status = section.get("status")
    if status != "active":
        reason = section.get("reason")
        return f"cache: {status or 'off'}" + (f" ({reason})" if reason else "")
    text = f"cache: active, staleness <= {section.get('staleness_bound', config.staleness)}"
    seen = section.get("max_staleness_seen")
    if isinstance(seen, int):
        text += f" (max seen {seen})"
    hot = section.get("hot_vertices")
    if isinstance(hot, int):
        text += f", {hot} hot vertices"
    rate = section.get("hit_rate")
    if isinstance(rate, float):
        text += f", hit rate {rate:.0%}"
    return text


def _partition(info: RunInfo, stats: dict) -> str | None:
    if getattr(info.options, "partition_config", None) is None:
        return "partition: off"
    section = stats.get("partition")
    if not isinstance(section, dict):
        return None
    if not section.get("enabled"):
        reason = section.get("reason")
        return "partition: no effect" + (f" ({reason})" if reason else "")
    stores = _dicts(section.get("stores"))
    return f"partition: features of {len(stores) or '?'} store{'s' if len(stores) != 1 else ''}" \
           f" split over {info.plan.processes} ranks"


def _data_path(info: RunInfo, stats: dict) -> str | None:
    """The device data path (``stats["device"]``, `gnnorch.device`): where each served loader
    samples and keeps its features, which loaders left to PyG have their batches copied, or
    why none is served."""
    section = stats.get("device")
    mode = getattr(getattr(info.options, "data_path", None), "mode", None)
    host_by_default = mode == "host" or (mode in (None, "auto") and info.device != "cuda")
    if not isinstance(section, dict):
        return "data path: host" if host_by_default else None
    if not section.get("active"):
        reason = section.get("reason")
        return "data path: host" + ("" if host_by_default or not reason else f" ({reason})")
    served = [loader for loader in _dicts(section.get("loaders")) if loader.get("served")]
    where = section.get("device")

    def place(value: Any) -> str:   # the placement's "gpu" is whatever device the path serves
        return {"gpu": str(where or "device"), "pinned": "pinned host"}.get(value, str(value))

    def features(loader: dict) -> str:   # a split: the share of rows its batches took there
        if loader.get("features") != "split":
            return f"features on {place(loader.get('features', '?'))}"
        rows = loader.get("split_rows") or {}
        taken = (rows.get("device") or 0) + (rows.get("host") or 0)
        share = f", {100 * rows['device'] / taken:.0f} % of rows read there" if taken else ""
        return f"features split (hottest rows on {place('gpu')}{share})"

    entries = [f"{loader.get('role', 'loader')} sampled on {place(loader.get('structure', '?'))}"
               f", {features(loader)}" for loader in served]
    entries += [f"{loader.get('role', 'loader')} built by PyG, copied"
                f"{' ahead' if loader.get('prefetch') else ''}"
                for loader in _dicts(section.get("loaders"))
                if not loader.get("served") and loader.get("copied")]
    return f"data path: {where or 'device'}" + (f": {_folded(entries)}" if entries else
                                                 ", no loader served")
