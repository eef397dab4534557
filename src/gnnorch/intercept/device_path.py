"""The device data path at the NeighborLoader seam (issue 21): on a training device, a loader's
graph structure and attributes live there, batches are sampled and gathered there, and batch
k+1 is prepared while batch k trains. LinkNeighborLoaders are served alike: their batches get
the fields of PyG's ``LinkLoader.filter_fn`` (`served_loader.link_batch`), and the negatives
PyG draws for them come from a CPU generator of the epoch's (`device_feed.own_generators`).

One `DevicePath` per rank and run, built by `intercept.session` and called by the loader seam
(`intercept.loader`) at two points:

* `adopt` (a NeighborLoader was built): decide whether the path serves it and how
  (`intercept.device_decisions`: `why_not_served`, and `data_placement` with a budget from the
  device's free memory, or ``budget_bytes``), record the decision in ``state.device``
  (`gnnorch.device.state.LoaderDevice`) and in ``stats["device"]``. A served loader builds
  its batches with a `gnnorch.device.gather.GatherPlan` (its ``filter_fn``; what serving
  changes on the loader and how `close` gives it back: `gnnorch.intercept.served_loader`);
  when its structure fits, gnnorch's sampler keeps its CSC on the device and samples there
  with a generator of its own (`gnnorch.device.seeds`), and the loader runs without worker
  processes. The user's `data` is never modified: device and pinned copies are the path's
  (shared by loaders over the same tensors).
* `epoch_start` (before an epoch's iterator is made): PyG's ``filter_fn`` reads
  ``loader.data`` at each batch, so a served loader whose data the user changed since
  (``del loader.data.x`` as PyG's reddit example does, an attribute added or replaced, a
  tensor written in place) gets a gather plan over the data as it is now (`GatherPlan.current`;
  device copies of tensors written in place are made again). Changes are seen from the next
  epoch, as PyG's worker processes see them.
* `feed` (an epoch of such a loader starts): the epoch's batches come through a
  `gnnorch.device.pipeline.Prefetcher` (depth ``prefetch``) whose producer thread samples,
  gathers and copies on a side stream (`gnnorch.device.transfer.DeviceTransfer`), while the
  trainer works on the previous batch; the consumer's stream waits on each batch's event. The
  first batch of an epoch is drawn in the trainer's thread (the loader's shuffling draws its
  permutation seed from torch's global RNG there, as in a plain run). Each epoch samples from
  a generator of its own (`device_feed.own_generators`), so epochs of one loader that run at
  once (``zip(loader, loader)``) each give the batches of a fixed-seed run, as in PyG.

When it serves: ``mode="auto"`` on a CUDA device, ``mode="device"`` always (the CPU as the device
where the run has none), ``mode="host"`` never. A ``mode="auto"`` run whose device says the CPU
while a GPU is visible watches for the first forward of a module holding a MessagePassing layer
(`FirstModelWatch`, one global forward pre-hook, removed at once): if its parameters are on a CUDA
device, the path serves that device from then on (`model_found_on`): loaders built afterwards at
`adopt`, loaders built before at the start of their next epoch (`epoch_start`; an epoch already
running stays as it started). A HeteroData loader is served alike
(`gnnorch.device.hetero_gather.HeteroGatherPlan`; its CSCs, one per edge type, sampled on the
device by `FastHeteroNeighborSampler`), without a split or the cache. It steps aside, saying why,
for ``adj_t``, partitioned features, a class that overrides ``filter_fn``, learnt features
(`learnt_attributes`) and numpy attributes where PyG's ``index_select`` is missing. Training
loaders of the historical-embedding cache (``cache=True``) are sampled on the device like any
other, the cache's exclusion mask there (hot vertices are not expanded); the cache's hotness,
admission and refreshes read the host's copy of the CSC (`FastNeighborSampler.host_structure`, kept
for them), and its rows live where the model computes them. They prefetch too: each batch carries
the pruning mask it was sampled with (`gnnorch.device.gather.sampled_exclusion`), and the pipeline
draws ahead only once the cache allows it (`cache.loader.LoaderCache.may_draw_ahead`: not while
admission is pending), so a fixed seed gives the same batches whatever the depth; the cache is then
shown the batches drawn ahead (`watch_ahead`), whose rows its background refresher recomputes
before they arrive.

A loader whose structure stays on the host (it does not fit the budget, its sampler has no
device path, or the cache) keeps the user's ``num_workers``: workers sample, the pipeline's
thread gathers. A loader the path leaves to PyG, on a run with a device, still goes through the
pipeline (`device_feed.PyGBatchesCopied`): PyG builds its batches, the path copies them from
pinned memory on a side stream, the batch left on the host with a device twin on every tensor.
Any loader's batches are drawn ahead only where that changes nothing a fixed seed gives
(`draw_ahead.why_not_drawn_ahead`: not with persistent workers, an index sampler that
draws as it goes, user code finishing batches in the trainer's process, or PyG sampling in
it). Where features stay on the host of a CUDA run with rewrites on, ``x`` is left in its
pinned rows for DAHA's host pre-transformation (`gnnorch.rewrite.host`: the loader seam
marks it, the rewrite engine decides per layer) and every other attribute is copied.

Batches equal those of a plain run drawing from the same sampling generator (tested): same
fields, values and key order; ``n_id`` / ``e_id`` / ``input_id`` stay on the host, every other
tensor is on the device. Nothing is left on a served loader after the run: `close` (at the
session's end) restores what serving changed on it.
"""
from __future__ import annotations

