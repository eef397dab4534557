"""Warm rank starts (`gnnorch.launch.zygote`): ranks forked from one pre-imported interpreter
train exactly as fresh interpreters do, the zygote is reused, replaced, refused and ended as
its invariants say, and a launch whose zygote dies fails at once instead of hanging."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
import torch
import torch.distributed as dist

import gnnorch
from gnnorch.launch import zygote, zygote_server
from gnnorch.launch.start import RankStarter

from helpers import cora, load_example

pytestmark = pytest.mark.usefixtures("no_leftover_children")


def _run(start, **options):
    train = load_example("train_vanilla").train
    runtime = gnnorch.Runtime(train, processes=2, launch={"rank_start": start}, **options)
    model = runtime(cora(), epochs=2)
    return model, runtime.last_run


def test_warm_ranks_train_exactly_as_fresh_ones():
    fresh_model, fresh = _run("fresh")
    warm_model, warm = _run("warm")
    for rank in (0, 1):
        assert fresh.stats[rank]["launch"]["rank_start"] == "fresh (launch.rank_start='fresh')"
        assert warm.stats[rank]["launch"]["rank_start"].startswith("warm (forked by the zygote")
    assert [e["seeds"] for e in warm.epochs[1]] == [e["seeds"] for e in fresh.epochs[1]]
    for (name, a), (_, b) in zip(warm_model.state_dict().items(),
                                 fresh_model.state_dict().items()):
        assert torch.equal(a, b), name


def rank_identity():
    """What a rank is: its parent, session, argv and its generators' first draws."""
    import random

    import numpy

    return {"pid": os.getpid(), "ppid": os.getppid(), "session": os.getsid(0),
            "argv": list(sys.argv), "omp": os.environ.get("OMP_NUM_THREADS"),
            "threads": torch.get_num_threads(), "random": random.random(),
            "numpy": float(numpy.random.random()), "rank": dist.get_rank()}


def gather_identities():
    mine = rank_identity()
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


def test_a_forked_rank_is_a_rank_as_a_fresh_interpreter_is():
    runtime = gnnorch.Runtime(gather_identities, processes=2, launch={"threads": 1})
    first = runtime()
    second = runtime()
    kept = zygote.current_pid()
    assert kept is not None
    assert {r["ppid"] for r in first + second} == {kept}   # every rank forked by one zygote
    for r in first + second:
        assert r["session"] == r["pid"]                  # its own session, as start_new_session
        assert r["argv"] == sys.argv                     # the caller's (`execute.caller_state`)
        assert r["omp"] == "1" and r["threads"] == 1
    draws = {(r["random"], r["numpy"]) for r in first + second}
    assert len(draws) == 1, "ranks draw from the caller's generators, alike"


def test_a_fork_reseeds_its_generators_as_a_fresh_interpreter():
    """Before the run's job hands a rank the caller's generators, a forked rank's own are
    reseeded (what the worker draws in between must not repeat across ranks)."""
    import numpy

    saved = numpy.random.get_state(), torch.get_rng_state()
    try:
        zygote_server._reseed_like_a_fresh_interpreter()
        assert numpy.random.get_state()[1].tolist() != saved[0][1].tolist()
        if torch.initial_seed() != torch.Generator().initial_seed():
            assert not torch.equal(torch.get_rng_state(), saved[1])
    finally:
        numpy.random.set_state(saved[0])
        torch.set_rng_state(saved[1])


def test_the_zygote_is_replaced_when_the_environment_changes(monkeypatch):
    runtime = gnnorch.Runtime(gather_identities, processes=2)
    runtime()
    before = zygote.current_pid()
    monkeypatch.setenv("GNNORCH_TEST_ZYGOTE_ENV", "changed")
    ranks = runtime()
    after = zygote.current_pid()
    assert before is not None and after is not None and after != before
    assert {r["ppid"] for r in ranks} == {after}
    assert not psutil.pid_exists(before) or psutil.Process(before).status() == "zombie"


def test_fork_hazards_name_threads_and_a_used_generator():
    threading.Thread(target=time.sleep, args=(1,), daemon=True).start()
    torch.rand(1)
    hazards = "; ".join(zygote_server.fork_hazards())
    assert "threads" in hazards
    assert "torch's default generator has been used" in hazards


