"""Rank processes see what the caller's interpreter had set when the run was called
(`gnnorch.execute.caller_state`): the command line a function parses, Python's and numpy's
global generators, torch's default dtype and device, deterministic algorithms, float32 matmul
precision, anomaly detection, the warning filters and torch's and numpy's print options. A function that reads any of them behaves in every rank as it does
called plainly, and the ranks agree with each other."""
import argparse
import functools
import random
import sys
import warnings

import numpy
import pytest
import torch
import torch.distributed as dist

import gnnorch
from gnnorch.execute.caller_state import BACKEND_FLAGS, CallerState

pytestmark = pytest.mark.usefixtures("no_leftover_children")


def _backend(module: str):
    """``torch.backends.<module>`` (dotted)."""
    return functools.reduce(getattr, module.split("."), torch.backends)


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
            "anomaly": (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
            "device": str(torch.get_default_device()),
            "cudnn": (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
                      torch.backends.cudnn.allow_tf32,
                      torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction),
            "printed": (repr(torch.tensor([1.23456789, 2e-9])),
                        repr(numpy.array([1.23456789, 2e-9]))),
            "warnings": _warnings_shown()}


def _warnings_shown() -> list[str]:
    """Which of three warnings the interpreter's filters let through, as text."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.warn("caller silenced this", UserWarning)
        warnings.warn("a deprecation", DeprecationWarning)
        warnings.warn("a plain one", UserWarning)
    return [f"{w.category.__name__}: {w.message}" for w in seen]


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
    printing = torch._tensor_str.get_printoptions(), numpy.get_printoptions()
    flags = [getattr(_backend(module), name) for module, name in BACKEND_FLAGS]
    filters = warnings.catch_warnings()
    filters.__enter__()
    random.seed(3)
    numpy.random.seed(4)
    torch.set_default_dtype(torch.float64)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_float32_matmul_precision("medium")
    torch.autograd.set_detect_anomaly(True, check_nan=False)
    warnings.simplefilter("always")
    warnings.filterwarnings("ignore", message="caller silenced")
    torch.set_printoptions(precision=2, sci_mode=False)
    numpy.set_printoptions(precision=3)
    torch.backends.cudnn.benchmark = torch.backends.cudnn.deterministic = True   # a GPU
    torch.backends.cudnn.allow_tf32 = False                                     # script's top
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    try:
        yield
    finally:
        for (module, name), value in zip(BACKEND_FLAGS, flags):
            setattr(_backend(module), name, value)
        filters.__exit__(None, None, None)
        torch.set_printoptions(**printing[0])
        numpy.set_printoptions(**printing[1])
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
    assert plain["warnings"] == ["DeprecationWarning: a deprecation", "UserWarning: a plain one"]
    assert plain["cudnn"] == (True, True, False, False)
    assert plain["printed"] == ("tensor([1.23, 0.00])",
                                "array([1.235e+00, 2.000e-09])")
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
    warnings.resetwarnings()
    torch.backends.cudnn.benchmark = torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    torch.set_printoptions(profile="default")
    numpy.set_printoptions(precision=8)
    torch.set_default_device("meta")
    try:
        state.apply()
        assert what_the_function_sees() == expected
    finally:
        torch.set_default_device(None)


def test_a_default_device_is_taken_over():
    torch.set_default_device("meta")
    try:
        state = CallerState.capture()
    finally:
        torch.set_default_device(None)
    try:
        state.apply()
        assert torch.empty(1).device.type == "meta"
    finally:
        torch.set_default_device(None)


def test_a_state_without_numpy_leaves_numpy_alone(caller_settings):
    state = CallerState.capture()
    state = CallerState(**{**state.__dict__, "numpy_random": None})
    numpy.random.seed(7)
    draw = numpy.random.get_state()[1].tolist()
    state.apply()
    assert numpy.random.get_state()[1].tolist() == draw
