"""A failing rank surfaces as the user's exception with the rank named; nothing is left behind."""
import os
import signal
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist

import gnnorch

pytestmark = pytest.mark.usefixtures("no_leftover_children")


def raise_in_rank_one():
    if dist.get_rank() == 1:
        raise ValueError("bad hyper-parameter in rank one")
    time.sleep(60)  # rank 0 would wait: it must be stopped, not awaited


def test_exception_reraised_with_type_rank_and_traceback():
    start = time.monotonic()
    with pytest.raises(ValueError, match="bad hyper-parameter in rank one") as info:
        gnnorch.Runtime(raise_in_rank_one, processes=2)()
    assert time.monotonic() - start < 30
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "rank 1 of 2" in notes
    assert "raise_in_rank_one" in str(info.value.__cause__)   # the rank's traceback


def kill_rank_one():
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(120)


def test_sigkilled_rank_detected_quickly():
    start = time.monotonic()
    with pytest.raises(gnnorch.RankDiedError, match=r"rank 1 of 2 \(pid \d+\) was killed by SIGKILL"):
        gnnorch.Runtime(kill_rank_one, processes=2)()
    assert time.monotonic() - start < 30


def test_unpicklable_argument_explained():
    lock = threading.Lock()
    with pytest.raises(gnnorch.SerializationError, match="keyword argument 'guard'.*processes=1"):
        gnnorch.Runtime(lambda guard: None, processes=2)(guard=lock)


def return_a_lock():
    return {"weights": torch.ones(2), "history": [1.0, threading.Lock()]}


def test_unpicklable_return_value_explained():
    """Before: a bare "TypeError: cannot pickle '_thread.lock' object" from cloudpickle."""
    with pytest.raises(gnnorch.SerializationError,
                       match=r"return value cannot be sent back.*value\['history'\]\[1\] "
                             r"\(lock\) does not pickle"):
        gnnorch.Runtime(return_a_lock, processes=2)()


def test_closure_and_lambda_run_by_value(tmp_path):
    scale = torch.tensor([3.0])

    def local_train(x):  # defined inside a function: travels by value
        return (x * scale).sum().item(), dist.get_world_size()

    assert gnnorch.Runtime(local_train, processes=2)(torch.ones(4)) == (12.0, 2)


def test_args_arrive_through_shared_memory():
    def check(t):
        return t.is_shared(), t.sum().item()

    assert gnnorch.Runtime(check, processes=2)(torch.arange(10.0)) == (True, 45.0)


def test_thousands_of_small_tensors_reach_the_ranks_without_holding_descriptors():
    # a Python list of graphs (PyG's collate of ToSparseTensor graphs keeps one SparseTensor
    # each): under torch's default file_descriptor sharing each tensor held descriptors in
    # the caller, the launch's sockets got numbers above select's 1024, then EMFILE
    tensors = [torch.full((4,), float(i)) for i in range(3000)]
    view = tensors[7][:2]                      # a view still shares its base's memory there

    def check(tensors, view):
        same = view.untyped_storage().data_ptr() == tensors[7].untyped_storage().data_ptr()
        return (sum(float(t.sum()) for t in tensors), same, all(t.is_shared() for t in tensors),
                dist.get_world_size())

    fds = len(os.listdir(f"/proc/{os.getpid()}/fd"))
    out = gnnorch.Runtime(check, processes=2, verbose=False)(tensors, view)
    assert out == (4.0 * sum(range(3000)), True, True, 2)
    assert len(os.listdir(f"/proc/{os.getpid()}/fd")) < fds + 100
    assert torch.multiprocessing.get_sharing_strategy() == "file_descriptor"


def test_keyboard_interrupt_stops_ranks():
    main_thread = threading.get_ident()

    def interrupt():
        time.sleep(8)
        signal.pthread_kill(main_thread, signal.SIGINT)

    # a shell's background job starts with SIGINT ignored (no KeyboardInterrupt at all):
    # install Python's own handler for the test
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            gnnorch.Runtime(time.sleep, processes=2)(120)
    finally:
        signal.signal(signal.SIGINT, previous)


def say_hello():
    rank = dist.get_rank()
    print(f"hello from rank {rank}")
    print(f"warning from rank {rank}", file=sys.stderr)
    return rank


def test_rank0_output_live_other_ranks_to_log_files(capsys, tmp_path):
    runtime = gnnorch.Runtime(say_hello, processes=2, launch={"log_dir": tmp_path})
    assert runtime() == 0
    out, err = capsys.readouterr()
    assert "hello from rank 0" in out and "rank 1" not in out
    assert "warning from rank 0" in err and "rank 1" not in err
    log = (tmp_path / "rank1.log").read_text()
    assert "hello from rank 1" in log and "warning from rank 1" in log
    assert runtime.last_run.log_dir == tmp_path


def freeze_rank_one():
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGSTOP)   # alive but frozen: no error, no exit, no beat
    time.sleep(60)


def test_a_frozen_rank_fails_the_run_within_its_heartbeat_bound():
    """The ranks' watchdogs beat in the launch's store; a rank silent past min(60 s,
    collective_timeout) is posted, and the supervisor fails the launch naming it."""
    start = time.monotonic()
    with pytest.raises(gnnorch.RankFailedError, match=r"rank 1: died or stopped responding "
                                                      r"\(no heartbeat for [\d.]+ s"):
        gnnorch.Runtime(freeze_rank_one, processes=2, launch={"collective_timeout": 6})()
    # + two ranks' start-up on a loaded 2-core machine (measured up to ~25 s); rank 0 sleeps
    # 60 s, so a missed detection would end in a CollectiveError from its final round instead
    assert time.monotonic() - start < 6 + 3 + 40


SCRIPTED_MAIN = """
import torch
import gnnorch


class Net(torch.nn.Module):
    def forward(self, x):
        return x * 2


def train(x):
    return torch.jit.script(Net())(x).sum().item()


if __name__ == "__main__":
    print("one process", gnnorch.Runtime(train, processes=1)(torch.ones(3)))
    gnnorch.Runtime(train, processes=2)(torch.ones(3))
"""


def test_a_scripted_main_class_in_a_rank_says_why_its_source_is_missing(tmp_path):
    # a class of the script's __main__ reaches the ranks by value, without its source: torch's
    # OSError from inspect gets a note that says so and what to do
    import subprocess

    script = tmp_path / "scripted_main.py"
    script.write_text(SCRIPTED_MAIN)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert "one process 6.0" in done.stdout
    assert done.returncode != 0 and "OSError" in done.stderr
    assert "reaches the rank processes by value, without its source file" in done.stderr
