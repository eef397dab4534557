"""gnnorch: run an unchanged PyTorch Geometric training function faster.

    runtime = gnnorch.Runtime(train, processes=2)
    model = runtime(data, epochs=20)

Every public configuration class, error and warning is importable from here.
"""
from .cache import CacheConfig, CacheWarning
from .device.config import DataPathConfig
from .errors import (ArgumentsChangedError, CacheSharingError, CollectiveError, ForkStuckError, GnnorchError,
                     GnnorchWarning, RankDiedError, RankFailedError, RankStartError,
                     SerializationError, StalenessError, TrimmingError, TrimmingWarning,
                     UnevenRanksError)
from .launch.config import LaunchConfig
from .partition.config import PartitionConfig
from .run_options import RunOptions
from .runtime import VALID_OPTIONS, RunInfo, Runtime
from .tune import TuneConfig, TuningReport

__version__ = "0.1.0"
__all__ = ["Runtime", "RunInfo", "RunOptions", "VALID_OPTIONS",
           "LaunchConfig", "CacheConfig", "TuneConfig", "PartitionConfig", "DataPathConfig",
           "TuningReport",
           "GnnorchError", "ArgumentsChangedError", "RankDiedError", "RankFailedError", "RankStartError",
           "SerializationError", "StalenessError", "TrimmingError", "UnevenRanksError",
           "CollectiveError", "ForkStuckError", "CacheSharingError",
           "GnnorchWarning", "TrimmingWarning", "CacheWarning",
           "__version__"]