def test_a_zygote_that_would_fork_unsafely_steps_aside(tmp_path, monkeypatch):
    """A site customisation that starts a thread in every interpreter: the zygote finds it at
    its hello, the launch starts fresh ranks and says why; a later launch does not retry."""
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        import threading, time
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    """))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    starter = RankStarter("warm", cuda=False, start_timeout=120)
    assert starter.how.startswith("fresh: it would fork unsafely: 2 threads"), starter.how
    start = time.monotonic()
    again = RankStarter("warm", cuda=False, start_timeout=120)
    assert again.how == starter.how and time.monotonic() - start < 1.0
    ranks = gnnorch.Runtime(gather_identities, processes=2)()
    assert os.getpid() in {r["ppid"] for r in ranks}


def test_a_zygote_that_exits_while_starting_says_so(tmp_path, monkeypatch):
    """A zygote that dies before its hello: the launch is told why and starts fresh ranks."""
    (tmp_path / "sitecustomize.py").write_text("import os\nos._exit(3)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    starter = RankStarter("warm", cuda=False, start_timeout=120)
    assert starter.how.startswith("fresh: it exited while starting (code 3"), starter.how


@pytest.mark.parametrize("start", ["warm", "fresh"])
def test_ranks_start_in_a_folder_whose_files_shadow_what_they_import(tmp_path, monkeypatch,
                                                                      start):
    """PyG's benchmark folders hold a ``statistics.py`` (stdlib's name, which torch imports):
    a rank imports torch and gnnorch as the caller did, without the working directory first on
    its path, and only then takes the caller's ``sys.path``."""
    (tmp_path / "statistics.py").write_text(
        "raise ImportError('statistics.py of the working directory was imported')\n")
    monkeypatch.chdir(tmp_path)
    runtime = gnnorch.Runtime(gather_identities, processes=2, launch={"rank_start": start})
    assert [r["rank"] for r in runtime()] == [0, 1]
    assert runtime.last_run.stats[0]["launch"]["rank_start"].startswith(start)


def test_cuda_ranks_and_the_fresh_option_never_use_the_zygote():
    assert RankStarter("warm", cuda=True, start_timeout=1).how.startswith(
        "fresh: CUDA ranks start fresh interpreters")
    assert RankStarter("fresh", cuda=False, start_timeout=1).how == \
        "fresh (launch.rank_start='fresh')"
    with pytest.raises(ValueError, match="launch.rank_start"):
        gnnorch.Runtime(gather_identities, processes=2, launch={"rank_start": "lukewarm"})


def sleep_in_ranks():
    dist.barrier()
    time.sleep(120)


def test_a_launch_whose_zygote_dies_fails_at_once():
    gnnorch.Runtime(gather_identities, processes=2)()   # a zygote to kill
    pid = zygote.current_pid()
    assert pid is not None
    killer = threading.Timer(5.0, os.kill, args=(pid, signal.SIGKILL))
    killer.start()
    start = time.monotonic()
    try:
        with pytest.raises(gnnorch.RankDiedError, match="was killed by SIGKILL"):
            gnnorch.Runtime(sleep_in_ranks, processes=2)()
    finally:
        killer.cancel()
    assert time.monotonic() - start < 30
    ranks = gnnorch.Runtime(gather_identities, processes=2)()   # a new zygote serves the next
    assert {r["ppid"] for r in ranks} == {zygote.current_pid()} != {pid}


def test_a_zygote_that_stops_answering_is_retired_and_replaced():
    env = dict(os.environ)
    stopped = zygote.warm_zygote(env, 120)
    os.kill(stopped.pid, signal.SIGSTOP)
    null = [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
    try:
        with pytest.raises(zygote.ZygoteUnavailable, match="no answer within 1 s"):
            stopped.fork(env, tuple(null), timeout=1)
    finally:
        for fd in null:
            os.close(fd)
    assert not stopped.alive()
    assert stopped.proc.poll() is not None   # ended: it ran no rank, nothing to wait for
    assert zygote.warm_zygote(env, 120).pid != stopped.pid


def test_the_zygote_ends_with_its_caller(tmp_path):
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent("""
        import gnnorch, torch.distributed as dist
        from gnnorch.launch import zygote, zygote_server

        def rank():
            return dist.get_rank()

        gnnorch.Runtime(rank, processes=2)()
        print(zygote.current_pid(), flush=True)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, check=True)
    pid = int(out.stdout.split()[-1])
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie":
        assert time.monotonic() < deadline, "the zygote outlived its caller"
        time.sleep(0.1)
