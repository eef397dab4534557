"""Uneven ranks (issue 22): ranks that take different numbers of optimizer steps run to
completion with identical models, or fail fast with a gnnorch error naming the ranks and the
step -- never a transport error, never a hang. Each pattern of tests/torchrun_scripts/
uneven_train.py runs with ``processes=2`` (our rank processes) and in a torchrun world of two
loopback nodes (`ExistingWorld`). The semantics are in docs/reliability.md and
`gnnorch.intercept.join`.
"""
import importlib.util
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

import gnnorch
from gnnorch.errors import CollectiveError, GnnorchError, UnevenRanksError
from gnnorch.intercept.join import Ask, Kind, decide

from helpers import cora

SCRIPTS = Path(__file__).resolve().parent / "torchrun_scripts"
TWO_CORES = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")
LAUNCH = {"threads": 1, "bind": False}


def _patterns():
    spec = importlib.util.spec_from_file_location("uneven_train", SCRIPTS / "uneven_train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PATTERNS = _patterns()


# -- the decision of a round (pure) ---------------------------------------------------------
def _step(opt=0, **kw):
    return Ask(Kind.STEP, optimizer=opt, tensors=4, numel=100, **kw)


def test_steppers_are_averaged_and_waiting_ranks_follow():
    d = decide((_step(), Ask(Kind.JOIN, epoch=1), _step(), Ask(Kind.FINAL)))
    assert d.action == "step" and d.steppers == [0, 2] and d.followers == [1, 3]
    assert d.source == 0 and d.adopt_hypers and not d.flags_needed
    assert not decide((_step(hyper_sum=0.1), _step(hyper_sum=0.1))).adopt_hypers
    assert decide((_step(hyper_sum=0.1), _step(hyper_sum=0.05))).adopt_hypers
    assert decide((_step(all_grads=False), _step())).flags_needed


def test_waiting_ranks_are_released_by_epoch_and_at_the_end():
    d = decide((Ask(Kind.JOIN, epoch=2), Ask(Kind.JOIN, epoch=1), Ask(Kind.FINAL)))
    assert d.action == "release"
    assert d.released(1) and not d.released(0) and not d.released(2)
    everyone = decide((Ask(Kind.FINAL), Ask(Kind.FINAL)))
    assert everyone.released(0) and everyone.released(1)


def test_a_broadcast_not_asked_by_every_rank_is_void():
    assert decide((Ask(Kind.BROADCAST, tensors=2, numel=9),) * 2).action == "broadcast"
    assert decide((Ask(Kind.BROADCAST, tensors=2, numel=9), _step())).action == "void"
    assert decide((Ask(Kind.BROADCAST, tensors=2, numel=9),
                   Ask(Kind.BROADCAST, tensors=2, numel=8))).action == "void"


def test_steps_of_different_optimizers_cannot_be_averaged():
    with pytest.raises(UnevenRanksError, match=r"rank 0 is at optimizer #0's step 3 of its "
                                               r"training epoch 2 .*rank 1 is at optimizer #1"
                                               r".*processes=1"):
        decide((_step(0, epoch=1, step=2), _step(1, epoch=1, step=2)))


def test_clipping_ranks_are_averaged_and_cannot_meet_a_step():
    norm = Ask(Kind.NORM, tensors=4, numel=100, epoch=1, step=2)
    d = decide((norm, Ask(Kind.JOIN, epoch=2), norm))
    assert d.action == "norm" and d.clippers == [0, 2] and d.followers == [1]
    assert decide((norm, Ask(Kind.BROADCAST, tensors=1, numel=3))).action == "void"
    with pytest.raises(UnevenRanksError, match=r"clip their gradients .*rank 0 is at "
                                               r"clip_grad_norm_ before step 3 .*rank 1 is at "
                                               r"optimizer #0"):
        decide((norm, _step(epoch=1, step=2)))
    with pytest.raises(UnevenRanksError, match=r"clip_grad_norm_ calls cannot be averaged"):
        decide((norm, Ask(Kind.NORM, tensors=3, numel=100)))


# -- processes=2 ------------------------------------------------------------------------------
def _same_models(stats, name):
    """Both ranks' final models, Adam states and learning rates are equal; their steps."""
    ranks = [PATTERNS.final_state(stats[r]["test_final"]) for r in range(2)]
    for key, value in ranks[0]["state"].items():
        assert torch.equal(value, ranks[1]["state"][key]), (name, key)
    for a, b in zip(ranks[0]["adam"], ranks[1]["adam"]):
        assert torch.equal(a, b), name                    # optimizer states too
    assert ranks[0]["lr"] == ranks[1]["lr"], name
    return [r["steps"] for r in ranks]


@pytest.mark.usefixtures("no_leftover_children")
@pytest.mark.parametrize("name", PATTERNS.COMPLETING)
def test_uneven_pattern_completes_with_identical_models(name, tmp_path):
    runtime = gnnorch.Runtime(getattr(PATTERNS, name), processes=2, launch=LAUNCH)
    start = time.monotonic()
    runtime(cora(), str(tmp_path))
    steps = _same_models(runtime.last_run.stats, name)
    stats = [runtime.last_run.stats[r]["gradsync"] for r in range(2)]
    print(name, f"{time.monotonic() - start:.1f} s", "steps", steps, stats)
    assert [s["steps"] for s in stats] == steps
    if name in ("rank_break", "uneven_lengths", "skipped_step"):     # surely uneven
        assert steps[0] != steps[1]
        fewer = 0 if steps[0] < steps[1] else 1
        assert stats[fewer]["followed_steps"] == abs(steps[0] - steps[1])
    if name == "rank_break":                  # one clip_grad_norm_ round per own step
        assert [s["clip_norms"] for s in stats] == steps
    if name == "rank0_validation":            # rank 0's own module was not broadcast
        assert stats[0]["void_broadcasts"] == 2 and stats[1]["void_broadcasts"] == 0


@pytest.mark.usefixtures("no_leftover_children")
def test_steps_that_cannot_be_matched_fail_fast_naming_ranks_and_step(tmp_path):
    start = time.monotonic()
    with pytest.raises(UnevenRanksError) as info:
        gnnorch.Runtime(PATTERNS.mismatched_optimizers, processes=2,
                        launch=LAUNCH)(cora(), str(tmp_path))
    assert time.monotonic() - start < 10 + 10     # + start-up of two ranks on 2 cores
    text = str(info.value)
    assert "rank 0 is at optimizer #0's step 1" in text and "rank 1 is at optimizer #1" in text
    assert "processes=1" in text


@pytest.mark.usefixtures("no_leftover_children")
def test_a_rank_that_stops_stepping_fails_the_run_within_the_bound(tmp_path):
    start = time.monotonic()
    with pytest.raises(CollectiveError) as info:
        gnnorch.Runtime(PATTERNS.sleeper, processes=2,
                        launch={**LAUNCH, "collective_timeout": 5})(cora(), str(tmp_path))
    took = time.monotonic() - start
    text = str(info.value)
    print(f"{took:.1f} s: {text}")
    assert re.search(r"rank 1 did not reach gnnorch's collective within 5 s: rank 0 waited "
                     r"in round \d+ \(optimizer #0's step 3", text), text
    assert "Last seen: rank 1 last finished gnnorch round" in text
    assert "collective_timeout" in text
    assert took < 5 + 25


# -- torchrun (ExistingWorld) ----------------------------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(patterns, out, timeout=180, env=None):
    """uneven_train.py as two torchrun nodes on loopback; [(return code, output)] per node.
    A hang fails the test; every process of the run is gone afterwards."""
    port = _free_port()
    environ = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(env or {}))
    procs, logs = [], []
    for node in range(2):
        logs.append(open(out / f"node{node}.log", "wb"))  # noqa: SIM115 - closed below
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}",
             "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--nproc-per-node=1",
             "--max-restarts=0", "--monitor-interval=0.1", str(SCRIPTS / "uneven_train.py"),
             ",".join(patterns), str(out)],
            stdout=logs[-1], stderr=subprocess.STDOUT, env=environ, start_new_session=True))
    hung = False
    try:
        for proc in procs:
            proc.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        hung = True
    finally:
        for proc in procs:
            family = []
            try:
                family = psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
            for p in family:
                p.kill()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for log in logs:
            log.close()
    output = [(out / f"node{i}.log").read_text(errors="replace") for i in range(2)]
    assert not hung, "torchrun hangs:\n" + "\n".join(output)
    return [(proc.returncode, output[i]) for i, proc in enumerate(procs)]


