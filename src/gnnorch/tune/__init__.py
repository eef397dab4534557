"""Auto-tuning of the core plan (ranks, sampler cores, trainer threads) by Bayesian optimisation
over short probes of the user's real function, and the tuning report.

`config` (TuneConfig), `space` (SearchSpace), `tuner` (skopt ask/tell), `probe` (measuring
steps inside ranks), `driver` (tune -> train for `Runtime`), `report` / `schema`
(TuningReport, JSON schema), `simulate` (analytical epoch-time model of large machines).
Light imports only here: rank processes import `gnnorch.tune.probe`.
"""
from .config import TuneConfig
from .report import ReportError, TuningReport
from .space import Dimension, SearchSpace

__all__ = ["TuneConfig", "TuningReport", "ReportError", "SearchSpace", "Dimension"]
