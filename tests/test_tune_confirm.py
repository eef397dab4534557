"""Racing the finalists after the search: one probe's noise is as large as the gaps between the
best plans, so every plan whose best probe is within `confirm_margin` of the best probe is
probed once more and the highest *mean* wins. Probes are scripted here (no training runs): the
driver's race step with its report, then the bad-setting errors."""
import pytest

import gnnorch
from gnnorch.execute import Request
from gnnorch.launch.plan import CorePlan
from gnnorch.tune.config import TuneConfig
from gnnorch.tune.driver import Autotune, Phase
from gnnorch.tune.report import point
from gnnorch.tune.schema import validate
from gnnorch.tune.space import SearchSpace


def never_called(*args, **kwargs):
    raise AssertionError("the tuned function must not run in these tests")


class _Bar:
    total = 0

    def update(self, n):
        pass

    def close(self):
        pass


def scripted_tuning(measurements, **tune):
    """A tuning driver whose probes return the next scripted throughput for their plan."""
    tuning = Autotune(Request(never_called), CorePlan(1, 0, 1), TuneConfig.from_option(tune),
                      verbose=False)
    queues = {k: list(v) for k, v in measurements.items()}
    asked = []

    def probe(plan, chosen_by, predicted=None):
        key = plan.as_tuple()
        asked.append((key, chosen_by))
        m = {"throughput": queues[key].pop(0), "complete": True, "batch_size_per_rank": [64],
             "seconds": 1.0, "batches": 8, "warmup": 2}
        return tuning.report.add_trial(point(plan), None, m, 1.0, chosen_by), None

    tuning._probe = probe
    tuning.bar = _Bar()
    return tuning, asked


def search(tuning, plans):
    """What the search loop leaves behind: one trial per plan, the first one the default's."""
    for k, key in enumerate(plans):
        tuning._probe(SearchSpace.plan(dict(zip(("processes", "sampler_cores", "threads"), key))),
                      "default" if k == 0 else "tuner")


def test_lucky_single_probe_loses_to_the_better_mean():
    default, lucky, slow = (1, 0, 2), (1, 0, 1), (2, 0, 1)
    tuning, asked = scripted_tuning({default: [100, 105], lucky: [110, 90], slow: [80]})
    search(tuning, [default, lucky, slow])
    phase, plan, result = tuning._race(None)
    assert phase is Phase.TRAIN and result is None and plan.as_tuple() == default
    # finalists are re-probed best first; the slow plan (80 < 0.85 * 110) is not a finalist
    assert asked[3:] == [(lucky, "confirm"), (default, "confirm")]
    d = tuning.report.data
    assert d["best"]["config"]["threads"] == 2 and d["best"]["throughput"] == pytest.approx(102.5)
    assert d["best"]["trial"] == 4                              # the default's confirm probe
    conf = d["confirmation"]
    assert conf["chosen"] == d["best"]["config"]
    assert [f["throughputs"] for f in conf["finalists"]] == [[110, 90], [100, 105]]
    assert d["speedup_over_default"] == pytest.approx(1.0)
    assert tuning.report.chosen == d["best"]["config"]
    validate(d)
    text = str(tuning.report)
    assert "confirmed" in text and "mean of 110, 90" in text


def test_a_real_gain_survives_confirmation():
    default, better = (1, 0, 2), (2, 0, 1)
    tuning, asked = scripted_tuning({default: [100, 98], better: [112, 110]})
    search(tuning, [default, better])
    _, plan, _ = tuning._race(None)
    d = tuning.report.data
    assert d["best"]["config"]["processes"] == 2 and plan.processes == 2
    assert d["speedup_over_default"] == pytest.approx(111 / 99)


@pytest.mark.parametrize("tune, plans, measurements", [
    ({"confirm_margin": 0.0}, [(1, 0, 2), (1, 0, 1)], {(1, 0, 2): [100], (1, 0, 1): [99]}),
    ({"confirm_finalists": 1}, [(1, 0, 2), (1, 0, 1)], {(1, 0, 2): [100], (1, 0, 1): [99]}),
    ({}, [(1, 0, 2), (1, 0, 1)], {(1, 0, 2): [100], (1, 0, 1): [50]}),   # one finalist only
])
def test_no_confirmation_probe_when_off_or_a_single_finalist(tune, plans, measurements):
    tuning, asked = scripted_tuning(measurements, **tune)
    search(tuning, plans)
    tuning._race(None)
    assert len(asked) == len(plans)
    d = tuning.report.data
    assert d["confirmation"] is None and d["best"]["config"]["threads"] == 2


@pytest.mark.parametrize("value", [-0.1, 1.0, "0.1"])
def test_bad_confirm_margin_is_rejected(value):
    with pytest.raises(ValueError, match="confirm_margin"):
        gnnorch.Runtime(never_called, tune={"confirm_margin": value})
