"""Where a run's data lives and how batches reach the training device (issues 15 and 21).

`placement`: a pure decision, from sizes and a memory budget, of where the graph structure and
the node features of a loader live (GPU, pinned host memory, pageable host memory), with the
reason for each choice. `gather`: building a loader's batch from a sampled subgraph with its
attributes gathered where they live (device copies, or pinned host rows copied
asynchronously). `seeds`: the sampling generator policy (a generator per loader and epoch,
seeded from the run's seed). `pipeline`: a bounded producer thread that samples, gathers and
copies batch k+1 while the trainer works on batch k, with correct semantics when the consumer
stops early; `transfer`: its side-stream copies. `state`: what was decided per loader, for the
stats. Ground floor: tensors and threads, nothing of processes or seams (the seam glue is
`gnnorch.intercept.device_path`).
"""
from .config import DataPathConfig
from .gather import GatherPlan, ResidentTensors
from .pipeline import Prefetcher
from .placement import DataPlacement, plan_data_placement
from .seeds import SamplingGenerator, sampling_seed
from .state import LoaderDevice
from .transfer import DeviceTransfer

__all__ = ["DataPathConfig", "DataPlacement", "DeviceTransfer", "GatherPlan", "LoaderDevice",
           "Prefetcher", "ResidentTensors", "SamplingGenerator", "plan_data_placement",
           "sampling_seed"]
