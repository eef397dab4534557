"""Bad arguments to Runtime get a clear error that says what to pass."""
import os

import pytest

import gnnorch


def train():
    return 1


def test_unknown_keyword_lists_valid_options():
    with pytest.raises(TypeError) as info:
        gnnorch.Runtime(train, procesess=2)
    msg = str(info.value)
    assert "procesess" in msg
    for name in ("processes", "sampler_cores", "threads", "device"):
        assert name in msg


def test_train_not_callable():
    with pytest.raises(ValueError, match="train must be a callable"):
        gnnorch.Runtime(42)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_processes_out_of_range(value):
    with pytest.raises(ValueError, match=r"processes must be an integer in 1\.\.\d+"):
        gnnorch.Runtime(train, processes=value)


def test_more_ranks_than_usable_cores():
    usable = len(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match=rf"processes must be an integer in 1\.\.{usable}, got {usable + 1}"):
        gnnorch.Runtime(train, processes=usable + 1)


def test_plan_that_oversubscribes_cores():
    usable = len(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match=r"allowed: processes\*\(sampler_cores\+threads\)"):
        gnnorch.Runtime(train, processes=1, sampler_cores=1, threads=usable)


@pytest.mark.parametrize("kwargs, name", [
    ({"threads": 0}, "threads"), ({"sampler_cores": -1}, "sampler_cores"),
    ({"device": "tpu"}, "device"), ({"bind": "yes"}, "bind"), ({"seed": -3}, "seed"),
    ({"start_timeout": 0}, "start_timeout"),
])
def test_bad_values_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gnnorch.Runtime(train, **kwargs)


def test_default_plan_is_one_rank_on_all_cores():
    rt = gnnorch.Runtime(train)
    assert rt.plan.processes == 1 and rt.plan.sampler_cores == 0
    assert rt.plan.threads == rt.topology.num_usable
    assert rt() == 1
