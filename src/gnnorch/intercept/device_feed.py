"""One epoch of a loader the GPU data path serves (`intercept.device_path`): its batches drawn,
sampled, gathered and copied to the device by a `gnnorch.device.pipeline.Prefetcher` while the
trainer works on the previous one. A loader the path leaves to PyG goes through the same
`pipelined` epoch (`PyGBatchesCopied`): PyG builds its batches, the transfer copies them.

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
from ..device.pipeline import Prefetcher
from ..device.seeds import SamplingGenerator
from ..device.state import LoaderDevice
from ..device.transfer import DeviceTransfer
from .draw_ahead import why_not_drawn_ahead
from .served_loader import loader_sampler

if TYPE_CHECKING:
    from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
    from torch_geometric.sampler import NegativeSampling

    from ..sampling.neighbor import FastNeighborSampler

    from .feeds import LoaderState

__all__ = ["PyGBatchesCopied", "deferred_fields", "pipelined", "own_generator", "own_generators"]

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


class PyGBatchesCopied:
    """Loaders the path leaves to PyG (``adj_t``, a ``filter_fn`` of their own, ...) on a run
    with a device: PyG builds their batches as it always does, and the path copies each tensor
    to the device on a side stream of the loader's, from pinned memory (never the user's
    pageable ``batch.to``). The batch the user gets is PyG's, on the host, each tensor carrying
    its device copy (`DeviceTransfer` with ``twin_all``): host-side code works as with PyG, and
    ``batch.to(device)`` copies nothing. Drawn ahead in the pipeline's thread where that
    changes nothing a fixed seed gives (`draw_ahead.why_not_drawn_ahead`), else in the
    trainer's thread when it asks. With `host_transform` (rewrites on), a homogeneous batch
    drawn in the trainer's thread keeps ``x`` as PyG made it, for DAHA's host
    pre-transformation (`deferred_fields`), as a served loader's does without prefetching."""

    def __init__(self, config: DataPathConfig, host_transform: bool) -> None:
        self.config, self.host_transform = config, host_transform
        self._moves: weakref.WeakKeyDictionary[Any, DeviceTransfer] = \
            weakref.WeakKeyDictionary()

    def epoch(self, iterator: Iterator[Any], loader: NeighborLoader | LinkNeighborLoader,
              state: LoaderState, record: LoaderDevice, device: torch.device | None,
              publish: Callable[[], None]) -> Iterator[Any]:
        """One epoch of `loader` towards `device` (a `pipelined` epoch); `iterator` itself
        when the run has no device (None)."""
        if device is None:
            return iterator
        why = why_not_drawn_ahead(loader, state, self.config.prefetch, served=False)
        record.copied, record.prefetch_reason = True, why or ""
        record.prefetch = 0 if why is not None else self.config.prefetch
        move = self._moves.get(loader)
        if move is None:
            move = self._moves[loader] = DeviceTransfer(device, pin=self.config.pin,
                                                        twin_all=True)
        move.host_fields = deferred_fields(getattr(loader, "data", None), device,
                                           record.prefetch, self.host_transform)
        record.deferred = move.host_fields
        record.epochs += 1
        ahead = _AfterTheHead(state) if state.head_pending else None
        return pipelined(iter(iterator), move, record.prefetch, record, ahead, publish)


class _AfterTheHead:
    """Batches of an epoch split after its head (`epoch_role.decided_after_first_batch`) are
    drawn ahead only once the head's step has run and the rest's sharding is decided: drawn
    earlier, the rest's first batch would be drawn before the model was seen."""

    def __init__(self, state: LoaderState) -> None:
        self.state = state

    def may_draw_ahead(self) -> bool:
        return not self.state.head_pending

    def watch_ahead(self, drawn: Callable[[], list[Any]] | None) -> None:
        return None


def deferred_fields(data: Any, device: torch.device, depth: int,
                    host_transform: bool) -> tuple[str, ...]:
    """The fields of a PyG-built batch left untouched on the host (no device copy): ``x`` of a
    homogeneous batch on a CUDA run with rewrites on (`host_transform`) whose batches are not
    drawn ahead (`depth` 0), which the loader seam marks for DAHA's host pre-transformation
    (`intercept.announce`, `gnnorch.rewrite.host`); drawn ahead, its copy is off the
    trainer's path anyway."""
    from torch_geometric.data import Data

    if host_transform and device.type == "cuda" and depth == 0 and isinstance(data, Data):
        return ("x",)
    return ()


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
