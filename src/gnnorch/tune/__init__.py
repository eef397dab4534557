"""Auto-tuning of the core plan (ranks, sampler cores, trainer threads) by Bayesian optimisation
over short probes of the user's real function, and the tuning report.

`config` (TuneConfig), `space` (SearchSpace), `tuner` (skopt ask/tell), `probe` (the meter
inside ranks and the tuner's hooks), `decide` (pure decisions: does tuning pay, racing),
`runs` (a probe; the default run that may become the real run), `driver` (`Autotune`: default
-> search -> race -> train), `report` / `render` / `schema` (TuningReport, table and PNG, JSON
schema). (The analytical epoch-time model of large machines that judges the tuner lives in
scripts/tuner_simulator.py.) Every run goes through
`gnnorch.execute`. Light imports only here: rank processes import `gnnorch.tune.probe`.
"""
from .config import TuneConfig
from .report import ReportError, TuningReport
from .space import Dimension, SearchSpace

__all__ = ["TuneConfig", "TuningReport", "ReportError", "SearchSpace", "Dimension"]