@TWO_CORES
@pytest.mark.usefixtures("no_leftover_children")
def test_uneven_patterns_complete_in_a_torchrun_world(tmp_path):
    results = _torchrun(PATTERNS.COMPLETING, tmp_path, timeout=300)
    assert [code for code, _ in results] == [0, 0], results
    for name in PATTERNS.COMPLETING:
        stats = torch.load(tmp_path / f"{name}-stats0.pt")
        assert torch.load(tmp_path / f"{name}-stats1.pt").keys() == stats.keys()
        steps = _same_models(stats, name)
        print(name, steps, stats[0]["gradsync"], stats[1]["gradsync"])
        if name in ("rank_break", "uneven_lengths", "skipped_step"):
            assert steps[0] != steps[1]


@TWO_CORES
@pytest.mark.usefixtures("no_leftover_children")
def test_unmatched_steps_fail_a_torchrun_world_with_uneven_ranks_error(tmp_path):
    results = _torchrun(["mismatched_optimizers"], tmp_path)
    assert all(code != 0 for code, _ in results)
    for rank in range(2):
        kind, seconds, message = (tmp_path / f"mismatched_optimizers-error{rank}.txt") \
            .read_text().splitlines()[:3]
        assert kind in ("UnevenRanksError", "RankFailedError"), (kind, message)
        assert "optimizer #1" in message and float(seconds) < 10


@TWO_CORES
@pytest.mark.usefixtures("no_leftover_children")
def test_a_sleeping_rank_fails_a_torchrun_world_within_the_bound(tmp_path):
    results = _torchrun(["sleeper"], tmp_path, env={"GNNORCH_TEST_COLLECTIVE_TIMEOUT": "5"})
    assert all(code != 0 for code, _ in results)
    kind, seconds, message = (tmp_path / "sleeper-error0.txt").read_text().splitlines()[:3]
    assert kind == "CollectiveError" and float(seconds) < 5 + 15, (kind, seconds)
    assert message.startswith("rank 1 did not reach gnnorch's collective within 5 s"), message
    output = "\n".join(text for _, text in results)
    # the sleeper is stopped by its watchdog (the failure rank 0 posted, or the store gone), or
    # first by torchrun's own agent once rank 0's node left (a race; both end it within bounds)
    stopped = (r"stopping this process: (rank 1: rank 1 did not reach|the world's store is "
               r"unreachable)|Sending process \d+ closing signal SIGTERM")
    assert re.search(stopped, output), output


def test_gnnorch_errors_are_gnnorch_errors():
    assert issubclass(UnevenRanksError, GnnorchError) and issubclass(CollectiveError,
                                                                     GnnorchError)
