"""One epoch of a loader the GPU data path serves (`intercept.device_path`): its batches drawn,
sampled, gathered and copied to the device by a `gnnorch.device.pipeline.Prefetcher` while the
trainer works on the previous one. A loader the path leaves to PyG whose batches may be drawn
ahead (`device_decisions.why_not_copied_ahead`) goes through the same `pipelined` epoch: PyG
builds its batches, the transfer copies them.

The first batch is drawn in the trainer's thread (the loader's shuffling draws its permutation
seed from torch's global RNG there, as in a plain run), and so is every batch while the
loader's `DrawAhead` says no (a cache whose admission is pending: batches are drawn on demand
until it has set its pruning mask); once batches are drawn ahead, it is shown them (a cache
recomputes the rows they will read before they arrive; what it is shown only guides that
work: every forward still checks its rows against the bound). Every draw, in either thread,
runs on the transfer's side stream (`DeviceTransfer.producing`), so the sampler's scratch
buffers stay on one stream. When the
epoch ends, or the user breaks out of it, the prefetcher is closed and the side stream drained
before its buffers can be reused.
"""
from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Protocol

import torch

from ..device.config import DataPathConfig
from ..device.gather import ID_FIELDS
from ..device.pipeline import Prefetcher
from ..device.seeds import SamplingGenerator
from ..device.state import LoaderDevice
from ..device.transfer import DeviceTransfer
from .device_decisions import why_not_copied_ahead
from .served_loader import loader_sampler

if TYPE_CHECKING:
    from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
    from torch_geometric.sampler import NegativeSampling

    from ..sampling.neighbor import FastNeighborSampler

    from .feeds import LoaderState

__all__ = ["OpenEpochs", "PyGBatchesAhead", "pipelined", "own_generator", "own_generators"]

_END = object()


class DrawAhead(Protocol):
    """What decides whether a loader's batches may be drawn ahead of the trainer, and watches
    them once they are (`cache.loader.LoaderCache`)."""

    def may_draw_ahead(self) -> bool: ...

    def watch_ahead(self, drawn: Callable[[], list[Any]] | None) -> None: ...


def pipelined(iterator: Iterator[Any], move: DeviceTransfer, depth: int, record: LoaderDevice,
              ahead: DrawAhead | None, publish: Callable[[], None]
              ) -> Generator[Any, None, None]:
    """The epoch's batches (module docstring), with a `Prefetcher` of depth `depth` (0: none)
    once `ahead` allows it (None: at once), shown to `ahead` while it runs; counts batches and
    waits in `record` and calls `publish` when the epoch ends."""
    pre: Prefetcher | None = None
    try:
        batch = _draw(iterator, move)   # trainer thread: the shuffle's global-RNG draw
        while batch is not _END:
            if depth > 0 and (ahead is None or ahead.may_draw_ahead()):   # k+1 while k trains
                pre = Prefetcher(iterator, transfer=move.transfer, depth=depth,
                                 ready=move.ready, name="gnnorch-device-path",
                                 produce_in=move.producing)
                if ahead is not None:
                    ahead.watch_ahead(_batches_of(pre, move))
            record.batches += 1
            yield move.ready(batch)
            if pre is not None:
                break
            batch = _draw(iterator, move)
        for batch in pre if pre is not None else ():
            record.batches += 1
            yield batch
    finally:
        if pre is not None:
            if ahead is not None:
                ahead.watch_ahead(None)
            pre.close()
            record.wait_s += pre.wait_s
        if move.stream is not None:   # work of dropped batches done before reuse
            move.stream.synchronize()
        publish()


class OpenEpochs:
    """Each loader's latest epoch through the pipeline, so that a new epoch of a loader with
    persistent workers first closes the previous one if the user left it open (an iterator kept
    after ``break``): PyTorch resets the one worker iterator such a loader keeps when the new
    epoch's iterator is made, and the old pipeline's thread must not be drawing from it then.
    (Without persistent workers each epoch has a worker iterator of its own.)"""

    def __init__(self) -> None:
        self._latest: weakref.WeakKeyDictionary[Any, weakref.ref[Generator[Any, None, None]]] \
            = weakref.WeakKeyDictionary()

    def opened(self, loader: NeighborLoader | LinkNeighborLoader,
               epoch: Generator[Any, None, None]) -> Generator[Any, None, None]:
        """`epoch`, remembered as `loader`'s latest."""
        self._latest[loader] = weakref.ref(epoch)
        return epoch

    def close_previous(self, loader: NeighborLoader | LinkNeighborLoader) -> None:
        """Before `loader`'s next epoch is made: its latest epoch closed (its prefetcher
        stopped and joined) where the loader's workers persist."""
        ref = self._latest.pop(loader, None)
        epoch = ref() if ref is not None else None
        if epoch is None or not getattr(loader, "persistent_workers", False):
            return
        try:
            epoch.close()
        except ValueError:   # running in another thread right now: it ends on its own
            pass