import functools
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from ..device.config import DataPathConfig
from ..device.gather import GatherPlan, ResidentTensors
from ..device.hetero_gather import HeteroGatherPlan
from ..device.placement import GPU, SPLIT
from ..device.seeds import SamplingGenerator
from ..device.state import LoaderDevice
from ..device.transfer import DeviceTransfer
from ..launch.context import RankContext
from .device_decisions import (data_placement, hetero_data_placement, host_sampling_reason,
                               resolve_device, row_ranking, shared_split, unservable_now,
                               why_not_served)
from .device_feed import PyGBatchesCopied, own_generators, pipelined
from .draw_ahead import why_not_drawn_ahead
from .model_watch import FirstModelWatch
from .served_loader import (LoaderUndo, ServedLoader, loader_sampler, structure_device,
                            structure_to_device)

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

    from ..sampling.hetero_neighbor import FastHeteroNeighborSampler
    from ..sampling.neighbor import FastNeighborSampler

    from .feeds import LoaderState


class DevicePath:
    """The device data path of one rank's run (see the module docstring)."""

    def __init__(self, ctx: RankContext, config: DataPathConfig,
                 device: torch.device | None) -> None:
        self.ctx, self.config = ctx, config
        self.device, self.reason = resolve_device(config, device)
        self.resident = ResidentTensors()
        self.loaders: list[LoaderDevice] = []
        self._served: weakref.WeakKeyDictionary[NeighborLoader, ServedLoader] = \
            weakref.WeakKeyDictionary()
        self._pyg_batches = PyGBatchesCopied(   # loaders left to PyG, copied over
            config, host_transform=ctx.options.rewrite is not False)
        self._late = False   # the device was found at the model's first forward
        self._watch = (FirstModelWatch(self.model_found_on)
                       if config.mode == "auto" and self.device is None
                       and torch.cuda.is_available() else None)
        self._publish()

    @property
    def active(self) -> bool:
        return self.device is not None

    # -- adopt ----------------------------------------------------------------------------
    def adopt(self, loader: NeighborLoader, state: "LoaderState") -> None:
        """Decide for a NeighborLoader just built (see the module docstring)."""
        record = LoaderDevice(key=len(self.loaders), role=state.role,
                              device=str(self.device) if self.device is not None else "none")
        self.loaders.append(record)
        state.device = record
        aside = why_not_served(loader, state, self.device, self.reason)
        if aside is not None:
            record.reason = aside
        else:
            self._serve(loader, state, record)
        self._publish()

    def _serve(self, loader: NeighborLoader, state: "LoaderState",
               record: LoaderDevice) -> None:
        assert self.device is not None
        cfg, data, sampler = self.config, loader.data, loader_sampler(loader)
        cuda = self.device.type == "cuda"
        from torch_geometric.data import HeteroData
        hetero = isinstance(data, HeteroData)
        why_host = host_sampling_reason(sampler)
        fast = why_host is None
        undo = LoaderUndo(loader)
        cached = (state.role == "train" and state.kind == "node"   # (no cache for links)
                  and self.ctx.options.cache_config is not None and not hetero)
        # DAHA's host transform (x left in pinned rows) only where x's copy is not prefetched
        # anyway: a deferred x the engine does not transform is copied on the trainer's stream
        defer = (("x",) if cuda and self.ctx.options.rewrite is not False and cfg.prefetch == 0
                 and not hetero else ())
        ranking = functools.cache(functools.partial(row_ranking, loader, sampler, self.device,
                                                    record))
        shared = (shared_split(data, self.device, self.resident, defer) if fast and not hetero
                  else None)
        placement = (hetero_data_placement(self.device, cfg, data, sampler, self.resident,
                                           why_host) if hetero else
                     data_placement(self.device, cfg, data, sampler.row.numel(),
                                    self.resident, why_host, ranking if fast else None, defer,
                                    shared))
        on_device = placement.structure == GPU
        generator, note = None, ""
        if on_device:
            if sampler.use_pyg:
                note = "; gnnorch's sampler replaces pyg-lib, which has no device sampler"
            sampler.use_pyg = False   # the only device sampler: ours
            # a cache loader keeps the host's CSC too: hotness and refreshes run there
            record.bytes_on_device += structure_to_device(
                sampler, data, self.device, self.resident, placement.structure_bytes,
                keep_host=cached)
        if fast and not sampler.use_pyg:   # pyg-lib draws from its own RNG
            where = structure_device(sampler) or (self.device if on_device
                                                  else torch.device("cpu"))
            generator = SamplingGenerator(where, self.ctx.data_seed, self.ctx.rank,
                                          record.key)
        before = self.resident.bytes_copied
        if hetero:
            plan: GatherPlan | HeteroGatherPlan = HeteroGatherPlan(
                data, self.device, placement.features, self.resident, pin=cfg.pin)
        else:
            hot = None if placement.features != SPLIT else \
                shared if shared is not None else ranking().hottest(placement.device_rows)
            plan = GatherPlan(data, self.device, placement.features, self.resident,
                              pin=cfg.pin, defer=defer, hot_rows=hot)
            record.split_rows = plan.counts if placement.features == SPLIT else None
        if placement.features in (GPU, SPLIT):
            record.bytes_on_device += self.resident.bytes_copied - before
        move = DeviceTransfer(self.device, pin=cfg.pin)
        served = ServedLoader(plan, move, generator, on_device, cached, undo)
        served.install(loader, record, state.user_num_workers)
        if cuda:
            torch.cuda.synchronize(self.device)   # copies made here precede every stream
        record.served, record.samples_on_device = True, on_device
        record.placement, record.features, record.deferred = placement, placement.features, \
            plan.defer
        record.reason = (f"{'sampled and gathered' if on_device else 'gathered'} for "
                         f"{self.device} ({placement.reasons[-1]}){note}")
        self._served[loader] = served

    def feature_source(self, loader: NeighborLoader) -> Callable[[], torch.Tensor] | None:
        """Where `loader`'s batches gather ``x`` when that is a device-resident copy
        (features on the GPU): a function returning the copy of ``data.x`` as it is when
        called (`ResidentTensors.on_device`: made again after ``data.x`` was replaced or
        written in place). None when the path does not serve the loader or its features stay
        on the host. The cache's refreshes read it, so they gather on the device too."""
        served = self._served.get(loader)
        device = self.device
        if (served is None or device is None or served.plan.features != GPU
                or not isinstance(served.plan, GatherPlan)):
            return None
        data, resident = loader.data, self.resident

        def current() -> torch.Tensor:
            x = data.x
            if isinstance(x, torch.Tensor) and not x.requires_grad:
                return resident.on_device(x, device)
            return x

        return current

    # -- a device found late -------------------------------------------------------------
    def model_found_on(self, device: torch.device) -> None:
        """The model's parameters were found on `device` at its first forward while the run's
        device said the CPU (``mode="auto"``): serve `device` from now on (module docstring).
        A CPU device, another mode or a path that already serves a device: nothing changes."""
        if self.device is not None or self.config.mode != "auto" or device.type == "cpu":
            return
        self.device, self._late = device, True
        self.reason = (f"the model's parameters were found on {device} at its first forward "
                       f"(the run's device said the CPU): served from each loader's next epoch")
        self._publish()

    def epoch_start(self, loader: NeighborLoader, state: "LoaderState") -> None:
        """Before an epoch's iterator is made: a served loader whose data the user changed
        since its plan was made gets a plan over the data as it is now (`_replan`); a loader
        adopted before the device was found (`model_found_on`) is decided again and served
        from this epoch on."""
        record = state.device
        served = self._served.get(loader)
        if served is not None and isinstance(record, LoaderDevice) and record.served:
            self._replan(loader, state, served, record)
            return
        if (not self._late or served is not None or not isinstance(record, LoaderDevice)
                or record.served or record.device != "none"):
            return
        record.device = str(self.device)
        aside = why_not_served(loader, state, self.device, self.reason)
        if aside is not None:
            record.reason = aside
        else:
            self._serve(loader, state, record)
            record.reason += f"; served from its epoch {_epochs_before(state)} (0-based) on"
        self._publish()

    def _replan(self, loader: NeighborLoader, state: "LoaderState", served: ServedLoader,
                record: LoaderDevice) -> None:
        """PyG's ``filter_fn`` reads ``loader.data`` at each batch, so the batches follow what
        the user changed in it after building the loader (an attribute deleted, added,
        replaced, or written in place: `GatherPlan.current`). The plan is made again over the
        data as it is now, with the same placement (a device copy of a tensor written in place
        is made again); data the path cannot serve any more is given back to PyG. Seen from
        the next epoch: an epoch already running keeps its plan (as PyG's workers keep the
        data they were started with)."""
        data = loader.data
        if served.plan.current(data):
            return
        why = unservable_now(data, served.plan.data)
        if why is not None:
            served.restore(loader)
            del self._served[loader]
            record.served = record.samples_on_device = False
            record.reason = f"given back to PyG at its epoch {_epochs_before(state)}: {why}"
            self._publish()
            return
        before = self.resident.bytes_copied
        served.use_plan(loader, served.plan.remade(data, self.resident, self.config.pin))
        if served.plan.features in (GPU, SPLIT):
            record.bytes_on_device += self.resident.bytes_copied - before
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)   # the new copies precede every stream
        record.deferred = served.plan.defer
        record.replans += 1
        self._publish()

    # -- the run's end --------------------------------------------------------------------
    def close(self) -> None:
        """The session ends: every served loader still alive is given back as it was before
        `adopt` (`LoaderUndo`: PyG's ``filter_fn``, the loader's ``filter_per_worker`` and
        ``num_workers``, its sampler's CSC on the device it came from, ``use_pyg`` and
        generator), so a loader the user keeps iterates as a plain PyG loader. The path's
        device and pinned copies go with it."""
        if self._watch is not None:
            self._watch.remove()
        for loader, served in list(self._served.items()):
            served.restore(loader)
        self._served.clear()

    # -- feed -----------------------------------------------------------------------------
    def feed(self, iterator: Iterator[Any], loader: NeighborLoader, state: "LoaderState",
             training: bool) -> Iterator[Any]:
        """One epoch's batches of `loader` through the pipeline: a served loader's, or PyG's
        batches copied to the device (`device_feed.PyGBatchesCopied`)."""
        served = self._served.get(loader)
        record = getattr(state, "device", None)
        if not isinstance(record, LoaderDevice):
            return iterator
        if served is None or not record.served:
            return self._pyg_batches.epoch(iterator, loader, state, record, self.device,
                                           self._publish)
        depth = self.config.prefetch
        in_process = int(getattr(loader, "num_workers", 0) or 0) == 0
        record.prefetch_reason = ""
        batches: Iterator[Any] = iter(iterator)
        # this epoch's draws from this epoch's generator; workers draw from torch's RNG as
        # PyG's DataLoader seeds it per worker (a shared generator would be forked alike)
        if served.generator is not None and in_process:
            batches, not_ahead = own_generators(batches, loader, served.generator,
                                                served.sampling)
            if not_ahead:
                depth, record.prefetch_reason = 0, not_ahead
        elif in_process and depth > 0:
            depth, record.prefetch_reason = 0, ("PyG's sampler draws from torch's global RNG: "
                                                "sampled in the trainer thread")
        if depth > 0 and (why := why_not_drawn_ahead(loader, state, depth, served=True)):
            depth, record.prefetch_reason = 0, why
        # a training loader's cache decides when batches are drawn ahead, and watches them
        cache = state.cache if served.cached and training else None
        record.prefetch = depth
        record.epochs += 1
        return pipelined(batches, served.move, depth, record, cache, self._publish)

    # -- report ---------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        return {"mode": self.config.mode, "config": self.config.to_dict(),
                "device": str(self.device) if self.device is not None else None,
                "active": self.active, "reason": self.reason,
                "resident_bytes": self.resident.bytes_copied,
                "loaders": [r.to_dict() for r in self.loaders]}

    def _publish(self) -> None:
        self.ctx.stats["device"] = self.stats()


def _epochs_before(state: "LoaderState") -> int:
    """Epochs the loader ran before this one (training and evaluation)."""
    return int(getattr(state, "epochs", 0) or 0) + int(getattr(state, "eval_epochs", 0) or 0)
