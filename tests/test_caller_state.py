"""Rank processes see what the caller's interpreter had set when the run was called
(`gnnorch.execute.caller_state`): the command line a function parses, Python's and numpy's
global generators, torch's default dtype, deterministic algorithms, float32 matmul precision
and anomaly detection. A function that reads any of them behaves in every rank as it does
called plainly, and the ranks agree with each other."""
import argparse
import random
import sys

import numpy
import pytest
import torch
import torch.distributed as dist

import gnnorch
from gnnorch.execute.caller_state import CallerState

pytestmark = pytest.mark.usefixtures("no_leftover_children")


def what_the_function_sees() -> dict:
    """What a training function might read from the interpreter (run in each rank)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--dataset", default="Cora")
    return {"argv": list(sys.argv), "epochs": parser.parse_args().epochs,
            "random": [random.random() for _ in range(3)],
            "numpy": numpy.random.permutation(10).tolist(),
            "dtype": str(torch.get_default_dtype()),
            "ones_dtype": str(torch.ones(1).dtype),
            "deterministic": (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled()),
            "precision": torch.get_float32_matmul_precision(),
            "anomaly": (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())}


def seen_by_every_rank() -> list[dict]:
    mine = what_the_function_sees()
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


@pytest.fixture
def caller_settings(monkeypatch):
    """The caller sets what a script sets at its top; everything is put back afterwards."""
    monkeypatch.setattr(sys, "argv", ["train.py", "--epochs", "5", "--dataset", "CiteSeer"])
    saved = (random.getstate(), numpy.random.get_state(), torch.get_default_dtype(),
             torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.get_float32_matmul_precision(), torch.is_anomaly_enabled(),
             torch.is_anomaly_check_nan_enabled())
    random.seed(3)
    numpy.random.seed(4)
    torch.set_default_dtype(torch.float64)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_float32_matmul_precision("medium")
    torch.autograd.set_detect_anomaly(True, check_nan=False)
    try:
        yield
    finally:
        random.setstate(saved[0])
        numpy.random.set_state(saved[1])
        torch.set_default_dtype(saved[2])
        torch.use_deterministic_algorithms(saved[3], warn_only=saved[4])
        torch.set_float32_matmul_precision(saved[5])
        torch.autograd.set_detect_anomaly(saved[6], check_nan=saved[7])


def _plain_view() -> dict:
    """What the function sees called plainly here, the caller's generators left as they were."""
    states = random.getstate(), numpy.random.get_state()
    try:
        return what_the_function_sees()
    finally:
        random.setstate(states[0])
        numpy.random.set_state(states[1])


@pytest.mark.parametrize("start", ["warm", "fresh"])
def test_every_rank_sees_what_the_caller_had_set(caller_settings, start):
    plain = _plain_view()
    assert plain["epochs"] == 5 and plain["dtype"] == "torch.float64"   # the settings took
    ranks = gnnorch.Runtime(seen_by_every_rank, processes=2,
                            launch={"rank_start": start, "threads": 1})()
    assert ranks == [plain, plain]


def test_the_callers_own_generators_are_not_advanced(caller_settings):
    before = random.getstate(), numpy.random.get_state()[1].tolist()
    gnnorch.Runtime(seen_by_every_rank, processes=2, launch={"threads": 1})()
    assert random.getstate() == before[0]
    assert numpy.random.get_state()[1].tolist() == before[1]


def test_capture_then_apply_restores_each_setting(caller_settings):
    state = CallerState.capture()
    expected = _plain_view()
    monkey_argv = ["elsewhere.py"]
    sys.argv[:] = monkey_argv
    random.seed(99)
    numpy.random.seed(99)
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(False)
    torch.set_float32_matmul_precision("highest")
    torch.autograd.set_detect_anomaly(False)
    state.apply()
    assert what_the_function_sees() == expected


def test_a_state_without_numpy_leaves_numpy_alone(caller_settings):
    state = CallerState.capture()
    state = CallerState(**{**state.__dict__, "numpy_random": None})
    numpy.random.seed(7)
    draw = numpy.random.get_state()[1].tolist()
    state.apply()
    assert numpy.random.get_state()[1].tolist() == draw