class PyGBatchesAhead:
    """Loaders the path leaves to PyG (HeteroData, ``adj_t``, ...) whose batches are drawn
    ahead: where the run has a device and drawing in the pipeline's thread changes nothing a
    fixed seed gives (`device_decisions.why_not_copied_ahead`), PyG's own batches are drawn
    there and copied to the device on a side stream of the loader's (from pinned memory), their
    id fields kept on the host with device twins, as a served loader's. Epochs are
    remembered in `open_epochs`."""

    def __init__(self, config: DataPathConfig, open_epochs: OpenEpochs) -> None:
        self.config, self.open_epochs = config, open_epochs
        self._moves: weakref.WeakKeyDictionary[Any, DeviceTransfer] = \
            weakref.WeakKeyDictionary()

    def epoch(self, iterator: Iterator[Any], loader: NeighborLoader | LinkNeighborLoader,
              state: LoaderState, record: LoaderDevice, device: torch.device | None,
              publish: Callable[[], None]) -> Iterator[Any]:
        """One epoch of `loader` towards `device`: a `pipelined` epoch, or `iterator` itself
        when the batches stay in the trainer's thread (`record` says why) or the run has no
        device (None)."""
        if device is None:
            return iterator
        why = why_not_copied_ahead(loader, state, self.config.prefetch)
        record.copied_ahead, record.prefetch_reason = why is None, why or ""
        record.prefetch = 0 if why is not None else self.config.prefetch
        if why is not None:
            publish()
            return iterator
        move = self._moves.get(loader)
        if move is None:
            move = self._moves[loader] = DeviceTransfer(
                device, pin=self.config.pin, host_fields=ID_FIELDS, twin_fields=ID_FIELDS)
        record.epochs += 1
        return self.open_epochs.opened(loader, pipelined(iter(iterator), move,
                                                         self.config.prefetch, record, None,
                                                         publish))


def _batches_of(pre: Prefetcher, move: DeviceTransfer) -> Callable[[], list[Any]]:
    """The batches `pre` drew ahead, next first, as the trainer will see them (host fields
    readable at once; device fields maybe still being copied)."""
    return lambda: [move.batch_of(item) for item in pre.drawn_ahead()]


def own_generators(iterator: Iterator[Any], loader: NeighborLoader | LinkNeighborLoader,
                   generators: SamplingGenerator,
                   lock: threading.Lock) -> tuple[Iterator[Any], str]:
    """The epoch's batches of `loader` drawn with the epoch's generators (`own_generator`),
    and why they may not be drawn ahead ("" when they may). A link loader's negatives come
    from the epoch's CPU generator (`SamplingGenerator.negatives`, drawn through
    `gnnorch.sampling.negatives.seeded_negatives`); where they cannot, PyG draws them from
    torch's global RNG, so the epoch is sampled in the trainer's thread."""
    from ..sampling.negatives import seeded_negatives

    link = getattr(loader, "node_sampler", None) is None
    sampler, generator = loader_sampler(loader), generators.next_epoch()
    users = getattr(loader, "neg_sampling", None) if link else None
    if users is None:
        return own_generator(iterator, sampler, generator, lock), ""
    seeded = seeded_negatives(users, generators.negatives())
    if seeded is None:
        return own_generator(iterator, sampler, generator, lock), (
            "its negative link samples are drawn from torch's global RNG (gnnorch.compat."
            "unavailable() says why, or a node weight is off the CPU): sampled in the "
            "trainer thread")
    return own_generator(iterator, sampler, generator, lock, (loader, seeded)), ""


def own_generator(iterator: Iterator[Any], sampler: FastNeighborSampler,
                  generator: torch.Generator, lock: threading.Lock,
                  negatives: tuple[LinkNeighborLoader, NegativeSampling] | None = None
                  ) -> Iterator[Any]:
    """`iterator`'s batches, each drawn with the loader's sampler given `generator` under
    `lock` (the loader's) for that draw only: epochs of one loader that run at once
    (``zip(loader, loader)``, an epoch left but kept while the next one runs) each sample from
    their own generator only, in whichever thread draws, so each gives the batches of a
    fixed-seed run. Between draws the sampler holds its own generator again, so worker
    processes forked from it later never share one generator state. `negatives`: (a link
    loader, the epoch's seeded ``neg_sampling``), set on the loader for each draw in the same
    way. For in-process sampling only (``num_workers=0``)."""
    loader, seeded = negatives if negatives is not None else (None, None)
    while True:
        with lock:
            own, sampler.generator = sampler.generator, generator
            if loader is not None:
                users, loader.neg_sampling = loader.neg_sampling, seeded
            try:
                batch = next(iterator)
            except StopIteration:
                return
            finally:
                sampler.generator = own
                if loader is not None:
                    loader.neg_sampling = users
        yield batch


def _draw(iterator: Iterator[Any], move: DeviceTransfer) -> Any:
    """The next batch drawn and transferred in this thread, on the side stream like the
    producer thread's; `_END` at the end."""
    with move.producing():
        try:
            batch = next(iterator)
        except StopIteration:
            return _END
        return move.transfer(batch)
