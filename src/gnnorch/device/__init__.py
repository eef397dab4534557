"""Where a run's data lives and how batches reach the training device (issue 15).

`placement`: a pure decision, from sizes and a memory budget, of where the graph structure and
the node features of a loader live (GPU, pinned host memory, pageable host memory), with the
reason for each choice. `pipeline`: a bounded producer thread that samples, gathers and copies
batch k+1 while the trainer works on batch k, with correct semantics when the consumer stops
early. Ground floor: tensors and threads, nothing of processes or seams.
"""
from .config import DataPathConfig
from .pipeline import Prefetcher
from .placement import DataPlacement, plan_data_placement

__all__ = ["DataPathConfig", "DataPlacement", "plan_data_placement", "Prefetcher"]
