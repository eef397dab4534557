"""gnnorch: run an unchanged PyTorch Geometric training function faster.

    runtime = gnnorch.Runtime(train, processes=2)
    model = runtime(data, epochs=20)
"""
from .errors import (GnnorchError, RankDiedError, RankFailedError, RankStartError,
                     SerializationError)
from .runtime import VALID_OPTIONS, RunInfo, Runtime
from .cache import CacheConfig
from .tune import TuneConfig, TuningReport

__version__ = "0.1.0"
__all__ = ["Runtime", "RunInfo", "VALID_OPTIONS", "CacheConfig",
           "TuningReport", "TuneConfig", "GnnorchError",
           "RankDiedError", "RankFailedError", "RankStartError", "SerializationError",
           "__version__"]
